"""`torch.gather` that is neither a row lookup nor a one-hot sum over a small axis: each output element is
one GATHER of a single table element (`indexing._gather_elements`). Checked against eager at lengths 1, an
odd length, a partial last tile and the maximum: a relative-position bias gathered from a wide bank of
distances (inkling's `rel_logits.gather(-1, distance)`), and a gather along the dynamic dim."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError

LENGTHS = (1, 37, 67, 130)
EXTENT = 300  # wider than the one-hot decomposition takes (own_decompositions._ONE_HOT_MAX)


class RelativeBias(torch.nn.Module):
    """Per query, one bias per backward distance, picked from a projected bank of EXTENT distances."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Parameter(torch.randn(4, 8, EXTENT, generator=torch.Generator().manual_seed(2)))

    def forward(self, h):
        rel = torch.einsum("btd,hde->bhte", h, self.proj)
        pos = torch.arange(h.shape[1])
        distance = (pos[:, None] - pos[None, :])[None, None]
        index = distance.clamp(0, EXTENT - 1).expand(*rel.shape[:2], -1, -1)
        bias = rel.gather(-1, index)
        return bias.masked_fill((distance < 0) | (distance >= EXTENT), 0.0)


def _inputs(n):
    return torch.randn(1, n, 8, generator=torch.Generator().manual_seed(n))


def test_a_relative_position_bias_gathered_from_a_wide_bank():
    module = RelativeBias()
    npu = compile_torch(module, _inputs(16), dynamic_dim=1, min_len=1, max_len=130, cache=False)
    for n in LENGTHS:
        with torch.no_grad():
            want = module(_inputs(n))
        got = npu(_inputs(n))
        assert got.shape == want.shape, f"T={n}"
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), f"T={n}: max err {(got - want).abs().max():.2e}"


def _along_length(x, ids):
    return torch.gather(x, 1, ids) * 2 + 1


def test_a_gather_along_the_dynamic_dim():
    """out[b, t, c] = x[b, ids[b, t, c], c], where the gathered dim is the length itself."""
    from torch.export import Dim

    module = Lambda(_along_length)
    T = Dim("T", min=1, max=130)
    make = lambda n: (  # noqa: E731
        torch.randn(2, n, 3, generator=torch.Generator().manual_seed(n)),
        torch.randint(0, n, (2, n, 3), generator=torch.Generator().manual_seed(n + 1)),
    )
    npu = compile_torch(module, *make(16), dynamic_shapes=(({1: T}, {1: T}),), cache=False)
    for n in LENGTHS:
        x, ids = make(n)
        assert torch.equal(npu(x, ids), module(x, ids)), f"T={n}"


def test_a_gather_from_more_elements_than_an_fp32_index_holds_is_refused_naming_the_line():
    module = Lambda(lambda x, ids: torch.gather(x, 1, ids))
    with pytest.raises(NovellaError, match=r"test_gather_elements.py:\d+: 'torch.aten.gather': gather picks single"):
        compile_torch(module, torch.randn(16, 70000), torch.zeros(16, 3, dtype=torch.int64), dynamic_dim=0,
                      min_len=1, max_len=300, cache=False)  # fmt: skip


def test_index_select_on_the_last_dim_of_a_rank_4_tensor():
    """The last dim moves first for the row gather (two transposes: the NPU's transpose cannot move the last
    dim together with others); at length 1 inkling's gather index is this (one index copied across heads)."""
    ids = torch.tensor([5, 0, 7, 7])
    module = Lambda(lambda x: torch.index_select(x, -1, ids) - x[..., :1])
    npu = compile_torch(module, torch.randn(1, 3, 16, 8), dynamic_dim=2, min_len=1, max_len=130, cache=False)
    for n in LENGTHS:
        x = torch.randn(1, 3, n, 8, generator=torch.Generator().manual_seed(n))
        assert torch.equal(npu(x), module(x)), f"T={n}"
