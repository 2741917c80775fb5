"""The analytic cost model against the simulator, on a few ops of bench/costmodel.py (the bench runs all).

For each op on the edge config at an odd length: every candidate tiling the kernel scores is
recorded; the cheapest by the model and a few others are compiled with the tiling forced and
simulated. The model's pick must be within 5% of the best of them and its prediction within 10%."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

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
