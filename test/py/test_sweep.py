"""`novella sweep`: models x lengths x configs, in-process (CI) and on a local Ray when installed."""

from __future__ import annotations

import csv

import pytest

from novella_mlir.tools import cli
from novella_mlir.tools import sweep as sw

FACTORY = """
import torch

def build():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.GELU(), torch.nn.Linear(48, 32))

def not_a_module():
    return 3
"""
LENGTHS = "1,17,64"


@pytest.fixture(scope="module")
def factory(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "tiny.py"
    path.write_text(FACTORY)
    return path


def _argv(factory, out, *extra):
    return ["sweep", f"{factory}:build", "--example-shape", "1,16,32", "--max-len", "64", "--lengths", LENGTHS,
            "--configs", "edge,default", "--out", str(out), *extra]  # fmt: skip


def _rows(out):
    with (out / "sweep.csv").open() as f:
        return list(csv.DictReader(f))


def test_sweep_in_process_table_and_plots(factory, tmp_path, capsys):
    assert cli.main(_argv(factory, tmp_path, "--in-process")) == 0
    rows = _rows(tmp_path)
    assert [(r["config"], int(r["T"])) for r in rows] == [(c, t) for c in ("edge", "default") for t in (1, 17, 64)]
    for r in rows:
        assert r["ok"] == "True" and float(r["max_err"]) < 1e-4
        assert int(r["cycles"]) >= float(r["roof"]) > 0 and float(r["cyc/roof"]) >= 1.0
        assert int(r["moved_B"]) >= int(r["compulsory_B"]) > 0
    by = {(r["config"], int(r["T"])): int(r["cycles"]) for r in rows}
    assert by["edge", 64] > by["default", 64] and by["default", 64] > by["default", 1]  # 8x8 array, longer runs
    md = (tmp_path / "sweep.md").read_text()
    assert md.startswith("| model | config | T | ok |") and md.count("\n") == 8
    assert (tmp_path / "tiny_build.png").stat().st_size > 1000
    out = capsys.readouterr().out
    assert "| tiny:build | edge | 17 | True |" in out


def test_sweep_reports_a_failing_compile_and_exits_1(factory, tmp_path, capsys):
    argv = _argv(factory, tmp_path, "--in-process", "--no-plots", "--configs", "edge")
    argv[1] = f"{factory}:not_a_module"
    assert cli.main(argv) == 1
    rows = _rows(tmp_path)
    assert len(rows) == 3 and all(r["ok"] == "False" and "expected a torch.nn.Module" in r["error"] for r in rows)
    assert "tiny:not_a_module on edge at T=1: compile: TypeError" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [(["--configs", "nope"], "config 'nope': neither a shipped config"), (["--lengths", "65"], "outside")],
)
def test_sweep_bad_requests(factory, tmp_path, capsys, extra, message):
    argv = _argv(factory, tmp_path, "--in-process")
    i = argv.index(extra[0])
    argv[i + 1] = extra[1]
    assert cli.main(argv) == 1
    assert message in capsys.readouterr().err


def test_run_tasks_in_process_keeps_order():
    seen = []
    assert sw.run_tasks(abs, [-3, 2, -1], in_process=True, progress=lambda i, n: seen.append((i, n))) == [3, 2, 1]
    assert seen == [(1, 3), (2, 3), (3, 3)]


@pytest.mark.skipif(not sw.ray_available(), reason="Ray is not installed (pip install 'novella-mlir[sweep]')")
def test_sweep_on_local_ray_matches_in_process(factory, tmp_path):
    assert cli.main(_argv(factory, tmp_path / "local", "--in-process", "--no-plots")) == 0
    assert cli.main(_argv(factory, tmp_path / "ray", "--workers", "2", "--no-plots")) == 0
    drop = ("compile_s", "sim_s")
    strip = [[{k: v for k, v in r.items() if k not in drop} for r in _rows(tmp_path / d)] for d in ("local", "ray")]
    assert strip[0] == strip[1]
