"""Shape buckets: cycles gained at short and long lengths, and the artifact bytes each bucket costs.

    .venv/bin/python bench/buckets.py                            # mlp384 and the Whisper encoder body
    .venv/bin/python bench/buckets.py --model mlp384 --lengths 1,16,64,65,512,2048 [--config edge]

Each model is compiled twice in this run, with shape buckets (`--novella-buckets`, the default) and
without (`buckets=False`, one generic program), and both are simulated at every length. Printed side
by side: the program each length runs, simulated cycles without and with buckets, their ratio (the
gain), the cost model's predicted ratio for the bucket program, and the compulsory roofline
(max(MACs / MACs-per-cycle, (weights + input + output) bytes / bandwidth)) with the moved bytes beside
it. Then each program's range and MacroMeta + TileMeta bytes, against the one generic program's.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import models  # noqa: E402
from cycles import config_of  # noqa: E402

from novella_mlir import compile_torch  # noqa: E402

DEFAULT = (("mlp384", 2048, (1, 16, 64, 65, 512, 2048)), ("body", 1500, (1, 16, 64, 65, 512, 1500)))


def compile_both(name: str, max_len: int, config):
    spec = models.SPECS[name]
    module = spec.build(max_len)
    lo, hi = spec.bounds(max_len)
    out = {}
    for buckets in (False, True):
        out[buckets] = compile_torch(
            module, spec.example(16), dynamic_dim=spec.dynamic_dim, min_len=lo, max_len=hi, config=config,
            buckets=buckets, cache=False,
        )  # fmt: skip
    return spec, out


def run(npu, x):
    y = npu(x)
    s, cfg = npu.last_run.stats, npu.config
    compulsory = npu.artifact.weight_nbytes + x.numel() * 4 + y.numel() * 4
    roof = max(s.macs / cfg.macs_per_cycle, compulsory / cfg.dram_bytes_per_cycle)
    return s.cycles, roof, s.dma_bytes_loaded + s.dma_bytes_stored


def report(name: str, max_len: int, lengths, config) -> None:
    spec, npus = compile_both(name, max_len, config)
    off, on = npus[False], npus[True]
    art = on.artifact
    extra = sum(v for k, v in on.stages.seconds.items() if " @ " in k or k == "novella-buckets")
    print(f"\n## {name}, T in [{art.symbols[0][1]}, {art.symbols[0][2]}]  (compile time of the buckets: "
          f"--novella-buckets and the bucket programs' passes, {extra:.2f} s)")  # fmt: skip
    head = f"{'T':>6} {'program':>8} {'cycles 1 prog':>14} {'cycles buckets':>15} {'gain':>6}"
    print(head + f" {'cyc/roof off':>12} {'cyc/roof on':>11} {'moved MB off':>12} {'moved MB on':>11}")
    for t in lengths:
        x = spec.example(t)
        sym = spec.symbol(t)
        if not art.symbols[0][1] <= sym <= art.symbols[0][2]:
            continue
        c_off, roof, m_off = run(off, x)
        c_on, _, m_on = run(on, x)
        print(f"{t:>6} {'#' + str(art.pick([sym])):>8} {c_off:>14,} {c_on:>15,} {c_off / c_on:>5.2f}x"
              f" {c_off / roof:>12.2f} {c_on / roof:>11.2f} {m_off / 1e6:>12.2f} {m_on / 1e6:>11.2f}")  # fmt: skip
    print(f"\n{'program':>8} {'range':>16} {'MacroMeta B':>12} {'TileMeta B':>11} {'total B':>8}  reason")
    generic = off.artifact.program_nbytes(0)
    print(f"{'(off)':>8} {str(off.artifact.programs[0].ranges[0]):>16} {generic[0]:>12} {generic[1]:>11}"
          f" {sum(generic):>8}  one generic program")  # fmt: skip
    for i, p in enumerate(art.programs):
        mb, tb = art.program_nbytes(i)
        print(f"{'#' + str(i):>8} {str(p.ranges[0]):>16} {mb:>12} {tb:>11} {mb + tb:>8}  {p.reason}")
    extra = art.nbytes - off.artifact.nbytes
    print(f"artifact metadata: {off.artifact.nbytes} B with one program, {art.nbytes} B with buckets "
          f"(+{extra} B, {extra / off.artifact.nbytes:+.0%}); weights {art.weight_nbytes} B either way")  # fmt: skip


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=sorted(models.SPECS), help="one model (default: mlp384 and body)")
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--lengths", help="comma-separated lengths (default: 1,16,64,65,512,max)")
    ap.add_argument("--config", default="default", help="default, edge or large")
    args = ap.parse_args(argv)
    config = config_of(args.config)
    print(f"shape buckets, config {args.config}: simulated cycles with one generic program vs with buckets")
    if args.model:
        lengths = [int(t) for t in args.lengths.split(",")] if args.lengths else (1, 16, 64, 65, 512, args.max_len)
        report(args.model, args.max_len, lengths, config)
        return
    for name, max_len, lengths in DEFAULT:
        report(name, max_len, lengths, config)


if __name__ == "__main__":
    main()
