"""The `novella` dialect, defined in Python on IRDL (`torch_mlir.dialects.ext`): its graph level.

Three layers of ops make up the dialect (one dialect, `dialect.Novella`, one registration, `load`):

* tensor ops (`novella.linear`, `novella.add`, ...) produced by the frontend, declared here;
* `novella.macro`, one per tiled kernel, whose region holds tile-level ops
  (`novella.dma_load`, `novella.mma`, `novella.vop`, `novella.dma_store`);
* `novella.inst`, one NPU instruction template, produced by inst-gen.

The macro, tile and instruction ops are declared in `novella_lower.py` (a file over 600 lines
otherwise; they carry the backend's decisions, not tensor shapes), the attention and KV-cache ops in
`novella_attention.py`; both are re-exported here. Shared
verifier helpers live in `verify.py`, the longer ops' verifiers in `op_verifiers.py`.

Every dynamic dim of a tensor value carries its symbolic size as the tensor
encoding: ``tensor<1x?x64xf32, affine_map<()[s0] -> (1, s0, 64)>>``. The
symbols' names and bounds live in the module attribute ``novella.symbols``.
"""

import sys
from typing import Any

from torch_mlir import ir
from torch_mlir.dialects import ext

from . import op_verifiers as ov
from .dialect import Novella
from .math_fns import MATH
from .novella_attention import AttentionOp, FlashAttentionOp, KvAppendOp, KvWriteOp  # noqa: F401 (one home)
from .novella_lower import DmaGatherOp, DmaLoadOp, DmaStoreOp, InstOp, MacroOp, MmaOp, VopOp  # noqa: F401 (one home)
from .novella_mlp import FusedMlpOp  # noqa: F401 (one home)
from .verify import (
    DYNAMIC,
    attr,
    dims_compatible,
    expands_to,
    f32,
    fail,
    static_dims,
    str_attr,
    verified,
    verify_binary,
    verify_f32,
    verify_same_shape,
)
from .verify import GATED as GATED  # re-exported (kernels)
from .verify import heads_major as heads_major  # re-exported (kernels)
from .verify import linear_epilogue as linear_epilogue  # re-exported (kernels)
from .verify import norm_is_rms as norm_is_rms  # re-exported (kernels)

Tensor = ir.RankedTensorType


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
        if DYNAMIC in t.shape:
            return fail(op, f"weight must have a static shape, got {t}")
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
    verify_invariants = ov.linear


class FusedLinearOp(Novella.Operation, name="fused_linear"):
    """A `novella.linear` with tensor operands in its epilogue: `act(input @ weight^T + bias)`, then
    `+ residual` (a tensor of the result's shape), then a layer norm over the last dim with
    `norm_weight`, `norm_bias` and `norm_eps`. Each stage but the matmul is optional (residual, or
    the norm's two operands, present or absent together; `norm_eps` counts only with them). Written by `--novella-legalize`
    (`fuse-residual`, `fuse-norm`) from `add(linear, x)` and `layer_norm` of a linear; the sum and
    the normalized rows are computed on the output tile before its one STORE. With `norm_input` the
    layer norm is a prologue instead: `act(LN(input) @ weight^T + bias) (+ residual)`, the norm's
    operands [K] (`fuse-prenorm`, from a `layer_norm` whose every use is a linear's input: the
    normalized rows never go to DRAM). Without `norm_bias` (a prologue only) the norm is an RMSNorm,
    `x * rsqrt(mean(x * x) + norm_eps) * norm_weight` (`fuse-prenorm` from a `novella.rms_norm`). With
    act "swiglu" the residual is a gate: `silu(residual) * (input @ weight^T + bias)` (`fuse-gated`, from a
    `novella.generic` computing SwiGLU's product of a linear's result)."""

    input: ext.Operand[Tensor]
    weight: ext.Operand[Tensor]
    bias: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    act: ir.StringAttr = ext.attribute(default_factory=lambda: ir.StringAttr.get("none"))
    residual: ext.Operand[Tensor] | None = None
    norm_weight: ext.Operand[Tensor] | None = None
    norm_bias: ext.Operand[Tensor] | None = None
    norm_eps: ir.FloatAttr = ext.attribute(default_factory=lambda: ir.FloatAttr.get_f32(1e-5))
    norm_input: ir.IntegerAttr = ext.attribute(default_factory=lambda: ir.BoolAttr.get(False))
    verify_invariants = ov.fused_linear


class MatmulOp(Novella.Operation, name="matmul"):
    """Batched matmul `lhs @ rhs` (or `lhs @ rhs^T` with `transpose_rhs`).

    lhs: [..., M, K], rhs: [..., K, N] ([..., N, K] if transposed), result:
    [..., M, N]. Batch dims are equal or 1 (broadcast); M, K, N may be dynamic."""

    lhs: ext.Operand[Tensor]
    rhs: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    transpose_rhs: ir.IntegerAttr = ext.attribute(default_factory=lambda: ir.BoolAttr.get(False))
    verify_invariants = ov.matmul


class _BinaryOp(Novella.Operation):
    """Fields and verifier shared by the broadcasting elementwise binary ops."""

    lhs: ext.Operand[Tensor]
    rhs: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    verify_invariants = verify_binary


class AddOp(_BinaryOp, name="add"):
    """Elementwise `lhs + rhs` with NumPy broadcasting."""


class SubOp(_BinaryOp, name="sub"):
    """Elementwise `lhs - rhs` with NumPy broadcasting."""


class MulOp(_BinaryOp, name="mul"):
    """Elementwise `lhs * rhs` with NumPy broadcasting."""


class DivOp(_BinaryOp, name="div"):
    """Elementwise `lhs / rhs` with NumPy broadcasting."""


class ScalarOp(Novella.Operation, name="scalar"):
    """Elementwise op with a compile-time scalar: `fn` is one of SCALAR_FNS (arithmetic, max/min, compares)."""

    input: ext.Operand[Tensor]
    fn: ir.StringAttr
    value: ir.FloatAttr
    result: ext.Result[Tensor]

    @staticmethod
    @verified(1)
    def verify_invariants(op) -> bool:
        fn = attr(op, "fn", ir.StringAttr)
        if fn not in SCALAR_FNS:
            return fail(op, f"unknown fn '{fn}' (expected one of {', '.join(SCALAR_FNS)})")
        attr(op, "value", ir.FloatAttr)
        return verify_same_shape(op)


class _UnaryOp(Novella.Operation):
    """Fields and verifier shared by the shape-preserving unary ops."""

    input: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    verify_invariants = verify_same_shape


class ReluOp(_UnaryOp, name="relu"):
    """Elementwise `max(x, 0)`."""


class GeluOp(_UnaryOp, name="gelu"):
    """Elementwise GELU, erf form: `0.5 * x * (1 + erf(x / sqrt(2)))`."""


class SoftmaxOp(_UnaryOp, name="softmax"):
    """Softmax over the last dim (which may be dynamic). A row whose inputs are all -inf is NaN, as
    in torch.softmax, or 0 with `safe` (torch's `_safe_softmax`, the softmax of SDPA)."""

    safe: ir.IntegerAttr = ext.attribute(default_factory=lambda: ir.BoolAttr.get(False))

    @staticmethod
    @verified(1)
    def verify_invariants(op) -> bool:
        attr(op, "safe", (ir.BoolAttr, ir.IntegerAttr), False)
        return verify_same_shape(op)


class LayerNormOp(Novella.Operation, name="layer_norm"):
    """Layer normalization over the last dim with affine `weight` and `bias`."""

    input: ext.Operand[Tensor]
    weight: ext.Operand[Tensor]
    bias: ext.Operand[Tensor]
    eps: ir.FloatAttr
    result: ext.Result[Tensor]

    @staticmethod
    @verified(3)
    def verify_invariants(op) -> bool:
        x, w, b = (v.type for v in op.operands)
        attr(op, "eps", ir.FloatAttr)
        c = static_dims(x)[-1]
        if c is None or static_dims(w) != [c] or static_dims(b) != [c]:
            return fail(op, f"needs a static last dim matching weight/bias, got {x}, {w}, {b}")
        y = op.results[0].type
        if not f32(x, y) or static_dims(x) != static_dims(y):
            return fail(op, f"supports only f32 tensors and a result of the input's shape, got {x} -> {y}")
        return True


class RmsNormOp(Novella.Operation, name="rms_norm"):
    """`y = x * rsqrt(mean(x * x) + eps) * w` per row over the last dim (RMSNorm), `weight` [C]. No torch
    op lowers to it: `--novella-fuse-elementwise` forms it from the square, the mean and the pointwise tail."""

    input: ext.Operand[Tensor]
    weight: ext.Operand[Tensor]
    eps: ir.FloatAttr
    result: ext.Result[Tensor]

    @staticmethod
    @verified(2)
    def verify_invariants(op) -> bool:
        x, w = (v.type for v in op.operands)
        attr(op, "eps", ir.FloatAttr)
        c = static_dims(x)[-1]
        if c is None or static_dims(w) != [c]:
            return fail(op, f"needs a static last dim matching the weight, got {x}, {w}")
        y = op.results[0].type
        if not f32(x, y) or static_dims(x) != static_dims(y):
            return fail(op, f"supports only f32 tensors and a result of the input's shape, got {x} -> {y}")
        return True


class TransposeOp(Novella.Operation, name="transpose"):
    """Permutes dims: result dim i is input dim `perm[i]`."""

    input: ext.Operand[Tensor]
    perm: Any
    result: ext.Result[Tensor]

    @staticmethod
    @verified(1)
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        if not isinstance(op.attributes["perm"], ir.DenseI64ArrayAttr):
            return fail(op, f"attribute 'perm' must be array<i64: ...>, got {op.attributes['perm']}")
        perm = list(ir.DenseI64ArrayAttr(op.attributes["perm"]))
        if sorted(perm) != list(range(x.rank)) or y.rank != x.rank:
            return fail(op, f"perm {perm} is not a permutation of rank {x.rank}")
        dx, dy = static_dims(x), static_dims(y)
        if any(not dims_compatible(dx[p], dy[i]) for i, p in enumerate(perm)):
            return fail(op, f"result {y} is not {x} permuted by {perm}")
        return True


class ReshapeOp(Novella.Operation, name="reshape"):
    """Row-major reshape; the result's symbolic shape is its type encoding."""

    input: ext.Operand[Tensor]
    result: ext.Result[Tensor]
    verify_invariants = verify_f32


class SliceOp(Novella.Operation, name="slice"):
    """`input[start : start + size]` along `dim`; the size is the result's (possibly symbolic) dim. A
    negative start counts from the end of the dim, as in Python: `start = -1` is position `n - 1` of a
    `?` dim of size n (`x.select(d, -1)`, `x[:, -3:]`), a start the JIT evaluates at run time. A start
    that is an affine map `()[s0, ...] -> (e)` is the expression e of the symbols (a relative-position
    table read from its middle, `pe[:, M - T + 1 : M + T]`), also evaluated by the JIT; the slice must
    lie inside the dim at every length the bounds allow (the kernel proves it)."""

    input: ext.Operand[Tensor]
    dim: ir.IntegerAttr
    start: ir.IntegerAttr | ir.AffineMapAttr
    result: ext.Result[Tensor]
    verify_invariants = ov.slice_


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
    verify_invariants = ov.conv1d


MATH_FNS = tuple(MATH)  # dialects/math_fns.py
COMPARE_FNS = ("lt", "le", "gt", "ge", "eq", "ne")
REDUCE_FNS = ("sum", "mean", "max", "min")
SCALAR_FNS = ("add", "sub", "mul", "div", "rsub", "max", "min") + COMPARE_FNS


class MathOp(Novella.Operation, name="math"):
    """Elementwise math function `fn` (one of MATH_FNS); `not` is 1 - x on a 0/1 mask."""

    input: ext.Operand[Tensor]
    fn: ir.StringAttr
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        if str_attr(op, "fn") not in MATH_FNS:
            return fail(op, f"unknown fn '{str_attr(op, 'fn')}' (expected one of {', '.join(MATH_FNS)})")
        return verify_same_shape(op)


class CompareOp(Novella.Operation, name="compare"):
    """Elementwise `lhs <fn> rhs` with NumPy broadcasting, as a 0.0/1.0 mask (fn in lt, le, gt, ge, eq, ne)."""

    lhs: ext.Operand[Tensor]
    rhs: ext.Operand[Tensor]
    fn: ir.StringAttr
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        if str_attr(op, "fn") not in COMPARE_FNS:
            return fail(op, f"unknown compare '{str_attr(op, 'fn')}' (expected one of {', '.join(COMPARE_FNS)})")
        return verify_binary(op)


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
        if not f32(c, x, y, r):
            return fail(op, "supports only f32 tensors")
        if not all(expands_to(t, r) for t in (c, x, y)):
            return fail(op, f"operands {c}, {x}, {y} do not broadcast to {r}")
        return True


class BroadcastOp(Novella.Operation, name="broadcast"):
    """A broadcast copy (`expand`): size-1 dims of `input` repeated to the result's (encoded) shape."""

    input: ext.Operand[Tensor]
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        if not expands_to(x, y):
            return fail(op, f"{x} does not broadcast to {y}")
        return verify_f32(op)


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
        if not f32(t, i, y):
            return fail(op, "supports only f32 tensors (indices are held as f32)")
        if t.rank != 2 or y.rank != i.rank + 1 or not dims_compatible(static_dims(y)[-1], t.get_dim_size(1)):
            return fail(op, f"expects a [N, C] table and result indices.shape + [C], got {t}, {i} -> {y}")
        return True


class ReduceOp(Novella.Operation, name="reduce"):
    """`fn` (sum, mean, max, min) over the last dim, kept as size 1: [..., C] -> [..., 1]."""

    input: ext.Operand[Tensor]
    fn: ir.StringAttr
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        if str_attr(op, "fn") not in REDUCE_FNS:
            return fail(op, f"unknown reduction '{str_attr(op, 'fn')}' (expected one of {', '.join(REDUCE_FNS)})")
        if y.rank != x.rank or static_dims(y)[-1] != 1:
            return fail(op, f"result {y} must be the input {x} with its last dim reduced to 1")
        return verify_f32(op)


class ConcatOp(Novella.Operation, name="concat"):
    """`torch.cat([lhs, rhs], dim)`: two tensors, equal except in `dim`, one after the other along it.

    Binary because an IRDL variadic operand binds one type for all its operands;
    the frontend chains more inputs."""

    lhs: ext.Operand[Tensor]
    rhs: ext.Operand[Tensor]
    dim: ir.IntegerAttr
    result: ext.Result[Tensor]
    verify_invariants = ov.concat


# ------------------------------------------------------------------ flip (issue 8 op families)


class FlipOp(Novella.Operation, name="flip"):
    """`torch.flip(input, [dim])`: the order of dim `dim` reversed (the dim may be dynamic)."""

    input: ext.Operand[Tensor]
    dim: ir.IntegerAttr
    result: ext.Result[Tensor]

    @staticmethod
    @verified(1)
    def verify_invariants(op) -> bool:
        x = op.operands[0].type
        d = attr(op, "dim", ir.IntegerAttr)
        if not 0 <= d < x.rank:
            return fail(op, f"dim {d} is out of range for {x}")
        return verify_same_shape(op)


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
    @verified(1)
    def verify_invariants(op) -> bool:
        x = op.operands[0].type
        d = attr(op, "dim", ir.IntegerAttr)
        fn = attr(op, "fn", ir.StringAttr)
        if fn not in SCAN_FNS:
            return fail(op, f"unknown scan '{fn}' (expected one of {', '.join(SCAN_FNS)})")
        if not 0 <= d < x.rank:
            return fail(op, f"dim {d} is out of range for {x}")
        return verify_same_shape(op)


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
    verify_invariants = ov.generic


class YieldOp(Novella.Operation, name="yield"):
    """The value a `novella.generic` body computes."""

    value: ext.Operand[Any]


# The bindings import `torch_mlir.dialects.<namespace>` before wrapping an op of a dialect they have no
# module for, and retry after every failure: ~0.1 ms per wrapped op, ~1 s of a Whisper compile. This module
# is the `novella` dialect's module.
sys.modules.setdefault(f"torch_mlir.dialects.{Novella.DIALECT_NAMESPACE}", sys.modules[__name__])


def load(context: ir.Context | None = None) -> None:
    """Registers the dialect (the ops of this module, `novella_attention.py` and `novella_lower.py`) in the current (or given)
    context, once."""
    ctx = context or ir.Context.current
    if not ctx.is_dialect_loaded(Novella.DIALECT_NAMESPACE):
        with ctx:
            Novella.load()
