"""--novella-tile: picks tile sizes within each op's SRAM budget.

Adds `novella.tiles` (sizes), `novella.grid` (loop extents as an affine map
of the symbols: the tile count along a `?` dim is a ceildiv, the last tile
may be partial) and `novella.buffers` (name -> [mem, offset, size])."""

from __future__ import annotations

from .. import symbolic as sy
from ..errors import TileFitError
from ..kernels import TensorView, get_kernel
from ..target import Target
from .common import PassError, body_ops, from_attr, functions, n_symbols, set_attr

OPTIONS = {"tile-m": (int, 0, "row tile size for every op (0: chosen per op from the SRAM budget)")}


def run(module_op, options, config) -> None:
    n = n_symbols(module_op)
    hardware = Target.from_config(config)
    for fn in functions(module_op):
        for op in body_ops(fn):
            if "novella.sram_budget" not in op.attributes:
                continue
            k = get_kernel(op.operation.name)
            target = hardware.with_budget(from_attr(op.attributes["novella.sram_budget"]))
            opts = {k2: v for k2, v in options.items() if v}
            try:
                tiling = k.tile(op, TensorView(op), target, opts)
            except (TileFitError, ValueError) as e:
                raise PassError(op, str(e)) from None
            set_attr(op, "novella.tiles", tiling.tiles)
            set_attr(op, "novella.grid", sy.make_map(tiling.grid, n))
            set_attr(op, "novella.buffers", {b.name: [b.mem, b.offset, b.size] for b in tiling.buffers})
