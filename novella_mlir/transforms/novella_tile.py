"""--novella-tile: picks tile sizes within each op's SRAM budget.

Adds `novella.tiles` (sizes), `novella.grid` (loop extents as an affine map
of the symbols: the tile count along a `?` dim is a ceildiv, the last tile
may be partial) and `novella.buffers` (name -> [mem, offset, size], plus the
slot count 2 of a double-buffered one: slot 1 is at offset + size)."""

from __future__ import annotations

import dataclasses

from .. import symbolic as sy
from ..artifact.limits import MAX_SLOTS
from ..errors import TileFitError
from ..kernels import TensorView
from ..machine.target import MAX_ROWS, Target
from ..optable import get_kernel
from .common import PassError, body_ops, check_symbols, from_attr, functions, require_stage, set_attr

OPTIONS = {
    "tile-m": (int, 0, "row tile size for every op (0: chosen per op from the SRAM budget)", (0, MAX_ROWS)),
    "slots": (
        int,
        2,
        "slots of a streamed buffer (2: double buffering, 1: single, 3 or more: a deeper ring "
        "for every streamed buffer)",
        (1, MAX_SLOTS),
    ),
}


def run(module_op, options, config) -> None:
    n = len(check_symbols(module_op))
    require_stage(module_op, "novella-tile", "novella.sram_budget", "novella-allocate")
    hardware = Target.from_config(config)
    for fn in functions(module_op):
        for op in body_ops(fn):
            if "novella.sram_budget" not in op.attributes:
                continue
            k = get_kernel(op.operation.name)
            target = hardware.with_budget(from_attr(op.attributes["novella.sram_budget"]))
            target = dataclasses.replace(target, buffer_slots=options.get("slots") or 2)
            opts = {k2: v for k2, v in options.items() if v and k2 != "slots"}
            try:
                tiling = k.tile(op, TensorView(op), target, opts)
            except (TileFitError, ValueError) as e:
                raise PassError(op, str(e)) from None
            set_attr(op, "novella.tiles", tiling.tiles)
            set_attr(op, "novella.grid", sy.make_map(tiling.grid, n))
            set_attr(op, "novella.buffers", {b.name: _buffer(b) for b in tiling.buffers})


def _buffer(b) -> list:
    """[mem, offset, size], and the slot count of a ping-pong buffer: [mem, offset, size, 2] (and 1 after it
    when the kernel alternates the slots itself: `Buffer.alternate`)."""
    return [b.mem, b.offset, b.size] + ([b.slots] if b.slots > 1 else []) + ([1] if b.alternate else [])
