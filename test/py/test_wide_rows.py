"""Rows wider than a LOAD's cols field (4095, a 7B model's hidden 4096) in the ops that read them whole:
an embedding's GATHER (kernels/indexing.py, a column tile at a time), a linear's bias row (loaded as a
[rows, n / rows] block), a linear's K (no loop order that LOADs whole rows of K), binary ops (the
column-tiled pointwise kernel instead of the row kernel) and layer_norm (mean, deviation, rsqrt as ops
that tile columns). Each used to fail at tile or inst-gen time; now each equals eager."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda

from novella_mlir import compile_torch

LENGTHS = (1, 2, 37, 67, 70)


def _check(model, make):
    npu = compile_torch(model, make(16), dynamic_dim=1, min_len=1, max_len=70, cache=False)
    for n in LENGTHS:
        with torch.no_grad():
            want = model(make(n))
        assert torch.allclose(npu(make(n)), want, atol=1e-4, rtol=1e-4), f"T={n}"


@pytest.mark.parametrize("width", [4096, 5000])
def test_an_embedding_wider_than_a_gather(width):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, width)).eval()
    _check(model, lambda n: torch.randint(0, 50, (1, n), generator=torch.Generator().manual_seed(n)))


@pytest.mark.parametrize("k, n", [(64, 4096), (4096, 8)])
def test_a_linear_with_a_side_wider_than_a_load(k, n):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(k, n)).eval()
    _check(model, lambda t: torch.randn(1, t, k, generator=torch.Generator().manual_seed(t)))


_W = torch.randn(4096, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x * _W,
        lambda x: x + x.sin(),
        lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + _W),
        lambda x: torch.nn.functional.layer_norm(x * 3 + 1, (4096,), _W, _W.flip(0)),
        lambda x: torch.nn.functional.layer_norm(x, (4096,)),
    ],
    ids=["mul_row", "add", "rms_norm", "layer_norm", "layer_norm_plain"],
)
def test_elementwise_and_norms_over_4096_wide_rows(fn):
    _check(Lambda(fn), lambda t: torch.randn(1, t, 4096, generator=torch.Generator().manual_seed(t)))
