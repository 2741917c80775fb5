"""Cycles of one batched decode step broken down by kernel (macro), from the simulator's trace.

Macros are separated by barrier steps, so each one's span (its first instruction's start to its last
one's end) is its share of the step; `by kind` sums them per kernel. The model is bench/decode.py's.

Usage: python bench/decode_ops.py [--model llama|gpt2] [--batch-sizes 1,32] [--past 16]
"""

from __future__ import annotations

import argparse
import collections

import numpy as np
from decode import build

from novella_mlir.causal_lm import compile_causal_lm
from novella_mlir.decoding.batched import compile_batched
from novella_mlir.runtime.batch import BatchStep, Lane
from novella_mlir.runtime.jit import Jit
from novella_mlir.runtime.kv import BlockTable


def spans(sess, name: str, syms: list, trace) -> list:
    """(macro, instructions, start, cycles) of every macro of program `name` in the traced run at `syms` (the
    clock and the lane fields, `BatchStep.starts`); a macro whose early loads ran under the one before starts
    at that one's end, so the spans add up to the run."""
    ev = [e for e in trace.events if e.get("ph") == "X" and "index" in e.get("args", {})]
    idx = np.array([e["args"]["index"] for e in ev])
    beg = np.array([e["ts"] for e in ev]) * trace.cycles_per_us
    end = beg + np.array([e["dur"] for e in ev]) * trace.cycles_per_us
    out = []
    for macro, s, e in Jit(sess.models[name].artifact).instantiate(syms).spans:
        m = (idx >= s) & (idx < e)
        if m.any():
            out.append((macro, e - s, beg[m].min(), end[m].max()))
    out, prev = sorted(out, key=lambda r: r[2]), 0.0
    for i, (macro, n, b, e) in enumerate(out):
        out[i], prev = (macro, n, max(b, prev), max(e - max(b, prev), 0.0)), max(prev, e)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama", choices=("gpt2", "llama"))
    ap.add_argument("--batch-sizes", default="1,32")
    ap.add_argument("--past", type=int, default=16)
    args = ap.parse_args()
    sizes, past, ps = [int(b) for b in args.batch_sizes.split(",")], args.past, 16
    hf = build(args.model, 1024)
    batch = max(sizes + [3])
    lm = compile_causal_lm(hf, max_len=1024, page_size=ps, max_batch=batch, n_pages=(batch + 1) * 65)
    compile_batched(hf, lm, sizes)
    sess = lm.session(check_hazards=False)
    null = BlockTable()
    sess.pool.reserve(null, 1)
    for n in sizes:
        tables = [BlockTable() for _ in range(n)]
        for t in tables:
            sess.pool.reserve(t, past + 1)
        lanes = [Lane(5, past, 0, t.blocks, 0) for t in tables]
        sess.sim.trace_enabled = True
        step = BatchStep(sess, f"batch{n}", n, null.blocks[0])
        _, stats, *_ = step.run(lanes, past)
        trace, sess.sim.trace_enabled = sess.sim.trace, False
        print(f"\nB = {n}, past {past}: {stats.cycles:,} cycles, {stats.instructions} instructions")
        kinds = collections.Counter()
        for macro, insts, start, cycles in spans(sess, f"batch{n}", [past, *step.starts(lanes, past)], trace):
            print(f"{macro:32s} {insts:6d} insts  start {start:9.0f}  {cycles:8.0f} cycles")
            kinds[macro.rsplit("_", 1)[0]] += cycles
        print("by kind:", ", ".join(f"{k} {int(v):,}" for k, v in kinds.most_common()))
        for t in tables:
            sess.pool.release(t)


if __name__ == "__main__":
    main()
