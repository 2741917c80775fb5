"""--novella-buckets: shape buckets, a cost-model decision: a program of its own for short lengths.

Runs after `--novella-allocate` (each op's SRAM budget is known), before
`--novella-tile`. Kernels plan their tiles for a nominal length (so that
tiling does not change with max_len); a short sub-range of a symbol may
be better served by tiles planned for its own upper end. For every kernel
that predicts its cycles (`predict`, from `novella_mlir/machine/costmodel.py`),
the pass sums the predictions of the generic program and of a program
planned for each candidate upper end B (`Target.bucket_edges`), and keeps
the largest B at which the model predicts at least `min-gain` percent
fewer cycles at T = B and no more at T = 1 and B / 2 (`costmodel.bucket`).
Below that bucket it asks again, against the bucket's plan, for up to
`max-buckets` nested buckets (each edge below the one above). A bucket
that loses at T = 1 is kept when the chain's shortest bucket, which
serves T = 1, does not lose there to the generic program.
Analytic: nothing is simulated. The edges depend on the model and the
Target only, not on the bounds: lengths up to B are planned for B whatever
max_len, and a static compile at T <= B tiles as the bucket holding T does.

The decision is the module attribute `novella.buckets`: one entry per
program, `{symbol, lo, hi, plan, reason}`: each bucket's lengths above the
next shorter bucket, then the generic program's above the longest,
intersected with the bounds (one entry when the bounds lie in one). The
pipeline then compiles each entry from a copy of the module whose symbol
bounds are [lo, hi] and whose `novella.plan_lengths` is `plan` (a
bucket's); one artifact holds the programs; with one bucket entry the pass
sets `novella.plan_lengths` itself.
No entry when no bucket pays, the pass is disabled
(`enable=0`), or the module has a paged KV cache (a decode session runs
one program).
"""

from __future__ import annotations

import dataclasses
import functools

from .. import symbolic as sy
from ..kernels import NOMINAL_LENGTH, PLAN_ATTR, TensorView
from ..machine import costmodel
from ..machine.target import Target
from ..optable import get_kernel
from .common import body_ops, check_symbols, from_attr, functions, set_attr

OPTIONS = {
    "enable": (int, 1, "emit shape buckets when the cost model predicts a gain (0: one generic program)", (0, 1)),
    "min-gain": (int, 2, "percent fewer predicted cycles a bucket needs at its upper end", (0, 1000)),
    "max-buckets": (int, 4, "most buckets below the generic program, each nested in the one above", (1, 8)),
}

ATTR = "novella.buckets"


def run(module_op, options, config) -> None:
    symbols = check_symbols(module_op)
    if ATTR in module_op.attributes:
        del module_op.attributes[ATTR]
    if PLAN_ATTR in module_op.attributes:
        del module_op.attributes[PLAN_ATTR]
    if not options["enable"] or not symbols:
        return
    fns = functions(module_op)
    if any("novella.kv_cache" in fn.attributes for fn in fns):
        return
    hardware = Target.from_config(config)
    ops = []
    for fn in fns:
        for op in body_ops(fn):
            k = get_kernel(op.operation.name) if "novella.sram_budget" in op.attributes else None
            if k is not None and hasattr(k, "predict"):
                ops.append((op, k, hardware.with_budget(from_attr(op.attributes["novella.sram_budget"]))))
    if not ops:
        return
    views = [TensorView(op) for op, _, _ in ops]
    kinds = [_signature(op) for op, _, _ in ops]  # equal layers predict alike: each kind is asked once

    @functools.cache  # the generic plan is asked again at each edge's lengths
    def predict_at(plan, at):
        total, known = 0.0, {}
        for (op, k, target), tv, kind in zip(ops, views, kinds):
            if kind not in known:
                known[kind] = k.predict(op, tv, target, {}, plan, at)
            if known[kind] is None:
                return None
            total += known[kind]
        return total

    def predict(plan, at):
        return predict_at(tuple(plan), tuple(at))

    nominal = [NOMINAL_LENGTH] * len(symbols)
    chain = _chain(predict, nominal, hardware, options)
    if not chain:
        return
    sym = chain[0].symbol
    s = symbols[sym]
    entries, lo = [], s.lo
    for b, base in zip(chain, [c.hi for c in chain[1:]] + [NOMINAL_LENGTH]):
        if lo <= min(s.hi, b.hi):
            entries.append(_entry(b, symbols, lo, min(s.hi, b.hi), list(b.plan), base=base))
        lo = max(lo, b.hi + 1)
    if s.hi >= lo:
        entries.append(_entry(None, symbols, lo, s.hi, nominal, sym))
    set_attr(module_op, ATTR, entries)
    if len(entries) == 1 and entries[0]["reason"] != "generic":  # the whole range is one bucket
        set_attr(module_op, PLAN_ATTR, entries[0]["plan"])


def _signature(op) -> tuple:
    """What a kernel's prediction depends on: the op's name, operand and result types, attributes but
    its DRAM placement (`novella.dram`, which no cost model reads)."""
    o = op.operation
    attrs = tuple(kv for kv in o.attributes.items() if kv[0] != "novella.dram")
    return (o.name, tuple(v.type for v in o.operands), tuple(v.type for v in o.results), attrs)


def _chain(predict, nominal, hardware, options) -> list:
    """The buckets, shortest first: the first against the generic program, each later one nested
    below the previous, against that bucket's plan (`costmodel.bucket` again on its sub-range).
    A bucket may lose at T = 1 to the plan above it when the shortest bucket of its chain does not
    lose there to the generic program (T = 1 is that bucket's); else every bucket is held to T = 1."""
    loose = _nested(predict, nominal, hardware, options, at_one=False)
    if loose:
        one = [1 if i == loose[0].symbol else v for i, v in enumerate(nominal)]
        shortest, generic = predict(list(loose[0].plan), one), predict(list(nominal), one)
        if shortest and generic and shortest <= generic:
            return loose
    return _nested(predict, nominal, hardware, options, at_one=True)


def _nested(predict, nominal, hardware, options, at_one: bool) -> list:
    chain, base, edges = [], nominal, hardware.bucket_edges(NOMINAL_LENGTH)
    while len(chain) < options["max-buckets"]:
        b = costmodel.bucket(predict, list(base), edges, options["min-gain"] / 100, at_one)
        if b is None or (chain and (b.symbol != chain[-1].symbol or b.hi >= chain[-1].hi)):
            break
        chain.append(b)
        base = list(b.plan)
    return chain[::-1]


def _entry(b, symbols, lo: int, hi: int, plan: list, symbol: int | None = None, base: int = NOMINAL_LENGTH) -> dict:
    if b is None:
        return {"symbol": symbol, "lo": lo, "hi": hi, "plan": plan, "reason": "generic"}
    name = symbols[b.symbol].name
    gains = ", ".join(f"{g:.2f}x" for g in b.gains)
    reason = (
        f"shape bucket: tiles planned for {name} = {b.hi} instead of {base}; the cost model "
        f"predicts {gains} fewer cycles at {name} = {', '.join(map(str, sorted({1, max(b.hi // 2, 1), b.hi})))}"
    )
    return {"symbol": b.symbol, "lo": lo, "hi": hi, "plan": plan, "reason": reason}


def programs(module) -> list:
    """(module, reason) per program of `novella.buckets`: copies of `module` with the symbol's bounds
    narrowed and the plan lengths set; [(module, "generic")] without buckets."""
    if ATTR not in module.operation.attributes:
        return [(module, "generic")]
    entries = from_attr(module.operation.attributes[ATTR])
    out = []
    for e in entries:
        m = module if len(entries) == 1 else module.operation.clone()
        syms = sy.read_symbols(m.operation)
        syms[e["symbol"]] = dataclasses.replace(syms[e["symbol"]], lo=e["lo"], hi=e["hi"])
        sy.write_symbols(m.operation, syms)
        if e["reason"] != "generic":
            set_attr(m, PLAN_ATTR, e["plan"])
        out.append((m, e["reason"]))
    return out
