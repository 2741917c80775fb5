"""Guards torch.export records on sizes derived from the length without narrowing the length's range.

A Python loop over a chunk count (`for i in range((T + pad) // 64)`) or a copy into a slice of it makes
torch guard `Eq((T + pad) // 64, 1)` at the example and trace that many iterations; the range of T stays
whole because the guard is not a bound on T. The trace is then another model wherever the guard is false.
`kept(prog, lo, hi, at)` is the interval around the example length `at` where every such guard holds,
so the caller compiles that part from this trace and traces the rest again (`ranges._specialize`).
Guards false only at sizes below 2 are left to `exporting._check_length_one`, which compares the trace
at 1 instead. A traced size that is 0 at some length (`x[:, 1:]` at T = 1) splits the range the same
way: torch traces sizes as at least 2 and a program holds no empty tensor, while the trace at that length
has the empty value static, where the frontend folds it away (an empty operand of a cat or a pad).
"""

from __future__ import annotations

import re

import numpy as np
import sympy
import torch


def shape_env(prog):
    """The ShapeEnv of the program's symbolic sizes, or None for a static program."""
    for n in prog.graph.nodes:
        val = n.meta.get("val")
        for d in getattr(val, "shape", ()):
            if isinstance(d, torch.SymInt):
                return d.node.shape_env
    return None


def small_size_hint(prog) -> bool:
    """Whether a size computed from the length is 0 or 1 at the example (a patch grid `W // 32` of one
    column): torch records guards such as `Eq(W // 32, 1)` on it, which a later retrace (decompositions)
    takes as facts and specializes the size to 1. An example at the top of the range has no such size."""
    for n in prog.graph.nodes:
        v = n.meta.get("val")
        for d in v.shape if isinstance(v, torch.Tensor) else ():
            if isinstance(d, torch.SymInt) and d.node.hint is not None and d.node.hint <= 1:
                return True
    return False


def failing(prog, lo: int, hi: int, failing_lengths) -> list[tuple]:
    """(guard, where torch recorded it, the lengths in [lo, hi] where it is false) of each guard in one size
    symbol that is false somewhere in the range. `failing_lengths` is `exporting.failing_lengths`."""
    env = shape_env(prog)
    out = []
    for g in env.guards if env is not None and lo <= hi else ():
        if len(g.expr.free_symbols) != 1:
            continue
        try:
            bad = failing_lengths(g.expr, lo, hi)
        except Exception:  # noqa: BLE001 - a guard numpy cannot evaluate is left to the compile's own checks
            continue
        if bad:
            user = getattr(g.sloc, "maybe_user_loc", None)
            out.append((g.expr, user or str(g.sloc).strip("()"), bad, user is None))
    return [r[:3] for r in sorted(out, key=lambda r: r[3])]  # those torch traced to a model line first


def empty(prog, lo: int, hi: int, failing_lengths) -> list[tuple]:
    """(size, where, the lengths in [lo, hi] where it is below 1) of each size of a traced tensor that is
    empty at some length (`x[:, 1:]` at T = 1): torch traces sizes as at least 2, and a program holds no
    empty tensor, so those lengths are traced on their own (where the empty value folds away)."""
    out, seen = [], set()
    for n in prog.graph.nodes:
        val = n.meta.get("val")
        for d in val.shape if isinstance(val, torch.Tensor) else ():
            expr = d.node.expr if isinstance(d, torch.SymInt) else None
            if expr is None or expr in seen or len(expr.free_symbols) != 1:
                continue
            seen.add(expr)
            try:
                bad = failing_lengths(sympy.Ge(expr, 1), lo, hi)
            except Exception:  # noqa: BLE001 - a size numpy cannot evaluate is left to the compile's own checks
                continue
            if bad:
                out.append((sympy.Ge(expr, 1), _line(n), bad))
    return out


def _line(node) -> str:
    frames = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else "<unknown>"


def kept(prog, lo: int, hi: int, at: int, failing_lengths) -> tuple[tuple[int, int], str] | None:
    """((a, b), the first reason in words) when a guard is false at some length of [max(lo, 2), hi] or a
    traced size is 0 at some length of [lo, hi]: [a, b] is the widest interval around `at` where neither
    happens (from `lo` if the guards hold down to 2 and no size is 0)."""
    reasons = empty(prog, lo, hi, failing_lengths) + failing(prog, max(lo, 2), hi, failing_lengths)
    if not reasons:
        return None
    bad = np.zeros(hi - lo + 1, dtype=bool)
    for _, _, lengths in reasons:
        bad[np.asarray(lengths) - lo] = True
    at = min(max(at, lo), hi)
    below = np.flatnonzero(bad[: at - lo])
    above = np.flatnonzero(bad[at - lo :])
    a = lo + int(below[-1]) + 1 if below.size else lo
    b = at + int(above[0]) - 1 if above.size else hi
    if b < a:
        return None
    expr, where, lengths = reasons[0]
    return (a, b), f"{_words(expr)} ({where}; false at {len(lengths)} lengths, e.g. {lengths[0]})"


def _words(expr) -> str:
    return "`" + re.sub(r"\bs\d+\b", "T", str(sympy.sympify(expr))) + "`"
