"""Shape rules of the novella tensor ops: the core of the shape mutator.

Each rule (listed in the op's entry of `novella_mlir/optable.py`) maps the operands' symbolic shapes (lists of `AffineExpr`) and the
op's attributes to the result's symbolic shape. The frontend calls them as it
builds ops; `--novella-shape-infer` re-runs them over a whole module.
"""

from __future__ import annotations

from collections.abc import Callable

from torch_mlir import ir

from .. import symbolic as sy
from .verify import norm_on_input

Shape = list[ir.AffineExpr]


class ShapeError(ValueError):
    """A shape rule found operands whose symbolic shapes do not fit."""


_TABLE: list[Callable] = []  # [the op table's lookup], installed by `use_table`


def use_table(lookup: Callable) -> None:
    """Where the rules come from: `lookup(op name) -> entry (with its `shape` rule) or None`. The op table
    (`novella_mlir/optable.py`) installs its own: it names the rules, so it sits above this module."""
    _TABLE[:] = [lookup]


def _rule(op_name: str) -> Callable | None:
    if not _TABLE:
        raise ShapeError(f"no op table is installed to find the shape rule of '{op_name}': import novella_mlir.optable")
    entry = _TABLE[0](op_name)
    return entry.shape if entry else None


def has_rule(op_name: str) -> bool:
    return _rule(op_name) is not None


def infer(op_name: str, shapes: list[Shape], attrs, result_type) -> Shape:
    """Result shape of `op_name`; `result_type` gives static dims and, for
    ops whose size is not a function of operands (reshape, slice), the encoding."""
    rule = _rule(op_name)
    if rule is None:
        raise ShapeError(
            f"'{op_name}' has no shape rule: add one to its entry in novella_mlir/optable.py "
            "(a function of the operands' symbolic shapes and the attributes, in novella_mlir/dialects/shapes.py)"
        )
    return rule(shapes, attrs, result_type)


def _same(a: ir.AffineExpr, b: ir.AffineExpr) -> bool:
    return sy.equal(a, b)


def broadcast(a: Shape, b: Shape) -> Shape:
    rank = max(len(a), len(b))
    a = [sy.const(1)] * (rank - len(a)) + a
    b = [sy.const(1)] * (rank - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if sy.as_int(x) == 1:
            out.append(y)
        elif sy.as_int(y) == 1 or _same(x, y):
            out.append(x)
        else:
            raise ShapeError(f"cannot broadcast size {x} against {y}")
    return out


def binary(shapes, attrs, rt):
    return broadcast(shapes[0], shapes[1])


def unary(shapes, attrs, rt):
    return list(shapes[0])


def linear(shapes, attrs, rt):
    x, w = shapes[0], shapes[1]
    if not _same(x[-1], w[1]):
        raise ShapeError(f"linear contracts {x[-1]} with weight dim {w[1]}")
    return x[:-1] + [w[0]]


def fused_linear(shapes, attrs, rt):
    """`linear`'s shape; the residual (operand 3, when the segment sizes give one) must have it."""
    out = linear(shapes[:3], attrs, rt)
    sizes = list(ir.DenseI32ArrayAttr(attrs["operandSegmentSizes"])) if "operandSegmentSizes" in attrs else [1] * 3
    if len(sizes) > 3 and sizes[3]:
        r = shapes[3]
        if len(r) != len(out) or not all(_same(a, b) for a, b in zip(r, out)):
            raise ShapeError(f"fused_linear residual {r} differs from the result {out}")
    width = shapes[0][-1] if norm_on_input(attrs) else out[-1]  # a prologue norm: over the input rows
    for norm in shapes[3 + (len(sizes) > 3 and sizes[3]) :]:
        if len(norm) != 1 or not _same(norm[0], width):
            raise ShapeError(f"fused_linear norm weight/bias {norm} must be [{width}]")
    return out


def fused_mlp(shapes, attrs, rt):
    """x [..., K] through w1 [H, K] then w2 [N, H]: [..., N]; the residual (operand 5) must have it."""
    hidden = linear(shapes[:2], attrs, rt)
    out = linear([hidden, shapes[3]], attrs, rt)
    for r in shapes[5:]:
        if len(r) != len(out) or not all(_same(a, b) for a, b in zip(r, out)):
            raise ShapeError(f"fused_mlp residual {r} differs from the result {out}")
    return out


def matmul(shapes, attrs, rt):
    a, b = shapes
    if len(a) < 2 or len(b) != len(a):
        raise ShapeError(f"matmul needs operands of equal rank >= 2, got ranks {len(a)} and {len(b)}")
    tr = "transpose_rhs" in attrs and bool(ir.IntegerAttr(attrs["transpose_rhs"]).value)
    k, n = (b[-1], b[-2]) if tr else (b[-2], b[-1])
    if not _same(a[-1], k):
        raise ShapeError(f"matmul contracts {a[-1]} with {k}")
    return broadcast(a[:-2], b[:-2]) + [a[-2], n]


def attention(shapes, attrs, rt):
    q, k, v = shapes
    if not len(q) == len(k) == len(v) or len(q) < 2:
        raise ShapeError("attention needs query, key and value of equal rank >= 2")
    if not _same(q[-1], k[-1]):
        raise ShapeError(f"attention query dim {q[-1]} differs from key dim {k[-1]}")
    if not _same(k[-2], v[-2]):
        raise ShapeError(f"attention key length {k[-2]} differs from value length {v[-2]}")
    return broadcast(q[:-2], broadcast(k[:-2], v[:-2])) + [q[-2], v[-1]]


def transpose(shapes, attrs, rt):
    perm = list(ir.DenseI64ArrayAttr(attrs["perm"]))
    return [shapes[0][p] for p in perm]


def conv1d(shapes, attrs, rt):
    x, w = shapes[0], shapes[1]
    stride = ir.IntegerAttr(attrs["stride"]).value
    pad = ir.IntegerAttr(attrs["padding"]).value
    k = sy.as_int(w[2])
    nwc = "layout" in attrs and ir.StringAttr(attrs["layout"]).value == "nwc"
    length_in, cin = (x[1], x[2]) if nwc else (x[2], x[1])
    if not _same(cin, w[1]):
        raise ShapeError(f"conv1d input has {cin} channels, the weight expects {w[1]}")
    length = sy.floordiv(length_in + sy.const(2 * pad - k), stride) + sy.const(1)
    return [x[0], length, w[0]] if nwc else [x[0], w[0], length]


def from_result(shapes, attrs, rt):
    exprs = sy.shape_of(rt)
    if exprs is None:
        raise ShapeError(f"result type {rt} must carry its symbolic shape as encoding")
    if "dim" not in attrs:
        _check_same_numel(shapes[0], exprs)
    else:
        _check_slice(shapes[0], exprs, ir.IntegerAttr(attrs["dim"]).value)
    return exprs


def where(shapes, attrs, rt):
    return broadcast(shapes[0], broadcast(shapes[1], shapes[2]))


def broadcast_to(shapes, attrs, rt):
    exprs = sy.shape_of(rt)
    if exprs is None:
        raise ShapeError(f"result type {rt} must carry its symbolic shape as encoding")
    if not sy.equal_shapes(broadcast(shapes[0], exprs), exprs):
        raise ShapeError(f"{[str(e) for e in shapes[0]]} does not broadcast to {[str(e) for e in exprs]}")
    return exprs


def gather_rows(shapes, attrs, rt):
    table, indices = shapes
    if len(table) != 2:
        raise ShapeError(f"gather_rows needs a [N, C] table, got rank {len(table)}")
    return list(indices) + [table[1]]


def reduce_last(shapes, attrs, rt):
    return list(shapes[0][:-1]) + [sy.const(1)]


def concat(shapes, attrs, rt):
    d = ir.IntegerAttr(attrs["dim"]).value
    first = shapes[0]
    for s in shapes[1:]:
        if len(s) != len(first) or any(i != d and not _same(a, b) for i, (a, b) in enumerate(zip(s, first))):
            raise ShapeError(
                f"concat inputs differ outside dim {d}: {[str(e) for e in first]} vs {[str(e) for e in s]}"
            )
    total = shapes[0][d]
    for s in shapes[1:]:
        total = total + s[d]
    out = list(first)
    out[d] = sy.fold(total)
    return out


def _check_slice(a: Shape, b: Shape, dim: int) -> None:
    if len(a) != len(b) or any(i != dim and not _same(x, y) for i, (x, y) in enumerate(zip(a, b))):
        raise ShapeError(f"slice along dim {dim} changes another dim: {[str(e) for e in a]} -> {[str(e) for e in b]}")


def _check_same_numel(a: Shape, b: Shape) -> None:
    na, nb = sy.numel(a), sy.numel(b)
    if not sy.equal(na, nb):
        raise ShapeError(f"reshape changes the element count: {na} vs {nb}")


def flash_attention(shapes, attrs, rt):
    """`attention`'s shape on the logical (heads-major) operands; the mask [..., Mq, Lk] must have
    the key length last and Mq = Lq or 1."""
    from .verify import heads_major

    minor = list(ir.DenseI64ArrayAttr(attrs["heads_minor"])) if "heads_minor" in attrs else [0] * 4
    shapes = [heads_major(list(s), f) for s, f in zip(shapes[:3], minor)] + list(shapes[3:])
    out = heads_major(attention(shapes[:3], attrs, rt), minor[3])
    if len(shapes) == 4:
        m = shapes[3]
        if len(m) < 2 or not _same(m[-1], shapes[1][-2]):
            raise ShapeError(f"flash_attention mask last dim {m[-1]} differs from the key length {shapes[1][-2]}")
        if sy.as_int(m[-2]) != 1 and not _same(m[-2], shapes[0][-2]):
            raise ShapeError(f"flash_attention mask rows {m[-2]} are neither 1 nor the query length")
    return out


def generic(shapes, attrs, rt):
    """`novella.generic`: the result's encoded shape, or the inputs' broadcast (a static result dim where
    every input broadcasts); every input broadcasts to it."""
    exprs = sy.shape_of(rt)
    if exprs is None:
        exprs = shapes[0]
        for s in shapes[1:]:
            exprs = broadcast(exprs, s)
        static = list(ir.RankedTensorType(rt).shape)
        exprs = [sy.const(d) if d != ir.ShapedType.get_dynamic_size() else e for d, e in zip(static, exprs)]
    for s in shapes:
        if len(s) != len(exprs) or not sy.equal_shapes(broadcast(s, exprs), exprs):
            raise ShapeError(f"{[str(e) for e in s]} does not broadcast to {[str(e) for e in exprs]}")
    return exprs
