"""The verifiers of the larger graph-level ops of `novella.py` (each op's declaration, fields and
docstring stay there; its `verify_invariants` is the function here of the op's name)."""

from __future__ import annotations

from torch_mlir import ir

from .verify import (
    GATED,
    Invalid,
    LinearView,
    attr,
    dims_compatible,
    f32,
    fail,
    heads_major,
    linear_epilogue,
    norm_is_rms,
    norm_on_input,
    static_dims,
    structure,
    verified,
    verify_f32,
)


@verified(3)
def linear(op) -> bool:
    x, w, b = (v.type for v in op.operands)
    y = op.results[0].type
    if not f32(x, w, b, y):
        return fail(op, "supports only f32 tensors")
    if w.rank != 2 or b.rank != 1:
        return fail(op, f"expects weight [N, K] and bias [N], got {w} and {b}")
    n, k = w.get_dim_size(0), w.get_dim_size(1)
    if not dims_compatible(static_dims(x)[-1], k):
        return fail(op, f"input inner dim must be {k} (weight is {n}x{k}), got {x}")
    if b.get_dim_size(0) != n or static_dims(y)[-1] != n or y.rank != x.rank:
        return fail(op, f"result must be [..., {n}] with bias [{n}], got {y}")
    act = attr(op, "act", ir.StringAttr, "none")
    if act == GATED and getattr(op, "gated", False):
        return True
    if act not in ("none", "relu", "gelu"):
        return fail(op, f"unknown activation '{act}' (expected none, relu or gelu)")
    return True


def fused_linear(op) -> bool:
    try:
        res, norm = linear_epilogue(op)
        structure(op, 3 + res + norm * (2 - norm_is_rms(op)))
        attr(op, "norm_eps", ir.FloatAttr)
    except Invalid as e:
        return fail(op, str(e))
    if not linear(LinearView(op)):
        return False
    y = op.results[0].type
    extra = [v.type for v in op.operands[3:]]
    if not f32(*extra):
        return fail(op, "supports only f32 tensors")
    if res and static_dims(extra[0]) != static_dims(y):
        return fail(op, f"residual must have the result's shape {y}, got {extra[0]}")
    n = static_dims(op.operands[0].type if norm_on_input(op.attributes) else y)[-1]
    if norm and any(static_dims(t) != [n] for t in extra[res:]):
        return fail(op, f"norm_weight and norm_bias must be [{n}], got {extra[res:]}")
    return True


def fused_mlp(op) -> bool:
    """`novella.fused_mlp`: x [..., K], w1 [H, K], b1 [H], w2 [N, H], b2 [N] (residual [..., N]), f32."""
    try:
        structure(op, len(op.operands))
        acts = [attr(op, name, ir.StringAttr, "none") for name in ("act1", "act")]
    except Invalid as e:
        return fail(op, str(e))
    if len(op.operands) not in (5, 6):
        return fail(op, f"expects 5 or 6 operands (input, w1, b1, w2, b2, residual?), got {len(op.operands)}")
    types = [v.type for v in (*op.operands, *op.results)]
    if not f32(*types):
        return fail(op, "supports only f32 tensors")
    if acts[0] not in ("none", "relu", "gelu") or acts[1] not in ("none", "relu"):
        return fail(op, f"activations {acts}: act1 must be none, relu or gelu, act none or relu")
    x, w1, b1, w2, b2, *res = (static_dims(t) for t in types[:-1])
    k, h, n = x[-1], w1[0], w2[0]
    if len(w1) != 2 or len(w2) != 2 or not (dims_compatible(w1[1], k) and dims_compatible(w2[1], h)):
        return fail(op, f"w1 {w1} must be [H, {k}] and w2 {w2} [N, H]")
    if b1 != [h] or b2 != [n]:
        return fail(op, f"b1 {b1} must be [{h}] and b2 {b2} [{n}]")
    if res and res[0] != static_dims(types[-1]):
        return fail(op, f"residual must have the result's shape {types[-1]}, got {op.operands[5].type}")
    return True


@verified(2)
def matmul(op) -> bool:
    a, b = (v.type for v in op.operands)
    y = op.results[0].type
    if not f32(a, b, y):
        return fail(op, "supports only f32 tensors")
    if a.rank < 2 or b.rank != a.rank or y.rank != a.rank:
        return fail(op, f"expects operands and result of equal rank >= 2, got {a}, {b} -> {y}")
    tr = bool(attr(op, "transpose_rhs", (ir.BoolAttr, ir.IntegerAttr), False))
    db, dy = static_dims(b), static_dims(y)
    k_b, n_b = (db[-1], db[-2]) if tr else (db[-2], db[-1])
    if not dims_compatible(static_dims(a)[-1], k_b):
        return fail(op, f"contraction dims differ: {a} @ {b}")
    if not dims_compatible(static_dims(a)[-2], dy[-2]) or not dims_compatible(n_b, dy[-1]):
        return fail(op, f"result {y} is not [..., M, N] of {a} @ {b}")
    return True


@verified(1)
def slice_(op) -> bool:
    x, y = op.operands[0].type, op.results[0].type
    d = attr(op, "dim", ir.IntegerAttr)
    start = attr(op, "start", (ir.IntegerAttr, ir.AffineMapAttr))
    if isinstance(start, ir.AffineMap):
        if start.n_dims or len(start.results) != 1:
            return fail(op, f"a symbolic start must be one expression of the symbols, got {start}")
        start = 0
    if y.rank != x.rank or not 0 <= d < x.rank:
        return fail(op, f"dim {d} / start {start} do not slice {x} to {y}")
    dx, dy = static_dims(x), static_dims(y)
    if any(i != d and not dims_compatible(a, b) for i, (a, b) in enumerate(zip(dx, dy))):
        return fail(op, f"result {y} may differ from {x} only in dim {d}")
    if start < 0 and (dx[d] is not None or (dy[d] is not None and dy[d] > -start)):
        return fail(op, f"a negative start {start} (from the end) needs a `?` dim {d} and at most {-start} rows")
    if start >= 0 and None not in (dx[d], dy[d]) and start + dy[d] > dx[d]:
        return fail(op, f"slice [{start}, {start + dy[d]}) is out of bounds of dim {d} of {x}")
    return verify_f32(op)


@verified(3)
def conv1d(op) -> bool:
    x, w, b = (v.type for v in op.operands)
    y = op.results[0].type
    if not f32(x, w, b, y):
        return fail(op, "supports only f32 tensors")
    layout = attr(op, "layout", ir.StringAttr, "ncw")
    act = attr(op, "act", ir.StringAttr, "none")
    if attr(op, "stride", ir.IntegerAttr) < 1 or attr(op, "padding", ir.IntegerAttr) < 0:
        return fail(op, "needs stride >= 1 and padding >= 0")
    if layout not in ("ncw", "nwc") or act not in ("none", "gelu"):
        return fail(op, f"layout must be ncw or nwc and act none or gelu, got {layout}, {act}")
    if x.rank != 3 or w.rank != 3 or b.rank != 1 or y.rank != 3:
        return fail(op, f"expects a rank-3 input, weight and result and a rank-1 bias, got {x}, {w}, {b}")
    ch = 1 if layout == "ncw" else 2
    cout, cin = w.get_dim_size(0), w.get_dim_size(1)
    if not dims_compatible(static_dims(x)[ch], cin) or static_dims(y)[ch] != cout:
        return fail(op, f"channels of {x} -> {y} do not match weight {w} ({layout})")
    if b.get_dim_size(0) != cout:
        return fail(op, f"bias must be [{cout}], got {b}")
    return True


@verified(3)
def attention(op) -> bool:
    q, k, v = (x.type for x in op.operands)
    attr(op, "scale", ir.FloatAttr)
    y = op.results[0].type
    if not f32(q, k, v, y):
        return fail(op, "supports only f32 tensors")
    if not q.rank == k.rank == v.rank == y.rank or q.rank < 2:
        return fail(op, f"expects query, key, value and result of equal rank >= 2, got {q}, {k}, {v}")
    dq, dk, dv, dy = (static_dims(t) for t in (q, k, v, y))
    if not dims_compatible(dq[-1], dk[-1]) or not dims_compatible(dk[-2], dv[-2]):
        return fail(op, f"query/key head dims or key/value lengths differ: {q}, {k}, {v}")
    if not dims_compatible(dq[-2], dy[-2]) or not dims_compatible(dv[-1], dy[-1]):
        return fail(op, f"result {y} must be [..., Lq, Dv] for query {q} and value {v}")
    return True


def concat(op) -> bool:
    types = [v.type for v in op.operands]
    y = op.results[0].type
    d = ir.IntegerAttr(op.attributes["dim"]).value
    if not types or not f32(*types, y) or not 0 <= d < y.rank or any(t.rank != y.rank for t in types):
        return fail(op, f"expects f32 inputs of the result's rank and 0 <= dim < {y.rank}, got dim {d}")
    dy = static_dims(y)
    for t in types:
        if any(i != d and not dims_compatible(a, b) for i, (a, b) in enumerate(zip(static_dims(t), dy))):
            return fail(op, f"input {t} differs from the result {y} outside dim {d}")
    return True


def kv_append(op) -> bool:
    p, n, y = op.operands[0].type, op.operands[1].type, op.results[0].type
    d = ir.IntegerAttr(op.attributes["dim"]).value
    if not f32(p, n, y) or not (p.rank == n.rank == y.rank) or not 0 <= d < y.rank:
        return fail(op, f"expects f32 past, new and result of one rank and 0 <= dim < rank, got dim {d}")
    for t in (p, n):
        if any(i != d and not dims_compatible(a, b) for i, (a, b) in enumerate(zip(static_dims(t), static_dims(y)))):
            return fail(op, f"{t} differs from the result {y} outside dim {d}")
    return True


def flash_attention(op) -> bool:
    try:
        structure(op, len(op.operands))
        attr(op, "scale", ir.FloatAttr)
        attr(op, "safe", (ir.BoolAttr, ir.IntegerAttr), False)
        causal = attr(op, "causal", ir.IntegerAttr)
    except Invalid as e:
        return fail(op, str(e))
    types = [x.type for x in op.operands]
    y = op.results[0].type
    if len(types) not in (3, 4) or not f32(*types, y):
        return fail(op, f"expects 3 or 4 f32 operands (query, key, value, mask), got {len(types)}")
    q, k, v = types[:3]
    if not q.rank == k.rank == v.rank == y.rank or q.rank < 2:
        return fail(op, f"expects query, key, value and result of equal rank >= 2, got {q}, {k}, {v}")
    if not isinstance(op.attributes["heads_minor"], ir.DenseI64ArrayAttr):
        return fail(op, f"attribute 'heads_minor' must be array<i64: ...>, got {op.attributes['heads_minor']}")
    minor = list(ir.DenseI64ArrayAttr(op.attributes["heads_minor"]))
    if len(minor) != 4 or set(minor) - {0, 1} or (any(minor) and q.rank < 3):
        return fail(op, f"heads_minor must be 4 flags 0/1 (rank >= 3 where set), got {minor}")
    dq, dk, dv, dy = (heads_major(static_dims(t), f) for t, f in zip((q, k, v, y), minor))
    if not dims_compatible(dq[-1], dk[-1]) or not dims_compatible(dk[-2], dv[-2]):
        return fail(op, f"query/key head dims or key/value lengths differ: {q}, {k}, {v}")
    if not dims_compatible(dq[-2], dy[-2]) or not dims_compatible(dv[-1], dy[-1]):
        return fail(op, f"result {y} must be [..., Lq, Dv] for query {q} and value {v}")
    if causal not in (0, 1):
        return fail(op, f"causal must be 0 or 1, got {causal}")
    if len(types) == 4 and (types[3].rank < 2 or not dims_compatible(static_dims(types[3])[-1], dk[-2])):
        return fail(op, f"mask {types[3]} must be [..., Lq or 1, Lk] for key {k}")
    return True


def generic(op) -> bool:
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    y = op.results[0].type
    if len(maps) != len(op.operands) or not f32(y, *(v.type for v in op.operands)):
        return fail(op, f"needs one indexing map per f32 input, got {len(maps)} for {len(op.operands)}")
    for v, m in zip(op.operands, maps):
        reads = [str(e) in (f"d{i}", "0") for i, e in enumerate(m.results)]
        if m.n_dims != y.rank or len(m.results) != v.type.rank or not all(reads):
            return fail(op, f"map {m} does not read {v.type} over the loops of {y} (d<i> or 0 in place i)")
    block = op.regions[0].blocks[0]
    if len(block.arguments) != len(op.operands) or block.operations[len(block.operations) - 1].name != "novella.yield":
        return fail(op, "needs a body with one argument per input, ending in novella.yield")
    return True
