"""Python values as attributes and back, the module that holds an op, and memos of results that are
functions of attributes (uniqued per context): shared by the kernels, the frontend and the passes."""

from __future__ import annotations

from torch_mlir import ir


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
