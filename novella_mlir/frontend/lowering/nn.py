"""Lowerings of layer_norm, group_norm, conv1d and other nn ops."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ...dialects.novella import Conv1dOp, LayerNormOp
from ...machine.target import MAX_COLS

MAX_GROUPS = 64  # a grouped conv1d is one conv1d op per group


def _tensor_or_none(cx, i: int):
    if i >= cx.num_operands:
        return None
    v = cx.value(cx.op.operands[i])
    return v if isinstance(v, ir.Value) else None


def _layer_norm(cx, eps: float):
    x = cx.operand(0)
    normalized = cx.const(1)
    c = ir.RankedTensorType(x.type).get_dim_size(ir.RankedTensorType(x.type).rank - 1)
    if len(normalized) != 1 or normalized[0] != c:
        raise cx.error(f"layer_norm over {normalized} is not supported; only over the last dim ({c})")
    w = _tensor_or_none(cx, 2)
    b = _tensor_or_none(cx, 3)
    if c > MAX_COLS:
        return _wide_layer_norm(cx, x, w, b, eps)
    w = w if w is not None else cx.add_weight("ln_ones", np.ones(c))
    b = b if b is not None else cx.add_weight("ln_zeros", np.zeros(c))
    return cx.emit(LayerNormOp, input=x, weight=w, bias=b, eps=ir.FloatAttr.get_f32(float(eps)))


def _wide_layer_norm(cx, x, w, b, eps: float):
    """A layer_norm over rows wider than the kernel's LOAD takes whole: mean, deviation, variance and
    rsqrt as ops whose kernels tile columns (the row reductions, the pointwise kernel)."""
    from ...dialects.novella import AddOp, MulOp, ReduceOp, SubOp
    from .pointwise import math_op, scalar_op

    def mean(v):
        return cx.emit(ReduceOp, check=False, input=v, fn=ir.StringAttr.get("mean"))

    dev = cx.emit(SubOp, check=False, lhs=x, rhs=mean(x))
    var = mean(cx.emit(MulOp, check=False, lhs=dev, rhs=dev))
    rstd = math_op(cx, "rsqrt", scalar_op(cx, "add", var, eps, check=False), check=False)
    affine = [(op, v) for op, v in ((MulOp, w), (AddOp, b)) if v is not None]
    y = cx.emit(MulOp, check=not affine, lhs=dev, rhs=rstd)
    for i, (op, v) in enumerate(affine):
        y = cx.emit(op, check=i == len(affine) - 1, lhs=y, rhs=v)
    return y


def layer_norm(cx):
    return _layer_norm(cx, cx.const(4))


def native_layer_norm(cx):
    return [_layer_norm(cx, cx.const(4)), None, None]


def _group_norm(cx, x, groups: int, w, b, eps: float):
    """`x` [N, C, *spatial] as [N, G, C/G * spatial]: per group, the mean and the (biased) variance over its
    last dim (a sum over a `?` dim divided by the length's size computed on the NPU), then
    `(x - mean) * rsqrt(var + eps)` back as [N, C, *spatial], times the weight and plus the bias per channel."""
    from ... import symbolic as sy
    from ...dialects.novella import AddOp, DivOp, MulOp, ReduceOp, SubOp
    from .elementwise import size_value
    from .pointwise import math_op, scalar_op
    from .shape_ops import reshape

    shape = list(cx.shape(x))
    c = sy.as_int(shape[1]) if len(shape) > 1 else None
    if c is None or groups <= 0 or c % groups:
        raise cx.error(f"group_norm with {groups} groups needs static channels divisible by it, got {shape}")
    n = sy.canon(sy.numel([sy.const(c // groups), *shape[2:]]))
    g = reshape(cx, x, [shape[0], sy.const(groups), n], check=False)
    count = None if sy.as_int(n) is not None else size_value(cx, n)

    def mean(v):
        total = cx.emit(ReduceOp, check=False, input=v, fn=ir.StringAttr.get("sum"))
        if count is None:
            return scalar_op(cx, "mul", total, 1.0 / sy.as_int(n), check=False)
        return cx.emit(DivOp, check=False, lhs=total, rhs=count)

    dev = cx.emit(SubOp, check=False, lhs=g, rhs=mean(g))
    var = mean(cx.emit(MulOp, check=False, lhs=dev, rhs=dev))
    rstd = math_op(cx, "rsqrt", scalar_op(cx, "add", var, eps, check=False), check=False)
    y = reshape(cx, cx.emit(MulOp, check=False, lhs=dev, rhs=rstd), shape, check=False)
    per_channel = [sy.const(c)] + [sy.const(1)] * (len(shape) - 2)
    if w is not None:
        y = cx.emit(MulOp, check=False, lhs=y, rhs=reshape(cx, w, per_channel, check=False))
    if b is not None:
        y = cx.emit(AddOp, check=False, lhs=y, rhs=reshape(cx, b, per_channel, check=False))
    return y


def group_norm(cx):
    """aten.group_norm(x, num_groups, weight, bias, eps, cudnn_enabled)."""
    return _group_norm(cx, cx.operand(0), cx.const(1), _tensor_or_none(cx, 2), _tensor_or_none(cx, 3), cx.const(4))


def native_group_norm(cx):
    """aten.native_group_norm(x, weight, bias, N, C, HxW, group, eps) -> (y, mean, rstd); only y is used."""
    x = cx.operand(0)
    return [_group_norm(cx, x, cx.const(6), _tensor_or_none(cx, 1), _tensor_or_none(cx, 2), cx.const(7)), None, None]


def _single(cx, i: int, what: str) -> int:
    v = cx.const(i)
    v = v if isinstance(v, int) else list(v)
    if isinstance(v, list):
        if len(set(v)) != 1:
            raise cx.error(f"conv1d {what} {v} is not supported")
        v = v[0]
    return v


def conv1d(cx):
    x, w = cx.operand(0), cx.operand(1)
    stride, padding, dilation = (_single(cx, i, n) for i, n in ((3, "stride"), (4, "padding"), (5, "dilation")))
    groups = cx.const(6) if cx.num_operands > 6 else 1
    if dilation != 1 or isinstance(padding, str):
        raise cx.error(f"conv1d with dilation {dilation}, groups {groups}, padding {padding!r} is not supported")
    b = _tensor_or_none(cx, 2)
    if b is None:
        b = cx.add_weight("zero_bias", np.zeros(ir.RankedTensorType(w.type).get_dim_size(0)))
    if groups != 1:
        return _grouped(cx, x, w, b, stride, padding, groups)
    return _conv(cx, x, w, b, stride, padding, check=True)


def _conv(cx, x, w, b, stride: int, padding: int, check: bool):
    i64 = ir.IntegerType.get_signless(64)
    return cx.emit(
        Conv1dOp,
        check=check,
        input=x,
        weight=w,
        bias=b,
        stride=ir.IntegerAttr.get(i64, stride),
        padding=ir.IntegerAttr.get(i64, padding),
        layout=ir.StringAttr.get("ncw"),
        act=ir.StringAttr.get("none"),
    )


def _grouped(cx, x, w, b, stride: int, padding: int, groups: int):
    """A grouped conv1d (wav2vec2's positional conv) as one conv1d per group: the group's input channels,
    output channels of the weight and bias, then the group outputs concatenated along the channels."""
    from ... import symbolic as sy
    from ...dialects.novella import ConcatOp, SliceOp

    cin, cout = sy.as_int(cx.shape(x)[1]), sy.as_int(cx.shape(w)[0])
    if cin == cout == groups:
        raise cx.error(
            f"a depthwise conv1d ({groups} channels) is per-tap multiply-adds on the generic path "
            "(linalg.depthwise_conv_2d_nchw_chw), which refused it"
        )
    if cin is None or cout is None or cin % groups or cout % groups:
        raise cx.error(f"conv1d with groups {groups} needs static channels divisible by it ({cin} in, {cout} out)")
    if groups > MAX_GROUPS:
        raise cx.error(f"conv1d with groups {groups}: one conv per group takes at most {MAX_GROUPS} groups")
    i64 = ir.IntegerType.get_signless(64)

    def part(v, dim: int, i: int, n: int):
        shape = list(cx.shape(v))
        shape[dim] = sy.const(n)
        attrs = dict(dim=ir.IntegerAttr.get(i64, dim), start=ir.IntegerAttr.get(i64, i * n))
        return cx.emit(SliceOp, result_shape=shape, check=False, input=v, **attrs)

    out = None
    for i in range(groups):
        xi, wi, bi = part(x, 1, i, cin // groups), part(w, 0, i, cout // groups), part(b, 0, i, cout // groups)
        y = _conv(cx, xi, wi, bi, stride, padding, check=False)
        out = (
            y
            if out is None
            else cx.emit(ConcatOp, check=i == groups - 1, lhs=out, rhs=y, dim=ir.IntegerAttr.get(i64, 1))
        )
    return out
