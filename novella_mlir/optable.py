"""The op table: one explicit entry per novella tensor op, keyed by op class.

An entry names everything the compiler knows about the op: the torch ops
that lower to it (torch op name -> lowering function), its shape rule, its
NPU kernel (or why it needs none) and the lit test that covers it.
`test/py/test_optable.py` fails when a dialect op has no entry, an entry
lacks a shape rule, a kernel or a lit test with a `?` case.

The table sits above what it names: nothing in the dialect, the kernels or the
lowerings imports it. The passes ask it for kernels and patterns (`get_kernel`,
`legalize_patterns`), the pipeline for the lowerings (`torch_lowerings`), and the
dialect's shape inference uses the lookup installed at the end of this file.

Adding an op: define `XxxOp` in `dialects/novella.py`, its shape rule in
`dialects/shapes.py`, its kernel in `kernels/`, its lowering in
`frontend/lowering/`, a lit test, and one entry below (a unary math op whose VEC
functions exist is one entry of `dialects/math_fns.py` plus its lit case:
docs/design.md, "Add a unary math op").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from .dialects import novella as nv
from .dialects import shapes
from .dialects.math_fns import MATH
from .frontend.lowering import activation, attention, elementwise, indexing, kv_cache, linear, nn, pointwise, shape_ops
from .kernels import attention as k_attention
from .kernels import conv as k_conv
from .kernels import data_movement as k_data
from .kernels import elementwise as k_elementwise
from .kernels import flash_attention as k_flash
from .kernels import flash_fusion as k_flash_fusion
from .kernels import indexing as k_index
from .kernels import kv_cache as k_kv
from .kernels import linear as k_linear
from .kernels import linear_mlp as k_mlp
from .kernels import normalization as k_norm
from .kernels.pointwise import Pointwise, Prefer
from .machine.target import MAX_COLS


@dataclass(frozen=True)
class OpDef:
    """What the compiler knows about one novella tensor op."""

    shape: Callable
    kernel: object | None
    lit: str
    lowers: dict[str, Callable] = field(default_factory=dict)
    no_kernel: str = ""  # why `kernel` is None: the op is an alias, or legalize rewrites it away


def _static_cols(op, tv) -> bool:
    """A static last dim that a row kernel's LOAD takes whole (else the column-tiled pointwise kernel)."""
    return tv.cols(-1) <= MAX_COLS


_ROWS_BINARY = k_elementwise.Binary()
_POINTWISE = Pointwise()
# The row kernels where they apply (goldens use them), else the general pointwise kernel.
_BINARY = Prefer(_ROWS_BINARY, _POINTWISE, lambda op, tv: _static_cols(op, tv) and _ROWS_BINARY.kinds(op, tv))
_UNARY = Prefer(k_elementwise.Unary(), _POINTWISE, _static_cols)
_SLICE = Prefer(k_data.Slice(), k_index.ColumnSlice(), lambda op, tv: k_data.Slice()._geometry(op, tv))
_LIT = "test/lit/"
# torch ops the generic path runs in as few cycles as the pointwise kernel or fewer, and matches eager
# (bench/generic.py part 2): no hand lowering. where.* are gone from their entry too. abs, neg and clamp
# stay: the generic path cannot take them on int tensors (math.absi, an int clamp with float bounds).
_GENERIC = frozenset({"exp", "sigmoid", "tanh", "sin"})
_LINEAR = k_linear.LINEAR  # one instance for both ops: their tile searches share its memo (`kernels.memoized`)

OPS: dict[type, OpDef] = {
    nv.LinearOp: OpDef(
        shapes.linear,
        _LINEAR,
        _LIT + "transforms/novella-tile.mlir",
        {"torch.aten.linear": linear.linear, "torch.aten.addmm": indexing.addmm},
    ),
    # a linear with residual / layer-norm epilogue (issue 10, part 4): formed by --novella-legalize, no torch op
    nv.FusedLinearOp: OpDef(shapes.fused_linear, _LINEAR, _LIT + "kernels/linear-epilogue.mlir"),
    # linear -> act -> linear with the hidden rows on chip (issue 22): formed by --novella-fuse, no torch op
    nv.FusedMlpOp: OpDef(shapes.fused_mlp, k_mlp.FUSED_MLP, _LIT + "transforms/novella-fuse-mlp.mlir"),
    nv.MatmulOp: OpDef(
        shapes.matmul,
        k_attention.Matmul(),
        _LIT + "kernels/attention.mlir",
        {"torch.aten.mm": attention.matmul, "torch.aten.bmm": attention.matmul, "torch.aten.matmul": attention.matmul},
    ),
    nv.AddOp: OpDef(
        shapes.binary,
        _BINARY,
        _LIT + "kernels/shape.mlir",
        {"torch.aten.add.Tensor": elementwise.add, "torch.aten.add.Scalar": elementwise.add},
    ),
    nv.SubOp: OpDef(
        shapes.binary,
        _BINARY,
        _LIT + "kernels/shape.mlir",
        {"torch.aten.sub.Tensor": elementwise.sub, "torch.aten.sub.Scalar": elementwise.sub},
    ),
    nv.MulOp: OpDef(
        shapes.binary,
        _BINARY,
        _LIT + "kernels/shape.mlir",
        {"torch.aten.mul.Tensor": elementwise.mul, "torch.aten.mul.Scalar": elementwise.mul},
    ),
    nv.DivOp: OpDef(
        shapes.binary,
        _BINARY,
        _LIT + "kernels/elementwise.mlir",
        {"torch.aten.div.Tensor": elementwise.div, "torch.aten.div.Scalar": elementwise.div},
    ),
    nv.ScalarOp: OpDef(shapes.unary, _UNARY, _LIT + "kernels/elementwise.mlir"),
    nv.ReluOp: OpDef(shapes.unary, _UNARY, _LIT + "kernels/elementwise.mlir", {"torch.aten.relu": activation.relu}),
    nv.GeluOp: OpDef(shapes.unary, _UNARY, _LIT + "kernels/nn.mlir", {"torch.aten.gelu": activation.gelu}),
    nv.SoftmaxOp: OpDef(
        shapes.unary,
        k_attention.Softmax(),
        _LIT + "kernels/attention.mlir",
        {
            "torch.aten._softmax": attention.softmax_internal,
            "torch.aten.softmax.int": attention.softmax,
            "torch.aten._safe_softmax": attention.safe_softmax,
            "torch.aten.log_softmax.int": attention.log_softmax,
            "torch.aten._log_softmax": attention.log_softmax,
            "torch.aten.logsumexp": attention.logsumexp,
        },
    ),
    nv.LayerNormOp: OpDef(
        shapes.unary,
        k_norm.LayerNorm(),
        _LIT + "kernels/nn.mlir",
        {"torch.aten.layer_norm": nn.layer_norm, "torch.aten.native_layer_norm": nn.native_layer_norm},
    ),
    # RMSNorm: formed by --novella-fuse-elementwise from the square, the mean and the pointwise tail, no torch op
    nv.RmsNormOp: OpDef(shapes.unary, k_norm.RmsNorm(), _LIT + "transforms/novella-fuse-elementwise.mlir"),
    # permute / transpose.int / t take the generic path (linalg.transpose -> shape_ops.any_transpose), in the
    # cycles of their old lowerings or fewer (bench/generic.py part 2); other lowerings emit it too
    nv.TransposeOp: OpDef(shapes.transpose, k_data.Transpose(), _LIT + "kernels/shape.mlir"),
    nv.ReshapeOp: OpDef(
        shapes.from_result,
        None,
        _LIT + "kernels/shape.mlir",
        {
            "torch.aten.view": shape_ops.view,
            "torch.aten.reshape": shape_ops.view,
            "torch.aten._unsafe_view": shape_ops.view,
            "torch.aten.unsqueeze": shape_ops.unsqueeze,
            "torch.aten.squeeze.dim": shape_ops.squeeze,
            "torch.aten.squeeze.dims": shape_ops.squeeze_dims,
            "torch.aten.squeeze": shape_ops.squeeze_dims,
            "torch.prims.squeeze": shape_ops.squeeze_dims,
            "torch.prims.collapse": shape_ops.collapse,
            "torch.aten.unflatten.int": shape_ops.unflatten,
            "torch.aten.flatten.using_ints": shape_ops.flatten,
        },
        no_kernel="a row-major reshape is a DRAM alias (--novella-allocate gives it its operand's buffer)",
    ),
    nv.SliceOp: OpDef(
        shapes.from_result,
        _SLICE,
        _LIT + "kernels/shape.mlir",
        {
            "torch.aten.slice.Tensor": shape_ops.slice_,
            "torch.aten.select.int": indexing.select,
            "torch.aten.narrow": indexing.narrow,
        },
    ),
    nv.Conv1dOp: OpDef(shapes.conv1d, k_conv.Conv1d(), _LIT + "kernels/nn.mlir", {"torch.aten.conv1d": nn.conv1d}),
    nv.AttentionOp: OpDef(
        shapes.attention,
        None,
        _LIT + "kernels/attention.mlir",
        {"torch.aten.scaled_dot_product_attention": attention.scaled_dot_product_attention},
        no_kernel="--novella-legalize decomposes it into matmul, softmax and matmul (kernels/attention.py)",
    ),
    nv.MathOp: OpDef(
        shapes.unary,
        _POINTWISE,
        _LIT + "kernels/pointwise.mlir",
        {
            **{f"torch.aten.{a}": pointwise.unary(fn) for fn, m in MATH.items() for a in m.aten if a not in _GENERIC},
            "torch.aten.expm1": pointwise.expm1,
            "torch.aten.log1p": pointwise.log1p,
            "torch.aten.logical_not": pointwise.logical_not,
            "torch.aten.bitwise_not": pointwise.logical_not,
            "torch.aten.pow.Tensor_Scalar": pointwise.pow_tensor_scalar,
            "torch.aten.pow.Scalar": pointwise.pow_scalar,
            "torch.aten.pow.Tensor_Tensor": pointwise.pow_tensor_tensor,
        },
    ),
    nv.CompareOp: OpDef(
        shapes.binary,
        _POINTWISE,
        _LIT + "kernels/pointwise.mlir",
        {
            **{f"torch.aten.{fn}.{k}": pointwise.compare(fn) for fn in nv.COMPARE_FNS for k in ("Tensor", "Scalar")},
            "torch.aten.logical_xor": pointwise.logical_xor,
            "torch.aten.__xor__.Tensor": pointwise.logical_xor,
            "torch.aten.bitwise_xor.Tensor": pointwise.logical_xor,
            "torch.aten._to_copy": pointwise.convert,
            "torch.aten.to.dtype": pointwise.convert,
            "torch.aten.to.dtype_layout": pointwise.convert,
            "torch.aten.type_as": pointwise.convert,
            "torch.prims.convert_element_type": pointwise.convert,
        },
    ),
    nv.MaximumOp: OpDef(
        shapes.binary,
        _POINTWISE,
        _LIT + "kernels/pointwise.mlir",
        {
            "torch.aten.maximum": pointwise.maximum,
            "torch.aten.logical_or": pointwise.logical_or,
            "torch.aten.bitwise_or.Tensor": pointwise.logical_or,
            "torch.aten.__or__.Tensor": pointwise.logical_or,
            "torch.aten.clamp": pointwise.clamp,
            "torch.aten.clamp.Tensor": pointwise.clamp,
        },
    ),
    nv.MinimumOp: OpDef(
        shapes.binary,
        _POINTWISE,
        _LIT + "kernels/pointwise.mlir",
        {
            "torch.aten.minimum": pointwise.minimum,
            "torch.aten.logical_and": pointwise.logical_and,
            "torch.aten.bitwise_and.Tensor": pointwise.logical_and,
            "torch.aten.__and__.Tensor": pointwise.logical_and,
        },
    ),
    nv.WhereOp: OpDef(shapes.where, _POINTWISE, _LIT + "kernels/pointwise.mlir"),  # emitted by other lowerings
    nv.BroadcastOp: OpDef(
        shapes.broadcast_to,
        _POINTWISE,
        _LIT + "kernels/pointwise.mlir",
        {"torch.aten.expand": indexing.expand, "torch.aten.repeat": indexing.repeat},
    ),
    nv.GatherRowsOp: OpDef(
        shapes.gather_rows,
        k_index.GatherRows(),
        _LIT + "kernels/indexing.mlir",
        {
            "torch.aten.embedding": indexing.embedding,
            "torch.aten.index_select": indexing.index_select,
            "torch.aten.gather": indexing.gather,
        },
    ),
    nv.ReduceOp: OpDef(
        shapes.reduce_last,
        k_index.Reduce(),
        _LIT + "kernels/indexing.mlir",
        {
            "torch.aten.mean.dim": indexing.mean,
            "torch.aten.sum.dim_IntList": indexing.sum_,
            "torch.aten.sum": indexing.sum_,
            "torch.aten.mean": indexing.mean,
            "torch.aten.amax": indexing.amax,
            "torch.aten.amin": indexing.amin,
            "torch.aten.var.correction": indexing.var,
            "torch.aten.var.dim": indexing.var,
            "torch.aten.std.correction": indexing.std,
            "torch.aten.std.dim": indexing.std,
        },
    ),
    nv.KvAppendOp: OpDef(
        shapes.concat,
        k_kv.KvAppend(),
        _LIT + "transforms/novella-kv-cache.mlir",
        {
            "torch.aten.slice_scatter": kv_cache.slice_scatter,
            "torch.aten.select_scatter": kv_cache.select_scatter,
            "torch.aten.index_put": kv_cache.index_put,
        },
    ),
    nv.KvWriteOp: OpDef(shapes.unary, k_kv.KvWrite(), _LIT + "transforms/novella-kv-cache.mlir"),
    # fused attention (issue 10, part 4): formed by --novella-legalize (FUSION_PATTERNS), no torch op
    nv.FlashAttentionOp: OpDef(shapes.flash_attention, k_flash.FlashAttention(), _LIT + "kernels/flash-attention.mlir"),
    nv.ConcatOp: OpDef(
        shapes.concat,
        k_index.Concat(),
        _LIT + "kernels/indexing.mlir",
        {
            "torch.aten.cat": indexing.cat,
            "torch.aten.split.Tensor": indexing.split,
            "torch.aten.split_with_sizes": indexing.split_with_sizes,
            "torch.aten.chunk": indexing.chunk,
            "torch.aten.pad": kv_cache.pad,
            "torch.aten.constant_pad_nd": kv_cache.pad,
        },
    ),
}

# torch ops that produce no novella op of their own: symbolic-size arithmetic, ops that
# forward their operand, and constants (weights, or weight tables sliced to a symbolic size).
FRONTEND_ONLY: dict[str, Callable] = {
    "torch.aten.detach_": shape_ops.identity,
    "torch.prims.view_of": shape_ops.identity,
    "torch.aten.arange": indexing.arange,
    "torch.aten.arange.start": indexing.arange,
    "torch.aten.arange.start_step": indexing.arange,
    "torch.aten.full": indexing.full,
    "torch.aten.eye": indexing.eye,
    "torch.aten.eye.m": indexing.eye,
    "torch.aten.zeros": indexing.zeros,
    "torch.aten.ones": indexing.ones,
    "torch.aten.full_like": indexing.full_like,
    "torch.aten.zeros_like": indexing.zeros_like,
    "torch.aten.ones_like": indexing.ones_like,
    "torch.aten.new_full": indexing.new_full,
    "torch.aten.new_zeros": indexing.new_zeros,
    "torch.aten.new_ones": indexing.new_ones,
    "torch.aten.scalar_tensor": indexing.scalar_tensor,
    "torch.aten.size.int": shape_ops.size,
    "torch.aten.sym_size.int": shape_ops.size,
    "torch.aten.add.int": shape_ops.int_add,
    "torch.aten.sub.int": shape_ops.int_sub,
    "torch.aten.neg.int": shape_ops.int_neg,
    "torch.aten.mul.int": shape_ops.int_mul,
    "torch.aten.floordiv.int": shape_ops.floordiv,
    "torch.aten.fmod.int": shape_ops.int_mod,
    "torch.aten.remainder.int": shape_ops.int_mod,
    "torch.aten.clone": shape_ops.identity,
    "torch.aten.contiguous": shape_ops.identity,
    "torch.aten.alias": shape_ops.identity,
    "torch.aten.detach": shape_ops.identity,
    "torch.aten.lift_fresh_copy": shape_ops.identity,
    "torch.aten.copy": kv_cache.copy,
    "torch.aten.dropout": shape_ops.dropout,
}

# Legalize rewrites, in the order they are added to the pattern set: (root op class, fn(op, rewriter)).
LEGALIZE_PATTERNS: tuple = (
    (nv.MatmulOp, k_attention.fold_transpose_into_matmul),
    (nv.AttentionOp, k_attention.decompose_attention),
    (nv.Conv1dOp, k_conv.conv_to_channels_last),
    (nv.GeluOp, k_conv.fuse_gelu_into_conv),
    (nv.TransposeOp, k_data.compose_transposes),
    (nv.GeluOp, k_data.sink_below_unary),
    (nv.ReluOp, k_data.sink_below_unary),
    (nv.ScalarOp, k_data.sink_below_unary),
)

# Fusions, added after LEGALIZE_PATTERNS unless --novella-legalize has fuse-attention=0.
FUSION_PATTERNS: tuple = (
    (nv.MatmulOp, k_flash_fusion.fuse_attention),
    (nv.FlashAttentionOp, k_flash_fusion.absorb_head_transposes),
)

# Epilogue fusions into a linear, each behind its --novella-legalize option: option -> (root op class,
# factory(Target) -> fn(op, rewriter)).
EPILOGUE_PATTERNS: dict[str, tuple] = {
    "fuse-residual": (nv.AddOp, k_linear.residual_pattern),
    "fuse-norm": (nv.LayerNormOp, k_linear.norm_pattern),
}

BY_NAME: dict[str, OpDef] = {cls.OPERATION_NAME: d for cls, d in OPS.items()}


def lookup(op: type | str) -> OpDef | None:
    """The entry of an op class or `novella.xxx` name, or None."""
    return OPS.get(op) if isinstance(op, type) else BY_NAME.get(op)


def torch_lowerings() -> dict[str, Callable]:
    """torch op name -> lowering function, over every entry and FRONTEND_ONLY."""
    table = dict(FRONTEND_ONLY)
    for cls, d in OPS.items():
        for name, fn in d.lowers.items():
            if name in table:
                raise AssertionError(f"{name} is lowered by two entries (the second is {cls.__name__})")
            table[name] = fn
    return table


def legalize_patterns(fusion: bool = True) -> list:
    """(root op class, fn(op, rewriter) -> falsy on success) for --novella-legalize, from the op table."""
    return list(LEGALIZE_PATTERNS) + (list(FUSION_PATTERNS) if fusion else [])


def get_kernel(op_name: str):
    """The kernel of novella op `op_name` from the op table, or None."""
    entry = lookup(op_name)
    return entry.kernel if entry else None


# ------------------------------------------------------------------ issue 8 op families: flip, argmax/argmin,
# matrix norms, prim.NumToTensor (lowerings in frontend/lowering/reductions.py, flip kernel in kernels/flip.py)
from .frontend.lowering import reductions  # noqa: E402
from .kernels import flip as k_flip  # noqa: E402

OPS[nv.FlipOp] = OpDef(shapes.unary, k_flip.Flip(), _LIT + "kernels/flip.mlir", {"torch.aten.flip": reductions.flip})
OPS[nv.ReduceOp].lowers.update(
    {
        "torch.aten.argmax": reductions.argmax,
        "torch.aten.argmin": reductions.argmin,
        "torch.aten.linalg_matrix_norm.str_ord": reductions.matrix_norm,
    }
)
FRONTEND_ONLY["torch.prim.NumToTensor.Scalar"] = reductions.num_to_tensor
BY_NAME[nv.FlipOp.OPERATION_NAME] = OPS[nv.FlipOp]
OPS[nv.DivOp].lowers["torch.aten.true_divide.Tensor"] = elementwise.div
OPS[nv.ReduceOp].lowers["torch.aten.linalg_matrix_norm"] = reductions.matrix_norm
OPS[nv.ReduceOp].lowers["torch.aten.linalg_norm"] = reductions.linalg_norm
OPS[nv.ReduceOp].lowers["torch.aten.linalg_norm.ord_str"] = reductions.linalg_norm
OPS[nv.FlipOp].lowers.update({"torch.aten.fliplr": reductions.fliplr, "torch.aten.flipud": reductions.flipud})

# ------------------------------------------------------------------ prefix scans: cumsum, cumprod
# (lowering in frontend/lowering/scan.py, kernel in kernels/scan.py)
from .frontend.lowering import scan  # noqa: E402
from .kernels import scan as k_scan  # noqa: E402

OPS[nv.ScanOp] = OpDef(
    shapes.unary,
    k_scan.Scan(),
    _LIT + "kernels/scan.mlir",
    {"torch.aten.cumsum": scan.cumsum, "torch.aten.cumprod": scan.cumprod},
)
BY_NAME[nv.ScanOp.OPERATION_NAME] = OPS[nv.ScanOp]

# ------------------------------------------------------------------ x[i, j] with index tensors (a row gather)
from .frontend.lowering import advanced_index  # noqa: E402

OPS[nv.GatherRowsOp].lowers["torch.aten.index.Tensor"] = advanced_index.index_tensor

# ------------------------------------------------------------------ the generic path: any op the table lacks goes
# through torch-mlir's linalg lowering (frontend/linalg/); no torch op names novella.generic itself
from .kernels import generic as k_generic  # noqa: E402

OPS[nv.GenericOp] = OpDef(shapes.generic, k_generic.Generic(), _LIT + "kernels/generic.mlir")
BY_NAME[nv.GenericOp.OPERATION_NAME] = OPS[nv.GenericOp]
LEGALIZE_PATTERNS += ((nv.GenericOp, k_generic.fuse_producer),)

# ------------------------------------------------------------------ longtail (issue 19): allocations whose
# values torch leaves unspecified (`new_empty(...).fill_(0)`, `empty_like(x).copy_(y)`) are zeros
FRONTEND_ONLY.update(
    {
        "torch.aten.new_empty": indexing.new_zeros,
        "torch.aten.empty_like": indexing.zeros_like,
        "torch.aten.empty.memory_format": indexing.zeros,
    }
)

# ------------------------------------------------------------------ conv and group norm: group_norm
# as sums over each group (a `?` dim: divided by the length's size) and elementwise ops (frontend/lowering/nn.py)
OPS[nv.ReduceOp].lowers.update(
    {"torch.aten.group_norm": nn.group_norm, "torch.aten.native_group_norm": nn.native_group_norm}
)

# the shape rules the dialect layer applies by op name come from this table (it names them, so it sits above)
shapes.use_table(lookup)
