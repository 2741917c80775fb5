"""npu(x, check_hazards=..., progress=...) and `novella run --no-hazard-check`."""

from __future__ import annotations

import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.tools import cli


@pytest.fixture(scope="module")
def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).eval()
    return model, compile_torch(model, torch.randn(1, 8, 32), dynamic_dim=1, min_len=1, max_len=256, cache=False)


def test_hazard_check_off_gives_the_same_outputs_and_cycles(mlp):
    model, npu = mlp
    x = torch.randn(1, 77, 32)
    on = npu(x)
    stats_on = npu.last_run.stats.to_dict()
    off = npu(x, check_hazards=False)
    assert torch.equal(on, off)
    assert npu.last_run.stats.to_dict() == stats_on
    torch.testing.assert_close(off, model(x), rtol=1e-4, atol=1e-4)


def test_progress_bar_only_when_asked_or_on_a_terminal(mlp, capsys, monkeypatch):
    _, npu = mlp
    x = torch.randn(1, 200, 32)
    npu(x)
    assert capsys.readouterr().err == ""  # pytest's stderr is not a terminal
    npu(x, progress=True)
    err = capsys.readouterr().err
    assert "inst" in err and "npu" in err
    monkeypatch.setenv("NOVELLA_PROGRESS", "1")
    npu(x)
    assert "inst" in capsys.readouterr().err


def test_cli_run_no_hazard_check(mlp, tmp_path, capsys):
    _, npu = mlp
    path = tmp_path / "mlp.nvla"
    npu.save(path)
    assert cli.main(["run", str(path), "--len", "33", "--no-hazard-check"]) == 0
    quick = capsys.readouterr().out
    assert cli.main(["run", str(path), "--len", "33"]) == 0
    checked = capsys.readouterr().out
    cycles = [line for line in quick.splitlines() if line.startswith("cycles")]
    assert cycles and cycles == [line for line in checked.splitlines() if line.startswith("cycles")]
