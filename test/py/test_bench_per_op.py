"""`bench/cycles.py --per-op`: the split of one run by op accounts for all of the run's DMA bytes and unit work."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
import cycles  # noqa: E402


@pytest.mark.parametrize("length", [1, 100])
def test_per_op_adds_up_to_the_run(length, capsys):
    rows = cycles.per_op("mlp", "default", length, 2048)
    spec, npu, _ = cycles.compiled("mlp", "default", 2048)
    npu(spec.example(length), check_hazards=False)
    stats = npu.last_run.stats
    assert sum(r["count"] for r in rows) == len(npu.last_run.program.spans)
    assert sum(r["loaded"] for r in rows) == stats.dma_bytes_loaded
    assert sum(r["stored"] for r in rows) == stats.dma_bytes_stored
    for k, unit in enumerate(("load", "matrix", "vector", "store")):
        assert sum(r["busy"][k] for r in rows) == pytest.approx(stats.busy[unit], rel=1e-6), unit
    assert 0 < sum(r["span"] for r in rows) <= stats.cycles
    assert f"mlp default T={length}: {stats.cycles} cycles" in capsys.readouterr().out


def test_dram_idle_splits_gaps_by_where_they_fall():
    """Data phases (start, end, op, is_load): op 0 loads until 10 and stores 15-20, op 1 loads 25-30 and
    40-50 and stores 55-60: 10-15 and 50-55 are op tails, 20-25 is at the barrier, 30-40 in op 1."""
    dmas = [(0, 10, 0, True), (15, 20, 0, False), (25, 30, 1, True), (40, 50, 1, True), (55, 60, 1, False)]
    assert cycles._dram_idle(dmas) == {"at barriers": 5.0, "op tails": 10.0, "in ops": 10.0}
