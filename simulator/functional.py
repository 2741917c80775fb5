"""Functional model: what each instruction does to the memories.

Each `exec_<mnemonic>` executes exactly one instruction with small numpy
operations, bounds-checks every access, and records the touched elements in
`self.effect` for the hazard checker, timing model and stats. This is the
ISA's readable spec; `fast.py` runs the same semantics with less overhead
and is tested bit for bit against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import SimulatorError
from .hazards import MEMS, Span
from .isa import BINARY_FNS, COMPARE_FNS, REDUCE_FNS, Instruction, VecFn, VecMode, vec_dst_shape
from .units import Accumulator, Dram, MemoryUnit, Scratchpad

F32 = np.float32
_ERF_P = np.array(
    [
        -2.72614225801306e-10,
        2.77068142495902e-08,
        -2.10102402082508e-06,
        -5.69250639462346e-05,
        -7.34990630326855e-04,
        -2.95459980854025e-03,
        -1.60960333262415e-02,
    ],
    dtype=F32,
)
_ERF_Q = np.array(
    [
        -1.45660718464996e-05,
        -2.13374055278905e-04,
        -1.68282697438203e-03,
        -7.37332916720468e-03,
        -1.42647390514189e-02,
    ],
    dtype=F32,
)


def _horner(coeffs: np.ndarray, x: np.ndarray) -> np.ndarray:
    acc = np.zeros_like(x)
    for c in coeffs:
        acc = acc * x + c
    return acc


def erf_f32(x: np.ndarray) -> np.ndarray:
    """The hardware erf: x*P(x^2)/Q(x^2) on x clamped to [-4, 4], all in fp32."""
    x = np.clip(np.asarray(x, dtype=F32), F32(-4), F32(4))
    x2 = x * x
    return (x * _horner(_ERF_P, x2) / _horner(_ERF_Q, x2)).astype(F32)


def _rsqrt(a):
    return F32(1) / np.sqrt(a)


def exp_sub(a, b, out=None):
    """EXPSUB: exp(a - b), the difference rounded to fp32 first (so bit for bit SUB then EXP)."""
    r = np.exp(np.subtract(a, b, dtype=F32))
    if out is None:
        return r
    out[...] = r
    return out


UNARY_OPS = {
    VecFn.EXP: np.exp,
    VecFn.RSQRT: _rsqrt,
    VecFn.TANH: np.tanh,
    VecFn.ERF: erf_f32,
    VecFn.RELU: lambda a: np.maximum(a, F32(0)),
    VecFn.COPY: lambda a: a.copy(),
    VecFn.SIN: np.sin,
    VecFn.COS: np.cos,
    VecFn.LOG: np.log,
    VecFn.ABS: np.abs,
    VecFn.EXPM1: np.expm1,
    VecFn.LOG1P: np.log1p,
    VecFn.TRANSPOSE: lambda a: a.T.copy(),
    VecFn.FLOOR: np.floor,
}
BINARY_OPS = {
    VecFn.ADD: np.add,
    VecFn.SUB: np.subtract,
    VecFn.MUL: np.multiply,
    VecFn.DIV: np.divide,
    VecFn.MAX: np.maximum,
    VecFn.MIN: np.minimum,
    VecFn.LT: np.less,
    VecFn.LE: np.less_equal,
    VecFn.GT: np.greater,
    VecFn.GE: np.greater_equal,
    VecFn.EQ: np.equal,
    VecFn.NE: np.not_equal,
    VecFn.EXPSUB: exp_sub,
}
REDUCE_OPS = {VecFn.ROWSUM: np.sum, VecFn.ROWMAX: np.max}


@dataclass
class Effect:
    """What one instruction touched: accesses, DMA bytes, MACs."""

    accesses: list[Span] = field(default_factory=list)
    dma_bytes: int = 0
    macs: int = 0


class FunctionalModel:
    def __init__(self, dram: Dram, spad: Scratchpad, acc: Accumulator):
        self.dram, self.spad, self.acc = dram, spad, acc
        self.effect = Effect()
        self._where: tuple[int, str] = (-1, "")

    def execute(self, index: int, inst: Instruction) -> Effect:
        self.effect = Effect()
        self._where = (index, inst.mnemonic)
        getattr(self, f"exec_{inst.mnemonic.lower()}")(inst.fields)
        return self.effect

    def error(self, message: str) -> SimulatorError:
        return SimulatorError(*self._where, message)

    def _sram(self, mem: int) -> MemoryUnit:
        return self.acc if mem else self.spad

    def _rows(self, unit: MemoryUnit, starts, cols: int, write: bool) -> np.ndarray:
        """Element indices [len(starts), cols] of rows starting at `starts`."""
        starts = np.asarray(starts, dtype=np.int64)
        if starts.size and cols:
            lo, hi = int(starts.min()), int(starts.max()) + cols
            if lo < 0 or hi > unit.size:
                kind = "dram" if unit.name == "dram" else "sram"
                raise self.error(f"{kind} range [{lo}, {hi}) exceeds {unit.label} size {unit.size}")
        idx = starts[:, None] + np.arange(cols, dtype=np.int64)
        self.effect.accesses.append(Span(MEMS.index(unit.name), write, 0, 0, len(starts), cols, starts))
        return idx

    def _tile(self, unit, addr, stride, rows, cols, write=False) -> np.ndarray:
        return self._rows(unit, addr + stride * np.arange(rows), cols, write)

    def _dma_rows(self, f: dict) -> tuple[np.ndarray, np.ndarray]:
        """(in-bound mask over j, logical DRAM row r) for a LOAD/STORE."""
        r = f["row_start"] + f["row_step"] * np.arange(f["rows"], dtype=np.int64)
        return (r >= 0) & (r < f["row_bound"]), r

    def exec_load(self, f: dict) -> None:
        inb, r = self._dma_rows(f)
        cols, sram = f["cols"], self._sram(f["mem"])
        didx = self._rows(self.dram, f["dram_base"] + r[inb] * f["dram_stride"], cols, False)
        sidx = self._tile(sram, f["sram_addr"], f["sram_stride"], f["rows"], cols, True)
        tile = np.zeros(sidx.shape, dtype=F32)
        tile[inb] = self.dram.data[didx]
        sram.data[sidx] = tile
        self.effect.dma_bytes = didx.size * 4

    def exec_gather(self, f: dict) -> None:
        """LOAD whose DRAM rows are the index vector at `idx_addr`: row j <- row int(idx[j])."""
        rows, cols, sram = f["rows"], f["cols"], self._sram(f["mem"])
        iunit = self._sram(f["idx_mem"])
        index = iunit.data[self._rows(iunit, [f["idx_addr"]], rows, False)[0]]
        r = index.astype(np.int64)
        bad = (r != index) | (r < 0) | (r >= f["row_bound"])
        if bad.any():
            j = int(np.argmax(bad))
            raise self.error(f"index {index[j]:g} of row {j} is not an integer in [0, {f['row_bound']})")
        didx = self._rows(self.dram, f["dram_base"] + r * f["dram_stride"], cols, False)
        sidx = self._tile(sram, f["sram_addr"], f["sram_stride"], rows, cols, True)
        sram.data[sidx] = self.dram.data[didx]
        self.effect.dma_bytes = didx.size * 4

    def exec_store(self, f: dict) -> None:
        inb, r = self._dma_rows(f)
        cols, sram = f["cols"], self._sram(f["mem"])
        j = np.flatnonzero(inb)
        sidx = self._rows(sram, f["sram_addr"] + j * f["sram_stride"], cols, False)
        didx = self._rows(self.dram, f["dram_base"] + r[inb] * f["dram_stride"], cols, True)
        self.dram.data[didx] = sram.data[sidx]
        self.effect.dma_bytes = didx.size * 4

    def exec_matmul(self, f: dict) -> None:
        m, k, n = f["m"], f["k"], f["n"]
        a = self.spad.data[self._tile(self.spad, f["a_addr"], f["a_stride"], m, k)]
        if f["transpose_b"]:
            b = self.spad.data[self._tile(self.spad, f["b_addr"], f["b_stride"], n, k)].T
        else:
            b = self.spad.data[self._tile(self.spad, f["b_addr"], f["b_stride"], k, n)]
        out = np.matmul(a, b)  # BLAS: NT for a transposed B
        if f["accumulate"]:
            out += self.acc.data[self._tile(self.acc, f["acc_addr"], f["acc_stride"], m, n)]
        self.acc.data[self._tile(self.acc, f["acc_addr"], f["acc_stride"], m, n, True)] = out
        self.effect.macs = m * k * n
        if f.get("rowmax"):  # the drain's row maxima of C, a contiguous column of the scratchpad
            if n == 0:
                raise self.error("MATMUL rowmax needs n >= 1")
            self.spad.data[self._rows(self.spad, [f["max_addr"]], m, True)[0]] = out.max(axis=1)

    def _operand_b(self, f: dict) -> np.ndarray:
        mode, unit = f["mode"], self._sram(f["b_mem"])
        if mode == VecMode.SCALAR:
            return np.array(f["imm"], dtype=F32)
        if mode == VecMode.ROW:
            return unit.data[self._tile(unit, f["b_addr"], 0, 1, f["cols"])]
        if mode == VecMode.COL:
            return unit.data[self._tile(unit, f["b_addr"], f["b_stride"], f["rows"], 1)]
        return unit.data[self._tile(unit, f["b_addr"], f["b_stride"], f["rows"], f["cols"])]

    def _vec_result(self, fn: VecFn, f: dict) -> np.ndarray:
        if fn == VecFn.FILL:
            return np.full((f["rows"], f["cols"]), f["imm"], dtype=F32)
        unit = self._sram(f["a_mem"])
        a = unit.data[self._tile(unit, f["a_addr"], f["a_stride"], f["rows"], f["cols"])]
        if fn == VecFn.SEL:
            dst = self._sram(f["dst_mem"])
            old = dst.data[self._tile(dst, f["dst_addr"], f["dst_stride"], f["rows"], f["cols"])]
            return np.where(a != 0, self._operand_b(f), old)
        if fn in COMPARE_FNS:
            return BINARY_OPS[fn](a, self._operand_b(f)).astype(F32)
        if fn in BINARY_FNS:
            return BINARY_OPS[fn](a, self._operand_b(f))
        if fn in REDUCE_FNS:
            if f["cols"] == 0:
                raise self.error(f"{fn.name} needs cols >= 1")
            return REDUCE_OPS[fn](a, axis=1, keepdims=True)
        return UNARY_OPS[fn](a)

    def exec_vec(self, f: dict) -> None:
        if f["fn"] not in VecFn._value2member_map_:
            raise self.error(f"unknown vector function code {f['fn']}")
        fn = VecFn(f["fn"])
        with np.errstate(all="ignore"):
            out = self._vec_result(fn, f).astype(F32, copy=False)
        rows, cols = vec_dst_shape(fn, f["rows"], f["cols"])
        unit = self._sram(f["dst_mem"])
        didx = self._tile(unit, f["dst_addr"], f["dst_stride"], rows, cols, True)
        unit.data[didx] = out
        if f.get("rowsum"):
            self._row_sums(fn, f, out)

    def _row_sums(self, fn: VecFn, f: dict, out: np.ndarray) -> None:
        """`rowsum`: the row sums of the result (as ROWSUM of dst), a contiguous column in `sum_mem`."""
        if fn in REDUCE_FNS or fn == VecFn.TRANSPOSE or f["cols"] == 0:
            raise self.error(f"{fn.name} has no rowsum output (an elementwise fn with cols >= 1 has)")
        sums = self._sram(f["sum_mem"])
        sums.data[self._rows(sums, [f["sum_addr"]], f["rows"], True)[0]] = REDUCE_OPS[VecFn.ROWSUM](out, axis=1)

    def exec_nop(self, f: dict) -> None:
        pass
