"""An independent instruction oracle: NPU words straight from the IR after `--novella-schedule`.

Deliberately simple and slow, so that it is easy to believe: for every
`novella.macro`, in program order, loop over every point of its grid; for
every `novella.inst`, evaluate its `when` guard and its fields with MLIR's
own affine machinery (`AffineMap.replace` of each dim and symbol by a
constant, which MLIR folds to a constant); add the tensor's DRAM base read
from the IR's `novella.dram` attributes; set the dependency tokens by the
rule of `docs/design.md` applied to the whole program at once; encode each
word with `simulator.isa.encode`.

It reads no MacroMeta, no TileMeta and no postfix program, and shares no
code with `runtime/jit.py` or `artifact/format.py`, so `compare(words, oracle)`
checks the JIT against the IR rather than against itself.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from simulator import isa

from ..dialects.context import make_context
from ..dialects.fields import result_dram

_QUEUE = {isa.Opcode.LOAD: "load", isa.Opcode.STORE: "store"}  # everything else: compute
_NOT_FIELDS = ("opcode", "tensor", "when", "slot")


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
    slotted: bool = False  # a load into a ping-pong slot
    load_slots: int = 1  # its macro's novella.schedule
    store_slots: int = 1
    early: int = 0  # its template's early tier (the schedule's `early`), 0 behind a macro without words

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
        slot = ir.DictAttr(attrs["slot"]) if "slot" in attrs else None
        self.slot = {slot[i].name: _stride(slot[i].attr) for i in range(len(slot))} if slot else {}

    def selected(self, point, syms) -> bool:
        for eq, m in self.guard:
            v = _eval_exprs(m, point, syms)[0]
            if (v != 0) if eq else (v < 0):
                return False
        return True

    def values(self, point, syms, index: int) -> dict:
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
        for name, (stride, n) in self.slot.items():
            out[name] += stride * (index % n)
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
        return _dram_map(result_dram(value.owner))

    return dram_of


def _macro_steps(macro, name, syms, dram_of, early: bool) -> list[list[Word]]:
    """The non-empty steps of one macro: one per grid point, in row-major order (d0 outermost);
    `early`: whether its early tiers apply (the macro before it in the IR has words)."""
    kernel = ir.StringAttr(macro.attributes["kernel"]).value
    extents = _eval_exprs(_dram_map(macro.attributes["grid"]), (), syms)
    insts = [_Inst(op, dram_of, _dram_map(macro.attributes["dram"])) for op in macro.regions[0].blocks[0]]
    sched = ir.DictAttr(macro.attributes["schedule"])
    slots = {sched[i].name: sched[i].attr for i in range(len(sched))}
    load_slots, store_slots = (ir.IntegerAttr(slots[k]).value for k in ("load_slots", "store_slots"))
    tiers = [ir.IntegerAttr(a).value for a in ir.ArrayAttr(slots["early"])] if early and "early" in slots else None
    steps = []
    for point in itertools.product(*[range(e) for e in extents]):
        step = [
            Word(inst.opcode, inst.values(point, syms, len(steps)), Origin(name, kernel, point, j),
                 "sram_addr" in inst.slot, load_slots, store_slots, tiers[j] if tiers else 0)
            for j, inst in enumerate(insts)
            if inst.selected(point, syms)
        ]  # fmt: skip
        if step:
            steps.append(step)
    return steps


def _set_tokens(steps: list[list[Word]]) -> None:
    """The token rule of docs/design.md, step by step over the program (barriers are steps):
    step k's loads wait for the compute of step max(k - d, barrier) (d = its macro's load_slots when all
    its loads are slotted, else 1), its compute for the stores of the latest store
    step <= k - store_slots; a wait already implied by an earlier one (queues run in order) is dropped.
    In a macro's first step its leading loads of early tier 1 wait for the step before the barrier
    instead, of tier 2 for the barrier before the previous macro (-1: none)."""
    barrier, before, waited_c, waited_s, store_steps, leading = -1, -1, -1, -1, [], False
    for k, step in enumerate(steps):
        by_q = {q: [w for w in step if w.queue == q] for q in ("load", "compute", "store")}
        loads, comp, stores = by_q["load"], by_q["compute"], by_q["store"]
        if not comp:
            raise ValueError(f"{step[0].origin} has no compute instruction")
        if step[0].origin.inst < 0:
            barrier, before, leading = k, barrier, True
        if loads:
            d = loads[0].load_slots if all(w.slotted for w in loads) else 1
            for w in loads:
                leading = leading and w.early > 0 and k == barrier + 1
                need = (barrier - 1 if w.early == 1 else before) if leading else max(k - d, barrier)
                if need >= 0 and need > waited_c:
                    w.fields["pop_next"] = 1
                    _last(steps[need], "compute").fields["push_prev"] = 1
                    waited_c = need
            loads[-1].fields["push_next"] = 1
            comp[0].fields["pop_prev"] = 1
        store_slots = 1 if step[0].origin.inst < 0 else step[0].store_slots
        done = [j for j in store_steps if j <= k - store_slots]
        if done and done[-1] > waited_s:
            comp[0].fields["pop_next"] = 1
            _last(steps[done[-1]], "store").fields["push_prev"] = 1
            waited_s = done[-1]
        if stores:
            comp[-1].fields["push_next"] = 1
            stores[0].fields["pop_prev"] = 1
            store_steps.append(k)


def _last(step: list[Word], queue: str) -> Word:
    return [w for w in step if w.queue == queue][-1]


def instantiate(ir_text: str, syms) -> OracleProgram:
    """The program for symbol values `syms`, from the textual IR after --novella-schedule."""
    syms = [int(s) for s in syms]
    with make_context():
        module = ir.Module.parse(ir_text)
        fn = next(op for op in module.body if op.operation.name == "func.func")
        dram_of = _dram_lookup(fn)
        steps, n_macros, ran = [], 0, False
        for op in fn.regions[0].blocks[0]:
            if op.operation.name != "novella.macro":
                continue
            kernel = ir.StringAttr(op.attributes["kernel"]).value
            name = f"{kernel.split('.')[1]}_{n_macros}"
            n_macros += 1
            mine = _macro_steps(op, name, syms, dram_of, ran)
            if mine and steps:
                steps.append([Word(isa.Opcode.NOP, {}, Origin(name, kernel, (), -1))])
            steps += mine
            ran = bool(mine)
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


def _stride(a) -> tuple[int, int]:
    """(stride, slots) of a `slot` entry: a stride (two slots) or [stride, slots]."""
    if isinstance(a, ir.ArrayAttr):
        return ir.IntegerAttr(a[0]).value, ir.IntegerAttr(a[1]).value
    return ir.IntegerAttr(a).value, 2
