"""An independent instruction oracle: NPU words straight from the IR after `--novella-inst-gen`.

Deliberately simple and slow, so that it is easy to believe: for every
`novella.macro`, in program order, loop over every point of its grid; for
every `novella.inst`, evaluate its `when` guard and its fields with MLIR's
own affine machinery (`AffineMap.replace` of each dim and symbol by a
constant, which MLIR folds to a constant); add the tensor's DRAM base read
from the IR's `novella.dram` attributes; set the dependency tokens by the
rule of `docs/design.md` applied to the whole program at once; encode each
word with `simulator.isa.encode`.

It reads no MacroMeta, no TileMeta and no postfix program, and shares no
code with `runtime/jit.py` or `artifact.py`, so `compare(words, oracle)`
checks the JIT against the IR rather than against itself.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from simulator import isa

from ..context import make_context

_QUEUE = {isa.Opcode.LOAD: "load", isa.Opcode.STORE: "store"}  # everything else: compute
_NOT_FIELDS = ("opcode", "tensor", "when")


@dataclass(frozen=True)
class Origin:
    """Where one word comes from: a tile (macro) of the IR, a grid point, an instruction of its region."""

    tile: str
    kernel: str
    point: tuple
    inst: int  # index in the macro's region; -1 = the barrier NOP before the tile

    def __str__(self) -> str:
        if self.inst < 0:
            return f"barrier NOP before tile {self.tile}"
        return f"tile {self.tile} ({self.kernel}) grid point d={self.point} template #{self.inst}"


@dataclass
class Word:
    opcode: isa.Opcode
    fields: dict
    origin: Origin

    @property
    def queue(self) -> str:
        return _QUEUE.get(self.opcode, "compute")


@dataclass
class OracleProgram:
    words: np.ndarray  # (n, 4) uint64
    insts: list  # [Word, ...], one per word
    steps: list  # [[word index, ...], ...], one per step, barriers included


class OracleMismatch(AssertionError):
    pass


# ------------------------------------------------------------------ affine evaluation by MLIR


def _eval_exprs(amap: ir.AffineMap, point, syms) -> list[int]:
    """The results of `amap` at dims `point` and symbols `syms`, folded to constants by MLIR."""
    m, nd, ns = amap, amap.n_dims, amap.n_symbols
    for i in range(nd):
        m = m.replace(ir.AffineDimExpr.get(i), ir.AffineConstantExpr.get(int(point[i])), nd, ns)
    for i in range(ns):
        m = m.replace(ir.AffineSymbolExpr.get(i), ir.AffineConstantExpr.get(int(syms[i])), nd, ns)
    out = []
    for e in m.results:
        c = e.maybe_downcast()
        if not isinstance(c, ir.AffineConstantExpr):
            raise ValueError(f"MLIR did not fold {amap} at d={point}, s={syms} to a constant: {c}")
        out.append(c.value)
    return out


def _constraints(attr) -> list[tuple[bool, ir.AffineMap]]:
    """(is_equality, one-result map) per constraint of an `affine_set` attribute.

    The bindings give no accessor on IntegerSetAttr: split the printed set
    and let MLIR parse each constraint's expression."""
    head, body = str(attr)[len("affine_set<") : -1].split(" : ", 1)
    parts, depth, cur = [], 0, ""
    for ch in body.strip()[1:-1]:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            parts, cur = parts + [cur], ""
        else:
            cur += ch
    out = []
    for c in parts + [cur]:
        eq = "==" in c
        lhs, rhs = c.split("==" if eq else ">=")
        if rhs.strip() != "0":
            raise ValueError(f"unexpected constraint '{c}' in {attr}")
        out.append((eq, ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{head} -> ({lhs})>")).value))
    return out


class _Inst:
    """One `novella.inst`, its attributes split into guard, tensor base and fields."""

    def __init__(self, op, dram_of, result_dram):
        attrs = {a.name: a.attr for a in (op.attributes[i] for i in range(len(op.attributes)))}
        self.opcode = isa.Opcode[ir.StringAttr(attrs["opcode"]).value]
        self.guard = _constraints(attrs["when"]) if "when" in attrs else []
        self.base = None
        if self.opcode == isa.Opcode.STORE:
            self.base = result_dram
        elif "tensor" in attrs:
            self.base = dram_of(op.operands[0])
        self.fields = {k: v for k, v in attrs.items() if k not in _NOT_FIELDS}

    def selected(self, point, syms) -> bool:
        for eq, m in self.guard:
            v = _eval_exprs(m, point, syms)[0]
            if (v != 0) if eq else (v < 0):
                return False
        return True

    def values(self, point, syms) -> dict:
        out = {}
        for name, a in self.fields.items():
            if isinstance(a, ir.AffineMapAttr):
                out[name] = min(_eval_exprs(a.value, point, syms))
            elif name == "fn":
                out[name] = int(isa.VecFn[ir.StringAttr(a).value])
            elif name == "mode":
                out[name] = int(isa.VecMode[ir.StringAttr(a).value])
            elif isinstance(a, ir.FloatAttr):
                out[name] = float(ir.FloatAttr(a).value)
            else:
                out[name] = int(ir.IntegerAttr(a).value)
        if self.base is not None:
            out["dram_base"] = out.get("dram_base", 0) + _eval_exprs(self.base, (), syms)[0]
        return out


# ------------------------------------------------------------------ the program


def _dram_map(attr) -> ir.AffineMap:
    return ir.AffineMapAttr(attr).value


def _dram_lookup(fn):
    arg_attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))

    def dram_of(value):
        if isinstance(value.owner, ir.Block):
            return _dram_map(ir.DictAttr(arg_attrs[ir.BlockArgument(value).arg_number])["novella.dram"])
        return _dram_map(value.owner.attributes["novella.dram"])

    return dram_of


def _macro_steps(macro, name, syms, dram_of) -> list[list[Word]]:
    """The non-empty steps of one macro: one per grid point, in row-major order (d0 outermost)."""
    kernel = ir.StringAttr(macro.attributes["kernel"]).value
    extents = _eval_exprs(_dram_map(macro.attributes["grid"]), (), syms)
    insts = [_Inst(op, dram_of, _dram_map(macro.attributes["novella.dram"])) for op in macro.regions[0].blocks[0]]
    steps = []
    for point in itertools.product(*[range(e) for e in extents]):
        step = [
            Word(inst.opcode, inst.values(point, syms), Origin(name, kernel, point, j))
            for j, inst in enumerate(insts)
            if inst.selected(point, syms)
        ]
        if step:
            steps.append(step)
    return steps


def _set_tokens(steps: list[list[Word]]) -> None:
    """The token rule of docs/design.md, over every step of the program (barriers are steps)."""
    for k, step in enumerate(steps):
        by_q = {q: [w for w in step if w.queue == q] for q in ("load", "compute", "store")}
        loads, comp, stores = by_q["load"], by_q["compute"], by_q["store"]
        if not comp:
            raise ValueError(f"{step[0].origin} has no compute instruction")
        prev_stored = k > 0 and any(w.queue == "store" for w in steps[k - 1])
        next_loads = k + 1 < len(steps) and any(w.queue == "load" for w in steps[k + 1])
        if loads:
            loads[0].fields["pop_next"] = int(k > 0)
            loads[-1].fields["push_next"] = 1
        comp[0].fields["pop_prev"] = int(bool(loads))
        comp[0].fields["pop_next"] = int(prev_stored)
        comp[-1].fields["push_next"] = int(bool(stores))
        comp[-1].fields["push_prev"] = int(next_loads)
        if stores:
            stores[0].fields["pop_prev"] = 1
            stores[-1].fields["push_prev"] = int(k + 1 < len(steps))


def instantiate(ir_text: str, syms) -> OracleProgram:
    """The program for symbol values `syms`, from the textual IR after --novella-inst-gen."""
    syms = [int(s) for s in syms]
    with make_context():
        module = ir.Module.parse(ir_text)
        fn = next(op for op in module.body if op.operation.name == "func.func")
        dram_of = _dram_lookup(fn)
        steps, n_macros = [], 0
        for op in fn.regions[0].blocks[0]:
            if op.operation.name != "novella.macro":
                continue
            kernel = ir.StringAttr(op.attributes["kernel"]).value
            name = f"{kernel.split('.')[1]}_{n_macros}"
            n_macros += 1
            mine = _macro_steps(op, name, syms, dram_of)
            if mine and steps:
                steps.append([Word(isa.Opcode.NOP, {}, Origin(name, kernel, (), -1))])
            steps += mine
    _set_tokens(steps)
    insts, index = [], []
    for step in steps:
        index.append(list(range(len(insts), len(insts) + len(step))))
        insts += step
    words = np.array([isa.encode(w.opcode, **w.fields) for w in insts], np.uint64).reshape(-1, isa.LANES)
    return OracleProgram(words, insts, index)


# ------------------------------------------------------------------ comparison


def compare(words: np.ndarray, oracle: OracleProgram, what: str = "JIT") -> None:
    """Raises OracleMismatch naming the first differing word's tile, grid point and fields."""
    words = np.asarray(words, np.uint64).reshape(-1, isa.LANES)
    n = min(len(words), len(oracle.words))
    diff = np.flatnonzero((words[:n] != oracle.words[:n]).any(axis=1))
    if len(diff):
        i = int(diff[0])
        got, want = isa.decode(words[i]), isa.decode(oracle.words[i])
        where = oracle.insts[i].origin
        if got.opcode != want.opcode:
            raise OracleMismatch(f"word {i}, {where}: {what} has {got.mnemonic}, the IR says {want.mnemonic}")
        fields = [
            f"{k}: {what} gives {got.fields[k]}, the IR {v}" for k, v in want.fields.items() if got.fields[k] != v
        ]
        raise OracleMismatch(
            f"word {i}, {where}, {want.mnemonic}: " + "; ".join(fields) + f" ({len(diff)} words differ)"
        )
    if len(words) != len(oracle.words):
        where = oracle.insts[n].origin if n < len(oracle.insts) else "after the IR's last word"
        raise OracleMismatch(f"{what} has {len(words)} words, the IR gives {len(oracle.words)}; first extra at {where}")
