"""Helpers shared by the novella passes."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..machine.target import MAX_LENGTH


class PassError(Exception):
    """Raised inside a pass; reported as an MLIR error at `op`'s location."""

    def __init__(self, op, message: str):
        super().__init__(message)
        self.op = op
        self.message = message


def functions(module_op) -> list:
    return [op for op in module_op.regions[0].blocks[0].operations if op.operation.name == "func.func"]


def body_ops(fn) -> list:
    return list(fn.regions[0].blocks[0].operations)


def n_symbols(module_op) -> int:
    return len(sy.read_symbols(module_op))


def module_of(op):
    while op.operation.name != "builtin.module":
        op = op.operation.parent
    return op


def set_attr(op, name: str, value) -> None:
    op.operation.attributes[name] = to_attr(value)


def to_attr(value) -> ir.Attribute:
    """Python value -> attribute: int, float, str, list, dict, or an affine map already built (plain data
    of ints, strs, lists and dicts remembered by value: tilings and slots repeat across layers)."""
    key = _plain_key(value)
    if key is None:
        return _to_attr(value)
    memo = current(_PLAIN_ATTRS)
    attr = memo.get(key)
    if attr is None:
        attr = memo[key] = _to_attr(value)
    return attr


def _plain_key(value):
    """A hashable key equal for equal plain data of the same types (None: not plain; floats are not:
    -0.0 == 0.0)."""
    kind = type(value)
    if kind in (int, bool, str):
        return kind, value
    if kind in (list, tuple):
        parts = tuple(map(_plain_key, value))
        return None if None in parts else (kind, parts)
    if kind is dict:
        parts = tuple((k, _plain_key(v)) for k, v in value.items())
        return None if any(p is None or type(k) is not str for k, p in parts) else (kind, parts)
    return None


def _to_attr(value) -> ir.Attribute:
    if isinstance(value, ir.Attribute):
        return value
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, float):
        return ir.FloatAttr.get_f32(value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    if isinstance(value, (list, tuple)):
        return ir.ArrayAttr.get([_to_attr(v) for v in value])
    if isinstance(value, dict):
        return ir.DictAttr.get({k: _to_attr(v) for k, v in value.items()})
    raise TypeError(f"cannot make an attribute from {value!r}")


_SCALAR_ATTRS = (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr, ir.StringAttr)


def from_attr(attr):
    """Attribute -> Python value (inverse of `to_attr` for plain data)."""
    if isinstance(attr, _SCALAR_ATTRS):
        return attr.value
    if isinstance(attr, ir.ArrayAttr):
        return [from_attr(a) for a in attr]
    if isinstance(attr, ir.DictAttr):
        return {a.name: from_attr(a.attr) for a in map(attr.__getitem__, range(len(attr)))}
    return attr


_IR_MEMOS: list[dict] = []
_MEMO_LIMIT = 1 << 16


class _IRMemo(dict):
    context = None  # the context of the keys held


def ir_memo() -> dict:
    """A dict for results that are functions of attributes (keys hold attributes and op names).
    Attributes are uniqued per context, so a key of one compile never equals another's; the pipeline
    empties every such memo at the start and end of a compile (`forget_ir_memos`), so equal ops of
    the layers and shape-bucket programs of one compile share a result. A memo used under another
    context (passes run outside the pipeline) starts over, so it holds one context at most."""
    memo = _IRMemo()
    _IR_MEMOS.append(memo)
    return memo


def remember(memo: _IRMemo, key, compute, *args):
    """`memo[key]`, computed by `compute(*args)` when absent (a memo past `_MEMO_LIMIT` entries starts over)."""
    memo = current(memo)
    if key not in memo:
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[key] = compute(*args)
    return memo[key]


def current(memo: _IRMemo) -> _IRMemo:
    """`memo`, emptied first if it holds another context's keys or is past `_MEMO_LIMIT` entries (for a
    loop that looks many keys up in it under one context)."""
    ctx = ir.Context.current
    if memo.context is not ctx or len(memo) >= _MEMO_LIMIT:
        memo.clear()
        memo.context = ctx
    return memo


_PLAIN_ATTRS = ir_memo()


def forget_ir_memos() -> None:
    for memo in _IR_MEMOS:
        memo.clear()
        memo.context = None


def is_tensor_op(op) -> bool:
    return op.operation.name.startswith("novella.") and op.operation.name not in ("novella.weight",)


def attr_dict(op) -> dict:
    """All attributes of `op` by name."""
    return dict(op.operation.attributes.items())


# ------------------------------------------------------------------ preconditions

MAX_SYMBOL_VALUE = MAX_LENGTH  # the ISA's row_bound field
_STRUCTURAL = ("novella.weight", "novella.macro", "novella.inst", "func.return")


def check_symbols(module_op) -> list[sy.Symbol]:
    """The module's `novella.symbols`, refused with a located error unless well formed and in range."""
    if "novella.symbols" in module_op.attributes and not isinstance(
        module_op.attributes["novella.symbols"], ir.DictAttr
    ):
        raise PassError(module_op, 'novella.symbols must be a dictionary such as {s0 = ["T", 1, 2048]}')
    try:
        symbols = sy.read_symbols(module_op)
    except (ValueError, TypeError, IndexError) as e:
        raise PassError(
            module_op, f'novella.symbols entries must be sN = ["name", min, max] with integer bounds ({e})'
        ) from None
    if [s.position for s in symbols] != list(range(len(symbols))):
        raise PassError(
            module_op, f"novella.symbols must name s0, s1, ... in order, got {[s.position for s in symbols]}"
        )
    for s in symbols:
        if not 0 <= s.lo <= s.hi <= MAX_SYMBOL_VALUE:
            raise PassError(
                module_op,
                f"symbol s{s.position} ('{s.name}') has bounds [{s.lo}, {s.hi}]; "
                f"need 0 <= min <= max <= {MAX_SYMBOL_VALUE} (the ISA's 24-bit row fields)",
            )
    _check_symbol_uses(module_op, len(symbols))
    return symbols


def _check_symbol_uses(module_op, n: int) -> None:
    """Every affine map in types and attributes uses only declared symbols."""
    found: list = []
    types, maps = set(), set()  # seen (uniqued): a repeated one was found, or passed, at its first use

    def check(op):
        for v in (*op.operands, *op.results):
            t = v.type
            if t not in types:
                types.add(t)
                if isinstance(t, ir.RankedTensorType) and isinstance(t.encoding, ir.AffineMapAttr):
                    found.append((op, t.encoding, f"type {t}"))
        for a in op.attributes.values():
            if type(a) is ir.AffineMapAttr and a not in maps:  # the bindings' class of every affine map
                maps.add(a)
                found.append((op, a, None))
        return ir.WalkResult.ADVANCE

    for fn in functions(module_op):
        for i, a in enumerate(fn.regions[0].blocks[0].arguments):
            if isinstance(a.type, ir.RankedTensorType) and isinstance(a.type.encoding, ir.AffineMapAttr):
                found.append((fn, a.type.encoding, f"argument #{i} ({a.type})"))
    module_op.operation.walk(check)
    for op, attr, what in found:
        used = attr.value.n_symbols
        if used > n:
            what = what or next(f"attribute '{k}'" for k, a in attr_dict(op).items() if a == attr)
            declared = ", ".join(f"s{i}" for i in range(n)) or "none"
            raise PassError(
                op,
                f"{what} uses symbol s{used - 1}, but novella.symbols declares {declared}; "
                f'add s{used - 1} = ["name", min, max] to the module attribute novella.symbols',
            )


def tensor_ops(module_op) -> list:
    """The novella tensor ops of every function (not weights, macros or instructions)."""
    return [
        op
        for fn in functions(module_op)
        for op in body_ops(fn)
        if op.operation.name.startswith("novella.") and op.operation.name not in _STRUCTURAL
    ]


def require_stage(module_op, flag: str, need: str | None, producer: str) -> None:
    """Refuses IR of the wrong stage: each tensor op must carry `need` (set by `producer`).

    Also refuses torch-dialect ops (the frontend converts them) and `?` dims
    without a symbolic size (from --novella-shape-infer)."""
    for fn in functions(module_op):
        for op in body_ops(fn):
            if op.operation.name.startswith("torch."):
                raise PassError(
                    op,
                    f"is a torch-dialect op, but --{flag} runs on the novella dialect; convert the module with "
                    "the frontend first (compile_torch(..., dump_dir=...) writes it as 01-novella.mlir)",
                )
    if flag == "novella-shape-infer":
        return
    sized = set()  # types seen (uniqued): a repeated one passed at its first use
    for op in tensor_ops(module_op):
        for v in (*op.operands, *op.results):
            t = v.type
            if t in sized:
                continue
            if isinstance(t, ir.RankedTensorType) and sy.shape_of(t) is None:
                raise PassError(
                    op, f"has a '?' dim without a symbolic size ({t}); --{flag} needs --novella-shape-infer first"
                )
            sized.add(t)
        if need and need not in op.attributes and op.operation.name != "novella.reshape":
            raise PassError(op, f"has no '{need}' attribute: --{flag} expects the output of --{producer}; run it first")
