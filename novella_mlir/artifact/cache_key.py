"""What the compile cache keys on: the exported programs, not the Python that wrote them.

Like torch's FX graph cache, a compile is identified by what it compiles. Every torch.export a
compile makes goes through `traced`, which records the call (its example inputs by shape and dtype,
its bounds or Dim spec) and its outcome: the exported program in torch's own serialized form
(`torch._export.serde`: ops, targets, literals, tensor metadata, signature, symbolic ranges) with
the node metadata dropped (stack traces, module stacks: where the source was, not what it
computes), plus every parameter, buffer and lifted constant by content; or the export error (an
export guard that narrows the range is a decision the compile acts on).

A lookup replays the recorded calls of a candidate entry on the module given and compares the
outcomes; the replayed programs are handed to the compile when the lookup misses, so a miss
exports once and a hit costs the exports plus a load.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import re

import torch

from ..errors import NovellaError


class Uncacheable(Exception):
    """The compile cannot be keyed (an input or a Dim the trace cannot describe): compile uncached."""


_ACTIVE: contextvars.ContextVar = contextvars.ContextVar("novella_cache_recording", default=None)
_DROP = ("metadata",)


def arg_desc(a):
    if isinstance(a, torch.Tensor):
        return ["tensor", list(a.shape), str(a.dtype)]
    if a is None or isinstance(a, (bool, int, float, str)):
        return ["value", a]
    raise Uncacheable(f"an example input of type {type(a).__name__}")


def make_arg(d):
    if d[0] == "tensor":
        return torch.zeros(d[1], dtype=getattr(torch, d[2].removeprefix("torch.")))
    return d[1]


def spec_desc(spec):
    """A `dynamic_shapes` spec as JSON (a Dim by name and bounds), or Uncacheable."""
    if spec is None or isinstance(spec, (bool, int, str)):
        return spec
    if isinstance(spec, torch.export.Dim):
        try:
            return {"Dim": spec.__name__, "min": int(spec.min), "max": int(spec.max)}
        except (TypeError, ValueError, OverflowError):
            raise Uncacheable(f"the Dim {spec.__name__} has no finite bounds") from None
    if isinstance(spec, dict):
        return {"dict": [[k, spec_desc(v)] for k, v in spec.items()]}
    if isinstance(spec, (list, tuple)):
        return {type(spec).__name__: [spec_desc(v) for v in spec]}
    raise Uncacheable(f"a dynamic_shapes entry of type {type(spec).__name__}")


def make_spec(d, dims: dict):
    if isinstance(d, dict) and "Dim" in d:
        key = (d["Dim"], d["min"], d["max"])
        if key not in dims:  # one Dim object per name: a shared Dim means equal sizes
            dims[key] = torch.export.Dim(d["Dim"], min=d["min"], max=d["max"])
        return dims[key]
    if isinstance(d, dict) and "dict" in d:
        return {k: make_spec(v, dims) for k, v in d["dict"]}
    if isinstance(d, dict):
        ((kind, items),) = d.items()
        seq = [make_spec(v, dims) for v in items]
        return tuple(seq) if kind == "tuple" else seq
    return d


def tensor_digest(h, name: str, t) -> None:
    if not isinstance(t, torch.Tensor):
        raise Uncacheable(f"the constant {name} is a {type(t).__name__}")
    t = t.detach().to("cpu").contiguous()
    h.update(f"{name}:{tuple(t.shape)}:{t.dtype}\0".encode())
    if t.numel():
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes())


def program_digest(prog) -> str:
    """sha256 of the program's canonical serialized graph and of every tensor it holds, by content."""
    h = hashlib.sha256(_graph_text(prog).encode())
    for name, t in sorted(prog.state_dict.items()):
        tensor_digest(h, "state:" + name, t)
    for name, t in sorted(prog.constants.items()):
        tensor_digest(h, "const:" + name, t)
    return h.hexdigest()


def _graph_text(prog) -> str:
    try:
        from torch._export.serde.serialize import serialize

        data = json.loads(serialize(prog).exported_program)
    except Exception:  # noqa: BLE001 - a program torch cannot serialize: its code, as inductor keys it
        return re.sub(r" *#.*$", "", prog.graph_module.code, flags=re.MULTILINE) + str(
            [prog.graph_signature, prog.range_constraints]
        )
    for node in data["graph_module"]["graph"]["nodes"]:
        for k in _DROP:
            node.pop(k, None)
    data["graph_module"].pop("metadata", None)
    return json.dumps(data, sort_keys=True)


def outcome(result) -> list:
    """What the compile learns from one export: its program(s) by digest and any decision it returned."""
    if isinstance(result, torch.export.ExportedProgram):
        return ["program", program_digest(result)]
    if isinstance(result, (tuple, list)):
        return ["seq", [outcome(r) for r in result]]
    if result is None or isinstance(result, (bool, int, str)):
        return ["value", result]
    raise Uncacheable(f"an export returned a {type(result).__name__}")


def error_outcome(e: NovellaError) -> list:
    return ["error", type(e).__qualname__, str(e), list(getattr(e, "kept", None) or []), getattr(e, "guard", "")]


class Recording:
    """The export calls of one top-level compile, in order, as (call, outcome); see the module doc."""

    def __init__(self, module, exports: dict, on_first):
        self.module, self.exports, self.on_first = module, exports, on_first
        self.calls: list = []
        self.memo: dict = {}  # call json -> [result or exception], from a replay, for the compile to reuse
        self.ok = True

    def __enter__(self):
        self._token = _ACTIVE.set(self)
        return self

    def __exit__(self, *exc):
        _ACTIVE.reset(self._token)

    def call(self, kind: str, module, args, params):
        try:
            call = {"kind": kind, "args": [arg_desc(a) for a in args], "params": spec_desc(params)}
        except Uncacheable:
            self.ok = False
        if not self.ok or module is not self.module:
            self.ok = False
            return self.exports[kind](module, args, *params)
        result, out = self._run(call, lambda: self.exports[kind](module, args, *params))
        self.calls.append([call, out])
        if len(self.calls) == 1:
            self.on_first(self)  # raises Hit when an entry matches
        if isinstance(result, BaseException):
            raise result
        return result

    def _run(self, call, fn):
        k = json.dumps(call, sort_keys=True)
        if self.memo.get(k):
            result = self.memo[k].pop(0)
        else:
            try:
                result = fn()
            except NovellaError as e:
                result = e
        try:
            out = error_outcome(result) if isinstance(result, NovellaError) else outcome(result)
        except Uncacheable:
            self.ok, out = False, None
        return result, out

    def replay(self, calls) -> bool:
        """Whether `calls` (a stored trace after its first call) give the same outcomes on this module;
        their results are kept for the compile."""
        for call, want in calls:
            args = [make_arg(a) for a in call["args"]]
            params = make_spec(call["params"], {})
            k = json.dumps(call, sort_keys=True)
            try:
                result = self.exports[call["kind"]](self.module, args, *params)
            except NovellaError as e:
                result = e
            except Exception:  # noqa: BLE001 - a replay that cannot run is a miss
                return False
            self.memo.setdefault(k, []).append(result)
            try:
                got = error_outcome(result) if isinstance(result, NovellaError) else outcome(result)
            except Uncacheable:
                return False
            if got != want:
                return False
        return True


def recording():
    """The Recording of the cached compile running in this context, or None."""
    return _ACTIVE.get()


def traced(kind: str, fn, module, args, *params):
    """`fn(module, args, *params)`: an export, recorded when a cached compile is being keyed."""
    rec = _ACTIVE.get()
    if rec is None:
        return fn(module, args, *params)
    rec.exports.setdefault(kind, fn)
    return rec.call(kind, module, tuple(args), params)


def digest(parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()
