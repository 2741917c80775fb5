"""Guard classes: the lengths at which the guards torch.export recorded for a trace take the same values, and
the proof that one traced program is valid on several classes.

torch.export guarantees a trace only where its guards hold. SEW's encoder pads its upsampled frames to the
input's when they are fewer (`if upsampled < T: pad`), a branch on the parity of the frame count: its guard
alternates every 320 samples of the waveform, and every run of lengths would be a program of its own. The
runs where the guards take the same values are one class, traced once from one of its lengths; that trace is
valid on each run of the class where its own guards hold (torch's guarantee, every length evaluated). A trace
X is valid on another class C when it computes C's trace at every length of C (`Proof.same_graph`): the same
ops in the same order on the same operands, every size or scalar X passes equal to C's at every length of C,
and every op one of them has and the other lacks the identity at every length of C (a pad of 0, a slice, view
or expand to the shape it reads). Each of these is a condition on the length evaluated at every length of C
(`guards.false_at`), never at a sample of them. The program kept is the trace valid on the widest span of
runs around the example."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

import numpy as np
import sympy
import torch

from . import guards

MAX_CLASSES = 6  # classes traced again besides the example's
JOIN: ContextVar[bool] = ContextVar("novella_join_guard_classes", default=True)  # off: each class its own program
_VALUE_IDENTITY = ("aten.contiguous.default", "aten.alias.default", "aten.detach.default", "aten.clone.default")
_PADS = ("aten.constant_pad_nd.default", "aten.pad.default")
_SAME_SHAPE = ("aten.slice.Tensor", "aten.narrow.default", "aten.view.default", "aten.reshape.default",
               "aten._unsafe_view.default", "aten.expand.default")  # fmt: skip


class Proof:
    """Conditions on the length `guards.T` decided at every length of a class (its runs), each once."""

    def __init__(self, runs):
        self.runs = list(runs)
        self.lengths = np.concatenate([np.arange(a, b + 1, dtype=np.int64) for a, b in self.runs])
        self._known: dict = {}

    def holds(self, cond) -> bool:
        cond = sympy.sympify(cond)
        if cond in (sympy.true, True) or cond in (sympy.false, False):
            return bool(cond)
        if cond not in self._known:
            try:
                self._known[cond] = guards.false_at(cond, self.lengths).size == 0
            except Exception:  # noqa: BLE001 - a condition that cannot be evaluated is not proved
                self._known[cond] = False
        return self._known[cond]

    def same_graph(self, x, y) -> bool:
        """Whether program `x` computes program `y`'s graph at every length of the class (see the module)."""
        if not (_comparable(x) and _comparable(y)) or _inputs(x) != _inputs(y) or not _same_constants(x, y):
            return False
        value = sym_value(_on_t)
        ops = [canonical(p.graph, value, lambda n: self._identity(n, value), True) for p in (x, y)]
        sizes: list = []
        return _match(ops[0], ops[1], sizes) and all(self.equal(a, b) for a, b in dict.fromkeys(sizes))

    def equal(self, a, b) -> bool:
        try:
            return self.holds(sympy.Eq(a, b))
        except (TypeError, ValueError):  # sympy has no equality of these (two conditions): not proved
            return False

    def _identity(self, node, value) -> bool:
        """Whether `node` returns its first operand unchanged at every length of the class."""
        target = str(node.target)
        if target in _VALUE_IDENTITY:
            return True
        if target not in _PADS + _SAME_SHAPE:
            return False
        src, out = node.args[0].meta.get("val"), node.meta.get("val")
        if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor) or src.dim() != out.dim():
            return False
        if target in _PADS and not all(self.equal(value(p), 0) for p in _sizes(node.args[1])):
            return False
        if target == "aten.slice.Tensor" and len(node.args) > 4 and not self.equal(value(node.args[4]), 1):
            return False
        return all(self.equal(value(a), value(b)) for a, b in zip(src.shape, out.shape))


def widened(prog, conds, need, kept, retrace: Callable):
    """(program, (lo, hi)): the program valid on the widest span of runs of `need` around `kept` (the run of
    the example, where `prog`'s guards `conds` hold), `prog` itself or another class's trace, within the
    range torch keeps for that trace. `retrace(n)` is the model traced from an example of length n and the
    range torch keeps for it, or None. At most MAX_CLASSES classes are traced."""
    keyed = guards.keyed_runs(conds, *need)
    own = next(key for run, key in keyed if run[0] <= kept[0] <= run[1])
    order = sorted(keyed, key=lambda rk: min(abs(rk[0][0] - kept[1]), abs(rk[0][1] - kept[0])))
    traced = {own: (prog, [r for r, k in keyed if k == own], tuple(need))}
    for run, key in order:
        if key not in traced and len(traced) <= MAX_CLASSES:
            traced[key] = _class_trace(retrace, run, [r for r, k in keyed if k == key])
    best = (prog, kept)
    for key, (trace, _, (lo, hi)) in traced.items():
        if trace is None:
            continue
        valid = set()
        for k, (other, runs, _) in traced.items():
            if other is not None and (k == key or Proof(runs).same_graph(trace, other)):
                valid |= {r for r in runs if lo <= r[0] and r[1] <= hi}
        span = _span([r for r, _ in keyed], valid, kept)
        if span is not None and span[1] - span[0] > best[1][1] - best[1][0]:
            best = (trace, span)
    if best[1] != kept:
        best[0].novella_joined = (kept, best[1])
    return best


def joined(prog) -> bool:
    """Whether `prog` is a trace `widened` kept for more runs than the example's guards hold on."""
    return getattr(prog, "novella_joined", None) is not None


def _class_trace(retrace, run, runs):
    """(the class's trace from the middle of `run`, the runs of the class within the range torch keeps for it
    on which its guards hold at every length, that range), or None and no runs."""
    traced = retrace((run[0] + run[1]) // 2)
    if traced is None:
        return None, [], (0, -1)
    other, (lo, hi) = traced
    conds = guards.recorded(other)
    valid = [r for r in runs if lo <= r[0] and r[1] <= hi and guards.kept_interval(conds, *r, r[0]) == tuple(r)]
    return (other, valid, (lo, hi)) if valid else (None, [], (0, -1))


def _span(runs, valid: set, kept):
    """The widest run of consecutive runs in `valid` holding `kept`, or None."""
    at = next(i for i, r in enumerate(runs) if r[0] <= kept[0] <= r[1])
    if runs[at] not in valid:
        return None
    a = b = at
    while a > 0 and runs[a - 1] in valid:
        a -= 1
    while b + 1 < len(runs) and runs[b + 1] in valid:
        b += 1
    return runs[a][0], runs[b][1]


def _comparable(prog) -> bool:
    """No subgraph (a higher-order op's body is no operand `canonical` compares) and every size symbol backed
    by the length (no data-dependent size)."""
    env = guards.shape_env(prog)
    backed = set(getattr(env, "backed_var_to_val", None) or env.var_to_val) if env is not None else set()
    for n in prog.graph.nodes:
        if n.op == "get_attr":
            return False
        for d in getattr(n.meta.get("val"), "shape", ()):
            if isinstance(d, torch.SymInt) and not d.node.expr.free_symbols <= backed:
                return False
    return True


def _inputs(prog) -> list:
    return [(s.kind, s.arg.name, s.target) for s in prog.graph_signature.input_specs]


def _same_constants(x, y) -> bool:
    """The lifted tensor constants of both programs are the same by name and value."""
    cx, cy = getattr(x, "constants", {}), getattr(y, "constants", {})
    if set(cx) != set(cy):
        return False
    return all(torch.is_tensor(cx[k]) == torch.is_tensor(cy[k]) and _equal(cx[k], cy[k]) for k in cx)


def _equal(a, b) -> bool:
    if torch.is_tensor(a):
        return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    return a is b


def sym_value(rewrite: Callable) -> Callable:
    """A size or scalar of a trace (or of an fx node's value) as a sympy value, a symbolic one's expression
    passed through `rewrite` (symbols substituted, or kept)."""

    def value(a):
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return rewrite(a.node.expr)
        if isinstance(a, torch.fx.Node):
            return value(a.meta.get("val"))
        return sympy.sympify(a)

    return value


def _on_t(e):
    """`e` in the length `guards.T` (each tensor's size symbol stands for it)."""
    return e.xreplace({s: guards.T for s in e.free_symbols})


def _sizes(a) -> list:
    return list(a) if isinstance(a, (list, tuple)) else [a]


def _match(a, b, sizes: list) -> bool:
    """Whether two canonical forms are equal, a pair of differing sizes ("sym", e) counted as equal and
    appended to `sizes` (the caller proves e == e' where it needs them equal)."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        if len(a) == 2 and a[0] == b[0] == "sym":
            if a[1] != b[1]:
                sizes.append((a[1], b[1]))
            return True
        return all(_match(x, y, sizes) for x, y in zip(a, b))
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return all(_match(x, y, sizes) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def canonical(graph, value: Callable, identity: Callable | None = None, shapes: bool = False) -> list:
    """The tensor ops of a graph in order, as (target, args, kwargs) with tensor operands by position and each
    size or scalar as ("sym", value(it)), and the shapes of its results if `shapes` (torch simplifies them
    under the trace's guards, and the compiler reads them); ops `identity(node)` says return their operand
    are left out (their result is that operand), as are contiguous, alias, detach and clone when `identity`
    is None."""
    index, out = {}, []
    is_identity = identity or (lambda n: str(n.target) in _VALUE_IDENTITY)
    for n in graph.nodes:
        val = n.meta.get("val")
        tensor = isinstance(val, torch.Tensor) or (
            isinstance(val, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in val)
        )
        if n.op == "call_function" and n.args and n.args[0] in index and is_identity(n):
            index[n] = index[n.args[0]]
        elif n.op == "placeholder" or (n.op == "call_function" and tensor):
            index[n] = len(set(index.values()))
            if n.op == "call_function":
                op = (str(n.target), _arg(n.args, index, value), _arg(dict(n.kwargs), index, value))
                out.append(op + ((_shapes(val, value),) if shapes else ()))
        elif n.op == "output":
            out.append(("output", _arg(n.args, index, value), ()))
    return out


def _shapes(val, value: Callable):
    if isinstance(val, torch.Tensor):
        return tuple(("sym", value(d)) for d in val.shape)
    return tuple(_shapes(v, value) for v in val) if isinstance(val, (tuple, list)) else ()


def _arg(a, index: dict, value: Callable):
    if isinstance(a, torch.fx.Node):
        if a in index:
            return ("node", index[a])
        return _arg(a.meta.get("val"), index, value)
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", value(a))
    if isinstance(a, (list, tuple)):
        return tuple(_arg(x, index, value) for x in a)
    if isinstance(a, dict):
        return tuple((k, _arg(v, index, value)) for k, v in sorted(a.items()))
    if isinstance(a, (int, float, bool)) and not isinstance(a, torch.Tensor):
        return ("sym", value(a)) if isinstance(a, int) and not isinstance(a, bool) else a
    return str(a)
