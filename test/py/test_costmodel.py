"""The analytic cost model against the simulator, on a few ops of bench/costmodel.py (the bench runs all).

For each op on the edge config at an odd length: every candidate tiling the kernel scores is
recorded; the cheapest by the model and a few others are compiled with the tiling forced and
simulated. The model's pick must be within 5% of the best of them and its prediction within 10%. The linear's
price follows what its emitter writes: a LOAD added to the emitter moves the prediction as it moves the
simulated cycles."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from novella_mlir.kernels import forget, linear, linear_emit
from novella_mlir.kernels import linear_cost as lc
from novella_mlir.machine import costmodel as cm
from novella_mlir.machine.target import Target
from simulator import load_config

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_costmodel", ROOT / "bench" / "costmodel.py")
bench = sys.modules.setdefault("bench_costmodel", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(bench)
CASES = {c.name: i for i, c in enumerate(bench.CASES)}
LENGTH = 37


@pytest.mark.parametrize(
    "name", ["linear 80->384 relu", "add [T,384]+[T,384]", "layernorm 384", "softmax [4,T] T cols", "q@k^T [6,T,64]"]
)
def test_pick_and_prediction_match_the_simulator(name):
    index = CASES[name]
    cands = bench.record((index, "edge", LENGTH))
    assert len(cands) >= 2, "the kernel scored no alternative"
    sample = [c for _, c in cands[:2]] + [cands[-1][1]]
    sims = {c: bench.simulate((index, "edge", LENGTH, c)) for c in dict.fromkeys(sample)}
    pred, pick = cands[0]
    assert sims[pick] <= 1.05 * min(sims.values()), sims
    assert abs(pred / sims[pick] - 1) <= 0.10, (pred, sims[pick])
    worst_pred, worst = cands[-1]
    assert worst_pred > pred and sims[worst] >= sims[pick]  # the model ranks as the simulator does


def test_group_overlap_takes_the_busier_compute_unit():
    """`Group.period`'s compute term: the serial chain, or with `overlap` the busier of the matrix unit (plus
    the VEC work the next MATMULs wait for) and the vector unit, at least the issue of the step."""
    t = Target.from_config(load_config())
    chain = cm.Group(0.0, 1000.0, 0.0, 0.0, 10, vector=400.0)
    assert chain.period(t) == 1000.0, "no overlap: matrix + vector in series"
    g = dataclasses.replace(chain, overlap=True)
    assert g.period(t) == 600.0
    assert dataclasses.replace(g, vector=700.0).period(t) == 700.0
    assert dataclasses.replace(g, vector_wait=150.0).period(t) == 750.0
    assert dataclasses.replace(g, issues=900).period(t) == 900 * t.issue_cycles
    assert dataclasses.replace(g, load=800.0).period(t) == 800.0, "a queue can still be the bottleneck"
    assert cm.pipeline(t, [g]) == 10 * 600.0 + (1000.0 - 600.0), "the first step's chain fills the pipeline"
    # two slots: the DMAs into a slot start when the step two earlier ends its chain, and the step waits
    # for them, so two periods hold a chain, a DMA latency and the step's DRAM data
    lat = t.issue_cycles + t.dma_latency
    ring = dataclasses.replace(g, load=300.0, store=300.0, dram=500.0)
    assert ring.period(t) == (1000.0 + lat + 500.0) / 2
    assert dataclasses.replace(ring, overlap=False).period(t) == 1000.0


def _loads(ops, point):
    return [(op.buffer, op.rows, op.cols, op.contiguous) for op in ops if op.kind == lc.LOAD and op.on(point)]


def test_the_step_is_priced_from_the_emitted_loads_and_matmul():
    """`linear_cost.emitted_body` runs the kernel's own `emit_loads` and `emit_matmul` into a trace: the
    tiles a step loads at each grid point (`_point`: a block's first step, a later k step) and the op's
    first step's own LOADs (`first_loads`: the bias row, once), and the MATMUL's sizes."""
    forget()
    epi = lc.Epilogue("relu")
    streamed = lc.emitted_body(epi, 16, 80, 384, (32, 16, 0, 1, 0, 0, 0))  # ws = 0: x and w tiles each step
    assert _loads(streamed, lc._point(False, 2)) == [("w", 32, 16, False), ("a", 16, 16, False)]
    assert _loads(streamed, lc.OP_FIRST)[-1] == ("bias", 1, 384, True)
    assert [(op.rows, op.k, op.cols) for op in streamed if op.kind == lc.MMA] == [(16, 16, 32)]
    slab = lc.emitted_body(epi, 16, 80, 384, (32, 16, 1, 1, 1, 0, 0))  # ws = 1, res_acc: the column's slab
    assert _loads(slab, lc._point(True, 0)) == [("w", 32, 80, True), ("a", 16, 16, False), ("acc", 16, 32, False)]
    assert _loads(slab, lc._point(False, 1)) == [("a", 16, 16, False)]
    t = Target.from_config(load_config())
    assert lc.first_loads(t, 80, 384, epi, (32, 16, 1, 1, 1, 0, 0)) == cm.dma(t, 1, 384, True)[1] + t.issue_cycles


def test_an_emitted_load_moves_the_price_as_it_moves_the_simulated_cycles(monkeypatch):
    """One more LOAD in the linear's emitter (the x tile again, no cost-model edit) raises the prediction by
    about what it adds to the simulated cycles, for a tiling of each loop order (ws = 1, and ws = 0 with the deferred epilogue)."""
    index, cands = (
        CASES["linear 80->384 relu"],
        [(16, 32, 16, 1, 1, 0, 0, 0), (16, 16, 40, 0, 2, 0, 0, 0)],
    )
    t, dims = Target.from_config(bench._config("edge")), (LENGTH, 80, 384, lc.Epilogue("relu"))
    emit_loads = linear_emit.emit_loads

    def again(g):
        emit_loads(g)
        b = g.b
        b.load_rows("a", 0, dram_offset=b.d(2) * g.tk, dram_stride=g.k, row_start=b.d(g.md) * g.tm,
                    row_bound=g.m_total, rows=g.rows, cols=g.tk)  # fmt: skip

    def measure():
        forget()
        return [(linear.Linear().cost(t, dims, c), bench.simulate((index, "edge", LENGTH, c))) for c in cands]

    before = measure()
    monkeypatch.setattr(linear_emit, "emit_loads", again)
    monkeypatch.setattr(linear, "emit_loads", again)
    after = measure()
    for (p0, s0), (p1, s1) in zip(before, after):
        assert p1 > p0 and abs((p1 - p0) / (s1 - s0) - 1) <= 0.25, (p0, s0, p1, s1)
        assert abs(p1 / s1 - 1) <= 0.10, (p1, s1)
