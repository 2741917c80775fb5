"""Gated-activation fusion (--novella-fuse `fuse-gated`): SwiGLU's `silu(gate) * up`, a `novella.generic`
whose one operand is a linear's result read nowhere else, becomes that linear's epilogue: a
`novella.fused_linear` with act "swiglu" and the gate as its residual operand, which loads each output
block's gate tile and multiplies the block by its silu on the vector unit, beside the MATMULs (the
generic kernel's DRAM round trip of both operands and its result are gone). What the generic computes is
read from its body at a few points (`norm_fusion.evaluate`), not from its op order. The cost model decides:
the fusion is made when the linear with the epilogue is predicted to cost less than alone plus the
generic kernel, at the length the tiles are planned for."""

from __future__ import annotations

import dataclasses
import math

from torch_mlir import ir

from ..dialects.novella import GATED, FusedLinearOp, linear_epilogue
from ..dialects.verify import norm_on_input
from .generic_fusion import predicted
from .linear import LINEAR_OPS, _plan_choice
from .linear_cost import Epilogue
from .norm_fusion import evaluate

_POINTS = ((0.7, 1.3), (-2.0, 0.5), (3.5, -1.5), (-0.25, 4.0))


def _swiglu(op) -> int | None:
    """The index of the gate operand when generic `op` computes silu(gate) * up elementwise (both
    operands and the result of one type, read at the identity), else None."""
    if op.operation.name != "novella.generic" or len(op.operands) != 2:
        return None
    t = op.results[0].type
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    if any(v.type != t for v in op.operands) or any(m != ir.AffineMap.get_identity(m.n_dims) for m in maps):
        return None
    body = op.regions[0].blocks[0]
    for gate in (0, 1):
        ok = True
        for g, u in _POINTS:
            y = evaluate(body, [g, u] if gate == 0 else [u, g])
            ok = ok and y is not None and abs(y - g / (1 + math.exp(-g)) * u) <= 1e-6 * max(abs(y), 1.0)
        if ok:
            return gate
    return None


def _linear(value):
    """The linear (act none, no residual, no norm but a prologue's) producing `value`, read only once."""
    op = value.owner
    if not isinstance(op, ir.OpView) or op.operation.name not in LINEAR_OPS or len(list(value.uses)) != 1:
        return None
    residual, norm = linear_epilogue(op)
    if residual or (norm and not norm_on_input(op.attributes)) or ir.StringAttr(op.attributes["act"]).value != "none":
        return None
    return op


def _gain(target, up, op) -> float:
    """Predicted cycles saved: the generic kernel's, less what the epilogue adds to the linear."""
    epi = Epilogue.of(up)
    fused, alone = (_plan_choice(target, up, dataclasses.replace(epi, act=GATED, residual=True)),
                    _plan_choice(target, up, epi))  # fmt: skip
    if fused[0] is None or alone[0] is None:
        return float("-inf")
    return predicted(target, op) - (fused[0][0] - alone[0][0])


def fuse_gated(target, op, safe) -> bool:
    """`generic(gate, up_linear(x))` computing silu(gate) * up -> `fused_linear(x, residual=gate,
    act="swiglu")` in the generic's place, with its DRAM offset, when `_gain` is positive and
    `safe(linear)` (the caller's DRAM check: x is still where the linear read it)."""
    gate_at = _swiglu(op)
    up = _linear(op.operands[1 - gate_at]) if gate_at is not None else None
    if up is None or _gain(target, up, op) <= 0 or not safe(up):
        return False
    x, w, bias, *norm = list(up.operands)
    fields = {"norm_weight": norm[0], "norm_bias": norm[1] if len(norm) > 1 else None} if norm else {}
    fields |= {"norm_eps": up.attributes["norm_eps"], "norm_input": up.attributes["norm_input"]} if norm else {}
    with ir.InsertionPoint(op), op.location:
        new = FusedLinearOp(x, w, bias, op.results[0].type, act=ir.StringAttr.get(GATED),
                            residual=op.operands[gate_at], loc=up.location, **fields)  # fmt: skip
    for a in up.attributes:
        name = a.name if hasattr(a, "name") else a
        if name.startswith("novella."):
            new.operation.attributes[name] = up.attributes[name]
    new.operation.attributes["novella.dram"] = op.attributes["novella.dram"]
    op.results[0].replace_all_uses_with(new.result)
    op.operation.erase()
    up.operation.erase()
    return True
