"""The `novella` dialect, defined in Python on IRDL (`torch_mlir.dialects.ext`).

Three layers of ops live here:

* tensor ops (`novella.linear`, `novella.add`, ...) produced by the frontend;
* `novella.macro`, one per tiled kernel, whose region holds tile-level ops
  (`novella.dma_load`, `novella.mma`, `novella.vop`, `novella.dma_store`);
* `novella.inst`, one NPU instruction template, produced by inst-gen.

Every dynamic dim of a tensor value carries its symbolic size as the tensor
encoding: ``tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>``. The
symbols' names and bounds live in the module attribute ``novella.symbols``.
"""

import sys
from collections.abc import Sequence
from typing import Any

from torch_mlir import ir
from torch_mlir.dialects import ext

from .math_fns import MATH

Tensor = ir.RankedTensorType


class Novella(ext.Dialect, name="novella"):
    """The Novella NPU dialect."""


def _fail(op, message: str) -> bool:
    op.location.emit_error(f"'{op.operation.name}' op {message}")
    return False


class _Invalid(Exception):
    """A verifier's finding, reported by `_verified` as the op's error."""


def _verified(n_operands: int):
    """Wraps a verifier: operand count and ranked, non-empty tensor types are checked first, and
    attribute or type errors become the op's diagnostic instead of a Python exception."""

    def wrap(fn):
        def verify(op) -> bool:
            try:
                _structure(op, n_operands)
                return fn(op)
            except _Invalid as e:
                return _fail(op, str(e))
            except (ValueError, TypeError, KeyError, IndexError) as e:
                return _fail(op, f"is malformed: {e}")

        return verify

    return wrap


def _structure(op, n_operands: int) -> None:
    if len(op.operands) != n_operands:
        raise _Invalid(f"expects {n_operands} operand(s), got {len(op.operands)}")
    for v in (*op.operands, *op.results):
        t = v.type
        if not isinstance(t, ir.RankedTensorType):
            raise _Invalid(f"expects ranked tensors, got {t}")
        if 0 in t.shape:  # a `?` dim is _DYNAMIC, not 0
            raise _Invalid(f"does not support zero-size dims, got {t}")


def _attr(op, name: str, kind, default=None):
    """The value of attribute `name`, which must be a `kind` (e.g. ir.StringAttr); `default` if absent."""
    if name not in op.attributes:
        if default is None:
            raise _Invalid(f"needs the attribute '{name}'")
        return default
    a = op.attributes[name]
    if not isinstance(a, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        what = " or ".join(k.__name__.removesuffix("Attr").lower() for k in kinds)
        raise _Invalid(f"attribute '{name}' must be a {what} attribute, got {a}")
    return a.value


def _static_dims(t: ir.RankedTensorType) -> list[int | None]:
    return [None if d == _DYNAMIC else d for d in t.shape]


_DYNAMIC = ir.ShapedType.get_dynamic_size()


def _dims_compatible(a: int | None, b: int | None) -> bool:
    return a is None or b is None or a == b


def _broadcast_ok(a: ir.RankedTensorType, b: ir.RankedTensorType, out) -> bool:
    da, db, do = _static_dims(a), _static_dims(b), _static_dims(out)
    rank = len(do)
    if len(da) > rank or len(db) > rank:
        return False
    da = [1] * (rank - len(da)) + da
    db = [1] * (rank - len(db)) + db
    for x, y, z in zip(da, db, do):
        want = y if x == 1 else x
        if x not in (1, None) and y not in (1, None) and x != y:
            return False
        if not _dims_compatible(want, z) and not (x == 1 and y == 1 and z == 1):
            return False
    return True


def _expands_to(a: ir.RankedTensorType, out: ir.RankedTensorType) -> bool:
    """Every dim of `a` (right-aligned) is 1 or the result's."""
    da, do = _static_dims(a), _static_dims(out)
    if len(da) > len(do):
        return False
    return all(x == 1 or _dims_compatible(x, z) for x, z in zip(da, do[len(do) - len(da) :]))


def _f32(*types) -> bool:
    return all(isinstance(t.element_type, ir.F32Type) for t in types)


class WeightOp(Novella.Operation, name="weight"):
    """A constant tensor (parameter, buffer or folded literal) living in DRAM.

    The data is held outside the IR, in the model's weight table, by `name`."""

    name: ir.StringAttr
    result: ext.Result[Any]

    @staticmethod
    def verify_invariants(op) -> bool:
        t = op.results[0].type
        if not isinstance(t, ir.RankedTensorType):
            return True  # a !torch.vtensor while the module is still in the torch dialect
        if _DYNAMIC in t.shape:
            return _fail(op, f"weight must have a static shape, got {t}")
        return True


class LinearOp(Novella.Operation, name="linear"):
    """`act(input @ weight^T + bias)` over the last dim, PyTorch `nn.Linear` layout.

    input: [..., K], weight: [N, K], bias: [N], result: [..., N].
    `act` is "none", "relu" or "gelu"; legalize fuses activations into it."""

    input: ext.Operand[Tensor]
    weight: ext.Operand[Tensor]
    bias: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    act: ir.StringAttr = ext.attribute(default_factory=lambda: ir.StringAttr.get("none"))

    @staticmethod
    @_verified(3)
    def verify_invariants(op) -> bool:
        x, w, b = (v.type for v in op.operands)
        y = op.results[0].type
        if not _f32(x, w, b, y):
            return _fail(op, "supports only f32 tensors")
        if w.rank != 2 or b.rank != 1:
            return _fail(op, f"expects weight [N, K] and bias [N], got {w} and {b}")
        n, k = w.get_dim_size(0), w.get_dim_size(1)
        if not _dims_compatible(_static_dims(x)[-1], k):
            return _fail(op, f"input inner dim must be {k} (weight is {n}x{k}), got {x}")
        if b.get_dim_size(0) != n or _static_dims(y)[-1] != n or y.rank != x.rank:
            return _fail(op, f"result must be [..., {n}] with bias [{n}], got {y}")
        act = _attr(op, "act", ir.StringAttr, "none")
        if act not in ("none", "relu", "gelu"):
            return _fail(op, f"unknown activation '{act}' (expected none, relu or gelu)")
        return True


class FusedLinearOp(Novella.Operation, name="fused_linear"):
    """A `novella.linear` with tensor operands in its epilogue: `act(input @ weight^T + bias)`, then
    `+ residual` (a tensor of the result's shape), then a layer norm over the last dim with
    `norm_weight`, `norm_bias` and `norm_eps`. Each stage but the matmul is optional (residual, or
    the norm's two operands, present or absent together; `norm_eps` counts only with them). Written by `--novella-legalize`
    (`fuse-residual`, `fuse-norm`) from `add(linear, x)` and `layer_norm` of a linear; the sum and
    the normalized rows are computed on the output tile before its one STORE."""

    input: ext.Operand[Tensor]
    weight: ext.Operand[Tensor]
    bias: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    act: ir.StringAttr = ext.attribute(default_factory=lambda: ir.StringAttr.get("none"))
    residual: ext.Operand[Tensor] | None = None
    norm_weight: ext.Operand[Tensor] | None = None
    norm_bias: ext.Operand[Tensor] | None = None
    norm_eps: ir.FloatAttr = ext.attribute(default_factory=lambda: ir.FloatAttr.get_f32(1e-5))

    @staticmethod
    def verify_invariants(op) -> bool:
        try:
            res, norm = linear_epilogue(op)
            _structure(op, 3 + res + 2 * norm)
            _attr(op, "norm_eps", ir.FloatAttr)
        except _Invalid as e:
            return _fail(op, str(e))
        if not LinearOp.verify_invariants(_LinearView(op)):
            return False
        y = op.results[0].type
        extra = [v.type for v in op.operands[3:]]
        if not _f32(*extra):
            return _fail(op, "supports only f32 tensors")
        if res and _static_dims(extra[0]) != _static_dims(y):
            return _fail(op, f"residual must have the result's shape {y}, got {extra[0]}")
        n = _static_dims(y)[-1]
        if norm and any(_static_dims(t) != [n] for t in extra[res:]):
            return _fail(op, f"norm_weight and norm_bias must be [{n}], got {extra[res:]}")
        return True


def linear_epilogue(op) -> tuple[bool, bool]:
    """(has a residual, has a layer norm) of a `novella.linear` or `novella.fused_linear`."""
    if op.operation.name != "novella.fused_linear":
        return False, False
    sizes = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    if len(sizes) != 6 or sizes[:3] != [1, 1, 1] or sizes[4] != sizes[5]:
        raise _Invalid(f"operandSegmentSizes must be [1, 1, 1, 0|1, n, n], got {sizes}")
    return bool(sizes[3]), bool(sizes[4])


class _LinearView:
    """The first three operands of a fused linear, as `LinearOp.verify_invariants` reads an op."""

    def __init__(self, op):
        self.operation, self.location, self.attributes = op.operation, op.location, op.attributes
        self.operands, self.results = list(op.operands)[:3], op.results


class MatmulOp(Novella.Operation, name="matmul"):
    """Batched matmul `lhs @ rhs` (or `lhs @ rhs^T` with `transpose_rhs`).

    lhs: [..., M, K], rhs: [..., K, N] ([..., N, K] if transposed), result:
    [..., M, N]. Batch dims are equal or 1 (broadcast); M, K, N may be dynamic."""

    lhs: ext.Operand[Tensor]
    rhs: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    transpose_rhs: ir.IntegerAttr = ext.attribute(default_factory=lambda: ir.BoolAttr.get(False))

    @staticmethod
    @_verified(2)
    def verify_invariants(op) -> bool:
        a, b = (v.type for v in op.operands)
        y = op.results[0].type
        if not _f32(a, b, y):
            return _fail(op, "supports only f32 tensors")
        if a.rank < 2 or b.rank != a.rank or y.rank != a.rank:
            return _fail(op, f"expects operands and result of equal rank >= 2, got {a}, {b} -> {y}")
        tr = bool(_attr(op, "transpose_rhs", (ir.BoolAttr, ir.IntegerAttr), False))
        db, dy = _static_dims(b), _static_dims(y)
        k_b, n_b = (db[-1], db[-2]) if tr else (db[-2], db[-1])
        if not _dims_compatible(_static_dims(a)[-1], k_b):
            return _fail(op, f"contraction dims differ: {a} @ {b}")
        if not _dims_compatible(_static_dims(a)[-2], dy[-2]) or not _dims_compatible(n_b, dy[-1]):
            return _fail(op, f"result {y} is not [..., M, N] of {a} @ {b}")
        return True


class _ElementwiseBinary:
    """Shared verifier: f32 operands that broadcast to the result shape."""

    @staticmethod
    @_verified(2)
    def verify_invariants(op) -> bool:
        a, b = (v.type for v in op.operands)
        y = op.results[0].type
        if not _f32(a, b, y):
            return _fail(op, "supports only f32 tensors")
        if not _broadcast_ok(a, b, y):
            return _fail(op, f"operands {a} and {b} do not broadcast to {y}")
        return True


class _BinaryOp(Novella.Operation):
    """Fields and verifier shared by the broadcasting elementwise binary ops."""

    lhs: ext.Operand[Tensor]
    rhs: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    verify_invariants = _ElementwiseBinary.verify_invariants


class AddOp(_BinaryOp, name="add"):
    """Elementwise `lhs + rhs` with NumPy broadcasting."""


class SubOp(_BinaryOp, name="sub"):
    """Elementwise `lhs - rhs` with NumPy broadcasting."""


class MulOp(_BinaryOp, name="mul"):
    """Elementwise `lhs * rhs` with NumPy broadcasting."""


class DivOp(_BinaryOp, name="div"):
    """Elementwise `lhs / rhs` with NumPy broadcasting."""


class _SameShapeUnary:
    @staticmethod
    @_verified(1)
    def verify_f32(op) -> bool:
        if not _f32(op.operands[0].type, op.results[0].type):
            return _fail(op, "supports only f32 tensors")
        return True

    @staticmethod
    @_verified(1)
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        if not _f32(x, y):
            return _fail(op, "supports only f32 tensors")
        if _static_dims(x) != _static_dims(y):
            return _fail(op, f"result {y} must have the operand's shape {x}")
        return True


class ScalarOp(Novella.Operation, name="scalar"):
    """Elementwise op with a compile-time scalar: `fn` is one of SCALAR_FNS (arithmetic, max/min, compares)."""

    input: ext.Operand[Tensor]
    fn: ir.StringAttr
    value: ir.FloatAttr
    result: ext.Result[Tensor]

    @staticmethod
    @_verified(1)
    def verify_invariants(op) -> bool:
        fn = _attr(op, "fn", ir.StringAttr)
        if fn not in SCALAR_FNS:
            return _fail(op, f"unknown fn '{fn}' (expected one of {', '.join(SCALAR_FNS)})")
        _attr(op, "value", ir.FloatAttr)
        return _SameShapeUnary.verify_invariants(op)


class _UnaryOp(Novella.Operation):
    """Fields and verifier shared by the shape-preserving unary ops."""

    input: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    verify_invariants = _SameShapeUnary.verify_invariants


class ReluOp(_UnaryOp, name="relu"):
    """Elementwise `max(x, 0)`."""


class GeluOp(_UnaryOp, name="gelu"):
    """Elementwise GELU, erf form: `0.5 * x * (1 + erf(x / sqrt(2)))`."""


class SoftmaxOp(_UnaryOp, name="softmax"):
    """Softmax over the last dim (which may be dynamic). A row whose inputs are all -inf is NaN, as
    in torch.softmax, or 0 with `safe` (torch's `_safe_softmax`, the softmax of SDPA)."""

    safe: ir.IntegerAttr = ext.attribute(default_factory=lambda: ir.BoolAttr.get(False))

    @staticmethod
    @_verified(1)
    def verify_invariants(op) -> bool:
        _attr(op, "safe", (ir.BoolAttr, ir.IntegerAttr), False)
        return _SameShapeUnary.verify_invariants(op)


class LayerNormOp(Novella.Operation, name="layer_norm"):
    """Layer normalization over the last dim with affine `weight` and `bias`."""

    input: ext.Operand[Tensor]
    weight: ext.Operand[Tensor]
    bias: ext.Operand[Tensor]
    eps: ir.FloatAttr
    result: ext.Result[Tensor]

    @staticmethod
    @_verified(3)
    def verify_invariants(op) -> bool:
        x, w, b = (v.type for v in op.operands)
        _attr(op, "eps", ir.FloatAttr)
        c = _static_dims(x)[-1]
        if c is None or _static_dims(w) != [c] or _static_dims(b) != [c]:
            return _fail(op, f"needs a static last dim matching weight/bias, got {x}, {w}, {b}")
        y = op.results[0].type
        if not _f32(x, y) or _static_dims(x) != _static_dims(y):
            return _fail(op, f"supports only f32 tensors and a result of the input's shape, got {x} -> {y}")
        return True


class TransposeOp(Novella.Operation, name="transpose"):
    """Permutes dims: result dim i is input dim `perm[i]`."""

    input: ext.Operand[Tensor]
    perm: Any
    result: ext.Result[Tensor]

    @staticmethod
    @_verified(1)
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        if not isinstance(op.attributes["perm"], ir.DenseI64ArrayAttr):
            return _fail(op, f"attribute 'perm' must be array<i64: ...>, got {op.attributes['perm']}")
        perm = list(ir.DenseI64ArrayAttr(op.attributes["perm"]))
        if sorted(perm) != list(range(x.rank)) or y.rank != x.rank:
            return _fail(op, f"perm {perm} is not a permutation of rank {x.rank}")
        dx, dy = _static_dims(x), _static_dims(y)
        if any(not _dims_compatible(dx[p], dy[i]) for i, p in enumerate(perm)):
            return _fail(op, f"result {y} is not {x} permuted by {perm}")
        return True


class ReshapeOp(Novella.Operation, name="reshape"):
    """Row-major reshape; the result's symbolic shape is its type encoding."""

    input: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    verify_invariants = _SameShapeUnary.verify_f32


class SliceOp(Novella.Operation, name="slice"):
    """`input[start : start + size]` along `dim`; the size is the result's (possibly symbolic) dim. A
    negative start counts from the end of the dim, as in Python: `start = -1` is position `n - 1` of a
    `?` dim of size n (`x.select(d, -1)`, `x[:, -3:]`), a start the JIT evaluates at run time."""

    input: ext.Operand[Tensor]
    dim: ir.IntegerAttr
    start: ir.IntegerAttr
    result: ext.Result[Tensor]

    @staticmethod
    @_verified(1)
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        d = _attr(op, "dim", ir.IntegerAttr)
        start = _attr(op, "start", ir.IntegerAttr)
        if y.rank != x.rank or not 0 <= d < x.rank:
            return _fail(op, f"dim {d} / start {start} do not slice {x} to {y}")
        dx, dy = _static_dims(x), _static_dims(y)
        if any(i != d and not _dims_compatible(a, b) for i, (a, b) in enumerate(zip(dx, dy))):
            return _fail(op, f"result {y} may differ from {x} only in dim {d}")
        if start < 0 and (dx[d] is not None or (dy[d] is not None and dy[d] > -start)):
            return _fail(op, f"a negative start {start} (from the end) needs a `?` dim {d} and at most {-start} rows")
        if start >= 0 and None not in (dx[d], dy[d]) and start + dy[d] > dx[d]:
            return _fail(op, f"slice [{start}, {start + dy[d]}) is out of bounds of dim {d} of {x}")
        return _SameShapeUnary.verify_f32(op)


class Conv1dOp(Novella.Operation, name="conv1d"):
    """`act(conv1d(input, weight) + bias)`, PyTorch semantics (no dilation, groups = 1).

    weight is [Cout, Cin, K] and bias [Cout]. `layout` "ncw": input [N, Cin, L],
    result [N, Cout, L'] (PyTorch); "nwc" (channels-last, what the kernel runs):
    input [N, L, Cin], result [N, L', Cout]. L' = (L + 2*padding - K) floordiv stride + 1.
    `act` is "none" or "gelu" (legalize fuses it)."""

    input: ext.Operand[Tensor]
    weight: ext.Operand[Tensor]
    bias: ext.Operand[Tensor]
    stride: ir.IntegerAttr
    padding: ir.IntegerAttr
    result: ext.Result[Tensor]
    layout: ir.StringAttr = ext.attribute(default_factory=lambda: ir.StringAttr.get("ncw"))
    act: ir.StringAttr = ext.attribute(default_factory=lambda: ir.StringAttr.get("none"))

    @staticmethod
    @_verified(3)
    def verify_invariants(op) -> bool:
        x, w, b = (v.type for v in op.operands)
        y = op.results[0].type
        if not _f32(x, w, b, y):
            return _fail(op, "supports only f32 tensors")
        layout = _attr(op, "layout", ir.StringAttr, "ncw")
        act = _attr(op, "act", ir.StringAttr, "none")
        if _attr(op, "stride", ir.IntegerAttr) < 1 or _attr(op, "padding", ir.IntegerAttr) < 0:
            return _fail(op, "needs stride >= 1 and padding >= 0")
        if layout not in ("ncw", "nwc") or act not in ("none", "gelu"):
            return _fail(op, f"layout must be ncw or nwc and act none or gelu, got {layout}, {act}")
        if x.rank != 3 or w.rank != 3 or b.rank != 1 or y.rank != 3:
            return _fail(op, f"expects a rank-3 input, weight and result and a rank-1 bias, got {x}, {w}, {b}")
        ch = 1 if layout == "ncw" else 2
        cout, cin = w.get_dim_size(0), w.get_dim_size(1)
        if not _dims_compatible(_static_dims(x)[ch], cin) or _static_dims(y)[ch] != cout:
            return _fail(op, f"channels of {x} -> {y} do not match weight {w} ({layout})")
        if b.get_dim_size(0) != cout:
            return _fail(op, f"bias must be [{cout}], got {b}")
        return True


class AttentionOp(Novella.Operation, name="attention"):
    """Scaled dot-product attention `softmax(q @ k^T * scale) @ v` over [..., L, D] operands.

    query: [..., Lq, D], key: [..., Lk, D], value: [..., Lk, Dv], result: [..., Lq, Dv];
    no mask, no dropout, not causal."""

    query: ext.Operand[Tensor]
    key: ext.Operand[Tensor]
    value: ext.Operand[Tensor]
    scale: ir.FloatAttr
    result: ext.Result[Tensor]

    @staticmethod
    @_verified(3)
    def verify_invariants(op) -> bool:
        q, k, v = (x.type for x in op.operands)
        _attr(op, "scale", ir.FloatAttr)
        y = op.results[0].type
        if not _f32(q, k, v, y):
            return _fail(op, "supports only f32 tensors")
        if not q.rank == k.rank == v.rank == y.rank or q.rank < 2:
            return _fail(op, f"expects query, key, value and result of equal rank >= 2, got {q}, {k}, {v}")
        dq, dk, dv, dy = (_static_dims(t) for t in (q, k, v, y))
        if not _dims_compatible(dq[-1], dk[-1]) or not _dims_compatible(dk[-2], dv[-2]):
            return _fail(op, f"query/key head dims or key/value lengths differ: {q}, {k}, {v}")
        if not _dims_compatible(dq[-2], dy[-2]) or not _dims_compatible(dv[-1], dy[-1]):
            return _fail(op, f"result {y} must be [..., Lq, Dv] for query {q} and value {v}")
        return True


MATH_FNS = tuple(MATH)  # dialects/math_fns.py
COMPARE_FNS = ("lt", "le", "gt", "ge", "eq", "ne")
REDUCE_FNS = ("sum", "mean", "max", "min")
SCALAR_FNS = ("add", "sub", "mul", "div", "rsub", "max", "min") + COMPARE_FNS


def _str_attr(op, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value


class MathOp(Novella.Operation, name="math"):
    """Elementwise math function `fn` (one of MATH_FNS); `not` is 1 - x on a 0/1 mask."""

    input: ext.Operand[Tensor]
    fn: ir.StringAttr
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        if _str_attr(op, "fn") not in MATH_FNS:
            return _fail(op, f"unknown fn '{_str_attr(op, 'fn')}' (expected one of {', '.join(MATH_FNS)})")
        return _SameShapeUnary.verify_invariants(op)


class CompareOp(Novella.Operation, name="compare"):
    """Elementwise `lhs <fn> rhs` with NumPy broadcasting, as a 0.0/1.0 mask (fn in lt, le, gt, ge, eq, ne)."""

    lhs: ext.Operand[Tensor]
    rhs: ext.Operand[Tensor]
    fn: ir.StringAttr
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        if _str_attr(op, "fn") not in COMPARE_FNS:
            return _fail(op, f"unknown compare '{_str_attr(op, 'fn')}' (expected one of {', '.join(COMPARE_FNS)})")
        return _ElementwiseBinary.verify_invariants(op)


class MaximumOp(_BinaryOp, name="maximum"):
    """Elementwise `max(lhs, rhs)` with NumPy broadcasting (also logical or of 0/1 masks)."""


class MinimumOp(_BinaryOp, name="minimum"):
    """Elementwise `min(lhs, rhs)` with NumPy broadcasting."""


class WhereOp(Novella.Operation, name="where"):
    """`cond != 0 ? x : y` elementwise, the three broadcasting to the result."""

    cond: ext.Operand[Tensor]
    x: ext.Operand[Tensor]
    y: ext.Operand[Tensor]
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        c, x, y = (v.type for v in op.operands)
        r = op.results[0].type
        if not _f32(c, x, y, r):
            return _fail(op, "supports only f32 tensors")
        if not all(_expands_to(t, r) for t in (c, x, y)):
            return _fail(op, f"operands {c}, {x}, {y} do not broadcast to {r}")
        return True


class BroadcastOp(Novella.Operation, name="broadcast"):
    """A broadcast copy (`expand`): size-1 dims of `input` repeated to the result's (encoded) shape."""

    input: ext.Operand[Tensor]
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        if not _expands_to(x, y):
            return _fail(op, f"{x} does not broadcast to {y}")
        return _SameShapeUnary.verify_f32(op)


class GatherRowsOp(Novella.Operation, name="gather_rows"):
    """`table[indices]`: rows of a [N, C] table picked by integer-valued indices of any shape.

    result: indices.shape + [C]; an index outside [0, N) faults on the NPU (GATHER)."""

    table: ext.Operand[Tensor]
    indices: ext.Operand[Tensor]
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        t, i = (v.type for v in op.operands)
        y = op.results[0].type
        if not _f32(t, i, y):
            return _fail(op, "supports only f32 tensors (indices are held as f32)")
        if t.rank != 2 or y.rank != i.rank + 1 or not _dims_compatible(_static_dims(y)[-1], t.get_dim_size(1)):
            return _fail(op, f"expects a [N, C] table and result indices.shape + [C], got {t}, {i} -> {y}")
        return True


class ReduceOp(Novella.Operation, name="reduce"):
    """`fn` (sum, mean, max, min) over the last dim, kept as size 1: [..., C] -> [..., 1]."""

    input: ext.Operand[Tensor]
    fn: ir.StringAttr
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        if _str_attr(op, "fn") not in REDUCE_FNS:
            return _fail(op, f"unknown reduction '{_str_attr(op, 'fn')}' (expected one of {', '.join(REDUCE_FNS)})")
        if y.rank != x.rank or _static_dims(y)[-1] != 1:
            return _fail(op, f"result {y} must be the input {x} with its last dim reduced to 1")
        return _SameShapeUnary.verify_f32(op)


class ConcatOp(Novella.Operation, name="concat"):
    """`torch.cat([lhs, rhs], dim)`: two tensors, equal except in `dim`, one after the other along it.

    Binary because an IRDL variadic operand binds one type for all its operands;
    the frontend chains more inputs."""

    lhs: ext.Operand[Tensor]
    rhs: ext.Operand[Tensor]
    dim: ir.IntegerAttr
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        types = [v.type for v in op.operands]
        y = op.results[0].type
        d = ir.IntegerAttr(op.attributes["dim"]).value
        if not types or not _f32(*types, y) or not 0 <= d < y.rank or any(t.rank != y.rank for t in types):
            return _fail(op, f"expects f32 inputs of the result's rank and 0 <= dim < {y.rank}, got dim {d}")
        dy = _static_dims(y)
        for t in types:
            if any(i != d and not _dims_compatible(a, b) for i, (a, b) in enumerate(zip(_static_dims(t), dy))):
                return _fail(op, f"input {t} differs from the result {y} outside dim {d}")
        return True


class DmaGatherOp(Novella.Operation, name="dma_gather"):
    """Tile gather: rows of tensor `src` picked by the index buffer `idx` into SRAM `buffer` (GATHER)."""

    src: ext.Operand[Tensor]
    buffer: ir.StringAttr
    idx: ir.StringAttr
    tensor: ir.IntegerAttr


class MacroOp(Novella.Operation, name="macro", traits=[ir.NoTerminatorTrait]):
    """One tiled kernel: its region runs once per point of the tile `grid`.

    `grid` maps the symbols to the loop extents (one result per loop dim,
    outermost first). Tile ops in the region read tensors through their SSA
    operand (captured from above), write the macro's result, and address
    SRAM by buffer name; `novella-inst-gen` turns them into `novella.inst`."""

    kernel: ir.StringAttr
    grid: ir.AffineMapAttr
    result: ext.Result[Tensor]
    body: ext.Region


class DmaLoadOp(Novella.Operation, name="dma_load"):
    """Tile load: rows of tensor `src` into SRAM `buffer`; `tensor` is its operand slot in the kernel.

    Address attributes are affine maps over (grid dims)[symbols]."""

    src: ext.Operand[Tensor]
    buffer: ir.StringAttr
    tensor: ir.IntegerAttr


class DmaStoreOp(Novella.Operation, name="dma_store"):
    """Tile store: rows of SRAM `buffer` into the enclosing macro's result tensor."""

    buffer: ir.StringAttr


class MmaOp(Novella.Operation, name="mma"):
    """Tile matmul on the MAC array: `acc (+)= lhs @ rhs`, buffers named by attribute."""

    acc: ir.StringAttr
    lhs: ir.StringAttr
    rhs: ir.StringAttr


class VopOp(Novella.Operation, name="vop"):
    """Tile vector op `fn` on SRAM buffers (`dst`, `a`, optional `b` or `imm`)."""

    fn: ir.StringAttr
    dst: ir.StringAttr


class InstOp(Novella.Operation, name="inst"):
    """One NPU instruction template. Each ISA field is an integer (constant),
    or an affine map over (grid dims)[symbols] whose results are combined
    with `min`. `when` (an integer set over the same dims) guards it. A LOAD
    has the tensor it reads as operand; `dram_base` is relative to it."""

    src: Sequence[ext.Operand[Tensor]]
    opcode: ir.StringAttr


# The bindings import `torch_mlir.dialects.<namespace>` before wrapping an op of a dialect they have no
# module for, and retry after every failure: ~0.1 ms per wrapped op, ~1 s of a Whisper compile. This module
# is the `novella` dialect's module.
sys.modules.setdefault(f"torch_mlir.dialects.{Novella.DIALECT_NAMESPACE}", sys.modules[__name__])


def load(context: ir.Context | None = None) -> None:
    """Registers the dialect in the current (or given) context, once."""
    ctx = context or ir.Context.current
    if not ctx.is_dialect_loaded(Novella.DIALECT_NAMESPACE):
        with ctx:
            Novella.load()


class KvAppendOp(Novella.Operation, name="kv_append"):
    """A KV cache append, `torch.cat([past, new], dim)` where `past` is a function input (the cache).

    The frontend recognizes the pattern; without paging its kernel is a concat. With
    `novella.paged` (set by `--novella-kv-cache`) `past` and the result are one paged tensor in
    the page pool: the kernel stores only `new`, in place, at the row `past` ends at."""

    past: ext.Operand[Tensor]
    new: ext.Operand[Tensor]
    dim: ir.IntegerAttr
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        p, n, y = op.operands[0].type, op.operands[1].type, op.results[0].type
        d = ir.IntegerAttr(op.attributes["dim"]).value
        if not _f32(p, n, y) or not (p.rank == n.rank == y.rank) or not 0 <= d < y.rank:
            return _fail(op, f"expects f32 past, new and result of one rank and 0 <= dim < rank, got dim {d}")
        for t in (p, n):
            if any(
                i != d and not _dims_compatible(a, b) for i, (a, b) in enumerate(zip(_static_dims(t), _static_dims(y)))
            ):
                return _fail(op, f"{t} differs from the result {y} outside dim {d}")
        return True


class KvWriteOp(Novella.Operation, name="kv_write"):
    """The cache write of a prefill: `input` (every position's key or value rows, [.., heads, T, head_dim])
    copied into the paged cache (`novella.paged`, set by `--novella-kv-cache`). The result is the
    cache tensor; the function returns it in place of `input`."""

    input: ext.Operand[Tensor]
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        if not _f32(x, y) or x.rank != y.rank or x.rank < 2:
            return _fail(op, f"expects f32 input and result of one rank >= 2, got {x} -> {y}")
        return True


# ------------------------------------------------------------------ flip (issue 8 op families)


class FlipOp(Novella.Operation, name="flip"):
    """`torch.flip(input, [dim])`: the order of dim `dim` reversed (the dim may be dynamic)."""

    input: ext.Operand[Tensor]
    dim: ir.IntegerAttr
    result: ext.Result[Tensor]

    @staticmethod
    @_verified(1)
    def verify_invariants(op) -> bool:
        x = op.operands[0].type
        d = _attr(op, "dim", ir.IntegerAttr)
        if not 0 <= d < x.rank:
            return _fail(op, f"dim {d} is out of range for {x}")
        return _SameShapeUnary.verify_invariants(op)


# ------------------------------------------------------------------ fused attention (issue 10, part 4)


def heads_major(dims: list, minor: int) -> list:
    """The logical [..., H, L, D] dims of a tensor stored [..., L, H, D] when `minor`, else `dims`."""
    return dims[:-3] + [dims[-2], dims[-3], dims[-1]] if minor else dims


class FlashAttentionOp(Novella.Operation, name="flash_attention"):
    """Fused attention `softmax(scale * q @ k^T + mask) @ v`, the scores kept on chip (online softmax).

    query: [..., Lq, D], key: [..., Lk, D], value: [..., Lk, Dv], result: [..., Lq, Dv]; the
    batch dims of each operand equal the result's or multiply to 1. `mask` (optional, additive)
    is [..., Mq, Lk] with Mq = Lq or 1, its batch dims multiplying to 1 or to the result's.
    `causal` = 1 keeps key j for query i when j <= i (torch's top-left `is_causal`; Lq = Lk).
    `safe` (from the softmax's): a query row whose masked scores are all -inf gives 0, not NaN.
    `heads_minor` (query, key, value, result; 0 or 1): a 1 means that tensor is stored as
    [..., L, H, D] (the heads inside each position's row, as a projection writes it); the shapes
    above are then its logical transpose [..., H, L, D]. Written by `--novella-legalize` from
    matmul -> softmax -> matmul, with the head transposes around it absorbed."""

    query: ext.Operand[Tensor]
    key: ext.Operand[Tensor]
    value: ext.Operand[Tensor]
    scale: ir.FloatAttr
    causal: ir.IntegerAttr
    heads_minor: Any  # array<i64: 4 flags>
    result: ext.Result[Tensor]
    mask: ext.Operand[Tensor] | None = None
    safe: ir.IntegerAttr = ext.attribute(default_factory=lambda: ir.BoolAttr.get(False))

    @staticmethod
    def verify_invariants(op) -> bool:
        try:
            _structure(op, len(op.operands))
            _attr(op, "scale", ir.FloatAttr)
            _attr(op, "safe", (ir.BoolAttr, ir.IntegerAttr), False)
            causal = _attr(op, "causal", ir.IntegerAttr)
        except _Invalid as e:
            return _fail(op, str(e))
        types = [x.type for x in op.operands]
        y = op.results[0].type
        if len(types) not in (3, 4) or not _f32(*types, y):
            return _fail(op, f"expects 3 or 4 f32 operands (query, key, value, mask), got {len(types)}")
        q, k, v = types[:3]
        if not q.rank == k.rank == v.rank == y.rank or q.rank < 2:
            return _fail(op, f"expects query, key, value and result of equal rank >= 2, got {q}, {k}, {v}")
        if not isinstance(op.attributes["heads_minor"], ir.DenseI64ArrayAttr):
            return _fail(op, f"attribute 'heads_minor' must be array<i64: ...>, got {op.attributes['heads_minor']}")
        minor = list(ir.DenseI64ArrayAttr(op.attributes["heads_minor"]))
        if len(minor) != 4 or set(minor) - {0, 1} or (any(minor) and q.rank < 3):
            return _fail(op, f"heads_minor must be 4 flags 0/1 (rank >= 3 where set), got {minor}")
        dq, dk, dv, dy = (heads_major(_static_dims(t), f) for t, f in zip((q, k, v, y), minor))
        if not _dims_compatible(dq[-1], dk[-1]) or not _dims_compatible(dk[-2], dv[-2]):
            return _fail(op, f"query/key head dims or key/value lengths differ: {q}, {k}, {v}")
        if not _dims_compatible(dq[-2], dy[-2]) or not _dims_compatible(dv[-1], dy[-1]):
            return _fail(op, f"result {y} must be [..., Lq, Dv] for query {q} and value {v}")
        if causal not in (0, 1):
            return _fail(op, f"causal must be 0 or 1, got {causal}")
        if len(types) == 4 and (types[3].rank < 2 or not _dims_compatible(_static_dims(types[3])[-1], dk[-2])):
            return _fail(op, f"mask {types[3]} must be [..., Lq or 1, Lk] for key {k}")
        return True


# ------------------------------------------------------------------ prefix scans (cumsum, cumprod)

SCAN_FNS = ("sum", "prod")


class ScanOp(Novella.Operation, name="scan"):
    """Inclusive prefix scan along `dim` (which may be dynamic): `fn` "sum" is `torch.cumsum`,
    "prod" `torch.cumprod`. result[..., i, ...] combines input[..., 0..i, ...]; the shape is the input's.
    Integer and bool inputs are held as f32; the frontend refuses an integer scan that could leave
    the range fp32 holds exactly (frontend/lowering/scan.py)."""

    input: ext.Operand[Tensor]
    dim: ir.IntegerAttr
    fn: ir.StringAttr
    result: ext.Result[Tensor]

    @staticmethod
    @_verified(1)
    def verify_invariants(op) -> bool:
        x = op.operands[0].type
        d = _attr(op, "dim", ir.IntegerAttr)
        fn = _attr(op, "fn", ir.StringAttr)
        if fn not in SCAN_FNS:
            return _fail(op, f"unknown scan '{fn}' (expected one of {', '.join(SCAN_FNS)})")
        if not 0 <= d < x.rank:
            return _fail(op, f"dim {d} is out of range for {x}")
        return _SameShapeUnary.verify_invariants(op)


# ------------------------------------------------------------------ the generic path (frontend/linalg/)


GENERIC_INPUTS = 6


class GenericOp(Novella.Operation, name="generic", traits=[ir.NoTerminatorTrait]):
    """An elementwise op of any body: a `linalg.generic` (parallel iterators) from torch-mlir's own lowering.

    The region's one block takes one scalar per input (f32, or i1 for a mask) and ends in `novella.yield`;
    its `arith`/`math` ops are one VEC each per tile. Up to GENERIC_INPUTS inputs. `indexing_maps` give, per input, the result dims it
    reads (a constant 0 where it broadcasts); the kernel turns them into DMA strides. `demoted = "f64"`
    says the body was f64 in torch-mlir's lowering (e.g. a mean's divisor) and runs in f32."""

    x0: ext.Operand[Tensor]
    indexing_maps: ir.ArrayAttr
    result: ext.Result[Tensor]
    body: ext.Region
    x1: ext.Operand[Tensor] | None = None  # optional operands: an IRDL variadic binds one type for all
    x2: ext.Operand[Tensor] | None = None
    x3: ext.Operand[Tensor] | None = None
    x4: ext.Operand[Tensor] | None = None
    x5: ext.Operand[Tensor] | None = None

    @staticmethod
    def verify_invariants(op) -> bool:
        maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        y = op.results[0].type
        if len(maps) != len(op.operands) or not _f32(y, *(v.type for v in op.operands)):
            return _fail(op, f"needs one indexing map per f32 input, got {len(maps)} for {len(op.operands)}")
        for v, m in zip(op.operands, maps):
            reads = [str(e) in (f"d{i}", "0") for i, e in enumerate(m.results)]
            if m.n_dims != y.rank or len(m.results) != v.type.rank or not all(reads):
                return _fail(op, f"map {m} does not read {v.type} over the loops of {y} (d<i> or 0 in place i)")
        block = op.regions[0].blocks[0]
        if (
            len(block.arguments) != len(op.operands)
            or block.operations[len(block.operations) - 1].name != "novella.yield"
        ):
            return _fail(op, "needs a body with one argument per input, ending in novella.yield")
        return True


class YieldOp(Novella.Operation, name="yield"):
    """The value a `novella.generic` body computes."""

    value: ext.Operand[Any]
