"""The fused MLP's split form (`novella.tiles` `pn`): for output blocks [tm, N] larger than the accumulator
(the MLP 384-1536-384 at 64 rows on the default config). The output block is summed in the scratchpad
(`ysum`), chunk by chunk: chunk j's product by w2 goes through the accumulator in pieces of pn columns (two
halves), each added into its columns of `ysum` by the vector unit beside the next piece's MATMUL (the last two
pieces' sums beside the next step's MATMUL: the step then retires with its MATMULs, and the token ring reloads
its slot of `w` sooner). The weights go by in one two-slot buffer `w`, one tile per grid step, so each slot
holds one tile rather than one of w1 and one of w2: x's rows [tm, K] and `ysum` [tm, N] fit beside them.
Grid (m, s), s in [0, 2 * chunks], one tile per step:

    s:      0      1      2      3      4      ...  2c-3     2c-2     2c-1     2c
    tile:   w1[0]  w1[1]  w2[0]  w1[2]  w2[1]  ...  w1[c-1]  w2[c-2]  -        w2[c-1]
    MATMUL  x.w1   x.w1   h0.w2  x.w1   h1.w2  ...  x.w1     h.w2     -        h(c-1).w2
    VEC     -      h0     sums   h1     sums   ...           sums     h(c-1)   sums, epilogue

Chunk j's bias and act1 (b1 and b2 sit in the accumulator) run on the vector unit beside the next chunk's
MATMUL by w1; the product by w2[j] reads them one step later. Both weight LOADs are in every step, the one
whose tile the step does not take with no rows (an unguarded LOAD keeps its two slots). The residual is
LOADed into x's buffer on the last step (x is no longer read there). The cost model (`cost`) picks the
form against the accumulator one (`linear_mlp.FusedMlp.choose`)."""

from __future__ import annotations

import math

from .. import symbolic as sy
from ..machine import costmodel as cm
from ..machine.target import MAX_COLS
from . import BufferPlan, first, last, resident, tile_rows
from .elementwise import ACT_FNS, emit_act
from .linear_emit import _bias_rows
from .support import _pieces


def plan(target, tm, hc, pn, k, h, n, residual, plan_type=BufferPlan, direct=0, act="none"):
    p = plan_type(target)
    # x rows (unless read where kept); the residual on the last step (unless ysum starts from it)
    rows = [n] * (residual and not _sums_residual(residual, direct, act, tm)) + [k] * (not direct)
    if rows:
        p.add("a", "spad", tm * max(rows))
    p.add("ysum", "spad", tm * n)
    p.add("w", "spad", max(hc * k, n * hc), stream=True)
    p.add("h", "spad", 2 * tm * hc)  # two halves, by the parity of the chunk
    p.add("tmp", "spad", tm * hc)
    p.add("acch", "acc", 2 * tm * hc)
    p.add("accp", "acc", 2 * tm * pn)
    p.add("b1", "acc", h)
    p.add("b2", "acc", n)
    return p


def candidates(target, k, h, n, residual, direct=0, act="none") -> list[tuple[int, int, int]]:
    """(tm, hc, pn) whose buffers fit: pn a divisor of N in array columns, below N (N whole is the
    accumulator form)."""
    if max(k, n) > MAX_COLS or target.buffer_slots < 2:
        return []
    hcs = [d for d in target.divisors(h) if d % target.array_cols == 0 and d <= MAX_COLS and h // d >= 2]
    pns = [d for d in target.divisors(n) if d % target.array_cols == 0 and d < n]
    return [
        (tm, hc, pn)
        for tm in target.array_tiles(16)
        for hc in hcs
        for pn in pns
        if plan(target, tm, hc, pn, k, h, n, residual, direct=direct, act=act).fits()
    ]


def cost(target, m, k, h, n, acts, residual, tm, hc, pn, direct=0) -> float:
    """Predicted cycles: per row piece its first step (x rows, w1[0], the first MATMUL), the w1 steps (a
    MATMUL, the previous chunk's VECs beside it), the w2 steps (the pieces' MATMULs, their sums beside),
    the step of the last chunk's VECs, and the last (w2's last tile, the epilogue, the STORE). A step's
    compute is its chain (first MATMUL to last VEC: the two units overlap), which the token ring through
    the two slots of `w` adds a DMA to (`costmodel.Group._ring`)."""
    chunks, groups, pieces = h // hc, [], n // pn
    first_res = _sums_residual(residual, direct, acts[1], tm)
    for r, count in _pieces(m, tm):
        mm1 = cm.matmul(target, r, k, hc)
        hv = cm.vecs(target, [("add", r, hc)] + [(fn, r, hc) for fn in ACT_FNS[acts[0]]])
        piece, add = cm.matmul(target, r, hc, pn), cm.vec(target, r, pn)
        mm2 = pieces * piece
        ev = cm.vecs(target, [(fn, r, n) for fn in ACT_FNS[acts[1]]]) + residual * cm.vec(target, r, n)
        w1, w2, res = (hc, k, True), (n, hc, False), [(r, n, True)] * residual
        groups.append(_group(target, [(r, k, True)] * (not direct) + res * first_res + [w1], mm1, count, slots=1))
        groups.append(_group(target, [w1], max(mm1, hv + 2 * add), count * (chunks - 1)))
        groups.append(_group(target, [w2], max(mm2, 2 * piece + (pieces - 2) * add), count * (chunks - 1)))
        groups.append(_group(target, [], hv + 2 * add, count))
        store = cm.dma(target, r, n, True)
        tail = [w2] + res * (not first_res)
        groups.append(_group(target, tail, mm2 + 2 * add + ev, count, slots=1, store=store))
    return cm.pipeline(target, groups)


def _group(target, loads, chain, count, slots=2, store=(0.0, 0.0)) -> cm.Group:
    _, ld = cm.dmas(target, loads)
    lq = ld + target.issue_cycles * (2 + len(loads))  # one DMA chain, two weight LOADs a step
    st, sd = store
    return cm.Group(lq, chain, st, ld + sd, count, slots, 1, overlap=True, issues=12)


def choose(target, m, k, h, n, acts, residual, direct=0):
    """(cycles, (tm, hc, pn)) of the cheapest fitting candidate, or (inf, None) (`direct`: x read where kept)."""
    best = (math.inf, None)
    for tm, hc, pn in candidates(target, k, h, n, residual, direct, acts[1]):
        key = (cost(target, m, k, h, n, acts, residual, tm, hc, pn, direct), -min(tm, m), tm, -hc, -pn)
        if best[1] is None or key < best[0]:
            best = (key, (tm, hc, pn))
    return (best[0][0] if best[1] else math.inf), best[1]


def emit(b, tv, dims, acts, tiles, direct=0) -> None:
    k, h, n, residual = dims
    tm, hc, pn = tiles["tm"], tiles["hc"], tiles["pn"]
    chunks, m_total = h // hc, tv.rows(0)
    rows, s = tile_rows(0, tm, m_total), b.d(1)
    big = sy.const(2 * chunks + 1)
    later = sy.ceildiv(s, 2 * chunks + 1)  # 0 at s = 0, else 1
    w1_step = sy.mod(s, 2) + sy.const(1) - later  # 1 where the step takes a w1 tile: s = 0 and odd s
    j1 = sy.floordiv(s + sy.const(1), 2)  # the w1 chunk of a w1 step
    j2 = sy.floordiv(s + sy.const(1), 2) - later  # the w2 chunk of a w2 step (even s >= 2)
    if not direct:  # else the MATMULs read x's rows where --novella-resident keeps them
        b.load_rows("a", 0, dram_stride=k, row_start=b.d(0) * tm, row_bound=m_total, rows=rows, cols=k, when=first(1))
    for buf, operand, width in (("b1", 2, h), ("b2", 4, n)):
        r = _bias_rows(width, MAX_COLS)
        b.load_block(buf, operand, dram_offset=0, rows=r, cols=width // r, when=first(0) + first(1))
    b.load_rows("w", 1, dram_stride=k, row_start=j1 * hc, row_bound=sy.const(h), cols=k,
                rows=[sy.const(hc), w1_step * hc, sy.const(h) - j1 * hc])  # fmt: skip
    b.load_rows("w", 3, dram_offset=j2 * hc, dram_stride=h, row_start=sy.const(0), row_bound=sy.const(n), cols=hc,
                rows=[sy.const(n), (sy.const(1) - w1_step) * n])  # fmt: skip
    out_tile = dict(dram_offset=0, dram_stride=n, row_start=b.d(0) * tm, row_bound=m_total, cols=n, rows=rows)
    at_last = last(1, big)
    first_res = _sums_residual(residual, direct, acts[1], tm)
    if residual:  # into x's buffer on the last step (x is no longer read), or as ysum's initial value
        b.load_rows("ysum" if first_res else "a", 5, **out_tile, when=first(1) if first_res else at_last)
    is_w1 = [("eq", sy.const(1) - w1_step)]
    x, at = x_operand(b, direct, tm, k)
    b.mma("acch", x, "w", acc_offset=sy.mod(j1, 2) * (tm * hc), a_stride=k, b_stride=k, acc_stride=hc, m=rows,
          k=k, n=hc, accumulate=0, transpose_b=1, when=is_w1 + [("ge", sy.const(chunks - 1) - j1)], **at)  # fmt: skip
    odd = [("eq", sy.const(1) - sy.mod(s, 2))]
    _hidden_vecs(b, acts[0], rows, tm, hc, sy.floordiv(s, 2), odd)
    _deferred(b, rows, tm, pn, n, sy.floordiv(s, 2) - sy.const(1), odd + [("ge", s - sy.const(3))], first_res)
    _products(b, rows, tm, hc, pn, n, j2, [("eq", w1_step)], at_last, first_res)
    emit_act(b, acts[1], "ysum", "tmp", rows, n, n, when=at_last)
    if residual and not first_res:
        b.vop("ADD", "ysum", "ysum", "a", rows=rows, cols=n, dst_stride=n, a_stride=n, b_stride=n, when=at_last)
    b.store_rows("ysum", **out_tile, when=at_last)


def _sums_residual(residual: bool, direct: int, act: str, tm: int) -> bool:
    """The residual is ysum's initial value, LOADed on the row block's first step: x is read where it is kept
    (no buffer of its rows is left to LOAD the residual into on the last step), no act follows the sum, and
    x's rows are one block (the LOAD into ysum would else wait for the previous block's STORE from it,
    which no token orders)."""
    return residual and 0 < direct <= tm and act == "none"


def x_operand(b, direct: int, tm: int, k: int) -> tuple[str, dict]:
    """The buffer the MATMULs read x's row block from, and its offset field: the region where
    `--novella-resident` keeps x, at the block's first row, or `a`, which the block's LOAD fills."""
    if not direct:
        return "a", {}
    region, at = resident.x_rows(b, 0, tm, k)
    return region, {"lhs_offset": at}


def _hidden_vecs(b, act1, rows, tm, hc, j, when) -> None:
    """Chunk j: + b1 from its accumulator half into its hidden half, then act1 in place."""
    half = sy.mod(j, 2) * (tm * hc)
    geo = dict(rows=rows, cols=hc, dst_stride=hc, a_stride=hc, b_stride=hc, when=when)
    b.vop("ADD", "h", "acch", "b1", mode="ROW", dst_offset=half, a_offset=half, b_offset=j * hc, **geo)
    emit_act(b, act1, "h", "tmp", rows, hc, hc, when=when, out_offset=half, buf_offset=half)


def _products(b, rows, tm, hc, pn, n, j, when, at_last, onto) -> None:
    """Chunk j's hidden half times w2[j]'s pieces of pn rows, each summed into its columns of ysum (chunk 0
    starts the sum with b2); the last two pieces' sums wait for the next step (beside its MATMUL: the slot
    of w this step reads is reloaded once the step retires), but on the last step."""
    lhs, pieces = sy.mod(j, 2) * (tm * hc), n // pn
    for p in range(pieces):
        b.mma("accp", "h", "w", acc_offset=(p % 2) * (tm * pn), lhs_offset=lhs, rhs_offset=p * pn * hc, a_stride=hc,
              b_stride=hc, acc_stride=pn, m=rows, k=hc, n=pn, accumulate=0, transpose_b=1, when=when)  # fmt: skip
        _sum(b, rows, tm, pn, n, p, j, when if p < pieces - 2 else at_last, onto)


def _deferred(b, rows, tm, pn, n, j, when, onto) -> None:
    """The last two pieces' sums of chunk j, whose products ran the step before."""
    for p in range(n // pn - 2, n // pn):
        _sum(b, rows, tm, pn, n, p, j, when, onto)


def _sum(b, rows, tm, pn, n, p, j, when, onto: bool) -> None:
    """Piece p of chunk j into its columns of ysum: chunk 0 starts them with b2 (`onto`: added to the
    residual ysum was loaded with), every later chunk adds its product."""
    half = (p % 2) * (tm * pn)
    geo = dict(rows=rows, cols=pn, dst_stride=n, a_stride=pn, dst_offset=p * pn, a_offset=half)
    sums = geo | {"a_stride": n, "a_offset": p * pn}
    b.vop("ADD", "ysum", "ysum" if onto else "accp", "b2", mode="ROW", b_stride=pn, b_offset=p * pn,
          **(sums if onto else geo), when=when + [("eq", j)])  # fmt: skip
    b.vop("ADD", "ysum", "ysum", "accp", b_stride=pn, b_offset=half, **sums,
          when=when + [("ge", j - sy.const(0 if onto else 1))])  # fmt: skip
