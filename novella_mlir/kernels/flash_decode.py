"""What a decode step over a paged KV cache changes in `novella.flash_attention` (`flash_attention.py`).

A decode step's attention has one query row per head (or a GQA group's rows, packed) and walks the
cache heads of every sequence of the batch, each over a few pages: its cycles are DMA latencies per
head. So the query rows of every head are loaded and scaled once and kept (`held_rows`), and a
per-sequence mask row is loaded as one row and added in ROW mode (`mask_row`), not repeated by the DMA
for each query row of the block. A step's K, V and mask LOADs continue the load queue's DMA chain
(`chained_loads`): the latency of each is hidden under the data of the one before.

A grid step takes `heads` consecutive heads (`SubHead`: each its own K, V, score, softmax and output
buffers; a mask the heads share is loaded once): the loads of step k go into the slots the compute
of step k - 2 frees, so with one head per step each head waited for a DMA latency, its loads' data
and the compute of the head two before, in series (measured 335 cycles per head of a 17-key
attention whose K/V data is 280). With several, the step's loads are in flight under the compute of
the step before, and its score MATMULs run while the vector unit does the softmax of the heads
before them (`flash_cost.interleaved`).
"""

from __future__ import annotations

from .. import symbolic as sy
from ..machine.target import MAX_ROWS
from . import first, last


def held_rows(g) -> int:
    """The query rows of every batch, which a decode step over a paged cache loads (and scales) once and
    keeps, instead of one LOAD per head (a DMA latency each, where a head's K and V are a few pages); 0
    where the query is not one contiguous [batch * lq, d] block of static size or a window guards loads."""
    nb, lq = sy.as_int(g.batch), sy.as_int(g.lq)
    if not g.paged or g.causal or g.window is not None or g.minor[0] or nb is None or lq is None:
        return 0
    contiguous = sy.as_int(g.base(0, sy.const(1))) == lq * g.d and g.row_stride(0) == g.d
    return nb * lq if contiguous and nb * lq <= MAX_ROWS else 0


PER_HEAD = ("k", "v", "mask", "p", "m", "l", "cm", "t", "out", "s", "o")  # buffers a sub-head has its own of


class SubHead:
    """The builder of head `sub` of the `heads` a grid step takes: grid dim 0 reads as that head's index
    (d0 * heads + sub) and the buffers of `PER_HEAD` but `shared` as the sub-head's own copies
    (`_plan`: `name` for head 0, `name` + sub after it)."""

    def __init__(self, b, heads: int, sub: int, shared: tuple = ()):
        self.b, self.heads, self.sub = b, heads, sub
        self.names = {n: f"{n}{sub}" for n in PER_HEAD if n not in shared} if sub else {}

    def d(self, i: int):
        return self.b.d(0) * self.heads + self.sub if i == 0 else self.b.d(i)

    def _n(self, name):
        return self.names.get(name, name)

    def load(self, buffer: str, tensor: int, **f) -> None:
        self.b.load(self._n(buffer), tensor, **f)

    def load_rows(self, buffer: str, tensor: int, **f) -> None:
        self.b.load_rows(self._n(buffer), tensor, **f)

    def store_rows(self, buffer: str, **f) -> None:
        self.b.store_rows(self._n(buffer), **f)

    def mma(self, acc: str, lhs: str, rhs: str, **f) -> None:
        self.b.mma(self._n(acc), self._n(lhs), self._n(rhs), **f)

    def vop(self, fn: str, dst: str, a: str | None = None, b: str | None = None, **f) -> None:
        self.b.vop(fn, self._n(dst), a and self._n(a), b and self._n(b), **f)


def shared_mask(g, heads: int) -> bool:
    """Whether the `heads` heads of a step read one mask (broadcast, or `heads` divides the heads per mask)."""
    return g.mask is None or sy.as_int(g.mask_stride) == 0 or g.mask_div % heads == 0


def shared(g, heads: int) -> tuple:
    """The buffers of `PER_HEAD` the `heads` heads of a step share: the held output, and a mask they all read."""
    return ("out",) + (("mask",) if shared_mask(g, heads) else ())


def rows_out(g) -> bool:
    """The result is one contiguous [batch * lq, dv] block (its rows can be held and stored at once)."""
    return sy.as_int(g.base(3, sy.const(1))) == sy.as_int(g.lq) * g.dv and g.row_stride(3) == g.dv


def load_query(b, g, t, tq: int, rows, emit: bool = True, opening=None):
    """LOADs and scales the query block of step (bi, qi) at its first key/value step; or, held
    (`held_rows`), every batch's rows once at the first grid point (`emit`: not again for a step's
    other heads). Where the query is kept in the scratchpad (`Geometry.kept`) there is no LOAD: the rows
    are scaled from the region, each head's at its first key tile (`opening`: the guards of the head's
    opening tile, its lane's first in a batched step, which has loads anyway: a MUL at a tile the lane skips
    would make a step of it, whose token the chained loads after it wait for) where the heads take more grid
    steps than the loads have slots (the loads of step 2 wait for the compute of step 0, which then does not
    scale every head's rows). Returns the block's offset in `q`."""
    bi, qi, held = b.d(0), b.d(1), t.tiles.get("q_held", 0)
    if held:
        lq, src = sy.as_int(g.lq), g.kept.get(0, "q")
        at = bi * (lq * g.d)
        if src != "q" and sy.as_int(g.batch) > 2 * t.tiles.get("heads", 1):  # step 2's loads wait for step 0
            b.vop("MUL", "q", src, mode="SCALAR", imm=g.scale, rows=lq, cols=g.d, dst_stride=g.d, a_stride=g.d,
                  dst_offset=at, a_offset=at, when=opening or first(2))  # fmt: skip
        elif emit:
            once = first(0) + first(1) + first(2)
            if src == "q":
                b.load_rows("q", 0, row_start=sy.const(0), row_bound=sy.const(held), rows=held, cols=g.d, when=once)
            b.vop("MUL", "q", src, mode="SCALAR", imm=g.scale, rows=held, cols=g.d, dst_stride=g.d, a_stride=g.d,
                  when=once)  # fmt: skip
        return at
    off = None
    if t.tiles.get("q_blocks"):  # query block (bi, qi) in slot (bi * blocks + qi) mod 2
        off = sy.mod(bi * sy.ceildiv(g.lq, tq) + qi, 2) * (tq * g.d)
    elif next(buf for buf in t.buffers if buf.name == "q").alternate:  # batch bi's rows in slot bi mod 2
        off = sy.mod(bi, 2) * (tq * g.d)
    load_block(b, g, tq, rows, bi, qi, off, first(2))
    scale_block(b, g, tq, rows, bi, qi, off, first(2))
    return off


def load_block(b, g, tq: int, rows, bi, qi, off, when) -> None:
    """LOAD the rows of query block (bi, qi) into `q` at `off`."""
    b.load_rows("q", 0, dram_offset=g.base(0, bi), dram_stride=g.row_stride(0), row_start=qi * tq,
                row_bound=g.lq, rows=rows, cols=g.d, buf_offset=off, when=when)  # fmt: skip


def scale_block(b, g, tq: int, rows, bi, qi, off, when, region=None) -> None:
    """`q` at `off` = the scale times query block (bi, qi): read from its `region` where the query is kept in
    the scratchpad (`Geometry.kept`), else in place."""
    src, stride, at = "q", g.d, off
    if region is not None:
        src, stride = region, g.row_stride(0)
        at = g.base(0, bi) + qi * (tq * stride)
    b.vop("MUL", "q", src, mode="SCALAR", imm=g.scale, rows=rows, cols=g.d, dst_stride=g.d, a_stride=stride,
          dst_offset=off, a_offset=at, when=when)  # fmt: skip


def hold_output(g, e, b) -> None:
    """Points head b.d(0)'s normalized output at its rows of the held output: the `out` buffer, or the
    result's region where it is kept in the scratchpad (`Geometry.kept`, rows as in DRAM: `rows_out`)."""
    e.out_off = b.d(0) * (sy.as_int(g.lq) * g.dv)
    if 3 in g.kept:
        e.out, e.out_stride = g.kept[3], g.row_stride(3)


def store_held(b, g, t, heads: int, when) -> None:
    """The held output of every head, STOREd once at the last grid step (none where it is kept)."""
    if 3 in g.kept:
        return
    held, steps = t.tiles["q_held"], sy.as_int(g.batch) // heads
    b.store_rows("out", row_start=sy.const(0), row_bound=sy.const(held), rows=held, cols=g.dv,
                 when=when + last(0, sy.const(steps)))  # fmt: skip


def mask_row(g) -> bool:
    """A decode step's mask (one row per sequence, over the paged cache) is loaded as that one row and
    added to every query row of the block in ROW mode, not repeated by the DMA (each row read again)."""
    return bool(g.paged) and g.mask is not None and sy.as_int(g.mask_rows) == 1 and sy.as_int(g.lq) != 1


def chained_loads(g, tk: int) -> bool:
    """Whether a step's K tile, V tile and mask LOADs continue the load queue's DMA chain (docs/isa.md, LOAD
    `chain`: a descriptor issued while the previous one moves its data, so its latency is hidden there; one
    that waits for a token still starts at the token): over a paged cache whose key/value tile spans pages,
    without guards that could leave a step's K loads out (causal, window). A decode step over short pasts
    is a few pages per head: its cycles were these latencies, three per head."""
    info = g.paged.get(1) if g.paged else None
    return bool(info) and 2 in g.paged and tk > info["page_size"] and not g.causal and g.window is None


SAMPLES = 7  # lengths a decode step's tiles are scored at


def plan_samples(g, plan: list[int]) -> list[list[int]]:
    """The symbol values an attention over a paged cache is scored at: a decode step's key/value tiles
    serve every past length, and the last tile of a head is partial. Where it holds a few rows, the next
    head's first loads wait for the whole compute of the tile before it (`flash_cost.chained_ring`): a
    cost at one length (the plan's, 4097 keys: one row) prices that tail at its worst for every tk. So
    the lengths from half the plan's to it, `SAMPLES` apart by a step no power of two divides (the tails
    of every tk spread), and their costs add up; the plan's alone elsewhere."""
    if not g.paged or g.causal or len(plan) != 1:
        return [plan]
    p = plan[0]
    return [[p // 2 + (i * p) // (2 * SAMPLES)] for i in range(SAMPLES)]


def lanes(g) -> int:
    """The sequences of a batched decode step over a paged cache (`novella.paged.batch`) whose key tiles
    each follow the sequence's own past: the step reads one lane field per sequence after its symbols
    (`runtime/expr.py` "sym@": the storage index of the sequence's position 0, below which its mask
    hides every key), so a lane skips the tiles before its first one. 0 where the op is not such a step
    (its mask is what makes a skipped tile's keys count for nothing)."""
    info = g.paged.get(1) if g.paged else None
    n = info.get("batch", 1) if info else 1
    return n if n > 1 and g.mask is not None and not g.causal and g.window is None else 0


class Lanes:
    """A builder (or `SubHead`) whose ops guarded by a lane condition carry the `lane` field: the lane of
    their grid point (`novella_macro_gen`: symbol n_syms of their `when` set is that lane's field)."""

    OPS = ("load", "load_rows", "store_rows", "mma", "vop")

    def __init__(self, b, g, n_syms: int):
        self.b, self.field, self.conds = b, sy.sym(n_syms), set()
        self.lane = sy.floordiv(b.d(0), sy.as_int(g.batch) // lanes(g))

    def guards(self, i, tk: int) -> tuple[list, list, list]:
        """(on, opening, rest) of key tile i in its lane: it holds a key at or after the lane's start,
        it is the lane's first such tile, or a later one."""
        on, first = ("ge", i * tk + (tk - 1) - self.field), ("ge", self.field - i * tk)
        rest = ("ge", i * tk - 1 - self.field)
        self.conds |= {on, first, rest}
        return [on], [on, first], [on, rest]  # every guard of a tile has the loads' (`novella_schedule`)

    def __getattr__(self, name):
        fn = getattr(self.b, name)
        if name not in self.OPS:
            return fn

        def call(*a, **f):
            if any(c in self.conds for c in f.get("when") or ()):
                f["lane"] = self.lane
            return fn(*a, **f)

        return call
