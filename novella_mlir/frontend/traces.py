"""Two traces of one model compared as graphs: whether the trace torch.export took at one length computes
what the model's own trace computes at other lengths.

A guard the trace recorded (`guards.recorded`) splits the range into runs of lengths where the guards
take the same values; runs with the same values are one class, traced once (the model takes the same
branches there). A class joins the trace's range when the trace is the class's own graph at the ends of
its runs, with the ops that do nothing at that length left out (a pad of 0, a slice or view to the shape
it reads): the model's `if upsampled < T: pad(T - upsampled)` alternates with the parity of a size, and the
branch that pads computes the other too, by a pad of 0. When the other class's trace covers the first
class this way, and not the other way round, that trace is the one kept."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from . import guards

MAX_CLASSES = 6  # classes of runs traced again
MAX_SAMPLES = 16  # runs of a class whose ends are compared

_VALUE_IDENTITY = ("aten.contiguous.default", "aten.alias.default", "aten.detach.default", "aten.clone.default")
_SHAPE_KEEPING = ("aten.slice.Tensor", "aten.narrow.default", "aten.view.default", "aten.reshape.default",
                  "aten._unsafe_view.default", "aten.expand.default", "aten.constant_pad_nd.default",
                  "aten.pad.default")  # fmt: skip


def widened(prog, conds, need, kept, retrace: Callable):
    """(program, (lo, hi)): `kept` (the run of `need` around the example where `prog`'s guards hold)
    widened over the neighbouring runs whose class `prog` computes, or the trace of another class when
    it computes `prog`'s class and more. `retrace(length)` is the model's trace from an example of that
    length over `need` (None when it fails). At most MAX_CLASSES classes are traced."""
    keyed = guards.keyed_runs(conds, *need)
    own = next(key for run, key in keyed if run[0] <= kept[0] <= run[1])
    near = sorted(keyed, key=lambda rk: min(abs(rk[0][0] - kept[1]), abs(rk[0][1] - kept[0])))
    traces = {own: prog}
    for run, key in near:
        if key not in traces and len(traces) <= MAX_CLASSES:
            traces[key] = _class_trace(retrace, run, [r for r, k in keyed if k == key])
    best = (prog, kept)
    for key, trace in traces.items():
        if trace is None:
            continue
        covered = {
            k for k, other in traces.items() if k == key or (other is not None and _covers(trace, other, keyed, k))
        }
        span = _span(keyed, covered, kept)
        if span is not None and span[1] - span[0] > best[1][1] - best[1][0]:
            best = (trace, span)
    return best


def _class_trace(retrace, run, runs):
    """The model traced from the middle of `run`, if its guards hold on every run of the class."""
    other = retrace((run[0] + run[1]) // 2)
    if other is None:
        return None
    conds = guards.recorded(other)
    if any(guards.kept_interval(conds, *r, r[0]) != tuple(r) for r in runs):
        return None
    return other


def _covers(trace, other, keyed, key) -> bool:
    """Whether `trace` is `other`'s graph at the ends of the runs of class `key` (at most MAX_SAMPLES runs)."""
    runs = [r for r, k in keyed if k == key]
    picks = (
        runs if len(runs) <= MAX_SAMPLES else [runs[i] for i in np.linspace(0, len(runs) - 1, MAX_SAMPLES).astype(int)]
    )
    for n in sorted({v for r in picks for v in r}):
        subs = [dict.fromkeys(_symbols(p), n) for p in (trace, other)]
        if canonical(trace.graph, subs[0]) != canonical(other.graph, subs[1]):
            return False
    return True


def _span(keyed, covered, kept):
    """The widest run of consecutive runs in `covered` holding `kept`, or None."""
    idx = [i for i, (run, _) in enumerate(keyed) if run[0] <= kept[0] <= run[1]][0]
    if keyed[idx][1] not in covered:
        return None
    a = b = idx
    while a > 0 and keyed[a - 1][1] in covered:
        a -= 1
    while b + 1 < len(keyed) and keyed[b + 1][1] in covered:
        b += 1
    return keyed[a][0][0], keyed[b][0][1]


def canonical(graph, at) -> list:
    """The tensor ops of a graph in order, as (target, args, kwargs) with tensor operands by position and
    symbolic sizes evaluated at 1 (`at` True) or substituted (`at` a dict symbol -> value), or kept
    (`at` False), for comparing a symbolic trace with another; ops that return their operand unchanged at
    those sizes (a pad of 0, a slice to the whole dim) are left out."""
    index, out = {}, []
    for n in graph.nodes:
        val = n.meta.get("val")
        tensor = isinstance(val, torch.Tensor) or (
            isinstance(val, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in val)
        )
        if n.op == "call_function" and n.args and n.args[0] in index and _identity(n, at):
            index[n] = index[n.args[0]]
        elif n.op == "placeholder" or (n.op == "call_function" and tensor):
            index[n] = len(set(index.values()))
            if n.op == "call_function":
                out.append((str(n.target), _arg(n.args, index, at), _arg(dict(n.kwargs), index, at)))
        elif n.op == "output":
            out.append(("output", _arg(n.args, index, at), ()))
    return out


def _identity(node, at) -> bool:
    """Whether `node` returns its first operand unchanged at the sizes `at`."""
    target = str(node.target)
    if target in _VALUE_IDENTITY:
        return True
    if target not in _SHAPE_KEEPING:
        return False
    src, val = node.args[0].meta.get("val"), node.meta.get("val")
    if not isinstance(src, torch.Tensor) or not isinstance(val, torch.Tensor):
        return False
    same = _arg(tuple(src.shape), {}, at) == _arg(tuple(val.shape), {}, at)
    if target.startswith(("aten.constant_pad_nd", "aten.pad")):
        return same and all(_arg(p, {}, at) == ("sym", "0") for p in node.args[1])
    if target == "aten.slice.Tensor":
        step = node.args[4] if len(node.args) > 4 else node.kwargs.get("step", 1)
        return same and _arg(step, {}, at) == ("sym", "1")
    return same


def _arg(a, index: dict, at):
    if isinstance(a, torch.fx.Node):
        if a in index:
            return ("node", index[a])
        return _arg(a.meta.get("val"), index, at)
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        expr = a.node.expr
        if isinstance(at, dict):
            value = expr.xreplace(at)
        else:
            value = expr.subs({s: 1 for s in expr.free_symbols}) if at else expr
        return ("sym", str(value))
    if isinstance(a, (list, tuple)):
        return tuple(_arg(x, index, at) for x in a)
    if isinstance(a, dict):
        return tuple((k, _arg(v, index, at)) for k, v in sorted(a.items()))
    if isinstance(a, bool):
        return a
    if isinstance(a, int):
        return ("sym", str(a))
    return a if isinstance(a, float) else str(a)


def _symbols(prog):
    env = guards.shape_env(prog)
    return getattr(env, "backed_var_to_val", None) or env.var_to_val
