"""Integer arithmetic on sizes as symbolic sizes: `-T` (a mask's last T positions, `mask[:, -T:]`), `T % b`
(a window partition's padding to a multiple of the window, `F.pad` by a size of the length) and the
equality proof that makes `T + (-T) mod b` a multiple of b; each module checked against eager at lengths
1, 2, odd, a partial last tile and the max."""

from __future__ import annotations

import pytest
import sympy
import torch
import torch.nn.functional as F
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir import symbolic as sy
from novella_mlir.dialects.context import make_context
from novella_mlir.errors import NovellaError
from novella_mlir.symbolic.periodic import periodic_zero

LENGTHS = (1, 2, 23, 37, 40)


def _check(module, shape_of, example=20):
    npu = compile_torch(module, torch.randn(shape_of(example)), dynamic_dim=1, min_len=1, max_len=40, cache=False)
    for n in LENGTHS:
        x = torch.randn(shape_of(n), generator=torch.Generator().manual_seed(n))
        want = module(x)
        got = npu(x)
        assert got.shape == want.shape, f"T={n}"
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=f"T={n}")
    return npu


def _pad_to_windows(x):
    t = x.shape[1]
    pad = (4 - t % 4) % 4
    y = F.pad(x, (0, 0, 0, pad), value=0.5)
    return y.view(1, (t + pad) // 4, 4, 8).sum(2)


def test_pad_to_a_multiple_of_the_window():
    npu = _check(Lambda(_pad_to_windows), lambda n: (1, n, 8))
    assert "torch.aten.fmod.int" in npu.stages.texts["torch"]


def _pad_width(x):
    """A pad of a static dim while a later dim is the length: the block of pad values is a table cut to it."""
    return F.pad(x, (0, 0, 0, 3), value=-1.0) * 2


def test_pad_of_a_static_dim_beside_the_length():
    _check(Lambda(lambda x: _pad_width(x.transpose(1, 2)).transpose(1, 2)), lambda n: (1, n, 5, 8))


def _last_positions(x):
    mask = (x[..., 0] > 0).float()
    return x * mask[:, -x.shape[1] :].unsqueeze(-1)


def test_negated_length_slices_the_whole_mask():
    npu = _check(Lambda(_last_positions), lambda n: (1, n, 8))
    assert "torch.aten.neg.int" in npu.stages.texts["torch"]


def test_a_start_before_the_front_is_clamped_to_it():
    # x[:, -(T + 1):] and x[:, -(T + 2):T] start before the front at every length: Python's slice starts at 0
    _check(Lambda(lambda x: x[:, -(x.shape[1] + 1) :] * 2), lambda n: (1, n, 8))
    _check(Lambda(lambda x: x[:, -(x.shape[1] + 2) : x.shape[1]] * 2), lambda n: (1, n, 8))


def test_periodic_equality_proof():
    with make_context():
        s = sy.sym(0)
        padded = s + sy.mod(sy.const(-1) * s, 4)
        assert sy.equal(padded, sy.ceildiv(s, 4) * 4)
        assert sy.equal(padded * 8, sy.floordiv(padded, 4) * 32)
        assert not sy.equal(padded, sy.ceildiv(s, 5) * 5)
        assert not sy.equal(sy.floordiv(s, 4), sy.floordiv(s + 1, 4))
    t = sympy.Symbol("s0", integer=True)
    assert not periodic_zero(t * t - t)  # not quasi-linear: no proof


def _patch_centers(x):
    """dinov3's patch centers: arange from a fractional start to a size of the length, over that size."""
    n = x.shape[1] // 2
    centers = torch.arange(0.5, n, dtype=torch.float32) / n
    below = torch.arange(-1.5, n, dtype=torch.float32)
    return x[:, :n] * centers, x[:, :n] + below[2:]


def test_arange_from_a_fractional_start():
    module = Lambda(_patch_centers)
    npu = compile_torch(module, torch.randn(1, 20), dynamic_dim=1, min_len=2, max_len=40, cache=False)
    for n in (2, 3, 23, 37, 40):
        x = torch.randn(1, n, generator=torch.Generator().manual_seed(n))
        for got, want in zip(npu(x), module(x)):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6, msg=f"T={n}")


def test_random_noise_is_refused_by_name():
    module = Lambda(lambda x: x + torch.rand(x.shape[0], x.shape[1]))
    with pytest.raises(NovellaError, match=r"'torch.aten.rand': draws random values"):
        compile_torch(module, torch.randn(1, 8), dynamic_dim=1, min_len=1, max_len=40, cache=False)
