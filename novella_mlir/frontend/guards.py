"""The guards torch.export records while it traces, as conditions on the length, and the part of a range
one trace is valid for.

torch.export with `Dim.DYNAMIC` keeps the length's range even when the model branches on an equality
of a size (`if W // 16 == 2`, `num_patches == num_positions`) or reads a size as a Python int
(transformers' `torch_int`): it records a guard (`Eq(W//16, 2)`, `Ne(W, 32)`) and traces the branch the
example takes, so the program is another model at the lengths where a guard is false. `recorded(prog)`
gives those guards, `kept_interval` the longest run of lengths around the example where they all hold
(what the export-range strategy compiles as one program, the rest as programs of their own), and
`explain` turns torch's constraint-violation message into a sentence that carries its guards (`Narrowing`).

Guards on sizes derived from the length are of the same kind: a Python loop over a chunk count (`for i in range((T + pad) // 64)`) or a copy into a slice of it makes
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

from ..errors import NovellaError

T = sympy.Symbol("T", integer=True)

GUARD = re.compile(r"satisfy the generated guard (.*?)\.?\s*(?:Specializations unexpectedly required.*)?$", flags=re.M)
_SIZE_REF = re.compile(r"L\['[^']+'\](\[\d+\])*\.size\(\)\[\d+\]")

# torch's sympy size functions (torch.utils._sympy.functions) on integer arrays.
_NUMPY_SIZE_FNS = {
    "FloorDiv": np.floor_divide,
    "CleanDiv": np.floor_divide,
    "PythonMod": np.mod,
    "Mod": np.mod,
    "floor": np.floor,
    "Max": np.maximum,
    "Min": np.minimum,
    "TruncToInt": np.trunc,
    "FloorToInt": np.floor,
    "CeilToInt": np.ceil,
    "ToFloat": np.float64,
    "IntTrueDiv": np.true_divide,
    "FloatTrueDiv": np.true_divide,
}
MAX_POINTWISE = 1 << 16  # lengths a condition numpy cannot evaluate is checked at, one by one


def failing_lengths(cond, lo: int, hi: int, where: str = "") -> list[int]:
    """Every length in [lo, hi] at which `cond` (in one symbol) is false: counterexamples for a message,
    after the symbolic proof (`unproved`) failed."""
    t = np.arange(lo, hi + 1, dtype=np.int64)
    return [int(v) for v in false_at(cond, t, where)]


def false_at(cond, lengths: np.ndarray, where: str = "") -> np.ndarray:
    """The lengths of the integer array `lengths` at which `cond` (in one symbol) is false, each one
    evaluated (numpy's integer kernels for torch's size functions, else sympy at each length)."""
    cond = sympy.sympify(cond)
    free = sorted(cond.free_symbols, key=str)
    if not free:
        return lengths[:0] if bool(cond) else lengths
    if len(free) > 1:
        raise NovellaError(f"a traced assert {cond} ({where}) involves several sizes; cannot check it")
    try:
        fn = sympy.lambdify(free, cond, modules=[_NUMPY_SIZE_FNS, "numpy"])
        ok = np.broadcast_to(np.asarray(fn(lengths), dtype=bool), lengths.shape)
    except Exception:  # noqa: BLE001 - a function numpy has no kernel for: sympy evaluates it at each length
        if lengths.size > MAX_POINTWISE:
            where = f" ({where})" if where else ""
            raise NovellaError(
                f"cannot evaluate the size condition {cond}{where} over {lengths.size} lengths"
            ) from None
        ok = np.array([bool(cond.xreplace({free[0]: sympy.Integer(int(v))})) for v in lengths], dtype=bool)
    return lengths[~ok]


def describe(cond) -> str:
    """A condition on the length in words, e.g. `(T - 1) // 2 != 0`."""
    text = str(cond)
    m = re.fullmatch(r"(Ne|Eq|Le|Lt|Ge|Gt)\((.*), (.*)\)", text)
    if m:
        ops = {"Ne": "!=", "Eq": "==", "Le": "<=", "Lt": "<", "Ge": ">=", "Gt": ">"}
        text = f"{m.group(2)} {ops[m.group(1)]} {m.group(3)}"
    return "`" + re.sub(r"\bs\d+\b", "T", text) + "`"


SHOWN = 4  # guards named in a message (the ones that exclude lengths first)


def explain(message: str, lo: int, hi: int) -> Narrowing:
    """torch's constraint-violation message as a sentence: the guard and the lengths it excludes."""
    guards = GUARD.findall(message)
    if not guards:
        first = message.strip().splitlines()[0] if message.strip() else "unknown error"
        return narrowing(f"torch.export failed: {first}")
    failing, proved, conds = [], [], []
    for g in guards:
        expr = _SIZE_REF.sub("T", g)
        try:
            cond = _parse_guard(expr)
            bad = failing_lengths(cond, lo, hi)
        except Exception:  # noqa: BLE001 - torch prints some guards in Python sympy cannot parse (math.trunc)
            failing.append(f"the model branches on `{expr}`")
            continue
        conds.append(cond)
        if bad:
            failing.append(f"the model branches on {describe(cond)}, which is false for {lengths_in_words(bad)}")
        else:
            proved.append(
                f"the model branches on {describe(cond)}, which is true over the range, but torch cannot prove it"
            )
    parts = failing + proved
    more = f" and {len(parts) - SHOWN} more guards" if len(parts) > SHOWN else ""
    text = "; ".join(parts[:SHOWN]) + more + " (a size-dependent check or branch in the model)."
    return narrowing(text, conds)


_RELATIONS = {"==": sympy.Eq, "!=": sympy.Ne, "<=": sympy.Le, ">=": sympy.Ge, "<": sympy.Lt, ">": sympy.Gt}


def _parse_guard(text: str):
    """A guard of torch's message (`lhs op rhs` in T, or such terms joined by `and`) as a sympy relation."""
    terms = _split_and(text)
    if len(terms) > 1:
        return sympy.And(*[_parse_guard(t) for t in terms])
    depth = 0
    for i, ch in enumerate(text):
        depth += ch == "("
        depth -= ch == ")"
        for op in ("==", "!=", "<=", ">=", "<", ">"):
            if depth == 0 and text.startswith(op, i):
                t = {"T": sympy.Symbol("T", integer=True)}
                lhs, rhs = sympy.sympify(text[:i], locals=t), sympy.sympify(text[i + len(op) :], locals=t)
                return _RELATIONS[op](lhs, rhs, evaluate=False)
    return sympy.sympify(text)


def _split_and(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and text.startswith(" and ", i):
            parts.append(text[start:i])
            start = i + 5
    return parts + [text[start:]]


def lengths_in_words(values: list[int]) -> str:
    if len(values) == 1:
        return f"T = {values[0]}"
    if values == list(range(values[0], values[-1] + 1)):
        return f"T in [{values[0]}, {values[-1]}]"
    return "T in {" + ", ".join(map(str, values[:8])) + (", ..." if len(values) > 8 else "") + "}"


class Narrowing(str):
    """A sentence saying which guard excludes which lengths; `conds` are those guards as conditions on `T`."""

    conds: tuple = ()


def narrowing(text: str, conds=()) -> Narrowing:
    out = Narrowing(text)
    out.conds = tuple(conds)
    return out


def shape_env(prog):
    """The ShapeEnv the program's symbolic sizes were traced in, or None (a static program)."""
    for n in prog.graph.nodes:
        for d in getattr(n.meta.get("val"), "shape", ()):
            if isinstance(d, torch.SymInt):
                return d.node.shape_env
    return None


def recorded(prog) -> list:
    """Every guard torch recorded while tracing `prog`, as a condition on `T` (every size symbol of a
    one-length export stands for that length), without the ones that hold trivially."""
    env = shape_env(prog)
    out = []
    for g in env.guards if env is not None else ():
        cond = g.expr.xreplace({s: T for s in g.expr.free_symbols})
        if cond.free_symbols and cond not in out:
            out.append(cond)
    return out


def kept_interval(conds, lo: int, hi: int, at: int) -> tuple[int, int] | None:
    """The longest [a, b] within [lo, hi] holding `at` where every condition holds (a condition that
    cannot be evaluated holds at `at` only); None when `at` is outside [lo, hi] or a condition is false there."""
    if not lo <= at <= hi:
        return None
    ok = np.ones(hi - lo + 1, dtype=bool)
    for cond in conds:
        try:
            bad = failing_lengths(cond, lo, hi)
        except Exception:  # noqa: BLE001 - a condition that cannot be evaluated holds only where traced
            bad = [v for v in range(lo, hi + 1) if v != at]
        ok[np.asarray(bad, dtype=np.int64) - lo] = False
    if not ok[at - lo]:
        return None
    a, b = at, at
    while a > lo and ok[a - 1 - lo]:
        a -= 1
    while b < hi and ok[b + 1 - lo]:
        b += 1
    return a, b


def keyed_runs(conds, lo: int, hi: int) -> list[tuple[tuple[int, int], tuple]]:
    """[lo, hi] cut into maximal runs of lengths at which every condition has the same truth value, each
    with those values (its key: the runs with one key are a guard class, `guard_classes`); a condition that
    cannot be evaluated makes every length a run of its own."""
    lengths = np.arange(lo, hi + 1, dtype=np.int64)
    rows = []
    for cond in conds:
        bad = np.zeros(hi - lo + 1, dtype=bool)
        try:
            bad[false_at(cond, lengths) - lo] = True
        except Exception:  # noqa: BLE001 - see kept_interval
            return [((v, v), (v,)) for v in range(lo, hi + 1)]
        rows.append(bad)
    keys = np.stack(rows, axis=1) if rows else np.zeros((hi - lo + 1, 0), dtype=bool)
    cuts = (np.flatnonzero((keys[1:] != keys[:-1]).any(axis=1)) + 1).tolist()
    starts, ends = [0, *cuts], [c - 1 for c in cuts] + [hi - lo]
    return [((lo + a, lo + b), tuple(keys[a].tolist())) for a, b in zip(starts, ends)]


def small_size_hint(prog, lo: int, hi: int) -> bool:
    """Whether a size computed from the length is 0 or 1 at the example (a patch grid `W // 32` of one
    column): torch records guards such as `Eq(W // 32, 1)` on it, which a later retrace (decompositions)
    takes as facts and specializes the size to 1. An example at the top of the range has no such size.
    A size of that value at every length of [lo, hi] (a chunk count of 1 in a one-chunk range, a
    `Min(1, chunks)`) is no such size: its specialization holds, and a retrace at the top would keep it."""
    seen = set()
    for n in prog.graph.nodes:
        v = n.meta.get("val")
        for d in v.shape if isinstance(v, torch.Tensor) else ():
            if isinstance(d, torch.SymInt) and d.node.hint is not None and d.node.hint <= 1:
                if d.node.expr not in seen and not _constant(d.node.expr, d.node.hint, prog, lo, hi):
                    return True
                seen.add(d.node.expr)
    return False


def _constant(expr, value: int, prog, lo: int, hi: int) -> bool:
    """Whether the size `expr` (each of its symbols the length, all backed) is `value` at every length of [lo, hi]."""
    if not expr.free_symbols or not expr.free_symbols <= set(prog.range_constraints):
        return False
    try:
        return not failing_lengths(sympy.Eq(expr.xreplace({s: T for s in expr.free_symbols}), value), lo, hi)
    except Exception:  # noqa: BLE001 - a size numpy cannot evaluate: not known constant
        return False


def failing(prog, lo: int, hi: int) -> list[tuple]:
    """(guard, where torch recorded it, the lengths in [lo, hi] where it is false) of each guard in one size
    symbol that is false somewhere in the range."""
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


def empty(prog, lo: int, hi: int) -> list[tuple]:
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


def kept(prog, lo: int, hi: int, at: int, sizes_only: bool = False) -> tuple[tuple[int, int], str] | None:
    """((a, b), the first reason in words) when a guard is false at some length of [max(lo, 2), hi] or a
    traced size is 0 at some length of [lo, hi]: [a, b] is the widest interval around `at` where neither
    happens (from `lo` if the guards hold down to 2 and no size is 0). `sizes_only`: the guards were
    read already (`recorded`, `kept_interval`), only the empty sizes are checked."""
    reasons = empty(prog, lo, hi)
    reasons += [] if sizes_only else failing(prog, max(lo, 2), hi)
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
