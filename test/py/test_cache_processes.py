"""Several processes compiling one model at once into one cache directory: all correct, one entry, no temp
files left (issue 20). Every child imports first and says so; the test lets them all compile together
only when each is ready, so the compiles overlap however loaded the machine is. NOVELLA_TEST_PROCESSES
sets how many (default 3: two writers already race; each child is a Python importing torch)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROCESSES = int(os.environ.get("NOVELLA_TEST_PROCESSES", 3))

CHILD = """
import sys, time, torch
from pathlib import Path
from novella_mlir import compile_torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8)).eval()
gate = Path(sys.argv[1])
(gate / f"ready-{sys.argv[2]}").touch()
while not (gate / "go").exists():
    time.sleep(0.005)
npu = compile_torch(m, torch.randn(1, 4, 8), dynamic_dim=1, min_len=1, max_len=32)
for t in (1, 7, 16, 32):
    x = torch.randn(1, t, 8)
    torch.testing.assert_close(npu(x), m(x), rtol=1e-4, atol=1e-4)
print("ok")
"""


def test_processes_compile_one_model_at_once(tmp_path):
    cache, gate = tmp_path / "cache", tmp_path / "gate"
    cache.mkdir()
    gate.mkdir()
    env = dict(os.environ, NOVELLA_CACHE="1", NOVELLA_CACHE_DIR=str(cache), PYTHONPATH=str(ROOT))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(gate), str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    deadline = time.time() + 600
    while len(list(gate.glob("ready-*"))) < PROCESSES and time.time() < deadline:
        assert all(p.poll() is None for p in procs), "a child exited before it was ready"
        time.sleep(0.05)
    (gate / "go").touch()
    results = [p.communicate(timeout=900) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
        assert "unreadable" not in err and "could not write" not in err, err[-2000:]
    names = sorted(p.name for p in cache.iterdir())
    entries = [n for n in names if not n.startswith(".")]
    assert len(entries) == 1, names
    assert [n for n in names if n.startswith((".tmp", ".trash"))] == []
    assert sorted(p.name for p in (cache / entries[0]).iterdir()) == ["model.nvla", "sig", "stages.json",
                                                                      "trace.json"]  # fmt: skip
