"""--novella-macro-gen: replaces each tiled op by a `novella.macro`.

The macro keeps the op's operands and result (so the function stays SSA). Its
declared fields take the op's decisions (`novella.grid`, `novella.tiles`,
`novella.buffers`, `novella.dram` become `grid`, `tiles`, `buffers`, `dram`; the
schedule starts at one slot each way), and its region holds the tile ops of one grid step (`novella.dma_load`,
`novella.mma`, `novella.vop`, `novella.dma_store`), with addresses and
sizes as affine maps over (grid dims)[symbols] and `when` integer sets for
steps that only some grid points run (first/last tile of a loop)."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.fields import macro_fields
from ..kernels import Buffer, MacroBuilder, TensorView, Tiling
from ..optable import get_kernel
from .common import (
    PassError,
    body_ops,
    check_symbols,
    current,
    from_attr,
    functions,
    ir_memo,
    remember,
    require_stage,
)


def tile_attr(value, n_dims: int, n_syms: int) -> ir.Attribute:
    """A tile-op field: int, float, str, affine expr, or list of exprs (their min)."""
    if type(value) is int:
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, ir.AffineExpr):
        value = [value]
    if isinstance(value, list) and value and isinstance(value[0], (ir.AffineExpr, int)):
        exprs = [sy.const(v) if isinstance(v, int) else v for v in value]
        if len(exprs) == 1:
            c = sy.as_int(exprs[0])
            if c is not None:
                return tile_attr(c, n_dims, n_syms)
        return ir.AffineMapAttr.get(ir.AffineMap.get(n_dims, n_syms, exprs))
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, float):
        return ir.FloatAttr.get_f32(value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    raise TypeError(f"bad tile op field {value!r}")


def when_attr(conds, n_dims: int, n_syms: int) -> ir.Attribute:
    """[("eq"|"ge", expr), ...] -> affine_set (expr == 0 / expr >= 0)."""
    exprs = [e for _, e in conds]
    eq = [kind == "eq" for kind, _ in conds]
    return ir.IntegerSetAttr.get(ir.IntegerSet.get(n_dims, n_syms, exprs, eq))


_TILINGS = ir_memo()  # (tiles, buffers attributes) -> their Python values (equal layers, programs)


def tiling_of(op) -> Tiling:
    """The op's tiling (a fresh copy: callers may change it)."""
    grid, *attrs = _TILED[op.operation.name == "novella.macro"]
    grid = sy.map_results(op.attributes[grid])
    attrs = op.attributes[attrs[0]], op.attributes[attrs[1]]
    tiles, bufs = remember(_TILINGS, attrs, _tiling_values, *attrs)
    return Tiling(dict(tiles), grid, [Buffer(*b) for b in bufs])


_TILED = {  # (grid, tiles, buffers) of a tiled op (by --novella-tile), of a macro (its declared fields)
    False: ("novella.grid", "novella.tiles", "novella.buffers"),
    True: ("grid", "tiles", "buffers"),
}


def _tiling_values(tiles, buffers) -> tuple[dict, list]:
    return from_attr(tiles), [(k, *v) for k, v in from_attr(buffers).items()]


def run(module_op, options, config) -> None:
    n_syms = len(check_symbols(module_op))
    require_stage(module_op, "novella-macro-gen", "novella.tiles", "novella-tile")
    for fn in functions(module_op):
        for op in body_ops(fn):
            if "novella.tiles" in op.attributes:
                _expand(op, n_syms)


def _expand(op, n_syms: int) -> None:
    tiling = tiling_of(op)
    n_dims = len(tiling.grid)
    builder = MacroBuilder(n_dims, n_syms)
    try:
        get_kernel(op.operation.name).macro(op, TensorView(op), tiling, builder)
    except (ValueError, KeyError) as e:
        raise PassError(op, f"macro generation failed: {e}") from None
    with op.location, ir.InsertionPoint(op):
        macro = ir.Operation.create(
            "novella.macro",
            results=[op.results[0].type],
            attributes=macro_fields(op.operation.name, *(op.attributes[k] for k in _TILED[False]), _dram(op)),
            regions=1,
        )
        block = macro.regions[0].blocks.append()
        with ir.InsertionPoint(block):
            for name, fields in builder.ops:
                reads = name in ("novella.dma_load", "novella.dma_gather")
                operands = [op.operands[fields["tensor"]]] if reads else []
                if name == "novella.dma_store":
                    fields = {k: v for k, v in fields.items() if k != "tensor"}
                ir.Operation.create(name, operands=operands, attributes=_fields(fields, n_dims, n_syms))
    op.results[0].replace_all_uses_with(macro.results[0])
    op.operation.erase()


def _dram(op) -> ir.Attribute:
    if "novella.dram" not in op.attributes:
        raise PassError(op, "has no 'novella.dram': --novella-macro-gen expects the output of --novella-allocate")
    return op.attributes["novella.dram"]


_FIELD_ATTRS = ir_memo()  # (is `when`, the value's type, the value, n_dims, n_syms) -> attribute


def _fields(fields: dict, n_dims: int, n_syms: int) -> dict:
    """The op's attributes; an op with a `lane` field reads its lane's field as symbol n_syms of `when`
    (`kernels/flash_decode.Lanes`)."""
    out, memo = {}, current(_FIELD_ATTRS)
    when_syms = n_syms + ("lane" in fields)
    for k, v in fields.items():
        if v is None:
            continue
        if type(v) is float:  # not a key: -0.0 == 0.0
            out[k] = tile_attr(v, n_dims, n_syms)
            continue
        ns = when_syms if k == "when" else n_syms
        key = (k == "when", type(v), tuple(v) if type(v) is list else v, n_dims, ns)
        attr = memo.get(key)
        if attr is None:
            attr = memo[key] = when_attr(v, n_dims, ns) if k == "when" else tile_attr(v, n_dims, ns)
        out[k] = attr
    return out
