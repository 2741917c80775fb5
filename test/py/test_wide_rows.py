"""Rows wider than a LOAD's cols field (4095) in the ops that read them whole: an embedding's GATHER
(kernels/indexing.py, a column tile at a time), a linear's bias row (loaded as a [rows, n / rows] block)
and a linear's K (no loop order that LOADs whole rows of K). Each used to fail at tile or inst-gen time;
now each equals eager."""

from __future__ import annotations

import pytest
import torch

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
