"""A `linalg.generic` body rebuilt as a `novella.generic` body: every value f32 (an integer tensor is its
values as f32, an f64 body is demoted), masks i1, captured constants as `arith.constant`s."""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir
from torch_mlir.dialects import arith

from ...dialects.novella import YieldOp
from ...kernels import generic as generic_kernel

REDUCE = {"arith.addf": ("sum", 0.0), "arith.maximumf": ("max", float("-inf")), "arith.maxnumf": ("max", float("-inf")),
          "arith.minimumf": ("min", float("inf")), "arith.minnumf": ("min", float("inf"))}  # fmt: skip


@dataclass
class Fill:
    """A tensor of one value everywhere (`linalg.fill`), or uninitialized (`tensor.empty`: value None)."""

    value: float | None
    shape: list


# integer ops on values held as f32: their float counterparts (exact on integers below 2^24)
_INT_AS_FLOAT = {
    "arith.addi": "arith.addf", "arith.subi": "arith.subf", "arith.muli": "arith.mulf",
    "arith.maxsi": "arith.maximumf", "arith.minsi": "arith.minimumf",
    "arith.maxui": "arith.maximumf", "arith.minui": "arith.minimumf",
}  # fmt: skip
_CMPI_TO_CMPF = {0: 1, 1: 13, 2: 4, 3: 5, 4: 2, 5: 3, 6: 4, 7: 5, 8: 2, 9: 3}  # eq ne slt sle sgt sge ult ule ugt uge
_ALIASES = ("arith.extf", "arith.truncf", "arith.sitofp", "arith.uitofp", "arith.extsi", "arith.extui",
            "arith.trunci", "arith.index_cast", "arith.bitcast")  # fmt: skip
_BOOL_OPS = ("arith.andi", "arith.ori", "arith.xori")
_TRUNCATIONS = ("arith.fptosi", "arith.fptoui")
# integer division on values held as f32: a / b rounded (toward zero, down, up), exact for |a| < 2**24 (a
# non-integer quotient is at least 1/|b| from the nearest integer, more than half an ulp of a / b)
_INT_DIVISIONS = {"arith.divsi": "trunc", "arith.divui": "trunc", "arith.remsi": "rem", "arith.remui": "rem",
                  "arith.floordivsi": "floor", "arith.ceildivsi": "ceil"}  # fmt: skip


class BodyError(ValueError):
    """A body op the vector unit has no VEC (sequence) for."""


class Builder:
    """Rebuilds ops of old blocks into the current insertion point; `env` maps old values to new ones
    (or to Python floats: constants)."""

    def __init__(self, env: dict):
        self.env = env
        self.f32, self.i1 = ir.F32Type.get(), ir.IntegerType.get_signless(1)
        self.demoted = False

    def value(self, v, want: str):
        """The new value of `v` as an f32 ("f") or i1 ("b") value."""
        x = self.env[v]
        if isinstance(x, (int, float)):
            x = self.env[v] = arith.ConstantOp(self.f32, ir.FloatAttr.get(self.f32, float(x))).result
        is_bool = isinstance(x.type, ir.IntegerType) and ir.IntegerType(x.type).width == 1
        if want == "b" and not is_bool:
            zero = arith.ConstantOp(self.f32, ir.FloatAttr.get(self.f32, 0.0)).result
            return arith.CmpFOp(arith.CmpFPredicate.UNE, x, zero).result
        if want == "f" and is_bool:
            return arith.UIToFPOp(self.f32, x).result
        return x

    def op(self, old) -> None:
        name = old.operation.name
        if name == "arith.constant":
            a = old.attributes["value"]
            if not isinstance(a, (ir.FloatAttr, ir.IntegerAttr, ir.BoolAttr)):
                raise BodyError(f"a constant {a} in the body")
            self.env[old.results[0]] = float(a.value)
            return
        if any(isinstance(t, ir.F64Type) for t in [*(r.type for r in old.results), *(v.type for v in old.operands)]):
            self.demoted = True
        if name in _ALIASES:
            self.env[old.results[0]] = self.env[old.operands[0]]
            return
        if name == "arith.select":
            c, a, b = old.operands
            kind = "b" if _is_bool(a.type) else "f"
            res = arith.SelectOp(self.value(c, "b"), self.value(a, kind), self.value(b, kind)).result
        elif name in ("arith.cmpf", "arith.cmpi"):
            pred = ir.IntegerAttr(old.attributes["predicate"]).value
            pred = _CMPI_TO_CMPF[pred] if name == "arith.cmpi" else pred
            lhs, rhs = (self.value(v, "f") for v in old.operands)
            res = arith.CmpFOp(pred, lhs, rhs).result
        elif name in _BOOL_OPS:
            if not all(_is_bool(v.type) for v in old.operands):
                raise BodyError(f"'{name}' on integers (bitwise arithmetic)")
            res = ir.Operation.create(
                name, results=[self.i1], operands=[self.value(v, "b") for v in old.operands]
            ).result
        elif name in _TRUNCATIONS:
            res = self._truncated(self.value(old.operands[0], "f"), old.operands[0])
        elif name in _INT_DIVISIONS:
            res = self._divided(_INT_DIVISIONS[name], *(self.value(v, "f") for v in old.operands))
        elif name.startswith(("arith.", "math.")) and len(old.results) == 1:
            new = _INT_AS_FLOAT.get(name, name)
            if new.endswith("i") and new.startswith("arith.") or name.startswith("arith.fpto"):
                raise BodyError(f"'{name}' (integer division, remainder or truncation)")
            attrs = {"fastmath": old.attributes["fastmath"]} if new == name and "fastmath" in old.attributes else {}
            operands = [self.value(v, "f") for v in old.operands]
            res = ir.Operation.create(new, results=[self.f32], operands=operands, attributes=attrs).result
        else:
            raise BodyError(f"'{name}' in the body")
        why = generic_kernel.supported(res.owner)
        if why:
            raise BodyError(why)
        self.env[old.results[0]] = res

    def _truncated(self, x, v=None):
        """float -> int (toward zero) on values held as f32: the value itself when the body floored it (`v`
        is the old value of `x`), else floor(x) for x >= 0 and -floor(-x) below."""
        if v is not None and isinstance(v.owner, ir.OpView) and v.owner.operation.name == "math.floor":
            return x
        zero = arith.ConstantOp(self.f32, ir.FloatAttr.get(self.f32, 0.0)).result
        down = self._floor(x)
        up = arith.NegFOp(self._floor(arith.NegFOp(x).result))
        return arith.SelectOp(arith.CmpFOp(arith.CmpFPredicate.OLT, x, zero).result, up.result, down).result

    def _floor(self, x):
        return ir.Operation.create("math.floor", results=[self.f32], operands=[x]).result

    def _divided(self, rounding: str, a, b):
        """a / b of integers held as f32, rounded as `rounding` says, or the remainder a - trunc(a / b) * b."""
        q = arith.DivFOp(a, b).result
        if rounding == "floor":
            return self._floor(q)
        if rounding == "ceil":
            return arith.NegFOp(self._floor(arith.NegFOp(q).result)).result
        t = self._truncated(q)
        return t if rounding == "trunc" else arith.SubFOp(a, arith.MulFOp(t, b).result).result

    def block(self, old_block, yield_value=None, skip=()) -> None:
        """Rebuilds `old_block`'s ops (but `skip`) and yields `yield_value` (default: what it yields), as f32."""
        for old in old_block.operations:
            if old.operation.name == "linalg.yield":
                y = yield_value if yield_value is not None else old.operands[0]
                YieldOp(self.value(y, "f"))
                return
            if old.operation not in skip:
                self.op(old)


def _is_bool(t) -> bool:
    return isinstance(t, ir.IntegerType) and ir.IntegerType(t).width == 1
