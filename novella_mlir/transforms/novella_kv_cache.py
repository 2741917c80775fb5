"""--novella-kv-cache: puts the KV cache in pages (option `page-size`; 0 leaves the module alone).

The cache is recognized in the graph, not by model class. A returned tensor is a cache tensor when
  * it is a `novella.kv_append` (decode: `cat(past, new)` onto a function input, or the write of
    position P into a grown past by `index_copy` / `slice_scatter` / `index_put`, which the
    frontend lowers to the same append: `frontend/lowering/kv_cache.py`), or
  * it is `[1, heads, T, head_dim]` and the key or value (rhs) of an attention matmul (prefill).
Each gets `novella.paged = {page_size, heads, head_dim, page_elems, slot}`, slots numbered in
return order (so prefill and decode agree); a prefill cache tensor is returned through a new
`novella.kv_write`, which copies every position into its page. Matmuls reading a paged cache
through a GQA head repeat (reshape, broadcast, reshape) read the cache itself with
`novella.kv_group` (query heads per cache head), and the repeat is erased; every matmul reading a
paged cache gets its geometry as `novella.paged_rhs`, a `novella.flash_attention` reading one as
`novella.paged_key` / `novella.paged_value` (the same head-repeat rule): nothing copies the
past. The function gets `novella.kv_cache = {page_size, results, args, slots}`: which results and
arguments are paged (the host neither writes nor reads them)."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.novella import KvWriteOp
from ..kernels.kv_cache import GROUP_ATTR, PAGED_ATTR, PAGED_OPERAND_ATTRS, PAGED_RHS_ATTR, PAGED_VSPAN, paged_info
from .common import PassError, body_ops, functions, set_attr

OPTIONS = {"page-size": (int, 0, "KV cache positions per page (0: no paging)")}
_CHAIN = ("novella.reshape", "novella.broadcast")


def run(module_op, options, config) -> None:
    ps = options.get("page-size", 0)
    if ps <= 0:
        return
    for fn in functions(module_op):
        _page(fn, ps)


def _root(v):
    """The value a GQA head repeat (reshape / broadcast chain) starts from, and the chain's ops."""
    chain = []
    while isinstance(v.owner, ir.OpView) and v.owner.operation.name in _CHAIN:
        chain.append(v.owner)
        v = v.owner.operands[0]
    return v, chain


def _rhs_roots(ops) -> set:
    """Values an attention reads as keys or values: a matmul's rhs, a flash_attention's key and value
    (and, where it reads one heads-minor, the head transpose of that operand the model returns)."""
    roots = {_root(op.operands[1])[0] for op in ops if op.operation.name == "novella.matmul"}
    for op in ops:
        if op.operation.name != "novella.flash_attention":
            continue
        minor = list(ir.DenseI64ArrayAttr(op.attributes["heads_minor"]))
        for i in (1, 2):
            x = op.operands[i]
            roots.add(_root(x)[0])
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
    set_attr(fn, "novella.kv_cache", {"page_size": ps, "results": results, "args": args, "slots": slots})


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
    """Operand `i` of `op` reads a paged cache (through a GQA head repeat or not): record its geometry
    in `attr` and the query heads per cache head in `novella.kv_group`, and read the cache itself."""
    root, chain = _root(op.operands[i])
    info = paged_info(root)
    if info is None:
        return
    set_attr(op, attr, info)
    if not chain:
        return
    heads = sy.as_int(sy.shape_of(ir.RankedTensorType(op.operands[i].type))[1])
    if heads is None or heads % info["heads"]:
        raise PassError(op, f"reads the KV cache through a head repeat to {heads} heads")
    g = heads // info["heads"]
    if GROUP_ATTR in op.attributes and ir.IntegerAttr(op.attributes[GROUP_ATTR]).value != g:
        raise PassError(op, f"reads its key and value caches with different head repeats ({g} and another)")
    op.operands[i] = root
    set_attr(op, GROUP_ATTR, g)
    for c in chain:
        if not list(c.results[0].uses):
            c.operation.erase()
