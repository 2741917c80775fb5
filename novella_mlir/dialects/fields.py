"""The declared fields of the lower IR (`novella_lower.py`): the field tables of the tile and
instruction ops, generated from the ISA's field table (`simulator.isa.LAYOUT`), and the builders
and readers of the macro's fields that the passes share.

An instruction template (`novella.inst`) carries the ISA fields of its opcode but the token bits
(the header, which the JIT's token rule sets), plus `tensor` (the operand it addresses), `when`
(the grid points it runs at) and `slot` (its ping-pong strides, from `--novella-schedule`). A tile
op carries the same ISA fields but its SRAM addresses and memories, which it names by buffer
(`ROLES`: role attribute -> the address field, and the memory field or fixed memory) plus a
relative `<role>_offset`, and its DRAM base as `dram_offset`."""

from __future__ import annotations

from torch_mlir import ir

from simulator import isa

from ..artifact.limits import MAX_SLOTS

MEMS = {"spad": isa.Mem.SPAD, "acc": isa.Mem.ACC}
SCHEDULE = ("load_slots", "store_slots")
# The optional `schedule` entry of `--novella-schedule`: per template, how early a LOAD or GATHER may
# start before the barrier that precedes its macro (0: after it; 1: after the previous macro's compute;
# 2: after the barrier before the previous macro), while it is among the macro's leading loads.
EARLY = "early"
# Buffers that hold a whole tensor kept in the scratchpad across macros (`--novella-resident`), by role:
# the op's input x (an attention's query), its residual operand, an attention's key and value, a kv_append's
# new rows, its result. They stay at their offsets (`--novella-schedule` moves no resident buffer); every op
# from the producer to the last reader tiles below them.
RESIDENT = {"x": "rx", "res": "rres", "k": "rk", "v": "rv", "new": "rnew", "out": "rout"}

# opcode -> {buffer role of the tile op: (its offset attribute, address field, memory field or memory)}
ROLES = {
    "LOAD": {"buffer": ("buf_offset", "sram_addr", "mem")},
    "STORE": {"buffer": ("buf_offset", "sram_addr", "mem")},
    "GATHER": {"buffer": ("buf_offset", "sram_addr", "mem"), "idx": ("idx_offset", "idx_addr", "idx_mem")},
    "MATMUL": {
        "acc": ("acc_offset", "acc_addr", "acc"),
        "lhs": ("lhs_offset", "a_addr", "spad"),
        "rhs": ("rhs_offset", "b_addr", "spad"),
        "max": ("max_offset", "max_addr", "spad"),  # the row maxima of C (`rowmax`)
    },
    "VEC": {r: (f"{r}_offset", f"{r}_addr", f"{r}_mem") for r in ("dst", "a", "b", "sum")},  # sum: `rowsum`'s
}
TILE_OPCODES = {
    "novella.dma_load": "LOAD",
    "novella.dma_store": "STORE",
    "novella.dma_gather": "GATHER",
    "novella.mma": "MATMUL",
    "novella.vop": "VEC",
}
_TOKENS = frozenset(f.name for f in isa.HEADER)
INST_FIELDS = {op.name: {f.name: f for f in fs if f.name not in _TOKENS} for op, fs in isa.LAYOUT.items()}
INST_EXTRA = frozenset(("opcode", "tensor", "when", "lane", "slot"))
_ENUMS = {"fn": isa.VecFn, "mode": isa.VecMode}
_GATHER_ROWS = frozenset(("row_start", "row_step"))  # a gather's rows come from its index buffer


def _tile_fields(opcode: str) -> frozenset[str]:
    """The ISA fields a tile op of `opcode` carries itself (all but addresses, memories and DRAM base)."""
    placed = {f for _, addr, mem in ROLES.get(opcode, {}).values() for f in (addr, mem)} | {"dram_base"}
    extra = _GATHER_ROWS if opcode == "GATHER" else frozenset()
    return frozenset(INST_FIELDS[opcode]) - placed | extra


TILE_FIELDS = {name: _tile_fields(op) for name, op in TILE_OPCODES.items()}


class FieldError(ValueError):
    """A field of a lower-level op that is absent, of the wrong kind, or out of range."""


def i64(v: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))


def unscheduled() -> ir.DictAttr:
    """The schedule of a macro before `--novella-schedule`: one slot each way (no overlap)."""
    return ir.DictAttr.get({k: i64(1) for k in SCHEDULE})


def macro_fields(kernel: str, grid, tiles, buffers, dram) -> dict:
    """The declared fields of a new `novella.macro`, the schedule not yet decided."""
    return {
        "kernel": ir.StringAttr.get(kernel),
        "grid": grid,
        "tiles": tiles,
        "buffers": buffers,
        "dram": dram,
        "schedule": unscheduled(),
    }


_SHAPE = '["spad"|"acc", offset, size(, slots(, alternate))]'


def buffer_entries(buffers: ir.DictAttr) -> dict[str, tuple]:
    """{name: (mem, offset, size, slots)} of a macro's `buffers` (or a tiled op's `novella.buffers`): slots
    2 to MAX_SLOTS if given; a fifth element 1 marks two slots the kernel alternates itself (`Buffer.alternate`)."""
    out = {}
    for i in range(len(buffers)):
        entry = buffers[i]
        v = [a.value for a in ir.ArrayAttr(entry.attr)]
        if len(v) not in (3, 4, 5) or v[0] not in MEMS or not all(isinstance(x, int) for x in v[1:]):
            raise FieldError(f"buffer '{entry.name}' must be {_SHAPE}, got {entry.attr}")
        mem, offset, size, *slots = v
        if offset < 0 or size < 1 or not (slots in ([], [2, 1]) or (len(slots) == 1 and 2 <= slots[0] <= MAX_SLOTS)):
            raise FieldError(
                f"buffer '{entry.name}' needs offset >= 0, size >= 1, slots 2..{MAX_SLOTS} and alternate 1 (with "
                f"slots 2) if given, got {v}"
            )
        out[entry.name] = (mem, offset, size, slots[0] if slots else 1)
    return out


MACRO_FIELDS = ("kernel", "grid", "tiles", "buffers", "dram", "schedule")


def check_macro(op) -> None:
    """The declared fields of a `novella.macro` are well formed (raises FieldError)."""
    missing = [k for k in MACRO_FIELDS if k not in op.attributes]
    if missing:
        raise FieldError(f"needs its declared field(s) {', '.join(missing)} (written by --novella-macro-gen)")
    grid = ir.AffineMapAttr(op.attributes["grid"]).value
    dram = ir.AffineMapAttr(op.attributes["dram"]).value
    if grid.n_dims != 0 or not grid.results:
        raise FieldError(f"grid must map the symbols to one or more extents, got {grid}")
    if dram.n_dims != 0 or len(dram.results) != 1:
        raise FieldError(f"dram must map the symbols to one offset, got {dram}")
    tiles = ir.DictAttr(op.attributes["tiles"])
    for i in range(len(tiles)):
        if not isinstance(tiles[i].attr, ir.IntegerAttr) or tiles[i].attr.value < 0:
            raise FieldError(f"tile '{tiles[i].name}' must be an integer >= 0, got {tiles[i].attr}")
    most = max([1] + [e[3] for e in buffer_entries(ir.DictAttr(op.attributes["buffers"])).values()])
    schedule = ir.DictAttr(op.attributes["schedule"])
    got = {schedule[i].name: schedule[i].attr for i in range(len(schedule))}
    early = got.pop(EARLY, None)
    if sorted(got) != sorted(SCHEDULE) or any(
        not isinstance(a, ir.IntegerAttr) or not 1 <= a.value <= most for a in got.values()
    ):
        raise FieldError(
            f"schedule must be {{load_slots = 1..{most}, store_slots = 1..{most}}} (the most slots of a buffer), "
            f"got {schedule}"
        )
    if early is not None:
        _check_early(early, len(op.regions[0].blocks[0].operations))


def _check_early(a, n_insts: int) -> None:
    """`schedule.early`: one tier (0, 1, 2) per instruction template of the macro."""
    tiers = list(ir.ArrayAttr(a)) if isinstance(a, ir.ArrayAttr) else None
    if (
        tiers is None
        or len(tiers) != n_insts
        or any(not isinstance(t, ir.IntegerAttr) or t.value not in (0, 1, 2) for t in tiers)
    ):
        raise FieldError(f"schedule.early must give each of the {n_insts} templates a tier 0, 1 or 2, got {a}")


def check_body(op) -> list[tuple[object, str]]:
    """(op, problem) of each tile op or instruction template in a macro's region whose fields are not
    those its opcode declares; each distinct (name, attributes, grid rank, buffers) is checked once
    per context (layers repeat them)."""
    n_dims = len(ir.AffineMapAttr(op.attributes["grid"]).value.results)
    buffers_attr = op.attributes["buffers"]
    memo = _VERDICTS.current()
    bad = []
    for child in op.regions[0].blocks[0].operations:
        name = child.operation.name
        attrs = tuple(child.attributes.items())
        key = (name, attrs, len(child.operands), n_dims, buffers_attr)
        if key not in memo:
            memo[key] = _problem(name, attrs, len(child.operands), n_dims, buffers_attr)
        if memo[key]:
            bad.append((child, memo[key]))
    return bad


def _problem(name: str, attrs: tuple, n_operands: int, n_dims: int, buffers_attr) -> str | None:
    try:
        if name == "novella.inst":
            _check_inst(attrs, n_operands, n_dims)
        elif name in TILE_OPCODES:
            _check_tile_op(name, attrs, n_operands, n_dims, buffer_entries(ir.DictAttr(buffers_attr)))
        else:
            return f"may not stand in a novella.macro (tile ops and novella.inst only), got {name}"
    except FieldError as e:
        return str(e)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        return f"is malformed: {e}"
    return None


class ContextMemo(dict):
    """Verdicts keyed by attributes, for the current context only (attributes are uniqued per context,
    so a key of another context's attribute must never meet this one's)."""

    context = None

    def current(self) -> ContextMemo:
        ctx = ir.Context.current
        if self.context is not ctx or len(self) > 1 << 16:
            self.clear()
            self.context = ctx
        return self


_VERDICTS = ContextMemo()


def in_macro(op) -> None:
    """A tile op or instruction template stands in a `novella.macro` (whose verifier checks its fields)."""
    parent = op.operation.parent
    if parent is None or parent.name != "novella.macro":
        raise FieldError("must be inside a novella.macro")


def _check_value(name: str, a, n_dims: int) -> None:
    """A field value: an integer, or an affine map over the macro's (grid dims)[symbols] (their min)."""
    if isinstance(a, ir.IntegerAttr):
        return
    if not isinstance(a, ir.AffineMapAttr):
        raise FieldError(f"field '{name}' must be an integer or an affine map, got {a}")
    m = a.value
    if m.n_dims != n_dims or not m.results:
        raise FieldError(f"field '{name}' must map the {n_dims} grid dims to one or more values, got {m}")


def _check_common(name: str, a, n_dims: int) -> None:
    if name == "when":
        if not isinstance(a, ir.IntegerSetAttr):  # (the bindings do not expose an attribute's set)
            raise FieldError(f"'when' must be an integer set over the {n_dims} grid dims, got {a}")
    elif name in _ENUMS:
        if not isinstance(a, ir.StringAttr) or a.value not in _ENUMS[name].__members__:
            raise FieldError(f"'{name}' must name one of {', '.join(_ENUMS[name].__members__)}, got {a}")
    elif name == "imm":
        if not isinstance(a, ir.FloatAttr):
            raise FieldError(f"'imm' must be a float, got {a}")
    else:
        _check_value(name, a, n_dims)


def _check_tile_op(name: str, attrs: tuple, n_operands: int, n_dims: int, buffers: dict) -> None:
    """The fields of a tile op: its ISA fields (`TILE_FIELDS`), buffer roles naming buffers of the
    enclosing macro, their offsets, `when`, and `tensor` for an op that reads a tensor."""
    opcode = TILE_OPCODES[name]
    roles = ROLES[opcode]
    offsets = {off for off, _, _ in roles.values()}
    for k, a in attrs:
        if k in roles:
            if not isinstance(a, ir.StringAttr) or a.value not in buffers:
                raise FieldError(f"'{k}' = {a} is not a buffer of the macro ({', '.join(buffers) or 'none'})")
        elif k == "tensor":
            if not isinstance(a, ir.IntegerAttr) or n_operands != 1:
                raise FieldError("'tensor' must be an integer, with the tensor read as the one operand")
        elif k in offsets or k in TILE_FIELDS[name] or k in ("when", "lane", "dram_offset"):
            _check_common(k, a, n_dims)
        else:
            raise FieldError(f"has no field '{k}' ({opcode} fields: {', '.join(sorted(TILE_FIELDS[name]))})")


def field_range(opcode: str, name: str, value: int) -> str | None:
    """Why constant `value` does not fit ISA field `opcode.name` (None when it fits)."""
    f = INST_FIELDS[opcode].get(name)
    if f is None:
        return f"{opcode} has no field '{name}'"
    if not f.lo <= value <= f.hi:
        return f"{opcode}.{name} = {value} does not fit its {f.bits}-bit field [{f.lo}, {f.hi}]"
    return None


def _check_inst(attrs: tuple, n_operands: int, n_dims: int) -> None:
    """The fields of an instruction template: those of its opcode's ISA layout (constants in range),
    `tensor` with one operand, `when`, and `slot` strides of its address fields."""
    opcode = dict(attrs)["opcode"].value
    if opcode not in INST_FIELDS or opcode == "NOP":
        raise FieldError(f"unknown opcode '{opcode}' (expected one of LOAD, STORE, GATHER, MATMUL, VEC)")
    layout = INST_FIELDS[opcode]
    for k, a in attrs:
        if k == "opcode":
            continue
        if k == "tensor":
            if not isinstance(a, ir.IntegerAttr) or n_operands != 1:
                raise FieldError("'tensor' must be an integer, with the tensor read as the one operand")
        elif k == "slot":
            _check_slot(a, layout)
        elif k not in layout and k not in ("when", "lane"):
            raise FieldError(f"{opcode} has no field '{k}'")
        else:
            _check_common(k, a, n_dims)
            why = field_range(opcode, k, a.value) if type(a) is ir.IntegerAttr else None
            if why:
                raise FieldError(why)


def _check_slot(a, layout) -> None:
    """Address field -> slot stride (two slots), or [stride, slots] (3..MAX_SLOTS); a stride 0 marks a LOAD
    into slots its kernel alternates itself."""
    if not isinstance(a, ir.DictAttr):
        raise FieldError(f"'slot' must map address fields to strides, got {a}")
    for i in range(len(a)):
        k, v = a[i].name, a[i].attr
        if not k.endswith("_addr") or k not in layout or not _slot_entry(v):
            raise FieldError(
                f"'slot' must map address fields to strides >= 0 or [stride > 0, slots 3..{MAX_SLOTS}], got {k} = {v}"
            )


def _slot_entry(v) -> bool:
    """A stride >= 0, or [stride > 0, slots 3..MAX_SLOTS]."""
    if isinstance(v, ir.IntegerAttr):
        return v.value >= 0
    pair = [x.value for x in ir.ArrayAttr(v) if isinstance(x, ir.IntegerAttr)] if isinstance(v, ir.ArrayAttr) else []
    return len(pair) == 2 == len(ir.ArrayAttr(v)) and pair[0] > 0 and 3 <= pair[1] <= MAX_SLOTS


def result_dram(op) -> ir.Attribute | None:
    """The DRAM offset map of `op`'s result: a macro's declared `dram`, another op's `novella.dram`
    (from `--novella-allocate`); None when not placed."""
    key = "dram" if op.operation.name == "novella.macro" else "novella.dram"
    return op.attributes[key] if key in op.attributes else None
