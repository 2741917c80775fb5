"""The discardable `novella.*` attributes: each declared once, with where it may stand, the pass that
writes it, the passes that read it, and a check of its value (what MLIR's
`Dialect::verifyOperationAttribute` does for a C++ dialect).

These annotate graph-level ops, functions, function arguments and the module between passes; once
`--novella-macro-gen` has run, a kernel's decisions are declared fields of its `novella.macro`
(`novella_lower.py`). `check(module)` walks a module and returns the first misuse: an unknown
`novella.*` name, one in the wrong place, or a value of the wrong kind."""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from .fields import ContextMemo, FieldError, buffer_entries


@dataclass(frozen=True)
class Annotation:
    name: str
    on: str  # "module", "func", "arg" (a function argument) or "op"
    kind: str  # a key of _KINDS
    writer: str
    readers: str
    doc: str


_A = Annotation
DECLARED = (
    _A("novella.symbols", "module", "dict", "frontend", "every pass", 'symbol -> ["name", min, max]'),
    _A(
        "novella.demoted_f64",
        "func",
        "array",
        "frontend",
        "the user (novella-opt, explain)",
        "ops the model computes in float64 and the NPU in float32",
    ),
    _A("novella.buckets", "module", "array", "novella-buckets", "pipeline", "the shape buckets chosen"),
    _A(
        "novella.plan_lengths",
        "module",
        "array",
        "novella-buckets",
        "kernels (tile search)",
        "lengths a bucket plans for",
    ),
    _A(
        "novella.dram",
        "op",
        "offset",
        "novella-allocate",
        "novella-macro-gen, extract, oracle",
        "the result's DRAM offset",
    ),
    _A("novella.dram", "arg", "offset", "novella-allocate", "extract, oracle", "the argument's DRAM offset"),
    _A("novella.dram_size", "func", "offset", "novella-allocate", "extract", "the DRAM the function needs"),
    _A(
        "novella.sram_budget",
        "op",
        "budget",
        "novella-allocate (lowered by novella-resident)",
        "novella-buckets, novella-resident, novella-tile",
        "SRAM the op tiles into",
    ),
    _A(
        "novella.resident",
        "op",
        "tiles",
        "novella-resident",
        "novella-tile, kernels (linear, fused_mlp, layer_norm, rms_norm, flash_attention, generic, kv_append)",
        "SPAD offsets (and sizes) of the tensors it keeps in the scratchpad: out, x, res, k, v, new",
    ),
    _A("novella.tiles", "op", "tiles", "novella-tile", "novella-macro-gen", "tile sizes by name"),
    _A("novella.grid", "op", "grid", "novella-tile", "novella-macro-gen", "loop extents over the symbols"),
    _A("novella.buffers", "op", "buffers", "novella-tile", "novella-macro-gen", "SRAM buffers of the tiling"),
    _A("novella.kv_cache", "func", "dict", "novella-kv-cache", "extract", "the paged cache's geometry"),
    _A("novella.paged", "op", "dict", "novella-kv-cache", "novella-allocate, kernels", "a paged cache tensor"),
    _A("novella.paged_rhs", "op", "dict", "novella-kv-cache", "kernels (matmul)", "a paged right operand"),
    _A("novella.paged_key", "op", "dict", "novella-kv-cache", "kernels (flash attention)", "a paged key"),
    _A("novella.paged_value", "op", "dict", "novella-kv-cache", "kernels (flash attention)", "a paged value"),
    _A("novella.kv_group", "op", "int", "novella-kv-cache", "kernels", "query heads per cached head"),
    _A(
        "novella.rotate_half",
        "op",
        "array",
        "novella-fuse-elementwise",
        "kernels (generic)",
        "generic inputs read as RoPE's rotate_half",
    ),
    _A("novella.kv_window", "op", "int", "novella-kv-cache", "kernels", "cached positions a query reads"),
    _A("novella.input_limits", "func", "dict", "frontend (scan)", "extract", "input -> [max |value|, why]"),
    _A("novella.splat", "op", "float", "frontend", "kv-window analysis", "a weight of one repeated value"),
    _A("novella.iota", "op", "unit", "frontend", "kv-window analysis", "a weight 0, 1, 2, ... along its dim"),
    _A("novella.causal", "op", "unit", "frontend (attention)", "novella-legalize", "a top-left causal mask add"),
    _A("novella.scale", "op", "float", "novella-legalize", "kernels (softmax)", "a softmax's folded input scale"),
)


def _offset(a) -> str | None:
    ok = isinstance(a, ir.AffineMapAttr) and a.value.n_dims == 0 and len(a.value.results) == 1
    return None if ok else "an affine map of the symbols to one offset"


def _grid(a) -> str | None:
    ok = isinstance(a, ir.AffineMapAttr) and a.value.n_dims == 0 and len(a.value.results) >= 1
    return None if ok else "an affine map of the symbols to the loop extents"


def _int_dict(a, keys=None) -> str | None:
    want = "a dictionary of integers" + (f" {', '.join(keys)}" if keys else "")
    if not isinstance(a, ir.DictAttr):
        return want
    entries = [a[i] for i in range(len(a))]
    if keys and sorted(e.name for e in entries) != sorted(keys):
        return want
    return None if all(isinstance(e.attr, ir.IntegerAttr) and e.attr.value >= 0 for e in entries) else want


def _buffers(a) -> str | None:
    if not isinstance(a, ir.DictAttr):
        return 'a dictionary of ["spad"|"acc", offset, size(, 2(, alternate))] buffers'
    try:
        buffer_entries(a)
    except (FieldError, TypeError, AttributeError) as e:
        return str(e)
    return None


_KINDS = {
    "dict": lambda a: None if isinstance(a, ir.DictAttr) else "a dictionary",
    "array": lambda a: None if isinstance(a, ir.ArrayAttr) else "an array",
    "int": lambda a: None if isinstance(a, ir.IntegerAttr) else "an integer",
    "float": lambda a: None if isinstance(a, ir.FloatAttr) else "a float",
    "unit": lambda a: None if isinstance(a, ir.UnitAttr) else "a unit attribute",
    "offset": _offset,
    "grid": _grid,
    "tiles": _int_dict,
    "budget": lambda a: _int_dict(a, ("acc", "spad")),
    "buffers": _buffers,
}
_WHERE = {(a.name, a.on): a for a in DECLARED}


_VERDICTS = ContextMemo()


def problem(name: str, on: str, value) -> str | None:
    """Why `name = value` may not annotate an `on` ("module", "func", "arg", "op"); None if it may."""
    memo = _VERDICTS.current()
    key = (name, on, value)
    if key not in memo:
        memo[key] = _problem(name, on, value)
    return memo[key]


def _problem(name: str, on: str, value) -> str | None:
    a = _WHERE.get((name, on))
    if a is None:
        places = [o for (n, o) in _WHERE if n == name]
        where = f"only on {' or '.join(places)}" if places else "not a declared novella annotation"
        return f"'{name}' may not annotate this {on} ({where}; see dialects/discardable.py)"
    want = _KINDS[a.kind](value)
    return None if want is None else f"'{name}' must be {want}, got {value}"


def check(module_op) -> tuple[object, str] | None:
    """(op, message) of the first misused `novella.*` attribute in the module, or None."""
    found = _attrs(module_op, "module")
    if found:
        return module_op, found
    bad: list = []

    def visit(op):
        name = op.operation.name
        if name == "func.func":
            msg = _attrs(op, "func") or _args(op)
        elif name in ("builtin.module",):
            msg = None
        else:
            msg = _attrs(op, "op")
        if msg:
            bad.append((op, msg))
            return ir.WalkResult.INTERRUPT
        # a macro's region holds tile ops and instructions, whose verifiers refuse any other field
        return ir.WalkResult.SKIP if name == "novella.macro" else ir.WalkResult.ADVANCE

    for op in module_op.regions[0].blocks[0].operations:
        op.operation.walk(visit)
        if bad:
            return bad[0]
    return None


def _attrs(op, on: str) -> str | None:
    attrs = op.operation.attributes
    for i in range(len(attrs)):
        a = attrs[i]
        if a.name.startswith("novella."):
            msg = problem(a.name, on, a.attr)
            if msg:
                return msg
    return None


def _args(fn) -> str | None:
    if "arg_attrs" not in fn.attributes:
        return None
    for d in ir.ArrayAttr(fn.attributes["arg_attrs"]):
        d = ir.DictAttr(d)
        for i in range(len(d)):
            if d[i].name.startswith("novella."):
                msg = problem(d[i].name, "arg", d[i].attr)
                if msg:
                    return msg
    return None
