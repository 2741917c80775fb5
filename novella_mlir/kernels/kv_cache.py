"""The paged KV cache: the append (decode), the write (prefill) and paged addressing for matmuls.

A paged cache tensor (`novella.paged`, set by `--novella-kv-cache`) is `[1, heads, positions,
head_dim]` in a *virtual* paged layout: logical page `j` (positions `j*ps .. j*ps + ps - 1`)
occupies `page_elems = heads * ps * head_dim` elements at `j * page_elems`, head-major inside the
page. Kernels address it in that layout, never crossing a page in one DMA (a tile of several pages
is a chain of LOADs, one per page: `load_page_chain`); the runtime maps each
DMA descriptor's virtual page to a physical page through the sequence's block table
(`runtime/kv.py`), so the page order of a sequence is free.
"""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.fields import RESIDENT
from ..machine.target import DRAM_LIMIT
from . import BufferPlan, Tiling, resident, tile_rows

PAGED_ATTR = "novella.paged"
PAGED_VBASE = DRAM_LIMIT // 2  # virtual DRAM window of the paged caches: the upper half of what dram_base addresses
PAGED_VSPAN = 1 << 24  # virtual elements per cache tensor (positions * heads * head_dim)
GROUP_ATTR = "novella.kv_group"
WINDOW_ATTR = "novella.kv_window"  # a one-query attention that reads only the last W cached positions
PAGED_RHS_ATTR = "novella.paged_rhs"
PAGED_OPERAND_ATTRS = {1: "novella.paged_key", 2: "novella.paged_value"}  # flash_attention's paged key / value


_KEYS = ("page_size", "heads", "head_dim", "page_elems", "slot", "batch", "seq_pages")


def paged_info(v) -> dict | None:
    """{page_size, heads, head_dim, page_elems, slot} of a paged cache value, else None."""
    owner = v.owner
    if isinstance(owner, ir.Block):
        return None
    op = owner.opview if hasattr(owner, "opview") else owner
    return _read(op, PAGED_ATTR)


def paged_rhs(op) -> dict | None:
    """The paged cache a matmul reads as its rhs (`novella.paged_rhs`, set by --novella-kv-cache), else None."""
    return _read(op, PAGED_RHS_ATTR)


def paged_operand(op, index: int) -> dict | None:
    """The paged cache `novella.flash_attention` reads as operand `index` (1 key, 2 value), else None."""
    return _read(op, PAGED_OPERAND_ATTRS[index])


def _read(op, name: str) -> dict | None:
    if name not in op.attributes:
        return None
    d = ir.DictAttr(op.attributes[name])
    return {k: ir.IntegerAttr(d[k]).value if k in d else 1 for k in _KEYS}


def group(op) -> int:
    """Query heads per key/value head of a matmul reading a paged cache (GQA), 1 otherwise."""
    return ir.IntegerAttr(op.attributes[GROUP_ATTR]).value if GROUP_ATTR in op.attributes else 1


def window(op) -> int | None:
    """The last W positions a one-query attention reads (`novella.kv_window`, a sliding window), else None."""
    return ir.IntegerAttr(op.attributes[WINDOW_ATTR]).value if WINDOW_ATTR in op.attributes else None


def page_offset(info: dict, head, position) -> ir.AffineExpr:
    """Virtual offset of row (`head`, `position`) of a paged tensor, relative to its base. In a batched
    cache `[B, heads, positions, head_dim]`, `head` counts the heads of all sequences (b * heads + h)
    and sequence b's pages start at page b * seq_pages: each sequence has its own block table."""
    ps, hd = info["page_size"], info["head_dim"]
    page = sy.floordiv(position, ps)
    if info.get("batch", 1) > 1:
        heads = info["heads"]
        page = page + sy.floordiv(head, heads) * info["seq_pages"]
        head = ir.AffineExpr.get_mod(head, sy.const(heads))
    return page * info["page_elems"] + head * (ps * hd) + ir.AffineExpr.get_mod(position, sy.const(ps)) * hd


def load_paged_rows(b, buffer: str, tensor: int, info: dict, *, head, row0, n_rows, rows, col0, cols, sram_stride,
                    when=None):  # fmt: skip
    """LOAD `rows` positions from `row0` (inside one page) of `head`; positions >= `n_rows` read as 0."""
    b.load(
        buffer,
        tensor,
        dram_offset=page_offset(info, head, row0) + col0,
        dram_stride=info["head_dim"],
        row_start=0,
        row_step=1,
        row_bound=n_rows - row0,
        rows=rows,
        cols=cols,
        sram_stride=sram_stride,
        when=when,
    )


def load_page_chain(b, buffer: str, tensor: int, info: dict, *, head, row0, n_rows, pages: int, cols: int,
                    sram_stride: int, when=None, chained: bool = False):  # fmt: skip
    """LOAD `pages` whole pages of `head` from position `row0` (page-aligned) into one tile, one LOAD per
    page, the second and later chained (docs/isa.md, LOAD `chain`: one exposed DMA latency per tile):
    page p fills tile rows p * page_size on, min(page_size, x) rows of it, x = `n_rows` - its first position.
    A page past the sequence's last (x <= 0) moves no row and addresses the last page instead, so every
    address the runtime maps through the block table is a page the sequence has. Rows as an affine min
    (`sy.step`): [page_size * [x >= 1], x + k [x <= 0]] with k = the tile's rows (x > -k in a tile that
    exists). Rows past the sequence are not written (the MATMULs read `n_rows` of the tile). `chained`: the
    first page continues the load queue's previous DMA too (`flash_decode.chained_loads`)."""
    ps = info["page_size"]
    k = pages * ps
    last = page_offset(info, head, sy.floordiv(n_rows - 1, ps) * ps)
    for p in range(pages):
        pos = row0 + p * ps
        here, x = page_offset(info, head, pos), n_rows - pos
        rows = [sy.const(ps) * sy.step(x), x + k - sy.step(x) * k] if p else [sy.const(ps), x]
        b.load(buffer, tensor, dram_offset=[here, last] if p else here, dram_stride=info["head_dim"],
               row_start=0, row_step=1, row_bound=ps, rows=rows, cols=cols, sram_stride=sram_stride,
               buf_offset=p * ps * sram_stride, chain=int(p > 0 or chained), when=when)  # fmt: skip


def check_tile(info: dict, t: int, what: str) -> None:
    if info["page_size"] % t:
        raise ValueError(f"{what} tile {t} does not divide the page size {info['page_size']}")


def _geometry(shape, what: str, batched: bool = False):
    n = sy.as_int(shape[0]) if len(shape) == 4 else None
    if n is None or (n != 1 and not batched) or sy.as_int(shape[1]) is None or sy.as_int(shape[3]) is None:
        raise ValueError(f"a paged {what} must be [1, heads, positions, head_dim] with static heads and head_dim")
    return sy.as_int(shape[1]), shape[2], sy.as_int(shape[3])


def _concat():
    from .indexing import Concat

    return Concat()


class KvAppend:
    """`novella.kv_append`: a concat unless paged; paged, COPY the new row of every head and STORE them in
    place at position `past` of each head (rows `ps * head_dim` apart). The new rows of every sequence
    are one contiguous [batch * heads, head_dim] block: where it fits twice (`whole`) it is one grid step,
    one LOAD and one COPY, then one STORE per sequence (each its own page), chained (docs/isa.md, STORE
    `chain`): one exposed DMA latency for the batch. Where `--novella-resident` keeps the new rows, only the
    first sequence's are COPYed (the step's compute, which its STOREs wait for) and the others STOREd
    straight from the region. Else one grid step per sequence, `out` in two slots
    (a sequence's STORE runs under the next one's COPY)."""

    def _plan(self, budget, batch: int, heads: int, hd: int, whole: bool, kept: bool = False) -> BufferPlan:
        plan = BufferPlan(budget)
        if not kept:
            plan.add("in", "spad", (batch if whole else 1) * heads * hd)
        plan.add("out", "spad", (batch if whole and not kept else 1) * heads * hd, stream=not whole)
        return plan

    def tile(self, op, tv, budget, options):
        info = paged_info(op.results[0])
        if info is None:
            return _concat().tile(op, tv, budget, options)
        heads, new, hd = _geometry(tv.shape(1), "append", batched=True)
        if sy.as_int(new) != 1:
            raise ValueError(f"a paged append takes one new position per step, got {new}")
        batch = info.get("batch", 1)
        kept = "new" in resident.regions(op)
        whole = batch > 1 and self._plan(budget, batch, heads, hd, True, kept).fits()
        plan = self._plan(budget, batch, heads, hd, whole, kept)
        return Tiling({"heads": heads, "whole": int(whole)}, [sy.const(1 if whole else batch)],
                      plan.check() + resident.buffers(op))  # fmt: skip

    def macro(self, op, tv, t, b):
        info = paged_info(op.results[0])
        if info is None:
            return _concat().macro(op, tv, t, b)
        heads, past, hd = _geometry(tv.shape(0), "append", batched=True)
        if t.tiles.get("whole"):
            n, kept = info["batch"], "new" in resident.regions(op)
            _new_rows(b, op, sy.const(0), (1 if kept else n) * heads, hd)
            for seq in range(n):
                src = RESIDENT["new"] if kept and seq else "out"
                _store_heads(b, info, sy.const(seq), heads, past, hd, seq * heads * hd, chain=int(seq > 0), src=src)
            return
        seq = b.d(0)  # one grid point per sequence, all at position `past`
        _new_rows(b, op, seq * (heads * hd), heads, hd)
        _store_heads(b, info, seq, heads, past, hd, 0)


def _new_rows(b, op, at, rows: int, hd: int) -> None:
    """COPY `rows` new rows from element `at` of operand 1 into `out`: LOADed into `in` first, or read where
    `--novella-resident` keeps them (`new`)."""
    src = RESIDENT["new"] if "new" in resident.regions(op) else "in"
    if src == "in":
        b.load_block("in", 1, dram_offset=at, rows=rows, cols=hd)
    b.vop(
        "COPY", "out", src, rows=rows, cols=hd, dst_stride=hd, a_stride=hd, **({"a_offset": at} if src != "in" else {})
    )


def _store_heads(b, info: dict, seq, heads: int, past, hd: int, at: int, chain: int = 0, src: str = "out") -> None:
    """STORE the `heads` rows of `src` from element `at` to position `past` of sequence `seq`'s heads."""
    f = {"chain": chain} if chain else {}
    b.store(src, -1, dram_offset=page_offset(info, seq * heads, past), dram_stride=info["page_size"] * hd,
            row_start=0, row_step=1, row_bound=heads, rows=heads, cols=hd, sram_stride=hd,
            buf_offset=at, **f)  # fmt: skip


class KvWrite:
    """`novella.kv_write`: grid (head, page): LOAD up to `ps` positions of one head, COPY, STORE them
    into that page of the paged cache (the last page partial)."""

    def tile(self, op, tv, budget, options):
        info = paged_info(op.results[0])
        if info is None:
            raise ValueError("kv_write needs a paged result (run --novella-kv-cache with page-size)")
        heads, n, hd = _geometry(tv.shape(0), "write")
        ps = info["page_size"]
        plan = BufferPlan(budget)
        plan.add("in", "spad", ps * hd)
        plan.add("out", "spad", ps * hd)
        return Tiling({"ps": ps}, [sy.const(heads), sy.ceildiv(n, ps)], plan.check())

    def macro(self, op, tv, t, b):
        info = paged_info(op.results[0])
        _, n, hd = _geometry(tv.shape(0), "write")
        ps = info["page_size"]
        h, j = b.d(0), b.d(1)
        rows = tile_rows(1, ps, n)
        b.load_rows("in", 0, dram_offset=h * n * hd, row_start=j * ps, row_bound=n, rows=rows, cols=hd)
        b.vop("COPY", "out", "in", rows=rows, cols=hd, dst_stride=hd, a_stride=hd)
        b.store(
            "out",
            -1,
            dram_offset=page_offset(info, h, j * ps),
            dram_stride=hd,
            row_start=0,
            row_step=1,
            row_bound=n - j * ps,
            rows=rows,
            cols=hd,
            sram_stride=hd,
        )
