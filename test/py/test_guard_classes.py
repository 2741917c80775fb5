"""Guard classes (`frontend/guard_classes.py`): a strided conv stack whose frames are pooled by 2, upsampled
back and padded to the frame count when they are fewer (SEW's encoder) records a guard on the parity of the
frame count, which alternates every 4 lengths. The trace of the class that pads computes the other class's
graph at every one of its lengths (a pad of 0 frames), which the proof shows, so the model is one program;
compiled once and checked against eager at the min, an odd length, partial last tiles and the max. The proof
refuses to join two classes whose graphs differ (`x * 2` at odd lengths, `x * 3` at even ones), and those
lengths are programs of their own."""

from __future__ import annotations

import sympy
import torch
import torch.nn.functional as F

from novella_mlir import compile_torch
from novella_mlir.frontend import exporting, guard_classes, guards


class ConvPoolPad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.c1 = torch.nn.Conv1d(4, 8, 3, stride=2)
        self.c2 = torch.nn.Conv1d(8, 8, 3, stride=2)
        self.up = torch.nn.Linear(8, 16)

    def forward(self, x):
        h = self.c2(torch.relu(self.c1(x.transpose(1, 2))))
        frames = h.shape[2]
        y = F.avg_pool1d(h, 2, 2).transpose(1, 2)
        y = torch.tanh(self.up(y)).reshape(1, y.shape[1], 2, 8).reshape(1, 2 * y.shape[1], 8)
        if y.shape[1] < frames:
            y = F.pad(y, (0, 0, 0, frames - y.shape[1]))
        return y


class ParityBranch(torch.nn.Module):
    def forward(self, x):
        if (x.shape[1] // 2) * 2 < x.shape[1]:
            return x * 2.0
        return x * 3.0


def _trace(module, n, lo, hi, width=4):
    prog, whole = exporting._dynamic_export(module, [torch.zeros(1, n, width)], 1, lo, hi)
    assert whole == (lo, hi)
    return prog


def _check(npu, module, lengths, width):
    g = torch.Generator().manual_seed(1)
    for n in lengths:
        x = torch.randn(1, n, width, generator=g)
        with torch.no_grad():
            ref = module(x)
        got = npu(x)
        assert got.shape == ref.shape, f"T={n}: shape {tuple(got.shape)}, eager gives {tuple(ref.shape)}"
        assert torch.allclose(got, ref, atol=1e-5, rtol=1e-5), f"T={n}: max error {(got - ref).abs().max()}"


def test_the_frame_parity_splits_the_range_into_two_classes():
    module = ConvPoolPad().eval()
    conds = guards.recorded(_trace(module, 100, 19, 600))
    keyed = guards.keyed_runs(conds, 19, 600)
    assert len(keyed) > 100 and len({k for _, k in keyed}) == 2
    assert [r for r, _ in keyed[:3]] == [(19, 22), (23, 26), (27, 30)]


def test_a_pad_of_zero_frames_is_one_export_range_compiled_once():
    module = ConvPoolPad().eval()
    x = torch.randn(1, 100, 4)  # 24 frames: the example is in the class that does not pad
    npu = compile_torch(module, x, dynamic_dim=1, min_len=19, max_len=600, cache=False)
    # one export range: its only split is the cost model's shape buckets, not a guard class
    assert [p.ranges for p in npu.artifact.programs] == [[[19, 512]], [[513, 600]]]
    assert all(p.reason.startswith("shape bucket:") for p in npu.artifact.programs)
    # 19: the min (4 frames); 23: an odd frame count (5, padded); 270, 271: 66 frames, 64 + a partial tile
    _check(npu, module, (19, 20, 23, 77, 270, 271, 512, 513, 600), 4)


def test_the_proof_joins_the_class_a_pad_of_zero_computes_and_not_the_other_way():
    module = ConvPoolPad().eval()
    pads, plain = _trace(module, 23, 19, 600), _trace(module, 19, 19, 600)  # 5 frames (odd), 4 (even)
    keyed = guards.keyed_runs(guards.recorded(plain), 19, 600)
    even = guard_classes.Proof([r for r, k in keyed if k == keyed[0][1]])
    odd = guard_classes.Proof([r for r, k in keyed if k != keyed[0][1]])
    assert 19 in even.lengths and 23 in odd.lengths and 23 not in even.lengths
    assert even.same_graph(pads, plain)  # the pad is of 0 frames at every even frame count
    assert not odd.same_graph(plain, pads)  # the plain trace lacks the pad of 1 frame
    assert odd.same_graph(pads, pads) and even.same_graph(plain, plain)


def test_the_proof_refuses_classes_whose_graphs_differ():
    module = ParityBranch()
    odd, even = _trace(module, 21, 4, 40), _trace(module, 20, 4, 40)
    keyed = guards.keyed_runs(guards.recorded(odd), 4, 40)
    assert len(keyed) == 37  # one run per length: the guard alternates at every length
    for runs in ([r for r, k in keyed if k == keyed[0][1]], [r for r, k in keyed if k != keyed[0][1]]):
        proof = guard_classes.Proof(runs)
        assert not proof.same_graph(odd, even) and not proof.same_graph(even, odd)


def test_classes_that_differ_are_programs_of_their_own():
    module = ParityBranch()
    npu = compile_torch(module, torch.randn(1, 7, 8), dynamic_dim=1, min_len=4, max_len=9, cache=False)
    assert sorted(p.ranges[0] for p in npu.artifact.programs) == [[n, n] for n in range(4, 10)]
    _check(npu, module, range(4, 10), 8)


def test_a_size_equal_only_on_the_class_is_proved_there_only():
    t = guards.T
    evens = guard_classes.Proof([(4, 4), (6, 6), (8, 8)])
    assert evens.equal(2 * sympy.floor(t / 2), t)
    assert not guard_classes.Proof([(4, 6)]).equal(2 * sympy.floor(t / 2), t)
    assert evens.holds(sympy.Eq(sympy.Mod(t, 2), 0)) and not evens.holds(sympy.Ge(t, 5))
