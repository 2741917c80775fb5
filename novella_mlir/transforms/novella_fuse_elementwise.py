"""--novella-fuse-elementwise: merges chains of pointwise ops into one `novella.generic` whose body holds
the whole chain, so the intermediates stay in the scratchpad (no STORE and re-LOAD through DRAM, one
kernel's fixed latency instead of one per op).

A producer is merged into its consumer when both are pointwise (`kernels/generic_fusion.pointwise`), every
use of the producer's result is an operand of that consumer (read over the same iteration space, or
broadcast: a row's value read by every column), the merged op reads at most GENERIC_INPUTS tensors, and the
cost model predicts the merged op cheaper than the two alone (`generic_fusion.predicted`, at the planned
length). Ops are visited in order, each consumer merging its producers until none qualifies, so a chain
(SwiGLU's `silu(gate) * up`, RoPE's `q * cos + rotate_half(q) * sin`, RMSNorm's `x * rsqrt(ms + eps) * w`)
becomes one op. Then an RMSNorm (the row mean of `x * x` read only by a tail computing
`x * rsqrt(mean + eps) * w`) becomes one `novella.rms_norm` (`kernels/norm_fusion.py`): its row is loaded
once and every step runs on the tile in SRAM. It runs before --novella-allocate: DRAM is placed for the
merged graph. Last, RoPE's `rotate_half` (two slices, a negation and a concat) read by a generic becomes
that generic reading its source with the halves swapped (`kernels/rope_fusion.py`)."""

from __future__ import annotations

from torch_mlir import ir

from ..kernels import generic_fusion as gf
from ..kernels import norm_fusion, rope_fusion
from ..machine.target import Target
from .common import PassError, body_ops, check_symbols, functions, require_stage

OPTIONS = {"fuse-elementwise": (int, 1, "merge pointwise chains into one novella.generic when it pays", (0, 1))}


def run(module_op, options, config) -> None:
    check_symbols(module_op)
    require_stage(module_op, "novella-fuse-elementwise", None, "novella-legalize")
    if not options.get("fuse-elementwise", 1):
        return
    target = Target.from_config(config)
    for fn in functions(module_op):
        placed = next((op for op in body_ops(fn) if "novella.dram" in op.attributes), None)
        if placed is not None:
            raise PassError(placed, "has DRAM placed: --novella-fuse-elementwise runs before --novella-allocate")
        for op in body_ops(fn):
            while gf.pointwise(op) and not _annotated(op):
                fused = _merge_one(target, op)
                if fused is None:
                    break
                op = fused
        for op in [o for o in body_ops(fn) if o.operation.name == "novella.reduce"]:
            norm_fusion.form(op, target)
        for op in [o for o in body_ops(fn) if o.operation.name == "novella.generic"]:
            rope_fusion.form(op, target)


def _annotated(op) -> bool:
    return any((a if isinstance(a, str) else a.name).startswith("novella.") for a in op.attributes)


def _producers(op) -> list:
    """The pointwise producers of `op` whose every use is by `op`, in operand order."""
    out = []
    for v in op.operands:
        p = v.owner
        if not isinstance(p, ir.OpView) or p in out or not gf.pointwise(p) or _annotated(p):
            continue
        if all(u.owner == op.operation for u in v.uses):
            out.append(p)
    return out


def _merge_one(target, op):
    """Merges the first producer of `op` that pays into it: the merged op, or None."""
    for p in _producers(op):
        made: list = []
        c, q = gf.as_generic(op, made), gf.as_generic(p, made)
        fused = gf.fuse(c, q, p.results[0], made)
        if fused is not None and gf.predicted(target, fused) < gf.predicted(target, c) + gf.predicted(target, q):
            op.results[0].replace_all_uses_with(fused.result)
            _keep(made, fused, [op, p])
            return fused
        gf.erase(made)
    return None


def _keep(made: list, fused, originals: list) -> None:
    """Erases the temporaries (`made` but `fused` and the reshapes it reads) and the merged originals."""
    reshapes = [o for o in made[:-1] if o.name == "novella.reshape"]
    for o in reversed(made[:-1]):
        if o.name != "novella.reshape":
            o.operation.erase()
    for o in originals:
        o.operation.erase()
    for o in reversed(reshapes):
        if not list(o.results[0].uses):
            o.operation.erase()
