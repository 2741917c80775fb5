"""The same words on the default config and on `dual_dma` (a second DMA engine behind the load queue),
side by side in one run, against the compulsory roofline (`bench/cycles.py`'s definition:
max(model MACs / MACs-per-cycle, (weights + input + output) bytes / DRAM bytes-per-cycle)) with the
moved bytes beside it.

    .venv/bin/python bench/dual_dma.py [--model mlp --lengths 1,65,500,2048]

The program is compiled once for the default config; `dual_dma` runs its words on the readable
machine (the fast path keeps one engine per DMA queue), so only the timing rule differs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import cycles  # noqa: E402
import numpy as np  # noqa: E402

from novella_mlir.runtime.executor import Executor  # noqa: E402
from simulator import load_config  # noqa: E402

DUAL = load_config(ROOT / "simulator" / "configs" / "dual_dma.toml")


def measure(workload: str, length: int, max_len: int) -> dict:
    spec, npu, _ = cycles.compiled(workload, "default", max_len)
    base = cycles.measure(workload, "default", length, max_len)
    dual = Executor(npu.artifact, config=DUAL)
    x = spec.example(length)
    same = np.array_equal(dual.run([x.numpy()])[0], npu(x).numpy())
    return base | {"dual": dual.last_run.stats.cycles, "same": same}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="mlp", choices=sorted(cycles.models.SPECS))
    p.add_argument("--lengths", default="1,65,500,2048")
    p.add_argument("--max-len", type=int, default=2048)
    a = p.parse_args(argv)
    head = (f"{'T':>5} {'roof':>9} {'moved B':>10} {'default':>9} {'cyc/roof':>8} {'dual_dma':>9} {'cyc/roof':>8} "
            f"{'dual/default':>12} {'same out':>8}")  # fmt: skip
    print(f"{a.model}, max_len {a.max_len}\n{head}\n{'-' * len(head)}")
    for t in (int(v) for v in a.lengths.split(",")):
        r = measure(a.model, t, a.max_len)
        print(f"{t:>5} {int(r['roof']):>9} {r['moved']:>10} {r['cycles']:>9} {r['ratio']:>8.2f} {r['dual']:>9} "
              f"{r['dual'] / r['roof']:>8.2f} {r['dual'] / r['cycles']:>12.3f} {str(r['same']):>8}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
