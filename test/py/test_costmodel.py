"""The analytic cost model against the simulator, on a few ops of bench/costmodel.py (the bench runs all).

For each op on the edge config at an odd length: every candidate tiling the kernel scores is
recorded; the cheapest by the model and a few others are compiled with the tiling forced and
simulated. The model's pick must be within 5% of the best of them and its prediction within 10%."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

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
