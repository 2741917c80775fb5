"""JIT host time against the simulated NPU time it feeds, for several lengths.

    .venv/bin/python bench/jit.py [--model mlp|layer|encoder] [--max-len 1500] [--lengths 1,64,...] [--repeat 5]

Per length, measured side by side in one run: the JIT's instantiation time
of a length it has not seen (best of `--repeat`), per word and as
instructions per second; the first call on a fresh `Jit` (which also
prepares the templates); a repeated length (the program cache); the simulated NPU time
(cycles / clock) of the same program; and JIT time / NPU time.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from models import compile_model

from novella_mlir.runtime.jit import Jit


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure(npu, spec, length: int, repeat: int, simulate: bool) -> dict:
    art = npu.artifact
    x = spec.example(length).numpy()
    syms = npu.executor.bind([x])
    first_s = _best(lambda: Jit(art).instantiate(syms), repeat)
    uncached = Jit(art, cache_size=0)
    uncached.instantiate([s + 1 if s < hi else s - 1 for s, (_, _, hi) in zip(syms, art.symbols)])  # another length
    jit_s = _best(lambda: uncached.instantiate(syms), repeat)
    warm = Jit(art)
    program = warm.instantiate(syms)
    cached_s = _best(lambda: warm.instantiate(syms), repeat)
    row = {"T": length, "words": program.n_words, "jit_s": jit_s, "first_s": first_s, "cached_s": cached_s}
    if simulate:
        t0 = time.perf_counter()
        npu.executor.run([x], check_hazards=False)
        row["sim_host_s"] = time.perf_counter() - t0
        stats = npu.last_run.stats
        row["npu_s"] = stats.cycles / (npu.config.clock_ghz * 1e9)
        assert np.array_equal(npu.last_run.program.words, program.words)
    return row


def table(rows: list[dict]) -> str:
    head = "| T | words | JIT, new length | ns / word | instr / s | first call | cached | NPU time (sim) | JIT / NPU |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        npu = f"{r['npu_s'] * 1e3:.3f} ms" if "npu_s" in r else "-"
        ratio = f"{r['jit_s'] / r['npu_s']:.3f}" if "npu_s" in r else "-"
        lines.append(
            f"| {r['T']} | {r['words']} | {r['jit_s'] * 1e3:.2f} ms | {r['jit_s'] / r['words'] * 1e9:,.0f} "
            f"| {r['words'] / r['jit_s'] / 1e6:.2f} M | {r['first_s'] * 1e3:.2f} ms | {r['cached_s'] * 1e6:.1f} us "
            f"| {npu} | {ratio} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("mlp", "mlp384", "layer", "encoder"), default="mlp")
    p.add_argument("--max-len", type=int, default=1500)
    p.add_argument("--lengths", default="2,64,65,256,1024,1500")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-sim", action="store_true", help="skip the simulator (JIT timings only)")
    args = p.parse_args(argv)
    spec, _, npu = compile_model(args.model, args.max_len)
    rows = [measure(npu, spec, int(t), args.repeat, not args.no_sim) for t in args.lengths.split(",")]
    print(f"model={args.model}  max_len={args.max_len}  clock={npu.config.clock_ghz} GHz")
    print(table(rows))
    sim = [r for r in rows if "sim_host_s" in r]
    if sim:
        print("simulator host time: " + ", ".join(f"T={r['T']}: {r['sim_host_s']:.1f} s" for r in sim))


if __name__ == "__main__":
    main()
