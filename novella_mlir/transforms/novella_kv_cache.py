"""--novella-kv-cache: puts the KV cache in pages (option `page-size`; 0 leaves the module alone).

The cache is recognized in the graph, not by model class. A returned tensor is a cache tensor when
  * it is a `novella.kv_append` (decode: `cat(past, new)` onto a function input, or the write of
    position P into a grown past by `index_copy` / `slice_scatter` / `select_scatter` /
    `index_put`, which the frontend lowers to the same append: `frontend/lowering/kv_cache.py`), or
  * it is `[1, heads, T, head_dim]` and the key or value (rhs) of an attention matmul (prefill),
    read directly or through the head-repeat chain that starts at it (with one KV head the
    model's own head transpose is a reshape, so the chain walked back may pass the returned value).
Each gets `novella.paged = {page_size, heads, head_dim, page_elems, slot}`, slots numbered in
return order (so prefill and decode agree); a prefill cache tensor is returned through a new
`novella.kv_write`, which copies every position into its page. Matmuls reading a paged cache
through a head repeat (reshape, broadcast, reshape: GQA, or MQA with one KV head; each head must be
repeated in place, head = b floordiv g) read the cache itself with `novella.kv_group` (query heads
per cache head), and the repeat is erased; a cache read flattened to `[batch*heads, T, d]` (ALiBi
models' `baddbmm`) is read at the cache's rank, the matmul's lhs and result viewed around it.
Every matmul reading a paged cache gets its geometry as `novella.paged_rhs`, a
`novella.flash_attention` reading one as `novella.paged_key` / `novella.paged_value` (the same
head-repeat rule): nothing copies the past. A one-query attention whose mask provably keeps only
the last W positions (`kv_window.band`: a sliding window) gets `novella.kv_window = W` and reads
only their tiles. The function gets `novella.kv_cache = {page_size, results, args, slots}` (and
`window = W` when every cache reader is windowed: the runtime frees the pages before the window):
which results and arguments are paged (the host neither writes nor reads them)."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.novella import KvWriteOp, ReshapeOp
from ..kernels.kv_cache import (
    GROUP_ATTR,
    PAGED_ATTR,
    PAGED_OPERAND_ATTRS,
    PAGED_RHS_ATTR,
    PAGED_VSPAN,
    WINDOW_ATTR,
    paged_info,
)
from .common import PassError, body_ops, functions, set_attr
from .kv_window import band

OPTIONS = {"page-size": (int, 0, "KV cache positions per page (0: no paging)")}
_CHAIN = ("novella.reshape", "novella.broadcast")


def run(module_op, options, config) -> None:
    ps = options.get("page-size", 0)
    if ps <= 0:
        return
    for fn in functions(module_op):
        _page(fn, ps)


def _root(v):
    """The value a GQA head repeat (reshape / broadcast chain) starts from, and the chain's ops; the walk
    stops at a paged cache (with one KV head, the model's own head transpose is a reshape too)."""
    chain = []
    while isinstance(v.owner, ir.OpView) and v.owner.operation.name in _CHAIN and paged_info(v) is None:
        chain.append(v.owner)
        v = v.owner.operands[0]
    return v, chain


def _chain_values(v) -> set:
    """`v` and every value the head-repeat chain ending at `v` passes through."""
    root, chain = _root(v)
    return {root} | {op.results[0] for op in chain}


def _rhs_roots(ops) -> set:
    """Values an attention reads as keys or values: a matmul's rhs, a flash_attention's key and value
    (and, where it reads one heads-minor, the head transpose of that operand the model returns)."""
    roots = set().union(*(_chain_values(op.operands[1]) for op in ops if op.operation.name == "novella.matmul"))
    for op in ops:
        if op.operation.name != "novella.flash_attention":
            continue
        minor = list(ir.DenseI64ArrayAttr(op.attributes["heads_minor"]))
        for i in (1, 2):
            x = op.operands[i]
            roots |= _chain_values(x)
            if minor[i]:
                roots |= {u.owner.results[0] for u in x.uses if u.owner.name == "novella.transpose"}
    return roots


def _geometry(op, v, ps) -> dict:
    """A cache `[1, heads, positions, head_dim]`, or a batched decode's `[B, heads, positions, head_dim]`
    (B static; each sequence its own pages: `seq_pages` apart in the virtual window)."""
    shape = sy.shape_of(ir.RankedTensorType(v.type))
    batch, heads, hd = (sy.as_int(shape[i]) if len(shape) == 4 else None for i in (0, 1, 3))
    if batch is None or heads is None or hd is None or (batch != 1 and op.operation.name != "novella.kv_append"):
        raise PassError(op, f"a KV cache must be [1, heads, positions, head_dim], got {[str(e) for e in shape]}")
    pe = heads * ps * hd
    geo = {"page_size": ps, "heads": heads, "head_dim": hd, "page_elems": pe}
    return geo if batch == 1 else {**geo, "batch": batch, "seq_pages": PAGED_VSPAN // pe // batch}


def _page(fn, ps: int) -> None:
    ops = body_ops(fn)
    ret = ops[-1]
    roots = _rhs_roots(ops)
    results, args, slots = [], {}, []
    for i, r in enumerate(list(ret.operands)):
        owner = r.owner
        if isinstance(owner, ir.OpView) and owner.operation.name == "novella.kv_append":
            op = owner
            past = op.operands[0]
            args[str(past.arg_number)] = len(results)
        elif r in roots and _is_cache_shaped(r):
            with ir.InsertionPoint(ret), ret.location:
                op = KvWriteOp(r, result=r.type)
            ret.operands[i] = op.result
        else:
            continue
        geo = _geometry(op, r, ps)
        set_attr(op, PAGED_ATTR, {**geo, "slot": len(results)})
        slots.append({k: v for k, v in geo.items() if k != "page_size"})
        results.append(i)
    if not results:
        return
    _read_through_repeats(fn)
    attr = {"page_size": ps, "results": results, "args": args, "slots": slots}
    window = _windows(fn)
    if window is not None:
        attr["window"] = window
    set_attr(fn, "novella.kv_cache", attr)


def _windows(fn) -> int | None:
    """Marks each one-query attention over paged caches whose mask keeps only the last W positions
    (`kv_window.band`: lo = positions - W, hi = positions - 1) with `novella.kv_window = W`; returns
    the largest W if every reader of the cache is windowed (positions before the last W are dead)."""
    found, unwindowed = [], False
    for op in body_ops(fn):
        name = op.operation.name
        if name == "novella.matmul" and PAGED_RHS_ATTR in op.attributes:
            unwindowed = True
        if name != "novella.flash_attention" or not any(a in op.attributes for a in PAGED_OPERAND_ATTRS.values()):
            continue
        w = _window(op)
        if w is None:
            unwindowed = True
        else:
            set_attr(op, WINDOW_ATTR, w)
            found.append(w)
    return max(found) if found and not unwindowed else None


def _window(op) -> int | None:
    if len(op.operands) != 4 or sy.as_int(_shape(op.operands[0])[-2]) != 1:
        return None
    got = band(op.operands[3])
    n = _shape(op.operands[1])[-2]
    if got is None or got[0] is None or (got[1] is not None and not sy.equal(got[1], n - 1)):
        return None
    w = sy.to_sympy(n - got[0])
    return int(w) if w.is_Integer and w >= 1 else None


def _is_cache_shaped(v) -> bool:
    shape = sy.shape_of(ir.RankedTensorType(v.type))
    return len(shape) == 4 and sy.as_int(shape[2]) is None


def _read_through_repeats(fn) -> None:
    for op in body_ops(fn):
        if op.operation.name == "novella.matmul":
            _read_paged(op, 1, PAGED_RHS_ATTR)
        elif op.operation.name == "novella.flash_attention":
            for i, name in PAGED_OPERAND_ATTRS.items():
                _read_paged(op, i, name)


def _read_paged(op, i: int, attr: str) -> None:
    """Operand `i` of `op` reads a paged cache (through a GQA head repeat, a flattening to
    `[batch*heads, T, d]`, or neither): record its geometry in `attr` and the query heads per cache
    head in `novella.kv_group`, and read the cache itself."""
    root, chain = _root(op.operands[i])
    info = paged_info(root)
    if info is None:
        return
    set_attr(op, attr, info)
    if not chain:
        return
    g = _repeat(op, op.operands[i], root, chain, info["heads"])
    if GROUP_ATTR in op.attributes and ir.IntegerAttr(op.attributes[GROUP_ATTR]).value != g:
        raise PassError(op, f"reads its key and value caches with different head repeats ({g} and another)")
    if len(_shape(root)) != len(_shape(op.operands[i])):
        _lift(op, root, g)
    op.operands[i] = root
    set_attr(op, GROUP_ATTR, g)
    for c in chain:
        if not list(c.results[0].uses):
            c.operation.erase()


def _shape(v) -> list:
    return sy.shape_of(ir.RankedTensorType(v.type))


def _repeat(op, read, root, chain, kv_heads: int) -> int:
    """Query heads per cache head of a read of the cache `root` through the reshape / broadcast `chain`:
    it keeps the positions and head_dim minor and repeats each head g times in place (head = b // g)."""
    shape, base = _shape(read), _shape(root)
    heads = sy.as_int(sy.numel(shape[:-2]))
    kv_heads = sy.as_int(sy.numel(base[:-2])) or kv_heads  # a batched cache: every sequence's heads
    ok = heads is not None and heads % kv_heads == 0 and sy.equal_shapes(shape[-2:], base[-2:])
    for c in chain:
        if ok and c.operation.name == "novella.broadcast":
            src, dst = _shape(c.operands[0]), _shape(c.results[0])
            grown = [d for d in range(len(src)) if sy.as_int(src[d]) == 1 and sy.as_int(dst[d]) != 1]
            ok = not grown or sy.as_int(sy.numel(src[: grown[0]])) == kv_heads
    if not ok:
        got = [str(e) for e in shape]
        raise PassError(op, f"reads the KV cache {[str(e) for e in base]} as {got}: not a repeat of each head in place")
    return heads // kv_heads


def _lift(op, root, g: int) -> None:
    """A matmul reading the cache flattened to `[batch*heads, T, d]` (ALiBi's `baddbmm`) runs at the cache's
    rank: its lhs and result are viewed as `[1, heads * g, M, .]` around it (reshapes)."""
    if op.operation.name != "novella.matmul":
        raise PassError(op, "reads the KV cache at another rank; only a matmul may (its batch dims are flattened)")
    base = _shape(root)
    n_syms = ir.AffineMapAttr(ir.RankedTensorType(root.type).encoding).value.n_symbols
    batch = [*base[:-3], sy.const(sy.as_int(base[-3]) * g)]
    lhs, y = op.operands[0], op.results[0]
    lhs_batch = batch if sy.as_int(sy.numel(_shape(lhs)[:-2])) != 1 else [sy.const(1)] * len(batch)
    f32 = ir.F32Type.get()
    with ir.InsertionPoint(op), op.location:
        op.operands[0] = ReshapeOp(input=lhs, result=sy.tensor_type(lhs_batch + _shape(lhs)[-2:], f32, n_syms)).result
        flat = y.type
        y.set_type(sy.tensor_type(batch + _shape(y)[-2:], f32, n_syms))
        back = ReshapeOp(input=y, result=flat)
    back.operation.move_after(op.operation)
    y.replace_all_uses_except(back.result, back.operation)
