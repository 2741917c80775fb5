"""What a compile-cache hit costs now that the key is the exported program (issue 20).

    .venv/bin/python bench/cache_hit.py [--models mlp,encoder] [--repeat 3]

Each figure in a new process (medians of `repeat`), side by side, and again as the process's second call: torch.export alone (the frontend's
`importer.export`, as a compile calls it, first call in the process), `compile_torch` into an empty
cache (a miss: export + compile + store), and `compile_torch` again (a hit: export + replay check + load
of the signed entry). The import of torch and novella_mlir is not in any figure."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_POSITIONS = 1500

CHILD = """
import sys, time
sys.path.insert(0, {bench!r})
from models import SPECS
from novella_mlir import compile_torch
from novella_mlir.frontend import importer
spec = SPECS[{name!r}]
module = spec.build({maxp})
lo, hi = spec.bounds({maxp})
x = spec.example(16)
for _ in range(2):
    w, c = time.perf_counter(), time.process_time()
    if {what!r} == "export":
        importer.export(module, (x,), spec.dynamic_dim, lo, hi)
    else:
        compile_torch(module, x, dynamic_dim=spec.dynamic_dim, min_len=lo, max_len=hi)
    print(time.perf_counter() - w, time.process_time() - c)
"""


def _run(name: str, what: str, cache: str) -> tuple[float, float, float]:
    """(wall, second call's wall, CPU) seconds of the first and second call in a new process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), NOVELLA_CACHE="1", NOVELLA_CACHE_DIR=cache)
    code = CHILD.format(bench=str(ROOT / "bench"), name=name, maxp=MAX_POSITIONS, what=what)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stderr[-2000:])
    w1, c1, w2, _ = map(float, out.stdout.split()[-4:])
    return w1, w2, c1


def measure(name: str, repeat: int) -> dict:
    """Medians over `repeat` interleaved triples (load changes hit all three alike) of (first call, second
    call in the process, first call's CPU) seconds: torch.export alone, a compile into an empty cache
    (miss), and again (hit)."""
    runs: dict = {"export": [], "miss": [], "hit": []}
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as cache:
            runs["export"].append(_run(name, "export", cache))
            runs["miss"].append(_run(name, "compile", cache))
            runs["hit"].append(_run(name, "compile", cache))
    return {k: tuple(statistics.median(r[i] for r in v) for i in (0, 1, 2)) for k, v in runs.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="mlp,encoder")
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args(argv)
    print(
        "| model | torch.export alone | compile, miss | compile, hit | hit / export | CPU time | the same, 2nd call "
        "in the process |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in a.models.split(","):
        r = measure(name, a.repeat)
        (e, e2, ec), (m, _, _), (h, h2, hc) = r["export"], r["miss"], r["hit"]
        print(f"| {name} | {e:.2f} s | {m:.2f} s | {h:.2f} s | {h / e:.2f} | {hc / ec:.2f} | export {e2:.2f} s, "
              f"hit {h2:.2f} s, {h2 / e2:.2f} |", flush=True)  # fmt: skip
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
