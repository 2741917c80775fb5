"""`x[i, j]` with integer index tensors (`aten.index.Tensor`, a row gather) against eager at lengths 1, odd,
a partial last tile and the maximum: transformers' padding-mask lookup, broadcast and negative indices,
a table whose rows are the length, and the clear errors."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError

W = torch.randn(4, 8)


def padding_lookup(mask):  # masking_utils.padding_mask_function, vectorized over (batch, kv)
    return mask[torch.arange(mask.shape[0])[:, None, None, None], torch.arange(mask.shape[1])[None, None, None, :]]


def mixed(ids):
    x = ids * 3 + 1
    reversed_kv = torch.arange(ids.shape[1]).flip(-1) - ids.shape[1]  # negative: counted from the end
    return x[ids[:, :1].clamp(0, 1), reversed_kv], W[ids.clamp(-4, 3)], x[1]


@pytest.mark.parametrize("fn", [padding_lookup, mixed], ids=["padding-mask", "broadcast-negative"])
def test_index_tensor_matches_eager(fn):
    module = Lambda(fn)
    npu = compile_torch(module, torch.randint(-9, 9, (2, 16)), dynamic_dim=1, min_len=1, max_len=130, cache=False)
    for n in (1, 7, 65, 130):
        ids = torch.randint(-9, 9, (2, n), generator=torch.Generator().manual_seed(n))
        want, got = module(ids), npu(ids)
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and torch.equal(g, w), f"T={n}"


def test_a_slice_between_index_tensors_leaving_the_length_is_a_clear_error():
    # x[:, i] and x[i, :, j] with static dims left are supported: test_longtail.py
    with pytest.raises(NovellaError, match=r"'torch.aten.index.Tensor': indexing leaves the dims \['s0'\]"):
        compile_torch(Lambda(lambda x: x[torch.tensor([0]), :, torch.tensor([1])]), torch.randn(3, 16, 4),
                      dynamic_dim=1, max_len=64)  # fmt: skip
