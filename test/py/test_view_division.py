"""The -1 of a view as an exact division of symbolic sizes (`symbolic.division.quotient`): a chunked scan
flattens heads into the length (`[T * 16, 128]`) and views it back as `[1, T, -1]`, which divides by T
no factor equals. And `symbolic.box.value_range` over a box: exact where the box is small, bounds that hold
the values where it is not (a `mod` peaks inside the box, not at a corner)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from novella_mlir import compile_torch
from novella_mlir import symbolic as sy
from novella_mlir.dialects.context import make_context
from novella_mlir.symbolic import box as sb
from novella_mlir.symbolic.division import quotient


@pytest.fixture
def ctx():
    with make_context():
        yield


class HeadsNormBack(torch.nn.Module):
    """lara_mini / olmo_hybrid's gated delta net: heads flattened into rows for a norm, viewed back."""

    def forward(self, x):
        b, t, _ = x.shape
        y = x.view(b, t, 4, 16).reshape(-1, 16)
        y = F.layer_norm(y, (16,))
        return y.reshape(b, t, -1)


class ChunkedScan(torch.nn.Module):
    """The length padded to a multiple of the chunk, viewed as chunks, scanned, flattened per head, cut
    back to the length and viewed as rows of heads."""

    def forward(self, x):
        c = 8
        b, h, t, d = x.shape
        y = F.pad(x, (0, 0, 0, (c - t % c) % c)).reshape(b, h, -1, c, d)
        y = (y.cumsum(-2) * 0.5).reshape(b, h, -1, d)[:, :, :t]
        y = y.transpose(1, 2).reshape(-1, d)
        return F.layer_norm(y, (d,)).reshape(b, t, -1)


@pytest.mark.parametrize(
    "module, shape, dim",
    [(HeadsNormBack(), (1, 0, 64), 1), (ChunkedScan(), (1, 2, 0, 4), 2)],
    ids=["heads", "chunked"],
)
def test_view_back_by_the_length_matches_eager(module, shape, dim):
    g = torch.Generator().manual_seed(0)
    sized = lambda n: torch.randn(*shape[:dim], n, *shape[dim + 1 :], generator=g)  # noqa: E731
    npu = compile_torch(module, sized(13), dynamic_dim=dim, min_len=1, max_len=40, cache=False)
    for n in (1, 7, 13, 17, 40):
        x = sized(n)
        ref = module(x)
        got = npu(x)
        assert got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5, rtol=1e-5), f"T={n}"


def test_quotient_is_exact_or_none(ctx):
    s0, s1 = sy.sym(0), sy.sym(1)
    assert sy.as_int(quotient([s0 * 16, sy.const(128)], [sy.const(1), s0])) == 2048
    chunks = sy.ceildiv(s0, 64)
    assert sy.equal(quotient([sy.const(1), chunks * 64, sy.const(8)], [chunks, sy.const(64)]), sy.const(8))
    assert sy.equal(quotient([s0 * s1 * 4, sy.const(6)], [s1, sy.const(3)]), s0 * 8)
    assert quotient([s0 * 16], [s1]) is None
    assert quotient([s0 * 4096], [sy.const(262144)]) is None  # s0 / 64 is no polynomial
    assert quotient([s0 + 1], [s0]) is None


def test_value_range_is_exact_for_mod_and_floordiv(ctx):
    s0 = sy.sym(0)
    box = [sy.Symbol(0, "T", 1, 100)]
    assert sb.value_range(sy.mod(s0, 64), box) == (0, 63)  # the corners give 1 and 36
    assert sb.value_range(sy.mod(s0 * -1, 8), box) == (0, 7)
    assert sb.value_range(s0 - sy.floordiv(s0, 2) * 2 + 3, box) == (3, 4)
    assert sb.value_range(sy.ceildiv(s0, 64) * 64 - s0, box) == (0, 63)
    assert sb.value_range(s0 * 2 + 1, box) == (3, 201)


def test_value_range_of_a_large_box_holds_every_value(ctx):
    s0, s1 = sy.sym(0), sy.sym(1)
    box = [sy.Symbol(0, "P", 1, 5000), sy.Symbol(1, "T", 1, 5000)]  # 25e6 points: bounds, not every point
    lo, hi = sb.value_range(sy.mod(s0 + s1, 64) + s1, box)
    assert lo <= 1 and hi >= 5000 + 63
    assert sb.value_range(s0 * s1, box) == (1, 25_000_000)
    assert sb.value_range(sy.floordiv(s0, 3) - s1, box) == (-5000, 1666 - 1)
