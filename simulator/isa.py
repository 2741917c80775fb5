"""Novella NPU instruction set: opcodes, bit layout, encoder, decoder.

Words are 256 bits, stored as four uint64 lanes (lane 0 least significant).
All addresses, strides and sizes count fp32 elements, never bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

WORD_BITS = 256
WORD_BYTES = 32
LANES = 4


class EncodingError(ValueError):
    """A field value that does not fit its bit field, or an undecodable word."""


class Opcode(IntEnum):
    NOP = 0
    LOAD = 1
    STORE = 2
    MATMUL = 3
    VEC = 4
    GATHER = 5


class VecFn(IntEnum):
    ADD = 0
    SUB = 1
    MUL = 2
    DIV = 3
    MAX = 4
    EXP = 5
    RSQRT = 6
    TANH = 7
    ERF = 8
    RELU = 9
    COPY = 10
    ROWSUM = 11
    ROWMAX = 12
    FILL = 13
    SIN = 14
    COS = 15
    LOG = 16
    ABS = 17
    MIN = 18
    LT = 19
    LE = 20
    GT = 21
    GE = 22
    EQ = 23
    NE = 24
    SEL = 25
    EXPM1 = 26
    LOG1P = 27
    EXPSUB = 28
    TRANSPOSE = 29
    FLOOR = 30


class VecMode(IntEnum):
    TENSOR = 0
    ROW = 1
    COL = 2
    SCALAR = 3


class Mem(IntEnum):
    SPAD = 0
    ACC = 1


COMPARE_FNS = frozenset({VecFn.LT, VecFn.LE, VecFn.GT, VecFn.GE, VecFn.EQ, VecFn.NE})
BINARY_FNS = frozenset(
    {VecFn.ADD, VecFn.SUB, VecFn.MUL, VecFn.DIV, VecFn.MAX, VecFn.MIN, VecFn.SEL, VecFn.EXPSUB} | COMPARE_FNS
)
UNARY_FNS = frozenset(
    {VecFn.EXP, VecFn.RSQRT, VecFn.TANH, VecFn.ERF, VecFn.RELU, VecFn.COPY, VecFn.SIN, VecFn.COS, VecFn.LOG, VecFn.ABS}
    | {VecFn.EXPM1, VecFn.LOG1P, VecFn.TRANSPOSE, VecFn.FLOOR}
)
REDUCE_FNS = frozenset({VecFn.ROWSUM, VecFn.ROWMAX})


def vec_dst_shape(fn: int, rows: int, cols: int) -> tuple[int, int]:
    """(rows, cols) of a VEC's destination tile: a column for ROWSUM/ROWMAX, `[cols x rows]` for TRANSPOSE."""
    if fn in REDUCE_FNS:
        return rows, 1
    return (cols, rows) if fn == VecFn.TRANSPOSE else (rows, cols)


# The queues, as a chain: a header's prev/next token flags name a queue's neighbours in it, so the
# token channels and their routes follow from it (`units.TOKEN_ROUTES`).
QUEUES = ("load", "compute", "store")
QUEUE_OF = {
    Opcode.NOP: "compute",
    Opcode.LOAD: "load",
    Opcode.STORE: "store",
    Opcode.MATMUL: "compute",
    Opcode.VEC: "compute",
    Opcode.GATHER: "load",
}
EXEC_UNITS = ("matrix", "vector")  # the units behind the compute queue, each in order (`timing.ComputeUnits`)
EXEC_UNIT_OF = {Opcode.MATMUL: "matrix", Opcode.VEC: "vector"}  # a NOP runs on none
# The unit whose busy time an instruction counts: a DMA's queue, a compute instruction's unit; a NOP
# (busy 0) counts on the vector unit, its trace span the instant it ends.
UNIT_OF = {op: EXEC_UNIT_OF.get(op, "vector" if q == "compute" else q) for op, q in QUEUE_OF.items()}
FLOAT_FIELDS = frozenset({"imm"})


@dataclass(frozen=True)
class Field:
    name: str
    lane: int
    offset: int
    bits: int
    signed: bool = False

    @property
    def lo(self) -> int:
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def hi(self) -> int:
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def mask(self) -> int:
        return (1 << self.bits) - 1

    @property
    def placed(self) -> int:
        """The field's bits in its lane (the mask shifted to the offset)."""
        return self.mask << self.offset

    def place(self, value: int) -> int:
        """`value` (two's complement if negative) in the field's position of its lane."""
        return (int(value) & self.mask) << self.offset

    def get(self, words) -> np.ndarray:
        """The field of every word of `words` (n, 4) uint64, as int64 (signed fields sign-extended)."""
        lane = np.asarray(words, np.uint64)[..., self.lane]
        v = ((lane >> np.uint64(self.offset)) & np.uint64(self.mask)).astype(np.int64)
        return np.where(v > self.hi, v - (1 << self.bits), v) if self.signed else v

    def put(self, words: np.ndarray, values, rows=slice(None)) -> None:
        """Writes `values` (masked, two's complement) into the field of `words[rows]` in place."""
        bits = (np.asarray(values, np.int64) & self.mask).astype(np.uint64) << np.uint64(self.offset)
        words[rows, self.lane] = (words[rows, self.lane] & ~np.uint64(self.placed)) | bits


def _fields(*specs) -> tuple[Field, ...]:
    return tuple(Field(*s) for s in specs)


HEADER = _fields(
    ("opcode", 0, 0, 4),
    ("pop_prev", 0, 4, 1),
    ("pop_next", 0, 5, 1),
    ("push_prev", 0, 6, 1),
    ("push_next", 0, 7, 1),
)
_DMA = _fields(
    ("mem", 0, 8, 1),
    ("sram_addr", 0, 9, 18),
    ("sram_stride", 0, 27, 16),
    ("row_step", 0, 43, 4),
    ("rows", 0, 47, 12),
    ("dram_base", 1, 0, 32),
    ("dram_stride", 1, 32, 24),
    ("row_start", 2, 0, 24, True),
    ("row_bound", 2, 24, 24),
    ("cols", 2, 48, 12),
)
_MATMUL = _fields(
    ("acc_addr", 0, 8, 16),
    ("acc_stride", 0, 24, 14),
    ("m", 0, 38, 12),
    ("accumulate", 0, 50, 1),
    ("transpose_b", 0, 51, 1),
    ("a_addr", 1, 0, 18),
    ("a_stride", 1, 18, 16),
    ("b_addr", 1, 34, 18),
    ("k", 2, 0, 12),
    ("n", 2, 12, 12),
    ("b_stride", 2, 24, 16),
    ("rowmax", 3, 0, 1),
    ("max_addr", 3, 1, 18),
)
_VEC = _fields(
    ("fn", 0, 8, 5),
    ("mode", 0, 13, 2),
    ("dst_mem", 0, 15, 1),
    ("dst_addr", 0, 16, 18),
    ("dst_stride", 0, 34, 16),
    ("rows", 0, 50, 12),
    ("a_mem", 1, 0, 1),
    ("a_addr", 1, 1, 18),
    ("a_stride", 1, 19, 16),
    ("b_mem", 1, 35, 1),
    ("b_addr", 1, 36, 18),
    ("b_stride", 2, 0, 16),
    ("cols", 2, 16, 12),
    ("imm", 2, 32, 32),
    ("rowsum", 3, 0, 1),
    ("sum_mem", 3, 1, 1),
    ("sum_addr", 3, 2, 18),
)

_GATHER = _fields(
    ("mem", 0, 8, 1),
    ("sram_addr", 0, 9, 18),
    ("sram_stride", 0, 27, 16),
    ("idx_mem", 0, 43, 1),
    ("rows", 0, 47, 12),
    ("dram_base", 1, 0, 32),
    ("dram_stride", 1, 32, 24),
    ("idx_addr", 2, 0, 18),
    ("row_bound", 2, 24, 24),
    ("cols", 2, 48, 12),
)

# LOAD and STORE: the descriptor continues the previous DMA of its queue (a scatter-gather chain).
_CHAIN = _fields(("chain", 0, 59, 1))

LAYOUT: dict[Opcode, tuple[Field, ...]] = {
    Opcode.NOP: HEADER,
    Opcode.LOAD: HEADER + _DMA + _CHAIN,
    Opcode.STORE: HEADER + _DMA + _CHAIN,
    Opcode.MATMUL: HEADER + _MATMUL,
    Opcode.VEC: HEADER + _VEC,
    Opcode.GATHER: HEADER + _GATHER,
}
_BY_NAME = {op: {f.name: f for f in fs} for op, fs in LAYOUT.items()}
OPCODE = HEADER[0]
FLAG_NAMES = tuple(f.name for f in HEADER[1:])  # pop_prev, pop_next, push_prev, push_next
FLAGS = Field("flags", 0, HEADER[1].offset, len(FLAG_NAMES))  # the four token flags as one group
assert all(f.offset == FLAGS.offset + i and f.bits == 1 for i, f in enumerate(HEADER[1:]))
FLAG_BIT = {f.name: 1 << f.offset for f in HEADER[1:]}  # a flag's bit in lane 0 (numba kernels set it)


def field(opcode: Opcode | int | str, name: str) -> Field:
    """The layout of field `name` of `opcode` (the one table every packer and unpacker reads)."""
    op = Opcode[opcode] if isinstance(opcode, str) else Opcode(opcode)
    if name not in _BY_NAME[op]:
        raise EncodingError(f"{op.name}: unknown field '{name}'")
    return _BY_NAME[op][name]


def opcodes(words) -> np.ndarray:
    """The opcode code of every word of `words` (n, 4) uint64 (unknown codes included), as int64."""
    return OPCODE.get(words)


@dataclass(frozen=True)
class Instruction:
    """A decoded instruction; `fields` holds every field except `opcode`."""

    opcode: Opcode
    fields: dict[str, int | float]

    @property
    def queue(self) -> str:
        return QUEUE_OF[self.opcode]

    @property
    def mnemonic(self) -> str:
        return self.opcode.name

    def __getitem__(self, name: str) -> int | float:
        return self.fields[name]


def _float_bits(value: float) -> int:
    return int(np.array(value, dtype=np.float32).view(np.uint32))


def _check_names(op: Opcode, names) -> None:
    for name in names:
        if name == "opcode" or name not in _BY_NAME[op]:
            raise EncodingError(f"{op.name}: unknown field '{name}'")


def _range_error(op: Opcode, f: Field, value) -> EncodingError:
    return EncodingError(f"{op.name}: field '{f.name}' value {value} out of range [{f.lo}, {f.hi}]")


def encode(opcode: Opcode | int, **fields: float) -> np.ndarray:
    """Encode one instruction into a (4,) uint64 word. Missing fields are 0."""
    op = Opcode(opcode)
    _check_names(op, fields)
    lanes = [0] * LANES
    values = dict(fields, opcode=int(op))
    for f in LAYOUT[op]:
        v = values.get(f.name, 0)
        if f.name in FLOAT_FIELDS:
            v = _float_bits(v)
        elif not isinstance(v, (int, np.integer)) or not (f.lo <= int(v) <= f.hi):
            raise _range_error(op, f, v)
        lanes[f.lane] |= f.place(v)
    return np.array(lanes, dtype=np.uint64)


def _batch_values(op: Opcode, f: Field, n: int, value) -> np.ndarray:
    if f.name in FLOAT_FIELDS:
        bits = np.asarray(value, dtype=np.float32).view(np.uint32)
        return np.broadcast_to(bits.astype(np.uint64), (n,))
    arr = np.asarray(value)
    if arr.dtype.kind not in "iub":
        raise EncodingError(f"{op.name}: field '{f.name}' needs integers")
    arr = np.broadcast_to(arr.astype(np.int64), (n,))
    bad = (arr < f.lo) | (arr > f.hi)
    if bad.any():
        raise _range_error(op, f, int(arr[np.argmax(bad)]))
    return (arr & f.mask).astype(np.uint64)


def encode_batch(opcode: Opcode | int, n: int, fields: dict) -> np.ndarray:
    """Encode `n` instructions of one opcode; each field is a scalar or (n,) array."""
    op = Opcode(opcode)
    _check_names(op, fields)
    words = np.zeros((n, LANES), dtype=np.uint64)
    words[:, 0] = np.uint64(int(op))
    for f in LAYOUT[op][1:]:
        if f.name in fields:
            vals = _batch_values(op, f, n, fields[f.name])
            words[:, f.lane] |= vals << np.uint64(f.offset)
    return words


def decode(word) -> Instruction:
    """Decode one (4,) uint64 word."""
    lanes = [int(x) for x in np.asarray(word, dtype=np.uint64).reshape(LANES)]
    code = (lanes[OPCODE.lane] >> OPCODE.offset) & OPCODE.mask
    if code not in Opcode._value2member_map_:
        raise EncodingError(f"unknown opcode {code}")
    op = Opcode(code)
    fields: dict[str, int | float] = {}
    for f in LAYOUT[op][1:]:
        v = (lanes[f.lane] >> f.offset) & f.mask
        if f.signed and v > f.hi:
            v -= 1 << f.bits
        if f.name in FLOAT_FIELDS:
            v = float(np.array(v, dtype=np.uint32).view(np.float32))
        fields[f.name] = v
    return Instruction(op, fields)


def decode_program(words) -> list[Instruction]:
    """Decode an (n, 4) uint64 program; errors name the instruction index."""
    prog = np.asarray(words, dtype=np.uint64).reshape(-1, LANES)
    out = []
    for i, w in enumerate(prog):
        try:
            out.append(decode(w))
        except EncodingError as e:
            raise EncodingError(f"instruction {i}: {e}") from None
    return out


def _flags(f: dict) -> str:
    names = ("pop_prev", "pop_next", "push_prev", "push_next")
    on = [n for n in names if f.get(n)]
    return f"  [{' '.join(on)}]" if on else ""


def _mem(code: int) -> str:
    return "acc" if code else "spad"


def _fn_name(code: int) -> str:
    return VecFn(code).name if code in VecFn._value2member_map_ else f"FN{code}"


def _dis_dma(inst: Instruction) -> str:
    f = inst.fields
    sram = f"{_mem(f['mem'])}[{f['sram_addr']} +{f['sram_stride']}]"
    dram = f"dram[{f['dram_base']} +{f['dram_stride']}]"
    arrow = f"{sram} <- {dram}" if inst.opcode == Opcode.LOAD else f"{sram} -> {dram}"
    chain = " chain" if f.get("chain") else ""
    return (
        f"{arrow} rows={f['rows']}/step{f['row_step']} start={f['row_start']} bound={f['row_bound']} cols={f['cols']}"
        + chain
    )


def _dis_gather(f: dict) -> str:
    sram = f"{_mem(f['mem'])}[{f['sram_addr']} +{f['sram_stride']}]"
    idx = f"{_mem(f['idx_mem'])}[{f['idx_addr']}]"
    return (
        f"{sram} <- dram[{f['dram_base']} +{f['dram_stride']} * {idx}] rows={f['rows']} "
        f"bound={f['row_bound']} cols={f['cols']}"
    )


def _dis_matmul(f: dict) -> str:
    op = "+=" if f["accumulate"] else "="
    t = "^T" if f["transpose_b"] else ""
    return (
        f"acc[{f['acc_addr']} +{f['acc_stride']}] {op} spad[{f['a_addr']} "
        f"+{f['a_stride']}] @ spad[{f['b_addr']} +{f['b_stride']}]{t} "
        f"m={f['m']} k={f['k']} n={f['n']}"
    ) + (f" rowmax->spad[{f['max_addr']}]" if f["rowmax"] else "")


def _dis_vec(f: dict) -> str:
    mode = VecMode(f["mode"]).name.lower()
    dst = f"{_mem(f['dst_mem'])}[{f['dst_addr']} +{f['dst_stride']}]"
    a = f"{_mem(f['a_mem'])}[{f['a_addr']} +{f['a_stride']}]"
    b = f"{_mem(f['b_mem'])}[{f['b_addr']} +{f['b_stride']}]"
    sums = f" rowsum->{_mem(f['sum_mem'])}[{f['sum_addr']}]" if f["rowsum"] else ""
    return f"{_fn_name(f['fn'])}.{mode} {dst} <- {a}, {b} imm={f['imm']:g} rows={f['rows']} cols={f['cols']}{sums}"


def format_instruction(inst: Instruction) -> str:
    """One readable line for a decoded instruction."""
    f = inst.fields
    if inst.opcode in (Opcode.LOAD, Opcode.STORE):
        body = _dis_dma(inst)
    elif inst.opcode == Opcode.GATHER:
        body = _dis_gather(f)
    elif inst.opcode == Opcode.MATMUL:
        body = _dis_matmul(f)
    elif inst.opcode == Opcode.VEC:
        body = _dis_vec(f)
    else:
        body = ""
    return f"{inst.mnemonic:<5} {body}".rstrip() + _flags(f)


def disassemble(words) -> str:
    """One readable line per instruction word."""
    return "\n".join(format_instruction(x) for x in decode_program(words))
