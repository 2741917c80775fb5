"""Pointwise and generic kernels over a result whose dim -2 is 1 (a decode step's `[B, heads, 1, d]`):
the rows come from the largest other dim (adjacent dims merged where every operand broadcasts alike),
each operand read at its own row stride (`kernels/pointwise.Geometry`), against eager PyTorch with the
hazard checker on."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from novella_mlir import compile_torch

MAX_T = 300


class _Rope(torch.nn.Module):
    """RoPE's shapes at decode: q [B, H, 1, D] against cos/sin [B, 1, 1, D], a per-row scalar, a
    per-sequence mask row [B, 1, 1, T] and a SiLU over [B, 1, F]."""

    def forward(self, q, cos, r, m, x):
        rot = torch.cat((-q[..., 16:], q[..., :16]), -1)
        y = q * cos + rot * torch.sin(cos)
        return y, torch.rsqrt(r) * q, torch.exp(m) * r, torch.nn.functional.silu(x)


def _inputs(b: int, h: int, t: int):
    g = torch.Generator().manual_seed(b * 1000 + h * 10 + t)
    q, cos = torch.randn(b, h, 1, 32, generator=g), torch.randn(b, 1, 1, 32, generator=g)
    r = torch.rand(b, 1, 1, 1, generator=g) + 0.5
    return q, cos, r, torch.randn(b, 1, 1, t, generator=g), torch.randn(b, 1, 256, generator=g)


@pytest.mark.parametrize("b,h", [(1, 4), (3, 5), (32, 4), (70, 2)])
def test_decode_shaped_pointwise_matches_eager_in_few_tiles(b, h):
    """1 sequence, odd counts, a tile's worth of rows, and more rows than a tile holds (70: a partial last
    tile); T = 1, odd and the maximum. One row per (sequence, head) tile would need at least 2 B H LOADs
    for q * cos alone."""
    model = _Rope().eval()
    T = Dim("T", min=1, max=MAX_T)
    npu = compile_torch(model, *_inputs(b, h, 9), dynamic_shapes=(None, None, None, {3: T}, None), cache=False)
    for t in (1, 7, MAX_T):
        xs = _inputs(b, h, t)
        outs, run = npu.run(*xs)
        for got, want in zip(outs, model(*xs)):
            torch.testing.assert_close(torch.as_tensor(got), want, rtol=1e-4, atol=1e-5)
        if b * h >= 32:
            assert run.stats.by_mnemonic["LOAD"] < 2 * b * h
