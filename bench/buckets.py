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


def measure(name: str, max_len: int, lengths, config) -> dict:
    """Both compiles of `name` simulated at every length in bounds: rows per length, bytes per program."""
    spec, npus = compile_both(name, max_len, config)
    off, on = npus[False], npus[True]
    art = on.artifact
    rows = []
    for t in lengths:
        x, sym = spec.example(t), spec.symbol(t)
        if not art.symbols[0][1] <= sym <= art.symbols[0][2]:
            continue
        c_off, roof, m_off = run(off, x)
        c_on, _, m_on = run(on, x)
        prog = art.pick([sym])
        rows.append(dict(T=t, program=prog, range=str(art.programs[prog].ranges[0]), off=c_off, on=c_on, roof=roof,
                         moved_off=m_off, moved_on=m_on))  # fmt: skip
    programs = [dict(range=str(p.ranges[0]), bytes=art.program_nbytes(i), reason=p.reason)
                for i, p in enumerate(art.programs)]  # fmt: skip
    generic = off.artifact.program_nbytes(0)
    return dict(name=name, bounds=tuple(art.symbols[0][1:]), rows=rows, programs=programs,
                generic=dict(range=str(off.artifact.programs[0].ranges[0]), bytes=generic),
                nbytes_off=off.artifact.nbytes, nbytes_on=art.nbytes, weights=art.weight_nbytes,
                compile_s=sum(v for k, v in on.stages.seconds.items() if " @ " in k or k == "novella-buckets"))  # fmt: skip


def report(name: str, max_len: int, lengths, config) -> None:
    r = measure(name, max_len, lengths, config)
    print(f"\n## {name}, T in [{r['bounds'][0]}, {r['bounds'][1]}]  (compile time of the buckets: "
          f"--novella-buckets and the bucket programs' passes, {r['compile_s']:.2f} s)")  # fmt: skip
    head = f"{'T':>6} {'program':>8} {'cycles 1 prog':>14} {'cycles buckets':>15} {'gain':>6}"
    print(head + f" {'cyc/roof off':>12} {'cyc/roof on':>11} {'moved MB off':>12} {'moved MB on':>11}")
    for w in r["rows"]:
        print(f"{w['T']:>6} {'#' + str(w['program']):>8} {w['off']:>14,} {w['on']:>15,} {w['off'] / w['on']:>5.2f}x"
              f" {w['off'] / w['roof']:>12.2f} {w['on'] / w['roof']:>11.2f} {w['moved_off'] / 1e6:>12.2f}"
              f" {w['moved_on'] / 1e6:>11.2f}")  # fmt: skip
    print(f"\n{'program':>8} {'range':>16} {'MacroMeta B':>12} {'TileMeta B':>11} {'total B':>8}  reason")
    g = r["generic"]
    print(f"{'(off)':>8} {g['range']:>16} {g['bytes'][0]:>12} {g['bytes'][1]:>11} {sum(g['bytes']):>8}"
          "  one generic program")  # fmt: skip
    for i, p in enumerate(r["programs"]):
        mb, tb = p["bytes"]
        print(f"{'#' + str(i):>8} {p['range']:>16} {mb:>12} {tb:>11} {mb + tb:>8}  {p['reason']}")
    extra = r["nbytes_on"] - r["nbytes_off"]
    print(f"artifact metadata: {r['nbytes_off']} B with one program, {r['nbytes_on']} B with buckets "
          f"(+{extra} B, {extra / r['nbytes_off']:+.0%}); weights {r['weights']} B either way")  # fmt: skip


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
