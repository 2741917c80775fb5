"""torch.export over the caller's length range, and the asserts and guards it leaves.

The cheapest trace goes first: `Dim.DYNAMIC(min, max)`, traced size-obliviously,
accepted only if torch keeps the whole range. When it narrows (transformers'
`q_len > 1` check does), the length becomes a named `Dim("T", min, max)`: traced
plainly, then size-obliviously with undecidable guards deferred to runtime
asserts. Each deferred assert is a condition on the length; it is proved by
evaluating it at every length of the (bounded) range, then dropped from the
graph. When every trace narrows, the error says which guard excluded which
lengths and what part torch keeps (`NarrowedError.kept`).
"""

from __future__ import annotations

import inspect
import re

import numpy as np
import sympy
import torch
from torch.export import Dim
from torch.fx.experimental import _config as fx_config

from ..errors import NovellaError

BOOKKEEPING = ("aten._assert_scalar", "aten._assert_tensor_metadata", "aten.sym_constrain_range")


# torch's sympy size functions (torch.utils._sympy.functions) on integer arrays.
_NUMPY_SIZE_FNS = {
    "FloorDiv": np.floor_divide,
    "CleanDiv": np.floor_divide,
    "PythonMod": np.mod,
    "Mod": np.mod,
    "floor": np.floor,
    "Max": np.maximum,
    "Min": np.minimum,
}


class NarrowedError(NovellaError):
    """torch.export keeps only part of the length range; `kept` is what it keeps, if known."""

    def __init__(self, message: str, kept: tuple[int, int] | None = None):
        super().__init__(message)
        self.kept = kept


def export(module, args, dynamic_dim: int, lo: int, hi: int):
    """The ExportedProgram over [lo, hi], or a NarrowedError saying why not."""
    module = module.eval()
    prog, kept = _dynamic_export(module, args, dynamic_dim, lo, hi)
    if kept == (lo, hi):
        return prog
    first = _named_dim_export(module, args, dynamic_dim, lo, hi, oblivious=False)
    if isinstance(first, str):
        second = _named_dim_export(module, args, dynamic_dim, lo, hi, oblivious=True)
        first = first if isinstance(second, str) else second
    if not isinstance(first, str):
        return first
    msg = f"torch.export cannot keep dim {dynamic_dim} symbolic over [{lo}, {hi}]: {first}"
    if kept:
        msg += f" The part it can trace is [{kept[0]}, {kept[1]}]."
    raise NarrowedError(msg + " Compile the lengths outside it separately (min_len == max_len).", kept)


def _dyn(module, args, dynamic_dim, length):
    """`dynamic_shapes` mirroring forward's parameters (a `*args` parameter takes one tuple)."""
    spec = tuple({dynamic_dim: length} if isinstance(a, torch.Tensor) else None for a in args)
    params = list(inspect.signature(module.forward).parameters.values())
    star = [i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_POSITIONAL]
    if star:
        return spec[: star[0]] + (spec[star[0] :],)
    return spec


def _named_dim_export(module, args, dynamic_dim, lo, hi, oblivious: bool):
    """The program, or a sentence saying which guard or assert excludes which lengths.

    `oblivious`: trace sizes size-obliviously and defer undecidable guards to asserts."""
    try:
        with fx_config.patch(backed_size_oblivious=oblivious):
            prog = torch.export.export(
                module,
                tuple(args),
                dynamic_shapes=_dyn(module, args, dynamic_dim, Dim("T", min=lo, max=hi)),
                strict=False,
                prefer_deferred_runtime_asserts_over_guards=oblivious,
            )
    except Exception as e:  # torch raises many kinds; keep the guard, drop the trace
        return explain(str(e), lo, hi)
    ranges = _ranges(prog)
    if not ranges:
        return "the model is static in that dim (the traced graph does not depend on it)."
    if any(r != (lo, hi) for r in ranges):
        return f"torch narrowed the range to {ranges[0]}."
    for cond, where in assert_conditions(prog):
        bad = failing_lengths(cond, lo, hi, where)
        if bad:
            return f"the trace assumes {describe(cond)}, which is false for {_lengths(bad)}."
    return prog


def _dynamic_export(module, args, dynamic_dim, lo, hi):
    try:
        with fx_config.patch(backed_size_oblivious=True):
            prog = torch.export.export(
                module,
                tuple(args),
                dynamic_shapes=_dyn(module, args, dynamic_dim, Dim.DYNAMIC(min=lo, max=hi)),
                strict=False,
            )
    except Exception:
        return None, None
    ranges = _ranges(prog)
    return prog, (ranges[0] if len(set(ranges)) == 1 else None)


def _ranges(prog) -> list[tuple[int, int]]:
    return [(int(r.lower), int(r.upper)) for r in prog.range_constraints.values()]


def assert_conditions(prog):
    """(sympy condition, source line) of every deferred runtime assert in the graph."""
    for n in prog.graph.nodes:
        if n.op == "call_function" and str(n.target).startswith("aten._assert_scalar"):
            val = n.args[0].meta.get("val") if isinstance(n.args[0], torch.fx.Node) else n.args[0]
            expr = val.node.expr if hasattr(val, "node") else sympy.sympify(bool(val))
            yield expr, _source(n)


def failing_lengths(cond, lo: int, hi: int, where: str = "") -> list[int]:
    """Every length in [lo, hi] at which `cond` (in one symbol) is false: an exhaustive check."""
    cond = sympy.sympify(cond)
    free = sorted(cond.free_symbols, key=str)
    if not free:
        return [] if bool(cond) else list(range(lo, hi + 1))
    if len(free) > 1:
        raise NovellaError(f"a traced assert {cond} ({where}) involves several sizes; cannot check it")
    t = np.arange(lo, hi + 1, dtype=np.int64)
    fn = sympy.lambdify(free, cond, modules=[_NUMPY_SIZE_FNS, "numpy"])
    ok = np.broadcast_to(np.asarray(fn(t), dtype=bool), t.shape)
    return [int(v) for v in t[~ok]]


def strip_asserts(prog) -> None:
    """Drops runtime asserts (checked by `export`) and metadata asserts, and the size arithmetic only they used."""
    g = prog.graph
    for n in list(g.nodes):
        if n.op == "call_function" and str(n.target).startswith(BOOKKEEPING):
            g.erase_node(n)
    for n in reversed(list(g.nodes)):
        if n.op == "call_function" and not n.users and not isinstance(n.meta.get("val"), torch.Tensor):
            if not str(n.target).startswith("aten.") or "sym" in str(n.target):
                g.erase_node(n)
    prog.graph_module.recompile()


def describe(cond) -> str:
    """A condition on the length in words, e.g. `(T - 1) // 2 != 0`."""
    text = str(cond)
    m = re.fullmatch(r"(Ne|Eq|Le|Lt|Ge|Gt)\((.*), (.*)\)", text)
    if m:
        ops = {"Ne": "!=", "Eq": "==", "Le": "<=", "Lt": "<", "Ge": ">=", "Gt": ">"}
        text = f"{m.group(2)} {ops[m.group(1)]} {m.group(3)}"
    return "`" + re.sub(r"\bs\d+\b", "T", text) + "`"


def explain(message: str, lo: int, hi: int) -> str:
    """torch's constraint-violation message as a sentence: the guard and the lengths it excludes."""
    guards = re.findall(r"satisfy the generated guard (.*?)\.?\s*$", message, flags=re.M)
    if not guards:
        first = message.strip().splitlines()[0] if message.strip() else "unknown error"
        return f"torch.export failed: {first}"
    parts = []
    for g in guards:
        expr = re.sub(r"L\['[^']+'\]\.size\(\)\[\d+\]", "T", g)
        try:
            cond = _parse_guard(expr)
            bad = failing_lengths(cond, lo, hi)
            fails = f"false for {_lengths(bad)}" if bad else "true over the range, but torch cannot prove it"
            parts.append(f"the model branches on {describe(cond)}, which is {fails}")
        except (sympy.SympifyError, TypeError, NovellaError):
            parts.append(f"the model branches on `{expr}`")
    return "; ".join(parts) + " (a size-dependent check or branch in the model)."


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


def _lengths(values: list[int]) -> str:
    if len(values) == 1:
        return f"T = {values[0]}"
    if values == list(range(values[0], values[-1] + 1)):
        return f"T in [{values[0]}, {values[-1]}]"
    return "T in {" + ", ".join(map(str, values[:8])) + (", ..." if len(values) > 8 else "") + "}"


def _source(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else "<unknown>"
