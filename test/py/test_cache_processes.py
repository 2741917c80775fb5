"""Ten processes compiling one model at once into one cache directory: all correct, one entry, no temp
files left (issue 20)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import sys, time, torch
from novella_mlir import compile_torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8)).eval()
while time.time() < float(sys.argv[1]):
    time.sleep(0.01)
npu = compile_torch(m, torch.randn(1, 4, 8), dynamic_dim=1, min_len=1, max_len=32)
for t in (1, 7, 16, 32):
    x = torch.randn(1, t, 8)
    torch.testing.assert_close(npu(x), m(x), rtol=1e-4, atol=1e-4)
print("ok")
"""


def test_ten_processes_compile_one_model_at_once(tmp_path):
    import time

    env = dict(os.environ, NOVELLA_CACHE="1", NOVELLA_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    start = str(time.time() + 20)  # every child imports first, then all compile together
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, start], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )  # fmt: skip
        for _ in range(10)
    ]
    results = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
        assert "unreadable" not in err and "could not write" not in err, err[-2000:]
    names = sorted(p.name for p in tmp_path.iterdir())
    entries = [n for n in names if not n.startswith(".")]
    assert len(entries) == 1, names
    assert [n for n in names if n.startswith((".tmp", ".trash"))] == []
    assert sorted(p.name for p in (tmp_path / entries[0]).iterdir()) == ["model.nvla", "sig", "stages.json",
                                                                         "trace.json"]  # fmt: skip
