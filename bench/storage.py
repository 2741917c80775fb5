"""Instruction storage: static stream vs per-length streams vs JIT metadata.

    .venv/bin/python bench/storage.py [--model mlp|layer|encoder] [--max-lens 1500,15000] [--static compile|count]

For each max length (positions; the encoder's symbol is its mel frames, twice that):

* static: the words of the model compiled for T = max (`--static compile`,
  a real static compile) or the JIT's word count at T = max (`--static count`,
  equal when the streams are bit-identical), times 32 bytes;
* per-length: the streams of *every* symbol value in bounds, counted exactly
  without materializing them (`streams.count_words_range`);
* (the JIT's own stream at T = max, for comparison with static);
* jit: `artifact.nbytes` (MacroMeta + TileMeta JSON); weights are shared by
  all three and left out.
"""

from __future__ import annotations

import argparse
import time

from models import compile_model

from novella_mlir.testing import streams
from simulator import isa


def measure(name: str, max_len: int, static: str) -> dict:
    t0 = time.perf_counter()
    spec, module, npu = compile_model(name, max_len)
    art = npu.artifact
    (_, lo, hi) = art.symbols[0]
    t1 = time.perf_counter()
    if static == "compile":
        words = len(streams.static_words(module, spec.example(max_len), dynamic_dim=spec.dynamic_dim))
    else:
        words = streams.count_words(art, [hi])
    t2 = time.perf_counter()
    counts = streams.count_words_range(art, lo, hi)
    t3 = time.perf_counter()
    return {
        "max_len": max_len,
        "bounds": f"[{lo}, {hi}]",
        "static": words * isa.WORD_BYTES,
        "jit_at_max": int(counts[-1]) * isa.WORD_BYTES,
        "per_length": int(counts.sum()) * isa.WORD_BYTES,
        "jit": art.nbytes,
        "macro": art.macro_nbytes,
        "tile": art.tile_nbytes,
        "seconds": (t1 - t0, t2 - t1, t3 - t2),
    }


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


def _ratio(a: int, b: int) -> str:
    return f"{a / b:,.1f}x" if a < 100 * b else f"{a / b:,.0f}x"


def table(rows: list[dict]) -> str:
    head = (
        "| max_len | symbol bounds | static @ max | (JIT stream @ max) | per-length, all lengths "
        "| JIT (Macro+Tile) | static / JIT | per-length / JIT |"
    )
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        lines.append(
            f"| {r['max_len']} | {r['bounds']} | {_size(r['static'])} | ({_size(r['jit_at_max'])}) "
            f"| {_size(r['per_length'])} "
            f"| {r['jit']} B ({r['macro']} + {r['tile']}) | {_ratio(r['static'], r['jit'])} "
            f"| {_ratio(r['per_length'], r['jit'])} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("mlp", "mlp384", "layer", "encoder"), default="mlp")
    p.add_argument("--max-lens", default="1500,15000")
    p.add_argument("--static", choices=("compile", "count"), default="compile")
    args = p.parse_args(argv)
    rows = [measure(args.model, int(m), args.static) for m in args.max_lens.split(",")]
    print(f"model={args.model}  static={args.static}")
    print(table(rows))
    for r in rows:
        c, s, n = r["seconds"]
        print(f"max_len={r['max_len']}: compile {c:.1f} s, static {s:.1f} s, per-length count {n:.2f} s")


if __name__ == "__main__":
    main()
