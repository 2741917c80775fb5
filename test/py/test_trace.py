"""The Chrome/Perfetto trace of a run: `npu(x, trace=True)` and `novella run --trace`."""

from __future__ import annotations

import json

import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.tools import cli
from novella_mlir.tools.plots import timeline, track_names

UNITS = {"load": "DMA load", "matrix": "matrix", "vector": "vector", "store": "DMA store"}


@pytest.fixture(scope="module")
def npu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.ReLU(), torch.nn.Linear(48, 32)).eval()
    return compile_torch(model, torch.randn(1, 8, 32), dynamic_dim=1, min_len=1, max_len=256)


def _cycles(us: float, clock_ghz: float) -> int:
    return round(us * clock_ghz * 1000)


def _check_trace(doc: dict, stats) -> None:
    events = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert sorted(names.values()) == sorted(UNITS.values())
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(e["tid"] in names for e in spans)
    assert max(_cycles(e["ts"] + e["dur"], stats.clock_ghz) for e in spans) == stats.cycles
    for unit, label in UNITS.items():
        tid = next(t for t, n in names.items() if n == label)
        busy = sum(
            _cycles(e["dur"], stats.clock_ghz) for e in spans if e["tid"] == tid and not e["name"].startswith("wait")
        )
        assert busy == stats.busy[unit], unit
        assert busy > 0, f"no {label} events"


def test_trace_from_call(npu, tmp_path):
    npu(torch.randn(1, 100, 32), trace=True)
    run = npu.last_run
    path = tmp_path / "t.json"
    run.trace.to_json(path)
    _check_trace(json.loads(path.read_text()), run.stats)
    names = [e["name"] for e in run.trace.events if e["ph"] == "X"]
    assert "MATMUL" in names and "LOAD" in names and "STORE" in names


def test_no_trace_unless_asked(npu):
    npu(torch.randn(1, 10, 32))
    assert npu.last_run.trace is None


def test_novella_run_writes_trace(npu, tmp_path, capsys):
    model = tmp_path / "m.nvla"
    npu.save(model)
    trace = tmp_path / "trace.json"
    assert cli.main(["run", str(model), "--len", "77", "--trace", str(trace), "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "T=77" in out and f"trace: {trace}" in out
    doc = json.loads(trace.read_text())
    npu(torch.randn(1, 77, 32))
    _check_trace(doc, npu.last_run.stats)
    assert f"cycles               {npu.last_run.stats.cycles}" in out


def test_timeline_plot_has_one_row_per_unit(npu):
    npu(torch.randn(1, 40, 32), trace=True)
    fig = timeline(npu.last_run.trace)
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == list(UNITS.values())
    assert len(track_names(npu.last_run.trace)) == 4
    end_us = npu.last_run.stats.cycles / (npu.last_run.stats.clock_ghz * 1000)
    assert ax.get_xlim() == pytest.approx((0, end_us))
