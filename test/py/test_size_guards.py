"""The guards torch.export records while it traces (`frontend/guards.py`): a branch on an equality of a
size, or a size read as a Python int (transformers' `torch_int`), holds only at some lengths; the trace
is compiled for the run of lengths around the example where every guard holds, and the other lengths get
programs of their own. Each model is compiled once and checked against eager at the range's min, an odd
length, the edges of the runs, and its max. Also the sizes a sub-range fixes (`W // 16` over
W in [32, 47]), which the frontend types as constants."""

from __future__ import annotations

import sympy
import torch
import torch.nn.functional as F

from novella_mlir import compile_torch
from novella_mlir.frontend import guards


def _check(module, shape, dim, lo, hi, example, lengths, atol=1e-5):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape[:dim], example, *shape[dim + 1 :], generator=g)
    npu = compile_torch(module, x, dynamic_dim=dim, min_len=lo, max_len=hi, cache=False)
    for n in lengths:
        x = torch.randn(*shape[:dim], n, *shape[dim + 1 :], generator=g)
        with torch.no_grad():
            ref = module(x)
        got = npu(x)
        assert got.shape == ref.shape, f"T={n}: shape {tuple(got.shape)}, eager gives {tuple(ref.shape)}"
        assert torch.allclose(got, ref, atol=atol, rtol=1e-5), f"T={n}: max error {(got - ref).abs().max()}"
    return npu


class EqualityBranch(torch.nn.Module):
    """Branches on `T // 4 == 2`: Dim.DYNAMIC keeps [4, 40] and records Eq(T//4, 2) (it was silently
    wrong at every length outside [8, 11])."""

    def forward(self, x):
        if x.shape[1] // 4 == 2:
            return x * 2.0
        return x * 3.0 + 1.0


def test_equality_branch_is_a_program_per_side():
    npu = _check(EqualityBranch(), (1, 0, 8), 1, 4, 40, 9, (4, 7, 8, 9, 11, 12, 25, 40))
    ranges = [p.ranges[0] for p in npu.artifact.programs]
    assert [8, 11] in ranges and sorted(r for rng in ranges for r in range(rng[0], rng[1] + 1)) == list(range(4, 41))


class SameBothWays(torch.nn.Module):
    """A branch whose sides compute the same graph (ViT's shortcut when the grid is the pretrained one
    and the interpolation it skips): the trace from either side is the same, so one program."""

    def forward(self, x):
        if x.shape[1] // 4 == 2:
            return x.softmax(-1) * 2.0
        return x.softmax(-1) * 2.0


def test_a_branch_that_computes_the_same_graph_keeps_one_program():
    npu = _check(SameBothWays(), (1, 0, 8), 1, 4, 40, 9, (4, 7, 9, 12, 40))
    assert [p.ranges for p in npu.artifact.programs] == [[[4, 40]]]


class PatchGrid(torch.nn.Module):
    """A patch embedding whose position table is resized to `int(W // 4)` columns (the `torch_int` of
    transformers' interpolate_pos_encoding): the int fixes the grid at the example's, so each grid width
    is a run of 4 lengths compiled on its own, with the grid's sizes constants (`W // 4` over a run)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Conv1d(3, 8, 4, stride=4)
        self.pos = torch.nn.Parameter(torch.randn(1, 8, 2))

    def forward(self, x):
        cols = int(x.shape[-1] // 4)
        patches = self.proj(x)
        pos = F.interpolate(self.pos, size=cols, mode="linear", align_corners=False)
        y = (patches + pos).transpose(1, 2)
        return y.reshape(1, -1, 2, 4).sum(-1).reshape(1, -1, 2)


def test_int_of_a_size_compiles_a_program_per_grid_width():
    npu = _check(PatchGrid(), (1, 3, 0), 2, 4, 19, 13, (4, 5, 7, 8, 11, 12, 13, 15, 16, 19))
    assert sorted(p.ranges[0] for p in npu.artifact.programs) == [[4, 7], [8, 11], [12, 15], [16, 19]]


def test_a_run_where_the_grid_is_fixed_is_one_program_with_constant_sizes():
    npu = _check(PatchGrid(), (1, 3, 0), 2, 8, 11, 10, (8, 9, 11))
    assert [p.ranges for p in npu.artifact.programs] == [[[8, 11]]]
    assert "floordiv" not in npu.ir("novella")


class CausalWhenLong(torch.nn.Module):
    """SDPA causal only when there are at least two patches (transformers' `is_causal = q_len > 1 and ...`,
    which hands SDPA the SymBool itself when it is false): the trace keeps the lengths of two patches or
    more (read from torch's guard message when the size-oblivious trace fails), and each length of one
    patch is a static program."""

    def forward(self, x):
        q = x.reshape(1, 2, -1, 4)[:, :, : x.shape[1] // 8]
        is_causal = q.shape[2] > 1 and x.dim() == 3
        return F.scaled_dot_product_attention(q, q, q, is_causal=is_causal).sum(2)


def test_narrowed_to_the_example_side_of_a_branch():
    npu = _check(CausalWhenLong(), (1, 0, 8), 1, 12, 40, 20, (12, 13, 15, 16, 17, 31, 40))
    ranges = sorted(p.ranges[0] for p in npu.artifact.programs)
    assert ranges == [[12, 12], [13, 13], [14, 14], [15, 15], [16, 40]]


def test_guard_message_parses_with_the_specialization_sentence_after_it():
    msg = (
        "  - Not all values of T = L['x'].size()[3] in the specified range 16 <= T <= 128 satisfy the generated "
        "guard L['x'].size()[3] != 32.\n"
        "  - Not all values of T = L['flat_args'][0].size()[3] in the specified range 16 <= T <= 128 satisfy the "
        "generated guard (L['flat_args'][0].size()[3] // 16) == 2.Specializations unexpectedly required (T)!\n"
    )
    text = guards.explain(msg, 16, 128)
    assert "`T != 32`, which is false for T = 32" in text and "Specializations" not in text
    assert guards.kept_interval(text.conds, 16, 128, 44) == (33, 47)
    assert guards.kept_interval(text.conds, 16, 128, 20) is None  # a guard is false at the example


def test_kept_interval_edges():
    t = guards.T
    assert guards.kept_interval([sympy.Ne(t, 5)], 1, 9, 1) == (1, 4)
    assert guards.kept_interval([sympy.Ne(t, 5)], 1, 9, 9) == (6, 9)
    assert guards.kept_interval([], 1, 9, 3) == (1, 9)
    assert guards.kept_interval([sympy.Ne(t, 5)], 1, 9, 10) is None


class ShuffleRanks(torch.nn.Module):
    """ViTMAE's masking order with the zoo's fixed noise (`bench/zoo_models.patch_noise`): argsort of a
    [1, patches] row, and argsort of that (the restoring order)."""

    def forward(self, x):
        noise = torch.sin(torch.arange(x.shape[1], dtype=torch.float32) * 12.9898 + 0.5).unsqueeze(0)
        order = torch.argsort(noise, dim=1)
        restore = torch.argsort(order, dim=1)
        return x + (order * 100 + restore).unsqueeze(-1).float()


def test_argsort_of_a_batch_one_row():
    _check(ShuffleRanks(), (1, 0, 4), 1, 1, 40, 9, (1, 2, 17, 40))


class KeepShuffled(torch.nn.Module):
    """ViTMAE's kept patches: `gather(x, 1, ids.unsqueeze(-1).repeat(1, 1, hidden))`, an index copied
    across the hidden dim, is a selection of whole rows along the (dynamic) patch dim."""

    def forward(self, x):
        noise = torch.sin(torch.arange(x.shape[1], dtype=torch.float32) * 12.9898 + 0.5).unsqueeze(0)
        keep = torch.argsort(noise, dim=1)[:, : x.shape[1] // 2 + 1]
        return torch.gather(x, 1, keep.unsqueeze(-1).repeat(1, 1, x.shape[2])) * 2.0


def test_gather_with_an_index_copied_across_the_other_dims():
    _check(KeepShuffled(), (1, 0, 8), 1, 1, 40, 9, (1, 2, 17, 40))
