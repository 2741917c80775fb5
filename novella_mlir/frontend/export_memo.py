"""Each distinct torch.export of one compile_torch made once.

The export-range strategy traces the same module with the same example shapes and the same spec more
than once in one compile (the range split where torch narrows it, the retrace with guard classes apart,
the static trace at T = 1 that `_check_length_one` compares with and that the T = 1 program compiles):
measured on the mamba2 test, 3 of 16 exports, ~6 s of a 49 s compile. Within a `scope` (compile_torch's
top-level call), `export` keys a call by the module's identity, each example's shape and dtype (export
traces fake tensors: values do not matter), the `dynamic_shapes` spec and the tracing flags, and hands
out a copy of the first outcome: the graph is copied (the compile rewrites it), tensors and the fake
values in the node metadata are shared. A hit whose ShapeEnv changed since the export (a later retrace
recorded more guards in it) exports again."""

from __future__ import annotations

import contextlib
import copy
import warnings
from contextvars import ContextVar

import torch
from torch.fx.experimental import _config as fx_config

from . import guards

_MEMO: ContextVar[dict | None] = ContextVar("novella_export_memo", default=None)


@contextlib.contextmanager
def scope():
    """Exports memoized while the block runs (nested scopes share the outermost one's)."""
    if _MEMO.get() is not None:
        yield
        return
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def export(module, args, **kw):
    """`torch.export.export(module, tuple(args), strict=False, **kw)`, memoized within a `scope`."""
    memo = _MEMO.get()
    key = _key(module, args, kw) if memo is not None else None
    if key is None:
        return torch.export.export(module, tuple(args), strict=False, **kw)
    hit = memo.get(key)
    if hit is None or hit[0] is not module or (hit[2] is not None and _env_state(hit[2]) != hit[3]):
        try:
            prog = torch.export.export(module, tuple(args), strict=False, **kw)
        except Exception as e:
            memo[key] = (module, e, None, None)
            raise
        env = guards.shape_env(prog)
        hit = memo[key] = (module, prog, env, _env_state(env))
    if isinstance(hit[1], BaseException):
        raise hit[1]
    return _copy(hit[1])


def _copy(prog):
    tensors = {id(t): t for t in (*prog.state_dict.values(), *prog.constants.values()) if isinstance(t, torch.Tensor)}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
        out = copy.deepcopy(prog, tensors)
    for a, b in zip(prog.graph.nodes, out.graph.nodes):  # the copy renames a node named as a builtin (`input`)
        b.name = a.name
    return out


def _key(module, args, kw):
    try:
        shapes = tuple(_arg(a) for a in args)
        spec = _spec(kw.get("dynamic_shapes"))
    except TypeError:
        return None
    flags = tuple(sorted((k, v) for k, v in kw.items() if k != "dynamic_shapes"))
    return (id(module), shapes, spec, flags, bool(fx_config.backed_size_oblivious))


def _arg(a):
    if isinstance(a, torch.Tensor):
        return ("tensor", tuple(a.shape), a.dtype)
    if a is None or isinstance(a, (bool, int, float, str)):
        return ("value", type(a).__name__, a)
    raise TypeError(type(a).__name__)


def _spec(spec):
    """A `dynamic_shapes` spec as a hashable value: each Dim or DimHint by its kind, name and bounds."""
    if spec is None or isinstance(spec, (bool, int, str)):
        return spec
    if isinstance(spec, dict):
        return ("dict", tuple((k, _spec(v)) for k, v in spec.items()))
    if isinstance(spec, (list, tuple)):
        return (type(spec).__name__, tuple(_spec(v) for v in spec))
    bounds = (getattr(spec, "min", None), getattr(spec, "max", None))
    if type(spec) is torch.export.Dim:  # a derived Dim (2 * T) is no key: exported each time
        return ("Dim", spec.__name__, *bounds)
    if type(spec).__name__ == "_DimHint":
        return ("DimHint", str(spec.type), *bounds)
    raise TypeError(type(spec).__name__)


def _env_state(env):
    if env is None:
        return None
    return (len(env.guards), len(env.replacements), len(env.deferred_runtime_asserts), str(env.var_to_range))
