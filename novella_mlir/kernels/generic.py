"""`novella.generic`: any elementwise body, one VEC per body op, over the pointwise kernel's tiles.

The result is tiled as `pointwise.Geometry` does ([*batch, R, C], row and column tiles, partial at the
end); each input is loaded at the strides its indexing map gives (a broadcast dim has stride 0, a
broadcast row is repeated by the DMA, a broadcast column is read in COL mode), a step's LOADs one DMA
chain (one exposed latency). The body's ops run in
order on SRAM buffers: an operand that is a constant is the VEC immediate (SCALAR mode), a value is
freed after its last use, the yielded value is computed into the output buffer. A resident input 0 and
result (`--novella-resident`) are read and written where they are kept (`in_place`), and RoPE's
`rotate_half(x) * s` summed once is done on column halves (`rope_fusion.split_rotation`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.fields import RESIDENT
from . import BufferPlan, TensorView, Tiling, first, resident, rope_fusion
from .pointwise import Geometry, Tile
from .support import producer

BINARY = {
    "arith.addf": "ADD", "arith.subf": "SUB", "arith.mulf": "MUL", "arith.divf": "DIV",
    "arith.maximumf": "MAX", "arith.maxnumf": "MAX", "arith.minimumf": "MIN", "arith.minnumf": "MIN",
    "arith.andi": "MUL", "arith.ori": "MAX", "arith.xori": "NE",
}  # fmt: skip
UNARY = {
    "math.exp": "EXP", "math.log": "LOG", "math.tanh": "TANH", "math.rsqrt": "RSQRT", "math.sin": "SIN",
    "math.cos": "COS", "math.erf": "ERF", "math.absf": "ABS", "math.expm1": "EXPM1", "math.log1p": "LOG1P",
    "math.floor": "FLOOR",
}  # fmt: skip
# arith.cmpf predicates: oeq ogt oge olt ole une (the VEC compares are ordered, NE is true on NaN); an
# unordered one is the complement of an ordered one (ugt = not ole), uno is x != x (NaN), ord its complement
CMPF = {1: "EQ", 2: "GT", 3: "GE", 4: "LT", 5: "LE", 13: "NE"}
NOT_CMPF = {9: 5, 10: 4, 11: 3, 12: 2, 7: 14}
UNO, UNE = 14, 13
_SWAPPED = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE", "ADD": "ADD", "MUL": "MUL",
            "MAX": "MAX", "MIN": "MIN"}  # fmt: skip
_NUMPY = {"ADD": np.add, "SUB": np.subtract, "MUL": np.multiply, "DIV": np.divide, "MAX": np.maximum,
          "MIN": np.minimum, "LT": np.less, "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
          "EQ": np.equal, "NE": np.not_equal, "EXP": np.exp, "LOG": np.log, "TANH": np.tanh, "SIN": np.sin,
          "COS": np.cos, "ABS": np.abs, "EXPM1": np.expm1, "LOG1P": np.log1p, "FLOOR": np.floor}  # fmt: skip
# base-2/10 logs and exp2 as the natural ones and a scale: (fn, scale of the input, scale of the result)
SCALED = {"math.log2": ("LOG", 1.0, 1 / math.log(2)), "math.log10": ("LOG", 1.0, 1 / math.log(10)),
          "math.exp2": ("EXP", math.log(2), 1.0)}  # fmt: skip
ALIASES = ("arith.uitofp",)
OTHER = ("arith.select", "arith.negf", "math.sqrt", "math.powf", "arith.constant", "arith.cmpf", "novella.yield")


def supported(op) -> str | None:
    """Why the vector unit cannot run body op `op`, or None."""
    name = op.operation.name
    pred = ir.IntegerAttr(op.attributes["predicate"]).value if name == "arith.cmpf" else None
    if pred is not None and pred not in CMPF and pred not in NOT_CMPF and pred != UNO:
        return f"'{name}' with the predicate {pred} (one, ueq, true or false)"
    if name in BINARY or name in UNARY or name in SCALED or name in ALIASES or name in OTHER:
        return None
    return f"'{name}'"


@dataclass
class Program:
    """The VECs of one tile: (fn, dst, a, b, imm) with a/b buffer names, `b` may be ("col", name)."""

    steps: list = field(default_factory=list)
    temps: int = 0


class Planner:
    """Plans the body on named buffers: inputs `in<k>`, temps `t<i>`, the result `out`."""

    def __init__(self, body, col_inputs: set):
        self.ops = [o for o in body.operations]
        self.args = list(body.arguments)
        self.col = col_inputs
        self.val: dict = {}
        self.prog = Program()
        self.free: list = []
        self.uses: dict = {}
        self.skip: set = set()
        for i, o in enumerate(self.ops):
            for v in o.operands:
                self.uses[v] = i
        self.out = self.ops[-1].operands[0]
        self.quotients = self._quotients()

    def run(self) -> Program:
        for k, a in enumerate(self.args):
            self.val[a] = f"in{k}"
        for i, o in enumerate(self.ops[:-1]):
            self.op(o)
            for v in o.operands:
                if self.uses.get(v) == i:
                    self._release(v)
        self._finish()
        return self.prog

    def _quotients(self) -> dict:
        """{x * (1 / y): (x, y)} where 1 / y has no other use: one DIV x / y, not a FILL, a DIV and a MUL
        (silu's x * sigmoid(x)); y then lives until the product."""
        out = {}
        for i, o in enumerate(self.ops):
            if o.operation.name != "arith.mulf":
                continue
            for r, x in ((o.operands[1], o.operands[0]), (o.operands[0], o.operands[1])):
                d = r.owner
                if not isinstance(d, ir.OpView) or d.operation.name != "arith.divf" or len(list(r.uses)) != 1:
                    continue
                if _constant(d.operands[0]) == 1.0 and x != r:
                    out[o.results[0]] = (x, d.operands[1])
                    self.uses[d.operands[1]] = max(self.uses.get(d.operands[1], i), i)
                    self.skip.add(d.operation)
                    break
        return out

    def get(self, v):
        """The buffer or constant of `v`; a constant defined above the body (a rewriter hoists them) too."""
        if v not in self.val:
            self.op(v.owner)
        return self.val[v]

    def temp(self) -> str:
        if self.free:
            return self.free.pop()
        self.prog.temps += 1
        return f"t{self.prog.temps - 1}"

    def _release(self, v) -> None:
        if v == self.out:
            return
        b = self.val.pop(v, None)
        if isinstance(b, str) and b.startswith("t") and b not in self.val.values():
            self.free.append(b)

    def vec(self, fn, dst, a=None, b=None, imm=0.0) -> None:
        self.prog.steps.append((fn, dst, a, b, imm))

    def full(self, v) -> str | float:
        """The buffer (or constant) of `v`, a broadcast column spread over a full tile first."""
        x = self.get(v)
        if isinstance(x, str) and x.startswith("in") and int(x[2:]) in self.col:
            t = self.temp()
            self.vec("FILL", t, imm=0.0)
            self.vec("ADD", t, t, ("col", x))
            self.val[v] = t
            return t
        return x

    def operand_b(self, v):
        x = self.get(v)
        if isinstance(x, str) and x.startswith("in") and int(x[2:]) in self.col:
            return ("col", x)
        return x

    def dst(self, r) -> str:
        return "out" if r == self.out else self.temp()

    def op(self, o) -> None:
        name = o.operation.name
        if o.operation in self.skip:
            return
        r = o.results[0]
        if r in self.quotients:
            self.binary("DIV", r, *self.quotients[r])
            return
        if name == "arith.constant":
            self.val[r] = _constant(r)
        elif name in ALIASES:
            self.val[r] = self.get(o.operands[0])
            if r == self.out:
                self.out = o.operands[0]
        elif name == "arith.cmpf":
            self.compare(ir.IntegerAttr(o.attributes["predicate"]).value, r, *o.operands)
        elif name in BINARY:
            self.binary(BINARY[name], r, *o.operands)
        elif name in UNARY or name == "arith.negf":
            self.unary(UNARY.get(name, "NEG"), r, o.operands[0])
        elif name == "math.sqrt":
            self.unary("SQRT", r, o.operands[0])
        elif name in SCALED:
            self.scaled(r, o.operands[0], *SCALED[name])
        elif name == "math.powf":
            self.pow(r, *o.operands)
        elif name == "arith.select":
            self.select(r, *o.operands)

    def binary(self, fn, r, a, b) -> None:
        x, y = self.get(a), self.get(b)
        if isinstance(x, float) and isinstance(y, float):
            self.val[r] = float(np.float32(_NUMPY[fn](np.float32(x), np.float32(y))))
            return
        if isinstance(x, float) and fn in _SWAPPED:
            fn, a, b, x, y = _SWAPPED[fn], b, a, y, x
        d = self.dst(r)
        if isinstance(y, float):
            self.vec(fn, d, self.full(a), None, y)
        elif isinstance(x, float):  # c - y, c / y
            if fn == "SUB":
                self.vec("MUL", d, self.full(b), None, -1.0)
                self.vec("ADD", d, d, None, x)
            else:
                self.vec("FILL", d, imm=x)
                self.vec(fn, d, d, self.operand_b(b))
        else:
            self.vec(fn, d, self.full(a), self.operand_b(b))
        self.val[r] = d

    def compare(self, pred: int, r, a, b) -> None:
        if pred == UNE and _constant(b) == 0.0 and _boolean(a):  # a 0/1 value != 0 is that value
            self.val[r] = self.get(a)
            return
        if pred in CMPF:
            self.binary(CMPF[pred], r, a, b)
            return
        if pred == UNO:  # NaN in a or b: a != a, b != b
            self.binary("NE", r, a, a)
            if b != a and not isinstance(self.get(b), float):
                d = self.get(r)
                t = self.temp()
                self.vec("NE", t, self.full(b), self.operand_b(b))
                self.vec("MAX", d, d, t)
                self.free.append(t)
            return
        self.compare(NOT_CMPF[pred], r, a, b)
        d = self.get(r)
        if isinstance(d, float):
            self.val[r] = 1.0 - d
            return
        self.vec("MUL", d, d, None, -1.0)
        self.vec("ADD", d, d, None, 1.0)

    def unary(self, fn, r, a) -> None:
        x = self.get(a)
        if isinstance(x, float):
            f = np.float32(x)
            folded = {"NEG": -f, "SQRT": np.sqrt(f), "RSQRT": 1 / np.sqrt(f), "ERF": math.erf(f)}.get(fn)
            self.val[r] = float(np.float32(folded if folded is not None else _NUMPY[fn](f)))
            return
        d = self.dst(r)
        src = self.full(a)
        if fn == "NEG":
            self.vec("MUL", d, src, None, -1.0)
        elif fn == "SQRT":  # 1 / rsqrt(x): exact at 0 and inf, unlike x * rsqrt(x)
            t = self.temp()
            self.vec("RSQRT", d, src)
            self.vec("FILL", t, imm=1.0)
            self.vec("DIV", d, t, d)
            self.free.append(t)
        else:
            self.vec(fn, d, src)
        self.val[r] = d

    def scaled(self, r, a, fn: str, pre: float, post: float) -> None:
        x = self.get(a)
        if isinstance(x, float):
            self.val[r] = float(np.float32(_NUMPY[fn](np.float32(x) * np.float32(pre)) * np.float32(post)))
            return
        d, src = self.dst(r), self.full(a)
        if pre != 1.0:
            self.vec("MUL", d, src, None, pre)
            src = d
        self.vec(fn, d, src)
        if post != 1.0:
            self.vec("MUL", d, d, None, post)
        self.val[r] = d

    def pow(self, r, a, b) -> None:
        e = self.get(b)
        if isinstance(e, float) and e in (1.0, 2.0, 3.0, 4.0):
            d, src = self.dst(r), self.full(a)
            self.vec("MUL", d, src, src) if e > 1 else self.vec("COPY", d, src)
            for _ in range(int(e) - 2):
                self.vec("MUL", d, d, src)
            self.val[r] = d
            return
        if e == 0.5:
            self.unary("SQRT", r, a)
            return
        base = self.get(a)
        d, t = self.dst(r), self.temp()  # exp(b * log(a)): NaN for a < 0, as torch for a non-integer b
        if isinstance(base, float):  # c ** b = exp(b * ln c)
            self.vec("MUL", t, self.full(b), None, float(np.log(np.float32(base))))
            self.vec("EXP", d, t)
            self.free.append(t)
            self.val[r] = d
            return
        self.vec("LOG", t, self.full(a))
        self.vec("MUL", t, t, None if isinstance(e, float) else self.operand_b(b), e if isinstance(e, float) else 0.0)
        self.vec("EXP", d, t)
        self.free.append(t)
        self.val[r] = d

    def select(self, r, c, x, y) -> None:
        vc, vx, vy = (self.get(v) for v in (c, x, y))
        if isinstance(vc, float):
            self.val[r] = vx if vc else vy
            return
        d = self.dst(r)
        if isinstance(vy, float):
            self.vec("FILL", d, imm=vy)
        elif isinstance(self.operand_b(y), tuple):  # a broadcast column spread straight into d
            self.vec("FILL", d, imm=0.0)
            self.vec("ADD", d, d, self.operand_b(y))
        else:
            self.vec("COPY", d, self.full(y))
        if isinstance(vx, float):
            t = self.temp()
            self.vec("FILL", t, imm=vx)
            self.vec("SEL", d, self.full(c), t)
            self.free.append(t)
        else:
            self.vec("SEL", d, self.full(c), self.operand_b(x))
        self.val[r] = d

    def _finish(self) -> None:
        x = self.get(self.out)
        if x == "out":
            return
        if isinstance(x, float):
            self.vec("FILL", "out", imm=x)
        else:
            self.vec("COPY", "out", self.full(self.out))


def _boolean(v) -> bool:
    """`v` is a compare's 0/1 result converted to a float."""
    o = v.owner
    if not isinstance(o, ir.OpView) or o.operation.name not in ALIASES:
        return False
    return producer(o.operands[0], "arith.cmpf") is not None


def _constant(v) -> float | None:
    o = producer(v, "arith.constant")
    return None if o is None else float(ir.FloatAttr(o.attributes["value"]).value)


def _cost(target, g: Geometry, prog: Program, rows: int, tc: int, tm: int) -> float:
    """Predicted cycles of row tile `tm` over `rows` rows (the row kernels' cost model): a decode step's few
    rows (`Geometry.moved`) in one tile would run its loads, VECs and store in series."""
    from .elementwise import row_kernel_cost

    loads = [tc if o.col_full else 1 for o in g.ops]
    return row_kernel_cost(target, rows, tc, tm, lambda r: [(r, c, True) for c in loads],
                           lambda r: [(fn, r, tc) for fn, *_ in prog.steps], chained=True)  # fmt: skip


class Generic:
    """The kernel of `novella.generic`: see the module docstring. Buffers p0.. hold the inputs, then the
    body's temporaries, the last one the result."""

    def _plan(self, op, g: Geometry) -> Program:
        col = {k for k, o in enumerate(g.ops) if not o.col_full}
        return Planner(op.regions[0].blocks[0], col).run()

    def tile(self, op, tv, target, options):
        g = Geometry(tv, list(range(len(op.operands))))
        prog = self._plan(op, g)
        n = len(g.ops)
        tc = target.col_tile(sy.as_int(g.c))
        r = sy.as_int(g.r)
        fitting = []
        for tm in [options["tile-m"]] if options.get("tile-m") else target.row_tiles(4):
            tm = min(tm, r) if r is not None else tm
            plan = BufferPlan(target)
            for i in range(n + prog.temps + 1):  # the inputs and the result stream (two slots), temps do not
                cols = tc if i >= n or g.ops[i].col_full else 1  # a broadcast column is [tm, 1]
                plan.add(f"p{i}", "spad", tm * cols, stream=i < n or i == n + prog.temps)
            if plan.fits() or tm == 1:
                fitting.append((tm, plan))
                if not (g.moved and r is not None and not options.get("tile-m")):
                    break
        if len(fitting) > 1:
            fitting.sort(key=lambda c: (_cost(target, g, prog, r, tc, c[0]), -c[0]))
        tm, plan = fitting[0]
        return Tiling({"tm": tm, "tc": tc}, g.grid(tm, tc), plan.check() + resident.buffers(op))

    def macro(self, op, tv, t, b):
        g = Geometry(tv, list(range(len(op.operands))))
        b = resident.wrap(b, op)
        tl = Tile(g, t, b)
        prog = self._plan(op, g)
        n = len(g.ops)
        names = {f"in{k}": f"p{k}" for k in range(n)}
        names.update({f"t{i}": f"p{n + i}" for i in range(prog.temps)})
        names["out"] = f"p{n + prog.temps}"
        rot, chain = rope_fusion.rotated(op), 0
        halves = {k: _loaded_twin(op, rot, k) for k in rot}
        places = in_place(op, g, tl, rot)
        for k, o in enumerate(g.ops):  # a step's inputs as one DMA chain: one exposed latency
            if k in rot and halves[k] is None:
                load_rotated(tl, f"p{k}", o, chain=chain)
            elif k not in rot and f"in{k}" not in places:
                tl.load(f"p{k}", o, chain=chain, when=_once(g, t, o))
            chain = 1
        steps, split = rope_fusion.split_rotation(prog.steps, halves, tl.tc // 2)
        for k, j in halves.items():
            if j is not None and k not in split:
                rotate_in_sram(tl, f"p{k}", f"p{j}", places.get(f"in{j}"))
        for fn, dst, a, bb, imm, half in steps:
            f = tl.geo() if half is None else tl.geo(cols=tl.tc // 2)
            if isinstance(bb, tuple):
                f.update(b=names[bb[1]], mode="COL", b_stride=1)
            elif bb is not None:
                f.update(_placed("b", bb, names, places))
            elif fn == "FILL":
                f["imm"] = imm
            elif fn not in UNARY.values() and fn != "COPY":
                f.update(mode="SCALAR", imm=imm)
            f.update(_placed("dst", dst, names, places))
            f.update(_placed("a", a, names, places) if a is not None else {})
            for role, at in zip(("dst", "a", "b"), half or ()):
                if at:
                    f[f"{role}_offset"] = f.get(f"{role}_offset", 0) + at
            b.vop(fn, f.pop("dst"), f.pop("a", None), **f)
        if "out" not in places:
            tl.store(names["out"])


def in_place(op, g: Geometry, tl: Tile, rot: set) -> dict:
    """{"in0" / "out": (region, offset of the tile in it, row stride)}: a resident input 0 of whole rows
    (`resident_role` "x", not rotated) the VECs read where it is kept, and a resident result they write
    there: no COPY into or out of the tile's buffer."""
    regions, out = resident.regions(op), {}
    o = g.ops[0]
    if "x" in regions and 0 not in rot and o.col_full:
        start = tl.batch_offset(o.batch_strides) + tl.dc * tl.tc + tl.dr * tl.tm * o.cols
        out["in0"] = (RESIDENT["x"], start, o.cols)
    if "out" in regions:
        start = tl.batch_offset(g.out_strides) + tl.dc * tl.tc + tl.dr * tl.tm * g.out_row
        out["out"] = (RESIDENT["out"], start, g.out_row)
    return out


def _placed(role: str, name: str, names: dict, places: dict) -> dict:
    """The VEC fields of operand `role` (dst, a, b) reading or writing program buffer `name`."""
    if name not in places:
        return {role: names[name]}
    region, offset, stride = places[name]
    return {role: region, f"{role}_offset": offset, f"{role}_stride": stride}


def load_rotated(tl: Tile, buf: str, o, chain: int) -> None:
    """LOADs `rotate_half` of operand `o` (`rope_fusion`): its upper column half into the tile's first
    half, its lower half after it (one DMA chain), then negates the first half. A tile holds whole rows."""
    h = tl.tc // 2
    for i, (col, at) in enumerate(((h, 0), (0, h))):
        f = dict(row_start=tl.dr * tl.tm, rows=tl.rows, row_bound=tl.g.r, cols=h, sram_stride=tl.tc)
        f = {**f, "chain": 1} if chain or i else f
        base = tl.batch_offset(o.batch_strides) + col
        tl.b.load_rows(buf, o.slot, dram_offset=base, dram_stride=o.cols, buf_offset=at, **f)
    tl.b.vop("MUL", buf, buf, **tl.geo(cols=h), mode="SCALAR", imm=-1.0)


def resident_role(op, k: int) -> str | None:
    """How input `k` of generic `op` reads a tensor kept in the scratchpad (`--novella-resident`): "x" for
    input 0 when its LOADs read whole rows at every grid step (not a broadcast row or batch dim, whose tile is
    loaded once and kept; not rotated: a COPY stands for them); "" for an input the kernel does not load
    (`rotate_half` of an input it loads); None otherwise."""
    rot = rope_fusion.rotated(op)
    if k in rot:
        return "" if _loaded_twin(op, rot, k) is not None else None
    if k:
        return None
    o = Geometry(TensorView(op), list(range(len(op.operands)))).ops[0]
    if not o.row_full or any(sy.as_int(s) == 0 for s in o.batch_strides):  # a tile loaded once, kept across steps
        return None
    return "x"


def _loaded_twin(op, rot: set, k: int) -> int | None:
    """The input that reads the value of rotated input `k` at the same map, not rotated: its tile is
    rotated in SRAM (`rotate_in_sram`) instead of loaded again."""
    maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
    for j, v in enumerate(op.operands):
        if j not in rot and v == op.operands[k] and maps[j] == maps[k]:
            return j
    return None


def rotate_in_sram(tl: Tile, dst: str, src: str, place=None) -> None:
    """dst = rotate_half(src) on one tile of whole rows: -src's upper half, then src's lower half; `place`:
    (region, offset, row stride) where src is read in place (`in_place`)."""
    h, at, geo = tl.tc // 2, 0, tl.geo(cols=tl.tc // 2)
    if place is not None:
        src, at, geo["a_stride"] = place
    tl.b.vop("MUL", dst, src, **geo, a_offset=at + h, mode="SCALAR", imm=-1.0)
    tl.b.vop("COPY", dst, src, **geo, dst_offset=h, **({"a_offset": at} if place is not None else {}))


def _once(g: Geometry, t, o):
    """The guard of an input loaded once and kept (its tile is the same at every grid step: broadcast in
    every batch dim of the grid, one row tile, one column tile; or broadcast in every dim), or None: loaded
    every step."""
    if any(sy.as_int(s) != 0 for s in o.batch_strides):
        return None
    if not o.row_full and not o.col_full:  # one value read by every step
        return [cond for d in range(len(g.batch) + 2) for cond in first(d)]
    r, c = sy.as_int(g.r), sy.as_int(g.c)
    if not g.batch or r is None or c is None or r > t.tiles["tm"] or c > t.tiles["tc"]:
        return None
    return [cond for d in range(len(g.batch)) for cond in first(d)]


# ------------------------------------------------------------------ fusion (a --novella-legalize pattern)


def fuse_producer(op, rewriter):
    """generic(.., generic_p(..), ..) -> one generic: the producer's body inlined where the consumer reads
    it, when that is the producer's only use, of the consumer's shape, read through the identity map (so
    the value never goes to DRAM). Inputs read twice at one map are loaded once; at most GENERIC_INPUTS."""
    from ..dialects.novella import GENERIC_INPUTS, GenericOp

    maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
    for k, v in enumerate(op.operands):
        p = v.owner
        if not isinstance(p, ir.OpView) or p.operation.name != "novella.generic" or len(list(v.uses)) != 1:
            continue
        m = ir.AffineMapAttr(maps[k]).value
        if p.results[0].type != op.results[0].type or m != ir.AffineMap.get_identity(m.n_dims):
            continue
        reads = [(w, m) for j, (w, m) in enumerate(zip(op.operands, maps)) if j != k]
        reads += list(zip(p.operands, ir.ArrayAttr(p.attributes["indexing_maps"])))
        slots: list = []
        for w, m in reads:
            if not any(w == a and m == b for a, b in slots):
                slots.append((w, m))
        if len(slots) > GENERIC_INPUTS:
            continue
        with rewriter.ip, op.location:
            extra = {f"x{i}": w for i, (w, _) in enumerate(slots[1:], 1)}
            fused = GenericOp(slots[0][0], ir.ArrayAttr.get([m for _, m in slots]), result=op.results[0].type, **extra)
        block = fused.regions[0].blocks.append(*[ir.F32Type.get()] * len(slots))
        slot = {i: next(j for j, (a, b) in enumerate(slots) if a == w and b == m) for i, (w, m) in enumerate(reads)}
        env = {}
        consumer_args = [a for j, a in enumerate(op.regions[0].blocks[0].arguments) if j != k]
        for i, a in enumerate([*consumer_args, *p.regions[0].blocks[0].arguments]):
            env[a] = block.arguments[slot[i]]
        env[op.regions[0].blocks[0].arguments[k]] = _inline(p.regions[0].blocks[0], block, env, keep_yield=False)
        _inline(op.regions[0].blocks[0], block, env, keep_yield=True)
        for name in ("demoted",):
            if name in p.attributes or name in op.attributes:
                fused.attributes[name] = (op.attributes if name in op.attributes else p.attributes)[name]
        rewriter.replace_op(op, [fused.result])
        rewriter.erase_op(p)
        return False
    return True


def _inline(src, dst, env: dict, keep_yield: bool):
    """Clones `src`'s ops into block `dst` with operands renamed by `env`; the yielded value (its clone)."""
    for o in src.operations:
        if o.operation.name == "novella.yield" and not keep_yield:
            return env.get(o.operands[0], o.operands[0])
        new = o.operation.clone(ip=ir.InsertionPoint(dst))
        for i, w in enumerate(new.operands):
            if w in env:
                new.operands[i] = env[w]
        for r, nr in zip(o.results, new.results):
            env[r] = nr
    return None
