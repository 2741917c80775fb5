"""Lowerings of `cumsum` and `cumprod`: one `novella.scan` along the dim (which may be the dynamic one).

Integers and bools are held as f32 (`frontend/dtypes.py`), exact while every partial result stays
within +-2**24. The NPU adds (multiplies) contiguous runs of the input in an order of its own, so an
integer result is exact when the sum of |x| (product of the |x|) over the longest scan is within that
range. The frontend bounds |x| from what it knows of the values: 1 for a bool tensor, a compare's mask
or a sign, the largest |x| of a constant, and 2**24 (what the NPU holds) for anything else. A scan
whose bound times the length's upper bound exceeds 2**24 is refused, naming the op, its line and the
length, rather than rounded silently; when the values are a model input's, the limit (2**24 over the
length) goes into the IR instead and every call checks it (`novella.input_limits`, read by the
executor). A float scan is fp32 arithmetic, as eager's."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.attrs import from_attr, to_attr
from ...dialects.novella import COMPARE_FNS, ScanOp
from ...symbolic import box as sb
from ..dtypes import EXACT_INT

LIMITS = "novella.input_limits"

_TRANSPARENT = ("novella.reshape", "novella.slice", "novella.transpose", "novella.broadcast", "novella.flip")
_MASK_FNS = {"novella.compare": COMPARE_FNS, "novella.scalar": COMPARE_FNS, "novella.math": ("not", "sign")}


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))


def value_bound(cx, v: ir.Value, kind: str) -> tuple[float, ir.Value | None]:
    """(an upper bound of |x| over the elements of the novella value `v` of torch element kind `kind`, the
    function input `v` views, or None): through views, products, sums and selects of masks (a histogram's
    counts are at most the number of elements counted)."""
    if kind == "bool":
        return 1.0, None
    while True:
        owner = v.owner
        if isinstance(owner, ir.Block):
            return float(EXACT_INT), v
        name = owner.operation.name
        if name in _MASK_FNS and ir.StringAttr(owner.attributes["fn"]).value in _MASK_FNS[name]:
            return 1.0, None
        if name == "novella.weight":
            data = cx.weight_data(v)
            return (float(np.abs(data).max()) if data is not None and data.size else float(EXACT_INT)), None
        if name in _COMBINE:
            parts = [value_bound(cx, x, "float")[0] for x in owner.operands[_COMBINE[name][0] :]]
            return min(float(EXACT_INT), _COMBINE[name][1](parts)), None
        if name == "novella.reduce" and ir.StringAttr(owner.attributes["fn"]).value == "sum":
            n = sb.value_range(cx.shape(owner.operands[0])[-1], cx.symbols)[1]
            return min(float(EXACT_INT), value_bound(cx, owner.operands[0], "float")[0] * n), None
        if name not in _TRANSPARENT:
            return float(EXACT_INT), None
        v = owner.operands[0]


_COMBINE = {  # op: (first operand bounded, bound of the result from the operands' bounds)
    "novella.mul": (0, lambda b: b[0] * b[1]),
    "novella.add": (0, sum),
    "novella.sub": (0, sum),
    "novella.where": (1, max),
}


def _largest_exact(fn: str, hi: int) -> int:
    """The largest |x| for which every partial result of a `fn` scan of `hi` values stays within 2**24."""
    return EXACT_INT // hi if fn == "sum" else (1 if hi > 24 else int(2 ** (24 / hi)))


def _check_exact(cx, x, fn: str, dim: int, n) -> None:
    """Refuses an integer scan that fp32 may not hold exactly at the longest length the bounds allow; on a
    function input, the limit goes into the IR instead (`novella.input_limits`), checked on every call."""
    hi = sb.value_range(n, cx.symbols)[1]
    bound, arg = value_bound(cx, x, cx.kind(0))
    limit = _largest_exact(fn, hi)
    if bound <= limit:
        return
    op = "cumsum" if fn == "sum" else "cumprod"
    what = f"{'sums' if fn == 'sum' else 'multiplies'} up to {hi} of its values along dim {dim}"
    if arg is not None and limit >= 1:
        why = f"{cx.error(f'{op} of this integer input {what}')} (exact in fp32 only within +-2**24)"
        _limit_input(ir.BlockArgument(arg), limit, why)
        return
    known = f"|x| <= {bound:.0f}" if bound < EXACT_INT else "values computed on the NPU, bounded only by 2**24"
    raise cx.error(
        f"{op} of an integer tensor along dim {dim}, whose length can reach {hi}, with {known}: a "
        f"running {'sum' if fn == 'sum' else 'product'} can leave +-2**24, where the NPU's fp32 no longer holds "
        "integers exactly. Lower max_len, scan a bool or 0/1 mask (`x != 0`, bounded by 1), or convert to "
        "float first (`x.float()`) if rounded results are acceptable."
    )


def _limit_input(arg: ir.BlockArgument, limit: int, why: str) -> None:
    """Records in the function's `novella.input_limits` ({input index: [max |x|, why]}) that input `arg`
    must hold no integer above `limit`: the executor refuses a call whose input does (the tightest wins)."""
    fn = arg.owner.owner
    limits = from_attr(fn.attributes[LIMITS]) if LIMITS in fn.attributes else {}
    key = str(arg.arg_number)
    if key not in limits or limits[key][0] > limit:
        limits[key] = [limit, why]
    fn.attributes[LIMITS] = to_attr(limits)


def _scan(fn: str):
    def lower(cx):
        x = cx.operand(0)
        shape = cx.shape(x)
        if not shape:
            return x
        dim = cx.const(1) % len(shape)
        if cx.result_kind() in ("int", "bool"):
            _check_exact(cx, x, fn, dim, shape[dim])  # |x.long()| <= |x|: bounded before the truncation
            if cx.kind(0) == "float":  # cumsum(x, dtype=torch.int64) scans x.long()
                from .pointwise import _truncate

                x = _truncate(cx, x)
        if sy.as_int(shape[dim]) == 1:
            return x
        return cx.emit(ScanOp, input=x, dim=_i64(dim), fn=ir.StringAttr.get(fn))

    lower.__name__ = f"cum{fn}"
    return lower


cumsum = _scan("sum")
cumprod = _scan("prod")
