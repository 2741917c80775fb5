"""`torch.max(x, dim)` / `torch.min(x, dim)` (values and indices, phimoe's sparsemixer router) as amax /
argmax and amin / argmin (frontend/own_decompositions.py): ties go to the first index and NaN is taken as
the extreme, as ATen does; compiled with the length dynamic they equal eager."""

from __future__ import annotations

import torch
from lambda_module import Lambda

from novella_mlir import compile_torch


def _both(x):
    v, i = x.max(dim=-1, keepdim=True)
    w, j = torch.min(x, dim=-1)
    return v, i.float(), w, j.float()


def _x(n: int):
    x = torch.randn(1, n, 6, generator=torch.Generator().manual_seed(n)).round()  # ties
    x[0, 0, 2] = float("nan")
    return x


def test_max_and_min_with_indices_equal_eager():
    model = Lambda(_both)
    npu = compile_torch(model, _x(16), dynamic_dim=1, min_len=1, max_len=70, cache=False)
    for n in (1, 2, 37, 67):
        for got, want in zip(npu(_x(n)), model(_x(n))):
            assert torch.allclose(got, want, equal_nan=True, atol=0, rtol=0), f"T={n}"
