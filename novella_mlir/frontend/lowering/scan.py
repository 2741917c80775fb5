"""Lowerings of `cumsum` and `cumprod`: one `novella.scan` along the dim (which may be the dynamic one).

Integers and bools are held as f32 (`frontend/dtypes.py`), exact while every partial result stays
within +-2**24. The NPU adds (multiplies) contiguous runs of the input in an order of its own, so an
integer result is exact when the sum of |x| (product of the |x|) over the longest scan is within that
range. The frontend bounds |x| from what it knows of the values: 1 for a bool tensor, a compare's
mask or a sign, the largest |x| of a constant, and 2**24 (what the NPU holds) for anything else, e.g. an integer
model input; a scan whose bound times the length's upper bound exceeds 2**24 is refused, naming the op,
its line and the length, rather than rounded silently. A float scan is fp32 arithmetic, as eager's."""

from __future__ import annotations

import math

import numpy as np
from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import COMPARE_FNS, ScanOp
from ..dtypes import EXACT_INT

_TRANSPARENT = ("novella.reshape", "novella.slice", "novella.transpose", "novella.broadcast", "novella.flip")
_MASK_FNS = {"novella.compare": COMPARE_FNS, "novella.scalar": COMPARE_FNS, "novella.math": ("not", "sign")}


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))


def value_bound(cx, v: ir.Value, kind: str) -> float:
    """An upper bound of |x| over the elements of the novella value `v` (torch element kind `kind`)."""
    if kind == "bool":
        return 1.0
    while True:
        owner = v.owner
        if not isinstance(owner, ir.OpView):
            return float(EXACT_INT)
        name = owner.operation.name
        if name in _MASK_FNS and ir.StringAttr(owner.attributes["fn"]).value in _MASK_FNS[name]:
            return 1.0
        if name == "novella.weight":
            data = cx.weight_data(v)
            return float(np.abs(data).max()) if data is not None and data.size else float(EXACT_INT)
        if name not in _TRANSPARENT:
            return float(EXACT_INT)
        v = owner.operands[0]


def _check_exact(cx, x, fn: str, dim: int, n) -> None:
    """Refuses an integer scan that fp32 may not hold exactly at the longest length the bounds allow."""
    hi = sy.value_range(n, cx.symbols)[1]
    bound = value_bound(cx, x, cx.kind(0))
    exact = bound * hi <= EXACT_INT if fn == "sum" else bound <= 1 or hi * math.log2(bound) <= math.log2(EXACT_INT)
    if exact:
        return
    what = f"|x| <= {bound:.0f}" if bound < EXACT_INT else "values bounded only by 2**24 (e.g. a model input)"
    op = "cumsum" if fn == "sum" else "cumprod"
    raise cx.error(
        f"{op} of an integer tensor along dim {dim}, whose length can reach {hi}, with {what}: a running "
        f"{'sum' if fn == 'sum' else 'product'} can leave +-2**24, where the NPU's fp32 no longer holds "
        "integers exactly. Lower max_len, scan a bool or 0/1 mask (`x != 0`, bounded by 1), or convert to "
        "float first (`x.float()`) if rounded results are acceptable."
    )


def _scan(fn: str):
    def lower(cx):
        x = cx.operand(0)
        shape = cx.shape(x)
        if not shape:
            return x
        dim = cx.const(1) % len(shape)
        if cx.result_kind() in ("int", "bool"):
            _check_exact(cx, x, fn, dim, shape[dim])
        if sy.as_int(shape[dim]) == 1:
            return x
        return cx.emit(ScanOp, input=x, dim=_i64(dim), fn=ir.StringAttr.get(fn))

    lower.__name__ = f"cum{fn}"
    return lower


cumsum = _scan("sum")
cumprod = _scan("prod")
