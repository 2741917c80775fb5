"""Each distinct torch.export of one compile_torch is made once (`frontend/export_memo.py`): a repeated call
gets a copy of the first program, and a call that differs in the module, a shape, the range or a tracing
flag is a call of its own."""

from __future__ import annotations

import torch
from torch.export import Dim

from novella_mlir import compile_torch
from novella_mlir.frontend import export_memo


class OneBranch(torch.nn.Module):
    def forward(self, x):
        return x.softmax(dim=1) if x.shape[1] > 1 else x * 3.0


def _counted(monkeypatch) -> list:
    calls, real = [], torch.export.export

    def export(module, args, *a, **kw):
        calls.append((id(module), [tuple(t.shape) for t in args], str(kw.get("dynamic_shapes"))))
        return real(module, args, *a, **kw)

    monkeypatch.setattr(torch.export, "export", export)
    return calls


def test_the_static_trace_at_t_1_is_exported_once(monkeypatch):
    """The T = 1 check's static trace is the T = 1 program's: one export, and the program still right."""
    calls = _counted(monkeypatch)
    m = OneBranch().eval()
    npu = compile_torch(m, torch.randn(1, 8, 4), min_len=1, max_len=40, cache=False)
    assert [p.ranges for p in npu.artifact.programs] == [[[1, 1]], [[2, 40]]]
    assert [c for c in calls if c[1] == [(1, 1, 4)]] == [(id(m), [(1, 1, 4)], "None")]
    for t in (1, 2, 37):
        x = torch.randn(1, t, 4)
        torch.testing.assert_close(npu(x), m(x))


def test_a_call_differing_in_range_shape_or_module_is_exported_again(monkeypatch):
    calls = _counted(monkeypatch)
    m, other = OneBranch().eval(), OneBranch().eval()
    x = torch.randn(1, 8, 4)
    with export_memo.scope():
        first = export_memo.export(m, (x,), dynamic_shapes=({1: Dim("T", min=2, max=16)},))
        x_node = next(n for n in first.graph.nodes if n.op == "placeholder")
        with first.graph.inserting_after(x_node):
            first.graph.call_function(torch.ops.aten.relu.default, (x_node,))  # what a compile does to its copy
        again = export_memo.export(m, (torch.zeros(1, 8, 4),), dynamic_shapes=({1: Dim("T", min=2, max=16)},))
        assert len(calls) == 1 and again is not first
        assert len(list(first.graph.nodes)) == len(list(again.graph.nodes)) + 1, "a hit is a fresh copy"
        wider = export_memo.export(m, (x,), dynamic_shapes=({1: Dim("T", min=2, max=32)},))
        export_memo.export(m, (torch.randn(1, 9, 4),), dynamic_shapes=({1: Dim("T", min=2, max=16)},))
        export_memo.export(other, (x,), dynamic_shapes=({1: Dim("T", min=2, max=16)},))
        export_memo.export(m, (x,))
    assert len(calls) == 5
    assert [int(r.upper) for r in wider.range_constraints.values()] == [32]
    export_memo.export(m, (x,))
    assert len(calls) == 6, "outside a compile nothing is kept"
