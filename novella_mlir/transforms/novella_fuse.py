"""--novella-fuse: prologue fusions, decided per program at its planned length (after --novella-buckets,
so a shape bucket fuses where its short rows make it pay and the generic program keeps the separate ops).

With `fuse-prenorm=1` (the default), a `novella.layer_norm` or `novella.rms_norm` whose every use is a
linear's input becomes each linear's prologue: a `novella.fused_linear` with `norm_input`
(`kernels/linear_prologue.py`, where the cost model decides), which LOADs the norm's input rows and normalizes them in the scratchpad, so the
normalized rows never go to DRAM (the norm's STORE and the linears' LOADs of its result are gone). The
fused op keeps the replaced linear's `novella.dram` and `novella.sram_budget`. DRAM was placed before
(--novella-allocate) with the norm as the input's last reader, so the fusion is made only when no op up
to the last linear has its result block over the input's at any length (offsets that differ as
expressions may meet at one length: a block placed where x was once the norm had read it).

With `fuse-gated=1` (the default), SwiGLU's `silu(gate) * up`, a `novella.generic` of a linear's result
read nowhere else, becomes that linear's epilogue (`kernels/linear_gate.py`, the cost model decides): a
`novella.fused_linear` with act "swiglu" and the gate as its residual, in the generic's place and with
its DRAM offset, made only when no op from the linear up to the generic writes where its input lives.

With `fuse-mlp=1` (the default), a linear whose one use is another linear's input (act1 between them, the
second's act none or relu, maybe its residual) becomes one `novella.fused_mlp` (`kernels/linear_mlp.py`, the
cost model decides per program): the hidden rows stay in the scratchpad, chunk by chunk, while the output
block accumulates; made only when no op from the first linear up to the second writes where x lives."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..kernels.linear import LINEAR_OPS
from ..kernels.linear_gate import fuse_gated
from ..kernels.linear_mlp import fuse_mlp
from ..kernels.linear_prologue import NORMS, fuse_prenorm
from ..machine.target import Target
from ..symbolic.box import value_range
from .common import body_ops, check_symbols, functions, require_stage

OPTIONS = {
    "fuse-prenorm": (
        int,
        1,
        "fuse a layer_norm or rms_norm feeding only linears into their prologue when it pays",
        (0, 1),
    ),
    "fuse-gated": (int, 1, "fuse SwiGLU's silu(gate) * up into the up linear's epilogue when it pays", (0, 1)),
    "fuse-mlp": (int, 1, "fuse linear -> act -> linear into one kernel (hidden rows on chip) when it pays", (0, 1)),
}


def run(module_op, options, config) -> None:
    check_symbols(module_op)
    require_stage(module_op, "novella-fuse", "novella.sram_budget", "novella-allocate")
    target = Target.from_config(config)
    symbols = sy.read_symbols(module_op)
    for fn in functions(module_op):
        args = _arg_offsets(fn)
        kept = lambda op, users, fn=fn, args=args: _input_kept(body_ops(fn), op, users, args, symbols)  # noqa: E731
        if options.get("fuse-mlp", 1):  # first: a pre-norm's linear that pays as an MLP is taken without it
            _fuse_mlps(fn, target, kept)
        if options.get("fuse-prenorm", 1):
            for op in [op for op in body_ops(fn) if op.operation.name in NORMS]:
                fuse_prenorm(target, op, lambda users, op=op, kept=kept: kept(op, users))
        if options.get("fuse-gated", 1):
            for op in [op for op in body_ops(fn) if op.operation.name == "novella.generic"]:
                fuse_gated(target, op, lambda up, op=op, kept=kept: kept(up, [op]))


def _fuse_mlps(fn, target, kept) -> None:
    """`fuse_mlp` on each linear in turn (a fusion erases two ops: the list is read again after one)."""
    safe = lambda first, second: kept(first, [second])  # noqa: E731
    while any(fuse_mlp(target, op, safe) for op in body_ops(fn) if op.operation.name in LINEAR_OPS):
        pass


def _arg_offsets(fn) -> dict:
    block = fn.regions[0].blocks[0]
    attrs = ir.ArrayAttr(fn.attributes["arg_attrs"])
    return {a: ir.DictAttr(d)["novella.dram"] for a, d in zip(block.arguments, attrs)}


def _offset(value, args) -> ir.Attribute | None:
    """The `novella.dram` offset of `value` (attributes are uniqued: equal offsets compare equal)."""
    if isinstance(value.owner, ir.Block):
        return args.get(value)
    owner = value.owner
    return owner.attributes["novella.dram"] if "novella.dram" in owner.attributes else None


def _input_kept(ops, norm, users, args, symbols) -> bool:
    """No op after `norm` (a norm, or a linear), up to and including the last of `users`, has its result
    where one of `norm`'s operands is (its input, and a norm weight computed at run time, e.g. Gemma's
    1 + w): their DRAM blocks are disjoint over the whole symbol box (offsets that differ as expressions
    may still meet at one length, a block placed where x was once the norm had read it)."""
    reads = [_block(v, args) for v in norm.operands]
    names = [op.operation for op in ops]
    start, end = names.index(norm.operation), max(names.index(u.operation) for u in users)
    written = [_block(op.results[0], args) for op in ops[start + 1 : end + 1] if len(op.results) == 1]
    return reads[0] is not None and all(r is None or _disjoint(r, w, symbols) for r in reads for w in written)


def _block(value, args):
    """(offset, size) expressions of `value`'s DRAM block (elements), or None."""
    at, shape = _offset(value, args), sy.shape_of(value.type) if isinstance(value.type, ir.RankedTensorType) else None
    if at is None or shape is None:
        return None
    return sy.map_results(at)[0], sy.numel(shape)


def _disjoint(a, b, symbols) -> bool:
    """Blocks a and b ((offset, size)) do not overlap at any point of the symbols' box (affine: at its corners)."""
    if b is None:
        return False
    (oa, na), (ob, nb) = a, b
    return value_range(oa + na - ob, symbols)[1] <= 0 or value_range(ob + nb - oa, symbols)[1] <= 0
