"""torch.export over the caller's length range, and the asserts and guards it leaves.

The one-length shorthand (`dynamic_dim=`) tries the cheapest trace first: `Dim.DYNAMIC(min, max)`,
traced size-obliviously, accepted only if torch keeps the whole range. When it narrows (transformers'
`q_len > 1` check does), the length becomes a named `Dim("T", min, max)`, as in a `dynamic_shapes`
spec (`export_spec`: named Dims, a shared Dim meaning equal sizes): traced plainly, then
size-obliviously with undecidable guards deferred to runtime asserts. Each deferred assert is a
condition on the sizes; it is proved symbolically over the Dims' box (`symbolic.provably_holds`),
then dropped from the graph. When every trace narrows, the error says which guard excluded which
lengths and what part torch keeps (`NarrowedError.kept`).
"""

from __future__ import annotations

import inspect
import re

import sympy
import torch
from torch.export import Dim
from torch.fx.experimental import _config as fx_config

from ..errors import NovellaError
from . import explain as messages
from . import export_memo, guard_classes, guards
from .dynspec import aligned_specs, at_size, dim_items, spec_dims
from .guards import GUARD, describe, explain, failing_lengths, lengths_in_words  # noqa: F401 - failing_lengths: API

BOOKKEEPING = ("aten._assert_scalar", "aten._assert_tensor_metadata", "aten.sym_constrain_range")


class NarrowedError(NovellaError):
    """torch.export keeps only part of the length range; `kept` is what it keeps, if known."""

    def __init__(self, message: str, kept: tuple[int, int] | None = None, guard: str = ""):
        super().__init__(message)
        self.kept = kept
        self.guard = guard  # the guard in words (`explain`), for the reason of a sub-range's program


def export(module, args, dynamic_dim: int, lo: int, hi: int, need_lo: int | None = None, need_hi: int | None = None):
    """The ExportedProgram over [lo, hi] with dim `dynamic_dim` of every tensor a `Dim("T")`, valid at every
    length of [need_lo, need_hi] (default [lo, hi]; the caller may export over a wider range than it runs),
    or a NarrowedError whose `kept` is the longest run of lengths around the example's the trace is valid for."""
    module = module.eval()
    need = (lo if need_lo is None else need_lo, hi if need_hi is None else need_hi)
    at = next(a.shape[dynamic_dim] for a in args if isinstance(a, torch.Tensor))
    prog, kept = _dynamic_export(module, args, dynamic_dim, lo, hi)
    if prog is not None and messages.unbacked(prog):  # size-oblivious tracing lost a size (a slice from T):
        prog, kept = None, None  # the named Dim's trace keeps it, or says why not
    whole, checked = kept == (lo, hi), kept is not None
    if kept is not None:  # the guards of the branches it took and the sizes it fixed at the example
        conds = guards.recorded(prog)
        kept = _kept(conds, (max(kept[0], need[0]), min(kept[1], need[1])), at)
        if whole and kept is not None and kept != need and guard_classes.JOIN.get():
            prog, kept = _same_around(module, args, dynamic_dim, prog, conds, (lo, hi), need, kept)
            conds = guards.recorded(prog)
    if whole and kept != need:  # the named-Dim trace records the same guards, or loses them (an int() of a float)
        where = "; ".join(w for _, w, _ in guards.failing(prog, *need)[: guards.SHOWN])
        prog = guards.narrowing(_excluded_by(conds, need, kept) + (f" Recorded at {where}." if where else ""), conds)
    elif not whole and (cut := _branch_cut(prog, need, at)) is not None:
        prog, kept = cut
    elif not whole:
        spec = _dyn(module, args, dynamic_dim, Dim("T", min=lo, max=hi))
        prog = export_spec(module, args, spec, raise_error=False, dim=dynamic_dim)
    if not isinstance(prog, str):
        _check_length_one(module, args, dynamic_dim, prog, (lo, hi))
        narrowed = guards.kept(prog, *need, at, sizes_only=checked)
        if narrowed:
            raise NarrowedError(f"torch.export traced the model for some lengths only: it assumed {narrowed[1]}.",
                                *narrowed)  # fmt: skip
        return prog
    first = prog
    if kept is None:
        kept = guards.kept_interval(getattr(prog, "conds", ()), *need, at)
    msg = f"torch.export cannot keep dim {dynamic_dim} symbolic over [{lo}, {hi}]: {first}"
    if kept:
        msg += f" The part it can trace is [{kept[0]}, {kept[1]}]."
    raise NarrowedError(msg + " Compile the lengths outside it separately (min_len == max_len).", kept, first)


def _branch_cut(prog, need, at: int):
    """(narrowing, kept) when the Dim.DYNAMIC trace, narrowed by torch, has a guard in one size symbol (a
    branch it took at the example: a chunk count) false at lengths >= 2 that `need` holds: the named-Dim
    trace, from the same example, takes the same branch and records the same guard, so it narrows as well
    (its two traces cost qwen3_5_text 35-90 s, 180 s with a mask). Each tensor's symbol stands for the length
    (as a named Dim ties them): `kept` is the run around the example where all the guards hold, within
    where all the symbols' ranges meet. None: the named-Dim traces decide."""
    ranges = _ranges(prog) if prog is not None else []
    if not ranges:
        return None
    lo, hi = max([need[0]] + [r[0] for r in ranges]), min([need[1]] + [r[1] for r in ranges])
    if lo > hi or not guards.failing(prog, max(lo, 2), hi):
        return None
    conds = guards.recorded(prog)
    kept = guards.kept_interval(conds, lo, hi, at)
    return (guards.narrowing(_excluded_by(conds, need, kept), conds), kept) if kept else None


def _kept(conds, need, at: int) -> tuple[int, int] | None:
    """The run of `need` around the example length `at` where every recorded condition holds; for an
    example outside `need` (a static compile traced at another length), all of `need` or None."""
    if need[0] <= at <= need[1]:
        return guards.kept_interval(conds, *need, at)
    for cond in conds:
        try:
            if failing_lengths(cond, *need):
                return None
        except Exception:  # noqa: BLE001 - a condition that cannot be evaluated holds only where traced
            return None
    return need


def _excluded_by(conds, need, kept) -> str:
    """The guards false somewhere in `need`, in words (at most guards.SHOWN)."""
    parts = []
    for cond in conds:
        try:
            bad = failing_lengths(cond, *need)
        except Exception:  # noqa: BLE001 - see guards.kept_interval
            bad = None
        if bad is None or bad:
            where = f"false for {lengths_in_words(bad)}" if bad else "not evaluable"
            parts.append(f"the trace assumes {describe(cond)}, which is {where}")
    if not kept:
        parts.append("a guard is false at the example")
    return "; ".join(parts[: guards.SHOWN]) + " (a size-dependent branch, or an int() of a size)."


def _same_around(module, args, dynamic_dim: int, prog, conds, bounds, need, kept):
    """(program, kept): `kept` widened over the runs of lengths next to it (where the guards the trace
    recorded take other values) on which a trace is proved valid (`guard_classes.widened`): the branch it
    skipped computes the same graph there (ViT's `num_patches == num_positions` test before it interpolates
    anyway, SEW's pad of 0 frames); each class is traced over `bounds`, as `prog` was."""

    def retrace(n):
        other, _ = _dynamic_export(module, [_resized_zeros(a, dynamic_dim, n) for a in args], dynamic_dim, *bounds)
        if other is None or messages.unbacked(other) or not _ranges(other):
            return None
        ranges = _ranges(other)  # each tensor's symbol stands for the length: valid where all their ranges meet
        return other, (max(r[0] for r in ranges), min(r[1] for r in ranges))

    return guard_classes.widened(prog, conds, need, kept, retrace)


def _resized_zeros(a, dim: int, n: int):
    if not isinstance(a, torch.Tensor):
        return a
    shape = list(a.shape)
    shape[dim] = n
    return torch.zeros(shape, dtype=a.dtype)


ONE_GUARD = (
    "torch.export traces a symbolic size as if it were at least 2 (it specializes sizes 0 and 1), and the "
    "trace at T = 1 computes something else"
)


def _check_length_one(module, args, dynamic_dim: int, prog, bounds) -> None:
    """A range from T = 1: the symbolic trace holds there only if the model's own trace at T = 1 is the
    same graph (torch.export assumes T >= 2 without a guard, so `if T > 1` silently takes one branch).
    When they differ, a NarrowedError keeps [2, hi]: T = 1 becomes a program of its own."""
    lo, hi = bounds
    if lo != 1 or hi < 2:
        return
    one = []
    for a in args:
        if isinstance(a, torch.Tensor):
            shape = list(a.shape)
            shape[dynamic_dim] = 1
            a = torch.zeros(shape, dtype=a.dtype)
        one.append(a)
    try:
        with fx_config.patch(backed_size_oblivious=False):
            static = export_memo.export(module, one)
    except Exception:  # noqa: BLE001 - no trace at T = 1 to compare with: keep the symbolic one
        return
    if _canonical(prog.graph, True) != _canonical(static.graph, False):
        msg = f"{ONE_GUARD}; T = 1 is compiled as a program of its own."
        raise NarrowedError(msg, (2, hi), ONE_GUARD)


def _canonical(graph, subs) -> list:
    """`guard_classes.canonical` of a trace, each symbol at 1 (`subs` True), substituted (`subs` a dict
    symbol -> value) or kept (`subs` False)."""

    def rewrite(e):
        if isinstance(subs, dict):
            return e.xreplace(subs)
        return e.subs({s: 1 for s in e.free_symbols}) if subs else e

    return guard_classes.canonical(graph, guard_classes.sym_value(rewrite))


def export_spec(module, args, spec, raise_error: bool = True, dim: int | str | None = None):
    """torch.export with a `dynamic_shapes` spec of named Dims (a shared Dim means equal sizes): the plain
    trace, then the size-oblivious trace with deferred asserts, each proved over the Dims' whole box.
    Returns the program, or raises a NarrowedError naming each symbol (a sentence if not `raise_error`).
    A failure that is no guard on a size (data-dependent flow, a recurrent layer) is a NovellaError naming
    the construct and the user's line (`explain.export_error`); `dim` names the dynamic dim in it."""
    module = module.eval()
    aligned_specs(module, args, spec)
    dims = spec_dims(spec)
    first = _named_dim_export(module, args, spec, dims, oblivious=False)
    if isinstance(first, (str, Exception)):
        second = _named_dim_export(module, args, spec, dims, oblivious=True)
        first = first if isinstance(second, (str, Exception)) else second
    if isinstance(first, Exception):
        lo, hi = _single(dims)
        where = dim if dim is not None else ", ".join(dims)

        def culprit():
            return messages.fixing_call(
                lambda: torch.export.export(module, tuple(args), dynamic_shapes=spec, strict=False)
            )

        raise NovellaError(messages.export_error(first, module, where, lo, hi, culprit))
    if isinstance(first, str) and raise_error:
        named = ", ".join(f"{n} in [{lo}, {hi}]" for n, (lo, hi) in dims.items())
        raise NarrowedError(f"torch.export cannot keep {named} symbolic: {first}")
    return first


def _dyn(module, args, dynamic_dim, length):
    """`dynamic_shapes` mirroring forward's parameters (a `*args` parameter takes one tuple)."""
    spec = tuple({dynamic_dim: length} if isinstance(a, torch.Tensor) else None for a in args)
    params = list(inspect.signature(module.forward).parameters.values())
    star = [i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_POSITIONAL]
    if star:
        return spec[: star[0]] + (spec[star[0] :],)
    return spec


def symbol_names(prog, args, spec, module) -> dict:
    """sympy symbol of the program -> the name of the Dim it stands for."""
    names = {}
    users = [n for n in prog.graph.nodes if n.op == "placeholder" and _user_input(prog, n)]
    for node, (_, dspec) in zip(users, aligned_specs(module, args, spec)):
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor):
            continue
        for d, dim in dim_items(dspec):
            e = val.shape[d]
            expr = e.node.expr if hasattr(e, "node") else None
            if isinstance(expr, sympy.Symbol) and hasattr(dim, "__name__"):
                names.setdefault(expr, dim.__name__)
    return names


def differs_at_one(module, args, spec, prog) -> str | None:
    """The first Dim whose range holds 1 and 2 at which the symbolic trace is wrong: torch.export traces
    each symbol as at least 2 without a guard, so `if T > 1` silently takes one branch. For each such Dim,
    the model is traced with that Dim's sizes static at 1 and the other Dims symbolic, and compared with
    the symbolic trace with that symbol at 1 (other symbols by name). The caller compiles each size of
    that Dim below 2 on its own (0 too when the Dim's min is 0; 0 alone is not checked)."""
    module = module.eval()
    names = symbol_names(prog, args, spec, module)
    for name, (lo, hi) in spec_dims(spec).items():
        for size in (1,) if lo <= 1 < hi else ():
            args1, spec1 = at_size(module, args, spec, name, size)
            try:
                with fx_config.patch(backed_size_oblivious=False):
                    small = export_memo.export(module, args1, dynamic_shapes=spec1)
            except Exception:  # noqa: BLE001 - no trace at that size to compare with: keep the symbolic one
                continue
            subs = {s: (size if n == name else sympy.Symbol(n, integer=True)) for s, n in names.items()}
            named = symbol_names(small, args1, spec1, module)
            subs1 = {s: sympy.Symbol(n, integer=True) for s, n in named.items()}
            if _canonical(prog.graph, subs) != _canonical(small.graph, subs1):
                return name
    return None


def _user_input(prog, node) -> bool:
    spec = next(s for s in prog.graph_signature.input_specs if s.arg.name == node.name)
    return spec.kind.name == "USER_INPUT"


def _named_dim_export(module, args, spec, dims: dict, oblivious: bool):
    """The program, a sentence saying which guard or assert excludes which values, or the exception
    of a failure that is no guard on a size.

    `oblivious`: trace sizes size-obliviously and defer undecidable guards to asserts."""
    try:
        with fx_config.patch(backed_size_oblivious=oblivious):
            prog = export_memo.export(
                module, args, dynamic_shapes=spec, prefer_deferred_runtime_asserts_over_guards=oblivious
            )
    except Exception as e:  # torch raises many kinds; keep the guard, drop the trace
        return explain(str(e), *_single(dims)) if GUARD.search(str(e)) else e
    data_dependent = messages.unbacked(prog)
    if data_dependent:  # its size symbols have no finite range
        raise NovellaError(data_dependent)
    names = symbol_names(prog, args, spec, module)
    box = {}
    for s, r in prog.range_constraints.items():
        name = names.get(s)
        want = dims.get(name)
        have = (int(r.lower), int(r.upper))
        box[s] = have
        if want is not None and have != want:
            conds = (sympy.Ge(guards.T, have[0]), sympy.Le(guards.T, have[1]))
            return guards.narrowing(f"torch narrowed {name} to [{have[0]}, {have[1]}].", conds)
    if not box:
        return "the model is static in that dim (the traced graph does not depend on it)."
    for cond, where in assert_conditions(prog):
        bad = unproved(cond, box, where)
        if bad:
            on_t = cond.xreplace({v: guards.T for v in cond.free_symbols}) if len(dims) == 1 else sympy.true
            return guards.narrowing(f"the trace assumes {describe(cond)}, which is {bad}.", [on_t])
    return prog


def _single(dims: dict) -> tuple[int, int]:
    """The bounds to name in a one-symbol guard message (the first Dim's)."""
    return next(iter(dims.values()), (1, 1))


def unproved(cond, box: dict, where: str = "") -> str:
    """ "" when `cond` holds over the symbols' box (a symbolic proof), else a phrase saying where it fails."""
    from .. import symbolic as sy

    cond = sympy.sympify(cond)
    if cond is sympy.true or cond is True:
        return ""
    if cond is sympy.false or cond is False:
        return "always false"
    if sy.provably_holds(cond, box):
        return ""
    free = sorted(cond.free_symbols, key=str)
    if len(free) == 1:
        lo, hi = box.get(free[0], (1, 1))
        bad = failing_lengths(cond, lo, hi, where)
        return f"false for {lengths_in_words(bad)}" if bad else ""
    return f"not provable over {', '.join(f'{s} in [{box[s][0]}, {box[s][1]}]' for s in free if s in box)} ({where})"


def _dynamic_export(module, args, dynamic_dim, lo, hi):
    try:
        with fx_config.patch(backed_size_oblivious=True):
            prog = export_memo.export(
                module, args, dynamic_shapes=_dyn(module, args, dynamic_dim, Dim.DYNAMIC(min=lo, max=hi))
            )
    except Exception:
        return None, None
    ranges = _ranges(prog)
    return prog, (ranges[0] if len(set(ranges)) == 1 else None)


def _ranges(prog) -> list[tuple[int, int]]:
    """The finite ranges of the program's size symbols (an unbacked size of a data-dependent op has none:
    `export` refuses those with its own message)."""
    return [b for b in map(_bounds, prog.range_constraints.values()) if b is not None]


def _bounds(r) -> tuple[int, int] | None:
    """(lo, hi) of a torch ValueRanges, None when a bound is infinite (sympy's oo or torch's int_oo)."""
    try:
        return int(r.lower), int(r.upper)
    except (TypeError, AttributeError, OverflowError):
        return None


def assert_conditions(prog):
    """(sympy condition, source line) of every deferred runtime assert in the graph."""
    for n in prog.graph.nodes:
        if n.op == "call_function" and str(n.target).startswith("aten._assert_scalar"):
            val = n.args[0].meta.get("val") if isinstance(n.args[0], torch.fx.Node) else n.args[0]
            expr = val.node.expr if hasattr(val, "node") else sympy.sympify(bool(val))
            yield expr, _source(n)


def strip_asserts(prog, recompile: bool = True) -> None:
    """Drops runtime asserts (checked by `export`) and metadata asserts, and the size arithmetic only they used.
    `recompile=False` leaves the graph module's Python code as it was (it still runs, asserts included):
    for a caller that only reads the graph, as the FX importer does."""
    g = prog.graph
    for n in list(g.nodes):
        if n.op == "call_function" and str(n.target).startswith(BOOKKEEPING):
            g.erase_node(n)
    for n in reversed(list(g.nodes)):
        if n.op == "call_function" and not n.users and not isinstance(n.meta.get("val"), torch.Tensor):
            if not str(n.target).startswith("aten.") or "sym" in str(n.target):
                g.erase_node(n)
    if recompile:
        prog.graph_module.recompile()


_SIZE_MIN_MAX = {torch.sym_min: ("torch.sym_min", sympy.Le), torch.sym_max: ("torch.sym_max", sympy.Ge)}


def fold_size_min_max(prog) -> dict:
    """Replaces each `torch.sym_min` / `torch.sym_max` of sizes (torch-mlir's FX importer has no op for them)
    by the argument that is the min (max) at every length of the range, proved symbolically or, for one
    length, checked at each length of the range; returns {Min/Max expr: chosen expr} for the shapes that
    carry it. Neither side winning everywhere is a refusal naming the source line."""
    box = size_box(prog)
    chosen = {}
    for n in [n for n in prog.graph.nodes if n.op == "call_function" and n.target in _SIZE_MIN_MAX]:
        name, rel = _SIZE_MIN_MAX[n.target]
        exprs = [_size_expr(a) for a in n.args]
        pick = winner(rel, exprs, box)
        if pick is None:
            raise NovellaError(
                f"{_source(n)}: {name}({exprs[0]}, {exprs[1]}) of sizes: neither side is the "
                f"{name[-3:]} at every length of the range, and torch-mlir's FX importer has no op for a size "
                "min/max. Compile the lengths where one side wins as their own range (min_len/max_len)"
            )
        out = n.meta.get("val")
        if hasattr(out, "node"):
            chosen[out.node.expr] = exprs[pick]
        _replace_uses(n, n.args[pick])
        prog.graph.erase_node(n)
    return chosen


def size_box(prog) -> dict:
    """{size symbol: (lo, hi)} of the program's finite ranges."""
    return {s: b for s, r in prog.range_constraints.items() if (b := _bounds(r)) is not None}


def winner(rel, sides, box: dict) -> int | None:
    """The index of the side of a size min (`rel` sympy.Le) or max (sympy.Ge) of two that wins at every
    point of `box`; None when neither does."""
    return next((i for i in (0, 1) if _always(rel(sides[i], sides[1 - i]), box)), None)


def _size_expr(a):
    return a.meta["val"].node.expr if isinstance(a, torch.fx.Node) else sympy.Integer(int(a))


def _always(cond, box: dict) -> bool:
    """`cond` at every point of `box`: a symbolic proof, else (one size symbol) the check at each length."""
    from ..symbolic import provably_holds

    if provably_holds(cond, box):
        return True
    free = sorted(cond.free_symbols, key=str)
    if len(free) != 1 or free[0] not in box:
        return False
    lo, hi = box[free[0]]
    return hi - lo <= 1 << 20 and not failing_lengths(cond, lo, hi)


def _replace_uses(node, value) -> None:
    if isinstance(value, torch.fx.Node):
        node.replace_all_uses_with(value)
        return
    for user in list(node.users):
        user.args = torch.fx.node.map_arg(user.args, lambda v: value if v is node else v)
        user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda v: value if v is node else v)


def _source(node) -> str:
    trace = node.meta.get("stack_trace") or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    return f"{frames[-1][0]}:{frames[-1][1]}" if frames else "<unknown>"
