"""Guards that alternate over the range (`frontend/traces.py`, `ranges._specialize`'s caps): SEW's encoder
pools the length by 2, upsamples it back and pads the result to the length when it is shorter, a branch
on the parity of the length. The branch that pads computes the other one too (a pad of 0), so the trace
from either parity is kept for the whole range as one program; a branch whose sides differ at every other
length is refused with the guard's line after a few splits instead of one retrace per length."""

from __future__ import annotations

import pytest
import sympy
import torch
import torch.nn.functional as F

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError
from novella_mlir.frontend import guards


class PoolUpsamplePad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(8, 16)

    def forward(self, x):
        n = x.shape[1]
        y = F.avg_pool1d(x.transpose(1, 2), 2, 2).transpose(1, 2)
        y = self.proj(y).reshape(1, y.shape[1], 2, 8).reshape(1, 2 * y.shape[1], 8)
        if y.shape[1] < n:
            y = F.pad(y, (0, 0, 0, n - y.shape[1]))
        return y


class ParityBranch(torch.nn.Module):
    def forward(self, x):
        if (x.shape[1] // 2) * 2 < x.shape[1]:
            return x * 2.0
        return x * 3.0


@pytest.mark.parametrize("example", [17, 16])
def test_a_pad_of_zero_keeps_both_parities_in_one_program(example):
    module = PoolUpsamplePad()
    g = torch.Generator().manual_seed(0)
    npu = compile_torch(module, torch.randn(1, example, 8, generator=g), dynamic_dim=1, min_len=4, max_len=40,
                        cache=False)  # fmt: skip
    assert [p.ranges for p in npu.artifact.programs] == [[[4, 40]]]
    for n in (4, 5, 17, 33, 40):
        x = torch.randn(1, n, 8, generator=g)
        with torch.no_grad():
            ref = module(x)
        got = npu(x)
        assert got.shape == ref.shape and torch.allclose(got, ref, atol=1e-5, rtol=1e-5), f"T={n}"


def test_a_branch_on_the_parity_is_refused_after_a_few_splits():
    x = torch.randn(1, 21, 8)
    with pytest.raises(NovellaError) as e:
        compile_torch(ParityBranch(), x, dynamic_dim=1, min_len=4, max_len=400, cache=False)
    msg = str(e.value)
    assert "levels deep" in msg and "test_guard_classes.py" in msg and "min_len/max_len" in msg


def test_keyed_runs_give_each_run_its_class():
    t = guards.T
    conds = [sympy.Eq(t % 2, 1), sympy.Ge(t, 6)]
    runs = guards.keyed_runs(conds, 3, 8)
    assert [r for r, _ in runs] == [(3, 3), (4, 4), (5, 5), (6, 6), (7, 7), (8, 8)]
    assert runs[0][1] == (False, True) and runs[3][1] == (True, False) and runs[5][1] == runs[3][1]
    assert guards.keyed_runs([sympy.Ge(t, 6)], 3, 8) == [((3, 5), (True,)), ((6, 8), (False,))]
    assert guards.keyed_runs([], 3, 8) == [((3, 8), ())]
