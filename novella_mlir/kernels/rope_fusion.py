"""RoPE's `rotate_half` read by its consumer (--novella-fuse-elementwise, after the pointwise chains are
merged): `cat(-x[..., h:], x[..., :h])` along the last dim (two slices, a negation and a concat, four
kernels whose results go through DRAM) read by a `novella.generic` becomes that generic reading `x` itself,
its input marked in `novella.rotate_half` (input indices): the kernel loads the two column halves of `x`
swapped (two LOADs of one DMA chain) and negates the first half in SRAM (`generic.load_rotated`).

Recognized from the graph: the concat's operands are a `neg` of `x`'s upper half and `x`'s lower half,
of the whole last dim of `x` (2h), read at the identity map, with no other reader. The last dim must fit
one column tile (`Target.col_tile`), so each tile holds whole rows.
"""

from __future__ import annotations

from torch_mlir import ir

from .support import producer

ATTR = "novella.rotate_half"


def rotated(op) -> set[int]:
    """Indices of the inputs of generic `op` read as `rotate_half` of the value."""
    if ATTR not in op.attributes:
        return set()
    return {ir.IntegerAttr(a).value for a in ir.ArrayAttr(op.attributes[ATTR])}


def form(op, target) -> None:
    """Rewrites every `rotate_half` input of generic `op` (see the module docstring)."""
    maps = list(ir.ArrayAttr(op.attributes["indexing_maps"]))
    done = rotated(op)
    for k, v in enumerate(op.operands):
        m = ir.AffineMapAttr(maps[k]).value
        x = _source(v, target) if m == ir.AffineMap.get_identity(m.n_dims) and k not in done else None
        if x is None:
            continue
        parts = _parts(v.owner)
        op.operation.operands[k] = x
        done.add(k)
        for p in parts:
            if not list(p.results[0].uses):
                p.operation.erase()
    if done:
        i64 = ir.IntegerType.get_signless(64)
        op.attributes[ATTR] = ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in sorted(done)])


def _parts(cat) -> list:
    """The concat, the neg and the two slices of a recognized `rotate_half` (consumers first)."""
    neg, lo = cat.operands[0].owner, cat.operands[1].owner
    return [cat, neg, neg.operands[0].owner, lo]


def _only_use(v, user) -> bool:
    return all(u.owner == user.operation for u in v.uses)


def _source(v, target):
    """The `x` of `v = cat(-x[..., h:], x[..., :h])` (last dim), or None."""
    cat = producer(v, "novella.concat")
    if cat is None or len(list(v.uses)) != 1:
        return None
    rank = ir.RankedTensorType(v.type).rank
    if ir.IntegerAttr(cat.attributes["dim"]).value % rank != rank - 1:
        return None
    neg, lo = producer(cat.operands[0], "novella.math"), producer(cat.operands[1], "novella.slice")
    if neg is None or lo is None or ir.StringAttr(neg.attributes["fn"]).value != "neg":
        return None
    hi = producer(neg.operands[0], "novella.slice")
    if hi is None or hi.operands[0] != lo.operands[0] or not _only_use(neg.results[0], cat):
        return None
    x = lo.operands[0]
    width = _last(x)
    if width is None or width % 2 or target.col_tile(width) != width or x.type != v.type:
        return None
    h = width // 2
    for s, start in ((lo, 0), (hi, h)):
        if not _is_int(s.attributes["start"], start) or _last(s.results[0]) != h:
            return None
        if ir.IntegerAttr(s.attributes["dim"]).value % rank != rank - 1:
            return None
    return x


def _is_int(attr, value: int) -> bool:
    return isinstance(attr, ir.IntegerAttr) and attr.value == value


def _last(v) -> int | None:
    """The static size of the last dim of `v`, or None."""
    n = ir.RankedTensorType(v.type).shape[-1]
    return None if ir.ShapedType.is_dynamic_size(n) else n


def split_rotation(steps: list, halves: dict, h: int) -> tuple[list, set]:
    """A generic's program `steps` ((fn, dst, a, b, imm) on named buffers, `generic.Planner`) with each
    `rotate_half(x) * s` read only by a sum `u + ...` computed on the column halves instead: the product
    of x's swapped halves and s (two half MULs, no negation), then `u - p` on the first half and `u + p` on
    the second (x's negated upper half times s, added: the same float operations, bit for bit). `halves`:
    {rotated input: the input holding x} (`generic._loaded_twin`). Returns the steps as (fn, dst, a, b,
    imm, half), `half` None or the (dst, a, b) column offsets of a step over `h` columns, and the rotated
    inputs no longer rotated in SRAM."""
    out: list = [[(*s, None)] for s in steps]
    split = set()
    for k, j in halves.items():
        rot, x = f"in{k}", f"in{j}"
        found = None if j is None else _rotated_sum(steps, rot)
        if found is None:
            continue
        (i, prod, s), (m, dst, u) = found
        out[i] = [("MUL", prod, x, s, 0.0, (0, h, 0)), ("MUL", prod, x, s, 0.0, (h, 0, h))]
        out[m] = [("SUB", dst, u, prod, 0.0, (0, 0, 0)), ("ADD", dst, u, prod, 0.0, (h, h, h))]
        split.add(k)
    return [s for group in out for s in group], split


def _rotated_sum(steps: list, rot: str):
    """((i, p, s), (m, dst, u)) where step i is the one read of `rot`, p = rot * s, and step m the one read
    of p, dst = u + p; or None."""
    uses = [i for i, st in enumerate(steps) if rot in st[2:4]]
    if len(uses) != 1:
        return None
    i = uses[0]
    fn, p, a, b, _ = steps[i]
    s = b if a == rot else a
    if fn != "MUL" or not isinstance(s, str) or rot in (s, p) or p == "out":
        return None
    later = [m for m in range(i + 1, len(steps)) if p in steps[m][2:4] or steps[m][1] == p]
    if not later or p not in steps[later[0]][2:4] or any(p in steps[m][2:4] for m in later[1:]):
        return None
    m = later[0]
    fn2, dst, a2, b2, _ = steps[m]
    u = b2 if a2 == p else a2
    if fn2 != "ADD" or not isinstance(u, str) or u == p:
        return None
    return (i, p, s), (m, dst, u)
