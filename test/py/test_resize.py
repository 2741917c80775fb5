"""Bilinear and bicubic resizes (`F.interpolate`, antialiased or not) through our own decomposition
(frontend/own_resize.py: one matmul per resized axis with an interpolation matrix built from iotas): the
decomposition equals each aten op in eager over up- and downsampling, align_corners and scale factors, and
a resize to a size of the length (a ViT's position embeddings on the patch grid of the input width, a
text model's position table on its sequence) compiles and matches eager at every length of its range."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from novella_mlir import compile_torch
from novella_mlir.frontend.own_resize import resize_decompositions

MODES = [("bicubic", False), ("bilinear", False), ("bicubic", True), ("bilinear", True)]


def _op(mode: str, aa: bool):
    name = f"_upsample_{mode}2d_aa" if aa else f"upsample_{mode}2d"
    return getattr(torch.ops.aten, name)


def _eager(x, size, mode, aa, ac):
    """F.interpolate; an antialiased resize to width 1 computed on the transposed input: eager's CPU kernel
    then skips the height axis (a [1, 1, 2, 1] input resized to (3, 1) repeats row 0)."""
    if aa and size[1] == 1 and size[0] != x.shape[2]:
        xt = x.transpose(2, 3)
        return F.interpolate(xt, size=size[::-1], mode=mode, align_corners=ac, antialias=aa).transpose(2, 3)
    return F.interpolate(x, size=size, mode=mode, align_corners=ac, antialias=aa)


@pytest.mark.parametrize("mode,aa", MODES)
def test_decomposition_equals_eager(mode, aa):
    table = resize_decompositions()
    g = torch.Generator().manual_seed(0)
    for ac, (h, w) in itertools.product((False, True), [(2, 2), (3, 5), (7, 4), (1, 6)]):
        x = torch.randn(1, 3, h, w, generator=g)
        for size in itertools.product([1, 2, 3, 5, 8], [1, 2, 4, 7, 13, 37]):
            got = table[_op(mode, aa).vec](x, list(size), ac, None)
            want = _eager(x, size, mode, aa, ac)
            torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5, msg=f"{mode} aa={aa} ac={ac} {(h, w)}->{size}")
            got = table[_op(mode, aa).default](x, list(size), ac)
            torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
        for sf in [(1.5, 2.25), (1.0, 0.7), (2.0, 3.0)]:
            got = table[_op(mode, aa).vec](x, None, ac, list(sf))
            want = F.interpolate(x, scale_factor=sf, mode=mode, align_corners=ac, antialias=aa)
            torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5, msg=f"{mode} aa={aa} ac={ac} x{sf}")


def test_eager_antialias_to_width_one_skips_the_height_axis():
    """Why `_eager` transposes: torch's own antialiased kernel against its non-antialiased one, which agree
    for a bilinear upsample by 3/2 (the triangle filter is not widened when upsampling)."""
    x = torch.tensor([[[[1.0], [3.0]]]])
    plain = F.interpolate(x, size=(3, 1), mode="bilinear")
    assert torch.equal(plain.flatten(), torch.tensor([1.0, 2.0, 3.0]))
    aa = F.interpolate(x, size=(3, 1), mode="bilinear", antialias=True)
    assert torch.equal(aa.flatten(), torch.tensor([1.0, 1.0, 1.0]))
    ours = resize_decompositions()[torch.ops.aten._upsample_bilinear2d_aa.vec](x, [3, 1], False, None)
    assert torch.equal(ours.flatten(), plain.flatten())


class PatchGrid(torch.nn.Module):
    """A ViT's `interpolate_pos_encoding`: a [grid x grid] table resized to (rows, width // patch) and added
    to the input's patch columns."""

    def __init__(self, mode: str, aa: bool, grid: tuple[int, int], rows: int, align_corners=False):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(1, 8, *grid))
        self.mode, self.aa, self.rows, self.ac = mode, aa, rows, align_corners

    def forward(self, x):
        n = x.shape[-1] // 4
        pos = F.interpolate(self.table, size=(self.rows, n), mode=self.mode, antialias=self.aa, align_corners=self.ac)
        return pos + x[:, :, :n].unsqueeze(2)


class SequenceTable(torch.nn.Module):
    """sam3-lite-text's position embedding: a [1, 1, P, H] table resized to (T, H) with bilinear."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(1, 1, 12, 16))

    def forward(self, x):
        pos = F.interpolate(self.table, size=(x.shape[1], 16), mode="bilinear")
        return x + pos.reshape(1, x.shape[1], 16)


def _check(module, shape_of, lengths, example, dim):
    torch.manual_seed(0)
    module = module.eval()
    x0 = torch.randn(shape_of(example))
    npu = compile_torch(module, x0, dynamic_dim=dim, min_len=lengths[0], max_len=lengths[-1], cache=False)
    for n in lengths:
        x = torch.randn(shape_of(n), generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = module(x)
        got = npu(x)
        assert got.shape == want.shape, f"T={n}"
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5, msg=f"T={n}")


CASES = {
    "vit_bicubic": ("bicubic", False, (2, 2), 2, False),
    "bicubic_3x3_align_corners": ("bicubic", False, (3, 3), 5, True),
    "bilinear": ("bilinear", False, (3, 3), 2, False),
    "bilinear_align_corners": ("bilinear", False, (2, 5), 3, True),
    "bicubic_aa_down_and_up": ("bicubic", True, (2, 6), 2, False),
    "bilinear_aa_down_and_up": ("bilinear", True, (3, 6), 1, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_resize_to_the_patch_grid_compiles(case):
    torch.manual_seed(0)
    mode, aa, grid, rows, ac = CASES[case]
    # widths 4..43: grids of 1 (the minimum), 2, an odd middle, 9 (past the 6-wide table: upsampled) and 10
    _check(PatchGrid(mode, aa, grid, rows, ac), lambda n: (1, 8, n), [4, 8, 23, 37, 43], 24, 2)


def test_resize_of_a_position_table_to_the_sequence():
    torch.manual_seed(0)
    _check(SequenceTable(), lambda n: (1, n, 16), [1, 2, 11, 17, 40], 16, 1)


def test_an_example_whose_patch_grid_is_one_column():
    """At width 5 the grid `W // 4` is 1: torch records `Eq(W // 4, 1)`, which the decompositions' retrace
    took as a fact (a program for one column only, refused by a view's shape check); the export is redone
    at the top of the range."""
    _check(PatchGrid("bicubic", False, (2, 2), 2), lambda n: (1, 8, n), [4, 8, 23, 37, 43], 5, 2)


class IntSizedGrid(PatchGrid):
    """dinov2-with-registers' `size=(torch_int(h), torch_int(w))`: int() of a size fixes it at export."""

    def forward(self, x):
        n = int(x.shape[-1] // 4)
        pos = F.interpolate(self.table, size=(self.rows, n), mode=self.mode, antialias=self.aa)
        return pos.flatten(2) + x[:, :, : x.shape[-1] // 4].repeat(1, 1, self.rows)


def test_a_size_fixed_by_int_is_a_program_per_grid_width():
    """The int() fixes the grid at the example's (`Eq(W // 4, 3)`); each grid width is a run of widths
    with a program of its own (it was refused, naming the guard), checked at each run's edges."""
    _check(IntSizedGrid("bicubic", True, (2, 2), 2), lambda n: (1, 8, n), [4, 7, 8, 12, 15, 17, 19], 13, 2)
