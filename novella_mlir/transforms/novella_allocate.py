"""--novella-allocate: DRAM placement and SRAM budgets.

Every tensor gets a DRAM offset (in fp32 elements) that is an affine
expression of the symbols: `novella.dram` on the defining op, and in the
argument attributes of the function. Weights come first (static offsets),
then inputs, then intermediates and results (a paged KV cache tensor gets a virtual offset instead,
`PAGED_VBASE + slot * PAGED_VSPAN`, which the runtime maps through the block table); a buffer whose last reader has
run is reused by a later tensor whose size it covers at every length in
bounds. `novella.reshape` aliases its input. Each op with a kernel also
gets `novella.sram_budget`, the SRAM it may tile into.

Option `fixed-offsets=1` sizes every buffer at the symbols' upper bounds, so every offset is a
constant: the addresses of a program then do not move with the length, and a decode step
instantiated once is patched in place per step (`runtime/step.py`), as a CUDA graph is replayed."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..kernels.kv_cache import PAGED_VBASE, PAGED_VSPAN, paged_info
from ..machine.target import DRAM_LIMIT, Target
from ..symbolic import box as sb
from .common import PassError, body_ops, check_symbols, functions, is_tensor_op, require_stage, set_attr

OPTIONS = {"fixed-offsets": (int, 0, "1: buffers sized at the upper bounds, every DRAM offset a constant", (0, 1))}


class _Arena:
    """Bump allocator with first-fit reuse of freed blocks that dominate the request."""

    def __init__(self, symbols, fixed: bool = False, align: int = 1):
        self.symbols, self.fixed, self.align = symbols, fixed, align
        self.box = sy.symbol_box(symbols, lower_only=True, lo=1)
        self.top = sy.const(0)
        self.free: list[tuple[ir.AffineExpr, ir.AffineExpr]] = []

    def _covers(self, big, small) -> bool:
        """big >= small, proved for every combination of symbol values >= 1 (`symbolic.provably_ge`).

        Independent of the compiled bounds, so the layout does not change with them."""
        return sy.provably_ge(big, small, self.box)

    def _block(self, size: ir.AffineExpr) -> ir.AffineExpr:
        size = sy.ceildiv(size, self.align) * self.align
        return sy.const(sb.value_range(size, self.symbols)[1]) if self.fixed else size

    def alloc(self, size: ir.AffineExpr) -> ir.AffineExpr:
        size = self._block(size)
        for i, (off, blk) in enumerate(self.free):
            if self._covers(blk, size):
                del self.free[i]
                return off
        off = self.top
        self.top = self.top + size
        return off

    def release(self, off, size) -> None:
        self.free.append((off, self._block(size)))


def run(module_op, options, config) -> None:
    symbols = check_symbols(module_op)
    require_stage(module_op, "novella-allocate", None, "novella-legalize")
    n = len(symbols)
    target = Target.from_config(config)
    budget = {"spad": target.spad_elems, "acc": target.acc_elems}
    for fn in functions(module_op):
        _place(fn, symbols, n, budget, bool(options.get("fixed-offsets", 0)), target.dram_align)
        _check_addressable(fn, symbols)


def _check_addressable(fn, symbols) -> None:
    size = sb.value_range(sy.map_results(fn.attributes["novella.dram_size"])[0], symbols)[1]
    if size > DRAM_LIMIT:
        at = ", ".join(f"{s.name}={s.hi}" for s in symbols) or "its static shapes"
        raise PassError(
            fn,
            f"needs {size} elements of DRAM at {at}; the ISA addresses {DRAM_LIMIT} (32-bit dram_base): "
            "lower the upper bound or the model's dims",
        )


def _size(v) -> ir.AffineExpr:
    return sy.numel(sy.shape_of(ir.RankedTensorType(v.type)))


def _place(fn, symbols, n, budget, fixed: bool, align: int) -> None:
    ops = body_ops(fn)
    block = fn.regions[0].blocks[0]
    arena = _Arena(symbols, fixed, align)
    offsets: dict = {}
    for op in ops:
        if op.operation.name == "novella.weight":
            offsets[op.results[0]] = arena.alloc(_size(op.results[0]))
            set_attr(op, "novella.dram", sy.make_map([offsets[op.results[0]]], n))
    paged = _paged(ops)
    for arg in block.arguments:
        offsets[arg] = paged[arg] if arg in paged else arena.alloc(_size(arg))
    last_use = _last_uses(ops)
    outputs = set(list(ops[-1].operands))
    for i, op in enumerate(ops):
        if not is_tensor_op(op) or op.operation.name == "func.return":
            continue
        res = op.results[0]
        if op.operation.name == "novella.reshape":
            offsets[res] = offsets[op.operands[0]]
        elif res in paged:
            offsets[res] = paged[res]
            set_attr(op, "novella.sram_budget", dict(budget))
        else:
            offsets[res] = arena.alloc(_size(res))
            set_attr(op, "novella.sram_budget", dict(budget))
        set_attr(op, "novella.dram", sy.make_map([offsets[res]], n))
        for v in dict.fromkeys(op.operands):  # once per value: cat(x, x) must not free x's block twice
            if last_use.get(v) == i and v not in outputs and v not in paged and _is_activation(v):
                arena.release(offsets[v], _size(v))
    fn.attributes["arg_attrs"] = ir.ArrayAttr.get(
        [ir.DictAttr.get({"novella.dram": sy.make_map([offsets[a]], n)}) for a in block.arguments]
    )
    set_attr(fn, "novella.dram_size", sy.make_map([arena.top], n))


def _paged(ops) -> dict:
    """value -> virtual DRAM offset of every paged KV cache tensor (results and the pasts they extend)."""
    out = {}
    for op in ops:
        info = paged_info(op.results[0]) if len(op.results) == 1 else None
        if info is None:
            continue
        base = sy.const(PAGED_VBASE + info["slot"] * PAGED_VSPAN)
        out[op.results[0]] = base
        if op.operation.name == "novella.kv_append":
            out[op.operands[0]] = base
    return out


def _is_activation(v) -> bool:
    owner = v.owner
    return isinstance(owner, ir.OpView) and owner.operation.name not in ("novella.weight", "novella.reshape")


def _last_uses(ops) -> dict:
    last = {}
    alias = {}
    for i, op in enumerate(ops):
        for v in op.operands:
            root = alias.get(v, v)
            last[root] = i
            last[v] = i
        if op.operation.name == "novella.reshape":
            alias[op.results[0]] = alias.get(op.operands[0], op.operands[0])
    return {v: max(i, last.get(alias.get(v, v), i)) for v, i in last.items()}
