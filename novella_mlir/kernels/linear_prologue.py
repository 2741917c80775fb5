"""Prologue fusion (--novella-fuse `fuse-prenorm`): a layer norm or an RMSNorm whose every use is a linear's
input becomes each linear's prologue (`novella.fused_linear` with `norm_input`), so the normalized rows stay in
the scratchpad as the MATMULs' A operand and never go to DRAM: the norm's STORE and the linears' LOADs of
it are gone (the linears LOAD the norm's input instead). The cost model decides: the fusion is made when
the linears with the prologue are predicted to cost less, together, than alone plus the norm's kernel,
at the length the tiles are planned for. An RMSNorm's prologue scales the rows by the norm's weight before
the MATMULs and each output row by its rsqrt(mean(x * x) + eps) in the epilogue (`Epilogue.rms`), so the
MATMULs wait only for two VECs and the row scales are computed on the vector unit beside them."""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.novella import FusedLinearOp, linear_epilogue
from . import TensorView, plan_lengths
from .linear import LINEAR, LINEAR_OPS, _plan_choice
from .linear_cost import Epilogue
from .normalization import LayerNorm, RmsNorm
from .support import replace_fused

# The norms a linear takes as its prologue: their kernels (the cost of leaving them) and whether RMS.
NORMS = {"novella.layer_norm": (LayerNorm(), False), "novella.rms_norm": (RmsNorm(), True)}


def _consumers(op) -> list | None:
    """The linears (without a norm of their own) that take `op`'s result as their input, if they are all
    its uses, else None."""
    users = []
    for use in op.results[0].uses:
        user = use.owner
        if user.name not in LINEAR_OPS or use.operand_number != 0 or linear_epilogue(user)[1]:
            return None
        users.append(user)
    return users or None


def _gain(target, op, users, spread: int = 4) -> float:
    """Predicted cycles saved at the planned length: the norm's, less what the prologue adds to each linear
    (-inf when some linear has no fitting tiling with it), or nothing (<= 0) when, with the tiles planned
    there, the relative gains at the planned rows and at rows / `spread` sum to a loss (a program runs at
    every length up to the one it is planned for: `LayerNorm.robust`'s rule)."""
    kernel, rms = NORMS[op.operation.name]
    tv = TensorView(users[0])
    rows, c = sy.evaluate(tv.rows(0), plan_lengths(users[0])), tv.cols(0)
    picks = []
    for user in users:
        epi = Epilogue.of(user)
        pair = [(e, _plan_choice(target, user, e)[1]) for e in (dataclasses.replace(epi, pre_norm=True, rms=rms), epi)]
        if any(cand is None for _, cand in pair):
            return float("-inf")
        picks.append((TensorView(user).static(1, 0), pair))
    norm = kernel.best(target, rows, c)[1]
    gains = []
    for r in (rows, max(rows // spread, 1)):
        extra = sum(
            LINEAR.cost(target, (r, c, n, e), cand) * sign
            for n, pair in picks
            for (e, cand), sign in zip(pair, (1, -1))
        )
        alone = kernel.cost(target, (r, c), norm) + sum(
            LINEAR.cost(target, (r, c, n, pair[1][0]), pair[1][1]) for n, pair in picks
        )
        gains.append((kernel.cost(target, (r, c), norm) - extra, alone))
    return gains[0][0] if sum(g / max(a, 1.0) for g, a in gains) > 0 else min(gains[0][0], 0.0)


def fuse_prenorm(target, op, safe) -> bool:
    """`linear_i(norm(x))` for every use of a `novella.layer_norm` or `novella.rms_norm` ->
    `fused_linear_i(x)` with the norm in the prologue (an RMSNorm's without norm_bias), when `_gain` is
    positive and `safe(linears)` (the caller's DRAM check); each keeps its linear's discardable
    annotations (DRAM offset, SRAM budget)."""
    users = _consumers(op)
    if users is None or _gain(target, op, users) <= 0 or not safe(users):
        return False
    x, nw, nb = (*op.operands, None)[:3]
    eps = ir.FloatAttr.get_f32(op.attributes["eps"].value)
    for user in users:
        _, w, bias, *rest = list(user.operands)
        with ir.InsertionPoint(user), user.location:
            new = FusedLinearOp(x, w, bias, user.results[0].type, act=user.attributes["act"],
                                residual=rest[0] if rest else None, norm_weight=nw, norm_bias=nb, norm_eps=eps,
                                norm_input=ir.BoolAttr.get(True), loc=user.location)  # fmt: skip
        replace_fused(new, user)
    op.operation.erase()
    return True
