"""The attention and KV-cache ops of the `novella` dialect's graph level (one dialect, `dialect.Novella`,
registered by `novella.load`; re-exported by `novella.py`).

Split from `novella.py` (a file over 600 lines otherwise): the ops the frontend writes for attention
(`novella.attention`, `novella.flash_attention` from legalize) and for a KV cache (`novella.kv_append`,
`novella.kv_write`, paged by `--novella-kv-cache`)."""

from typing import Any

from torch_mlir import ir
from torch_mlir.dialects import ext

from . import op_verifiers as ov
from .dialect import Novella
from .verify import f32, fail

Tensor = ir.RankedTensorType


class AttentionOp(Novella.Operation, name="attention"):
    """Scaled dot-product attention `softmax(q @ k^T * scale) @ v` over [..., L, D] operands.

    query: [..., Lq, D], key: [..., Lk, D], value: [..., Lk, Dv], result: [..., Lq, Dv];
    no mask, no dropout, not causal."""

    query: ext.Operand[Tensor]
    key: ext.Operand[Tensor]
    value: ext.Operand[Tensor]
    scale: ir.FloatAttr
    result: ext.Result[Tensor]
    verify_invariants = ov.attention


class KvAppendOp(Novella.Operation, name="kv_append"):
    """A KV cache append, `torch.cat([past, new], dim)` where `past` is a function input (the cache).

    The frontend recognizes the pattern; without paging its kernel is a concat. With
    `novella.paged` (set by `--novella-kv-cache`) `past` and the result are one paged tensor in
    the page pool: the kernel stores only `new`, in place, at the row `past` ends at."""

    past: ext.Operand[Tensor]
    new: ext.Operand[Tensor]
    dim: ir.IntegerAttr
    result: ext.Result[Tensor]
    verify_invariants = ov.kv_append


class KvWriteOp(Novella.Operation, name="kv_write"):
    """The cache write of a prefill: `input` (every position's key or value rows, [.., heads, T, head_dim])
    copied into the paged cache (`novella.paged`, set by `--novella-kv-cache`). The result is the
    cache tensor; the function returns it in place of `input`."""

    input: ext.Operand[Tensor]
    result: ext.Result[Tensor]

    @staticmethod
    def verify_invariants(op) -> bool:
        x, y = op.operands[0].type, op.results[0].type
        if not f32(x, y) or x.rank != y.rank or x.rank < 2:
            return fail(op, f"expects f32 input and result of one rank >= 2, got {x} -> {y}")
        return True


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
    verify_invariants = ov.flash_attention
