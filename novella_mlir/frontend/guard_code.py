"""The export's guards as the decomposition retrace runs them, each min / max of sizes decided over the range.

torch's retrace (`run_decompositions`) first runs the exported program's guards as Python (`prog.module()`'s
`_guards_fn`, from `prog._guards_code`), where a `Min(64, T)` is printed as the builtin `min(64, T)`: it
compares `T < 64` at the example's size and guards the outcome. At T = 64 that guard is `T >= 64`, the length
fixed at 64 (qwen3_5_text's `32*min(64, T) == 32*T`); at T = 16 it is `T <= 63`, a range narrowed without a
word. A min or max whose winner is the same at every length of the range is replaced by that side, as
`exporting.fold_size_min_max` does in the graph; one that is not stays as torch printed it.
"""

from __future__ import annotations

import contextlib

import sympy
from torch.utils._sympy.functions import Max, Min

from . import exporting, guards


@contextlib.contextmanager
def decided_during(prog):
    """`prog._guards_code` with each min / max decided (`decided`) while the block runs."""
    kept = prog._guards_code
    prog._guards_code = decided(prog)
    try:
        yield
    finally:
        prog._guards_code = kept


def decided(prog) -> list[str]:
    """`prog._guards_code`, each guard that holds a min / max of sizes printed again with the side that wins
    over the range's box in its place; a guard torch printed otherwise is kept as it is."""
    from torch.fx.experimental.symbolic_shapes import ShapeGuardPythonPrinter

    env = guards.shape_env(prog)
    if env is None or not prog._guards_code:
        return list(prog._guards_code)
    box = exporting.size_box(prog)
    printer = ShapeGuardPythonPrinter(env.var_to_sources, lambda s: s.name, env.var_to_sources)
    again = {}
    for g in env.guards:
        if not g.expr.atoms(Min, Max, sympy.Min, sympy.Max):
            continue
        try:
            again[printer.doprint(g.expr)] = printer.doprint(_decided(g.expr, box))
        except Exception:  # noqa: BLE001 - a guard the printer cannot take is left as torch printed it
            continue
    return [again.get(code, code) for code in prog._guards_code]


def _decided(expr, box: dict):
    """`expr` with each two-sided Min / Max replaced by the side that is the min (max) over all of `box`."""
    if not expr.args:
        return expr
    args = [_decided(a, box) for a in expr.args]
    if isinstance(expr, (Min, Max, sympy.Min, sympy.Max)) and len(args) == 2:
        rel = sympy.Le if isinstance(expr, (Min, sympy.Min)) else sympy.Ge
        if (i := exporting.winner(rel, args, box)) is not None:
            return args[i]
    return expr.func(*args)
