"""linalg on tensors (torch-mlir's lowering of one torch op) -> novella ops in the module being built."""

from __future__ import annotations

from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import BroadcastOp, ConcatOp, MatmulOp, ReshapeOp
from ...errors import UnsupportedOpError
from ..lowering.shape_ops import affine, any_transpose, simplify
from . import body as bd
from .body import REDUCE as _REDUCE
from .body import Fill

_INDEX_OPS = {
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b, "arith.muli": lambda a, b: a * b,
}  # fmt: skip
_IGNORED = ("cf.assert", "tensor.empty")
_SCALAR_FLOAT = {"arith.addf": lambda a, b: a + b, "arith.subf": lambda a, b: a - b,
                 "arith.mulf": lambda a, b: a * b, "arith.divf": lambda a, b: a / b}  # fmt: skip
_SCALAR_CASTS = ("arith.sitofp", "arith.uitofp", "arith.extf", "arith.truncf", "arith.extsi", "arith.trunci")


class Converter:
    """Walks the lowered function; `env` maps its values to novella values, ints, affine exprs, floats or Fills."""

    def __init__(self, cx):
        self.cx = cx
        self.env: dict = {}

    def run(self, fn, args: list) -> list:
        block = fn.regions[0].blocks[0]
        self.env.update(zip(block.arguments, args))
        for op in block.operations:
            name = op.operation.name
            if name == "func.return":
                return [self._check(self.tensor(v), r) for v, r in zip(op.operands, self.cx.op.results)]
            try:
                self.convert(op, name)
            except bd.BodyError as e:
                raise self.refuse(
                    f"its linalg form computes {e}, which the vector unit has no instruction for"
                ) from None
            except KeyError:
                raise self.refuse(
                    f"its '{name}' reads a scalar computed at run time (e.g. a size of the length as a float)"
                ) from None
        raise AssertionError("no func.return")

    def refuse(self, why: str) -> UnsupportedOpError:
        from .outline import _refuse

        return _refuse(self.cx, why)

    # ------------------------------------------------------------------ values

    def shape(self, v) -> list:
        """The symbolic shape of the lowered function's value `v`."""
        x = self.env[v]
        return x.shape if isinstance(x, Fill) else self.cx.shape(x)

    def tensor(self, v) -> ir.Value:
        """The novella tensor of `v`; a Fill is a broadcast 0-d constant."""
        x = self.env[v]
        if isinstance(x, Fill):
            if x.value is None:
                raise self.refuse("its linalg form reads an uninitialized tensor")
            x = self.env[v] = self.emit(BroadcastOp, x.shape, input=self.cx.scalar(x.value))
        return x

    def emit(self, cls, shape=None, **fields) -> ir.Value:
        return self.cx.emit(cls, result_shape=shape, check=False, **fields)

    def reshape(self, v: ir.Value, shape: list) -> ir.Value:
        if sy.equal_shapes(self.cx.shape(v), shape):
            return v
        return self.emit(ReshapeOp, shape, input=v)

    def transpose(self, v: ir.Value, perm: list) -> ir.Value:
        """`v` permuted by `perm` (`shape_ops.any_transpose`: moving only size-1 dims is a reshape, any other
        permutation the transposes the kernel runs in one op each)."""
        return any_transpose(self.cx, v, list(perm), check=False)

    def _check(self, v: ir.Value, torch_result) -> ir.Value:
        self.cx._check_static(self.cx.shape(v))
        return v

    def _dims(self, rtype, dynamic: list) -> list:
        """The symbolic shape of a result type whose `?` dims are the values `dynamic`, in order."""
        it = iter(dynamic)
        return [
            sy.const(d) if d != ir.ShapedType.get_dynamic_size() else affine(self.env[next(it)]) for d in rtype.shape
        ]

    # ------------------------------------------------------------------ ops

    def convert(self, op, name: str) -> None:
        out = op.results[0] if len(op.results) else None
        if name in ("torch_c.to_builtin_tensor", "torch_c.from_builtin_tensor", "tensor.cast") or name.startswith(
            "torch_c."
        ):
            self.env[out] = self.env[op.operands[0]]
        elif name.startswith("torch.constant."):
            self.env[out] = None
        elif name in _SCALAR_CASTS:  # a size (an int or affine expr) as a float: a body reads it as one
            x = self.env[op.operands[0]]
            self.env[out] = float(x) if isinstance(x, (int, float)) and name.endswith(("tofp", "f")) else x
        elif name in _SCALAR_FLOAT and len(op.operands) == 2 and not isinstance(op.operands[0].type, ir.ShapedType):
            self.env[out] = self._scalar_float(op, name)
        elif name == "arith.constant":
            self.env[out] = self._constant(op)
        elif name in ("arith.minsi", "arith.maxsi"):
            self.env[out] = self._min_max(op, name)
        elif name in _INDEX_OPS or name in ("arith.floordivsi", "arith.divsi", "arith.ceildivsi", "arith.index_cast"):
            self.env[out] = self._index(op, name)
        elif name == "tensor.dim":
            self.env[out] = simplify(self.shape(op.operands[0])[self.env[op.operands[1]]])
        elif name in _IGNORED:
            if name == "tensor.empty":
                self.env[out] = Fill(None, self._dims(out.type, list(op.operands)))
        elif name == "linalg.fill":
            value = self.env[op.operands[0]]
            self.env[out] = Fill(float(value), self.shape(op.operands[1]))
        elif hasattr(self, "_" + name.replace(".", "_")):
            self.env[out] = getattr(self, "_" + name.replace(".", "_"))(op)
        else:
            raise self.refuse(f"its linalg form has '{name}', which the generic path does not convert")

    def _scalar_float(self, op, name: str):
        """Float arithmetic on scalars above the bodies: folded, or on a size exact as an affine expr."""
        a, b = (self.env[v] for v in op.operands)
        fn = _SCALAR_FLOAT[name]
        if isinstance(a, float) and isinstance(b, float):
            return float(fn(a, b))
        if name != "arith.divf" and all(isinstance(x, ir.AffineExpr) or float(x).is_integer() for x in (a, b)):
            return simplify(fn(*(x if isinstance(x, ir.AffineExpr) else sy.const(int(x)) for x in (a, b))))
        raise self.refuse(f"its linalg form computes '{name}' of a size of the length, which is not affine")

    def _constant(self, op):
        a = op.attributes["value"]
        if isinstance(a, (ir.IntegerAttr, ir.BoolAttr)):
            return int(a.value)
        if isinstance(a, ir.FloatAttr):
            return float(a.value)
        if isinstance(a, ir.DenseElementsAttr) and ir.RankedTensorType(op.results[0].type).rank == 0:
            import numpy as np

            return float(np.array(a).reshape(()))
        if isinstance(a, ir.DenseElementsAttr):
            import numpy as np

            return self.cx.add_weight("const", np.array(a).astype("float32"))
        raise self.refuse(f"its linalg form has a constant {a}")

    def _index(self, op, name: str):
        a = self.env[op.operands[0]]
        if name == "arith.index_cast":
            return a
        b = self.env[op.operands[1]]
        if isinstance(a, int) and isinstance(b, int):
            return {"arith.floordivsi": lambda: a // b, "arith.divsi": lambda: int(a / b),
                    "arith.ceildivsi": lambda: -(-a // b)}.get(name, lambda: _INDEX_OPS[name](a, b))()  # fmt: skip
        if name in _INDEX_OPS:
            return simplify(_INDEX_OPS[name](affine(a), affine(b)))
        if not isinstance(b, int) or b <= 0:
            raise self.refuse(f"a size divided by the size {b}, which is not affine")
        return simplify(sy.ceildiv(affine(a), b) if name == "arith.ceildivsi" else sy.floordiv(affine(a), b))

    def _min_max(self, op, name: str):
        """The min (max) of two sizes: folded when both are known, else the side that is the min (max) at
        every length of the range, proved symbolically."""
        a, b = (self.env[v] for v in op.operands)
        pick = min if name == "arith.minsi" else max
        if isinstance(a, int) and isinstance(b, int):
            return pick(a, b)
        box = sy.symbol_box(self.cx.symbols)
        lo, hi = (a, b) if sy.provably_ge(affine(b), affine(a), box) else (b, a)
        if not sy.provably_ge(affine(hi), affine(lo), box):
            raise self.refuse(f"its linalg form takes '{name}' of the sizes {a} and {b}; neither is always the smaller")
        return simplify(affine(lo if pick is min else hi))

    def _linalg_transpose(self, op):
        perm = list(ir.DenseI64ArrayAttr(op.attributes["permutation"]))
        return self.transpose(self.tensor(op.operands[0]), perm)

    def _linalg_broadcast(self, op):
        x = self.tensor(op.operands[0])
        shape = self.shape(op.operands[1])
        added = set(ir.DenseI64ArrayAttr(op.attributes["dimensions"]))
        src = iter(self.cx.shape(x))
        aligned = [sy.const(1) if i in added else next(src) for i in range(len(shape))]
        return self.emit(BroadcastOp, shape, input=self.reshape(x, aligned))

    def _tensor_expand_shape(self, op):
        static = list(ir.DenseI64ArrayAttr(op.attributes["static_output_shape"]))
        it = iter(op.operands[1:])
        shape = [sy.const(d) if d != ir.ShapedType.get_dynamic_size() else affine(self.env[next(it)]) for d in static]
        return self._reshaped(op.operands[0], shape)

    def _tensor_collapse_shape(self, op):
        src = self.shape(op.operands[0])
        groups = [[ir.IntegerAttr(i).value for i in g] for g in ir.ArrayAttr(op.attributes["reassociation"])]
        return self._reshaped(op.operands[0], [sy.numel([src[i] for i in g]) for g in groups])

    def _reshaped(self, v, shape: list):
        """`v` reshaped; a Fill (an init, perhaps uninitialized) stays one."""
        x = self.env[v]
        return Fill(x.value, shape) if isinstance(x, Fill) else self.reshape(self.tensor(v), shape)

    def _tensor_concat(self, op):
        dim = ir.IntegerAttr(op.attributes["dim"]).value
        out = self.tensor(op.operands[0])
        for v in op.operands[1:]:
            out = self.emit(
                ConcatOp, lhs=out, rhs=self.tensor(v), dim=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim)
            )
        return out

    def _tensor_extract_slice(self, op):
        from .movement import extract_slice

        return extract_slice(self, op)

    def _tensor_insert_slice(self, op):
        from .movement import insert_slice

        return insert_slice(self, op)

    def _tensor_pad(self, op):
        from .movement import pad

        return pad(self, op)

    def _linalg_conv_2d_nchw_fchw(self, op):
        from .conv import conv_2d_nchw_fchw

        return conv_2d_nchw_fchw(self, op)

    def _linalg_conv_2d_ngchw_gfchw(self, op):
        from .conv import conv_2d_ngchw_gfchw

        return conv_2d_ngchw_gfchw(self, op)

    def _linalg_depthwise_conv_2d_nchw_chw(self, op):
        from .conv import depthwise_conv_2d_nchw_chw

        return depthwise_conv_2d_nchw_chw(self, op)

    def _linalg_matmul(self, op):
        lhs, rhs = (self.tensor(v) for v in op.operands[:2])
        return self._accumulate(self.emit(MatmulOp, lhs=lhs, rhs=rhs), op.operands[2], "sum")

    _linalg_batch_matmul = _linalg_matmul

    def _linalg_generic(self, op):
        from .generic import generic

        return generic(self, op)

    def _accumulate(self, v: ir.Value, init, fn: str) -> ir.Value:
        """`v` combined with the initial value `init` of a reduction into it (nothing for the identity)."""
        x = self.env[init]
        if isinstance(x, Fill) and x.value == _identity(fn):
            return v
        from .generic import combine

        return combine(self, v, init, fn)


def _identity(fn: str) -> float:
    return next(ident for f, ident in _REDUCE.values() if f == fn)
