"""Linear layers on the MAC array, with a fused epilogue and a loop order chosen by the cost model."""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.novella import FusedLinearOp, ReshapeOp, linear_epilogue
from ..machine import costmodel as cm
from . import BufferPlan, TensorView, Tiling, first, last, memoized, plan_lengths, resident, tile_rows
from . import linear_cost as lc
from .linear_cost import Epilogue
from .linear_emit import (
    _bias_rows,
    emit_epilogue,
    emit_loads,
    emit_matmul,
    emit_prologue,
    emit_prologue_tail,
    emit_spread_epilogue,
)
from .normalization import LayerNorm
from .support import _pieces

LINEAR_OPS = ("novella.linear", "novella.fused_linear")


class Linear:
    """`y[M, N] = epilogue(x[M, K] @ W[N, K]^T)`, in one of three loop orders (`novella.tiles` ws):

    * ws = 1, grid (n, m, k), weight-stationary: the weight slab W[n-block, :] stays in the scratchpad while the row tiles of x stream through (x is read N / tn times);
    * ws = 0, grid (m, n, k), output-stationary: tiles of x and W both stream through two slots
      each while an [tm, tn] block accumulates (x is read N / tn times, W ceil(M / tm) times),
      so the weight slab need not fit and every load runs under the previous step's compute;
    * ws = 2, grid (m, n, k), input-stationary: the row slab x[m-block, :] stays in the scratchpad while
      the weight tiles stream through two slots (x is read once, W ceil(M / tm) times): at lengths whose
      rows fit one slab with a weight tile, every byte moves once, and the next weight tile loads under
      the current MATMUL.

    The bias row is resident (one LOAD on the op's first step), or with `bias_tile` each output block's
    columns are LOADed with its epilogue (docs/design.md). The K loop accumulates in the accumulator; the epilogue (`Epilogue`: bias, activation, residual,
    layer norm) writes a two-slot output buffer on the last k step, whose STORE runs under the next
    step's compute. With `acc_slots` = 2 the accumulator has two halves, chosen by the parity of the
    output block (an address expression of the grid dims, not the step parity `--novella-schedule`
    alternates: the k loop accumulates across steps), so the next block's MATMULs on the matrix unit
    need not wait for this block's epilogue VECs on the vector unit. The cost model
    (`novella_mlir/machine/costmodel.py`) scores every order, tile size and accumulator slot count at the
    planned length (`plan_lengths`: the nominal length, or a shape bucket's upper end) and the cheapest
    fitting one wins."""

    exhaustive = False  # score every fitting candidate, no bound (bench/costmodel.py, which replaces `cost`)

    def _plan(self, target, cand, k, n, epi: Epilogue, plan_type=BufferPlan):
        tm, tn, tk, ws, acc, ra, bt, ring = cand
        deferred = acc > 1
        plan = plan_type(target)
        plan.add("w", "spad", tn * k if ws == 1 else tn * tk, stream=ws != 1, ring=ring)
        plan.add("bias", "spad", tn if bt else n, stream=bool(bt), ring=ring)  # its block's columns, or the row
        if bt and deferred:
            plan.add("bias2", "spad", tn)
        if not epi.direct or epi.pre_norm:  # x kept in the scratchpad: the MATMULs read it there (`a`: squares)
            plan.add("a", "spad", tm * k if ws == 2 else tm * tk, stream=ws != 2, ring=ring)
        plan.add("out", "spad", tm * tn, stream=True)
        if deferred:  # the last block's own output buffer
            plan.add("out2", "spad", tm * tn, stream=True)
        if epi.scratch:
            plan.add("tmp", "spad", tm * tn)
        if epi.residual and not ra:
            plan.add("res", "spad", tm * tn, stream=True, ring=ring)
            if deferred:
                plan.add("res2", "spad", tm * tn)
        if epi.norm:
            for name, size in (("nw", n), ("nb", n), ("mean", tm), ("var", tm)):
                plan.add(name, "spad", size)
        if epi.pre_norm:  # the input rows' norm: squares tk columns at a time (tk = K but input-stationary)
            pre = (("pw", k), ("pss", tm), ("pa", tm * k)) if epi.rms else (("pw", k), ("pb", k), ("pmean", tm),
                   ("pvar", tm), ("psum", tm), ("psq", tm * tk))  # fmt: skip
            for name, size in pre:
                plan.add(name, "spad", size)
        plan.add("acc", "acc", tm * tn * min(acc, 2))
        if epi.rms and ws == 2 and k > tk:  # the partial sums of squares (`emit_prologue_tail` spread over k)
            plan.add("psum", "spad", tm)
        return plan

    @memoized
    def cost(self, target, dims, cand) -> float:
        """Predicted cycles of the whole op (cost model): dims = (M, K, N, Epilogue), cand = (tm, tn, tk, ws,
        acc_slots (SPREAD: two, spread), res_acc). Weight-stationary, the first step of each column block also loads the weight slab (single
        slot: it waits for the previous compute); input-stationary, the first step of each row tile its row
        slab; the bias row (and a layer norm's weight and bias) loads once, on the op's first step. The
        epilogue's VECs run on the vector unit beside the MATMULs, which use other SRAM (`Group.vector`,
        `overlap`):
        * one accumulator half: on the last k step, after its MATMUL; the next block's MATMULs wait for the
          bias add (`vector_wait`: it reads the accumulator the next block's first MATMUL overwrites), and
          the loads two steps on wait for the epilogue's retirement (`Group._ring`, `retire_floor`);
        * two halves: deferred to the next block along grid dim 1, on its first k step, beside its MATMUL
          (the step's chain is the longer of the two), with that step's residual load and the STORE;
          dim 1's last block runs its own after its MATMUL, as with one half."""
        (m, k, n, epi), (tm, tn, tk, ws, acc, ra, bt, ring) = dims, cand
        n_blocks, k_steps = -(-n // tn), k // tk
        steps, known, tiles = [], lc.steps_of(target, k, n, epi), (tn, tk, ws, acc, ra, bt, ring)

        def add(r, count, j, head, deferred, lead=False):
            if count:  # `cm.pipeline` drops empty groups
                key = (tiles, r, j, head, deferred, lead)
                terms = known.get(key)
                if terms is None:
                    terms = known[key] = lc.step(target, k, n, epi, tiles, r, j, head, deferred, known, lead)
                steps.append((terms, count))

        ks = [(0, 1)] + [(1, k_steps - 2)] * (k_steps > 2) + [(k_steps - 1, 1)] * (k_steps > 1)
        if acc == lc.SPREAD:  # each k step its own share of the spread epilogue
            ks = [(j, 1) for j in range(k_steps)]
        pieces = _pieces(m, tm)
        once = lc.first_loads(target, k, n, epi, tiles)  # the bias row and the norms' rows, on the first step
        if ws == 2:
            return once + self._cost_rows(ks, pieces, n_blocks, acc, add, steps, epi.rms and k_steps > 1)
        for j, cnt in ks:
            for i, (r, nr) in enumerate(pieces):
                # with two halves, the last block along grid dim 1 of each d0 runs its epilogue in its own step
                in_step = n_blocks * nr if acc == 1 else (n_blocks * (i == len(pieces) - 1) if ws else nr)
                head = j == 0 and i == 0 and (bool(ws) or epi.norm)
                add(r, n_blocks * cnt, j, True, acc > 1 and in_step < n_blocks * nr) if head else None
                rest = n_blocks * nr - head * n_blocks
                add(r, max(rest - in_step, 0) * cnt, j, False, True)
                add(r, min(in_step, rest) * cnt, j, False, False)
        return once + cm.pipelined(steps)

    @staticmethod
    def _cost_rows(ks, pieces, n_blocks, acc, add, steps, lead: bool) -> float:
        """`cost`'s steps input-stationary (ws = 2): the first step of each row tile loads its row slab
        (one slot: after the previous row tile's compute); with two accumulator halves, every block but
        the row's last along n runs its epilogue in the next block's first k step. `lead`: the first
        block's later k steps hold their share of an RMSNorm's row sums (`emit_prologue_tail`), a group
        of their own (taken from the group the first block is in)."""
        for j, cnt in ks:
            for r, nr in pieces:
                if j == 0:
                    add(r, nr, j, True, acc > 1)
                rest = n_blocks * nr - nr * (j == 0)
                own = nr if acc > 1 else rest
                first = nr if lead and j > 0 else 0
                in_own = acc == 1 or n_blocks == 1  # the first block's group: own epilogue, or deferred
                add(r, first * cnt, j, False, not in_own, True)
                add(r, (max(rest - own, 0) - first * (not in_own)) * cnt, j, False, True)
                add(r, (min(own, rest) - first * in_own) * cnt, j, False, False)
        return cm.pipelined(steps)

    def choose(self, target, m, k, n, epi: Epilogue, options):
        """(key, (tm, tn, tk, ws, acc_slots, res_acc), plan) of the cheapest fitting candidate for M = m rows, or
        (None, None, plan) (memoized: `--novella-buckets` and `--novella-tile` ask for the same candidates)."""
        return _choose(self, target, m, k, n, epi, options.get("tile-m") or 0)

    def _search(self, target, m, k, n, epi: Epilogue, tile_m):
        """The first, in the loop order below, of the fitting candidates with the least (cost, -min(tm, M), -tn,
        tm): of tiles that hold all M rows the smallest (the row slab and the output buffers no larger than
        the rows, which leaves the scratchpad to the next macro's early loads, `--novella-schedule`).
        A layer norm needs whole rows (tn = N). The second accumulator half costs SRAM, so one-half
        candidates stay in the search. Exact shortcuts: a candidate's SRAM use grows with tk and tn, so the
        fitting tks of (ws, acc, tm, tn) are a tail of the list, no shorter than for a larger tn (found by
        bisection); candidates are scored in the order of a lower bound of their cost
        (`linear_cost.lower_bounds`, at most the cost), until that bound exceeds the best cost."""
        cands = _fitting(self, target, k, n, epi, tile_m)
        if not cands:
            tms = [tile_m] if tile_m else target.array_tiles(16)
            tns = ([n] if n <= target.max_cols else []) if epi.norm else target.col_tiles(n)
            tks = target.divisors(k, target.array_rows)
            return None, None, self._plan(target, (tms[-1], (tns or [n])[-1], tks[-1], 0, 1, 0, 0, 0), k, n, epi)
        dims = (m, k, n, epi)
        if self.exhaustive:
            best = min((self.cost(target, dims, c), -min(c[0], m), -c[1], c[0], i) for i, c in enumerate(cands))
        else:
            best = self._pruned(target, dims, cands)
        cand, cost = self._ring(target, dims, cands[best[-1]], best[0])
        return (cost, *best[1:3]), cand, self._plan(target, cand, k, n, epi)

    def _ring(self, target, dims, cand, cost) -> tuple:
        """(candidate, cost): the winner `cand`, or its tiles with a third slot (`ring`) and any tk, accumulator
        halves and bias form, where that costs less. Priced only beside the winner (`_rings`), in the order of
        their lower bounds until one exceeds the least cost: a few where x and W tiles stream, not a second
        candidate list."""
        m, k, n, epi = dims
        rings = _rings(self, target, k, n, epi, cand)
        if not rings:
            return cand, cost
        bounds = lc.lower_bounds(target, m, k, n, rings, epi)
        best = cm.least_by_bound(bounds, lambda i: (self.cost(target, dims, rings[i]), i), self.exhaustive, (cost, -1))
        return (cand, cost) if best[1] < 0 else (rings[best[1]], best[0])

    def _pruned(self, target, dims, cands):
        """The least (cost, -min(tm, M), -tn, tm, index), scoring by class (`linear_cost.classes`) in the order
        of their lower bounds (`costmodel.least_by_bound`). A class has one cost, so its member of the
        smallest tm is its least key."""
        m, k, n, epi = dims
        first, rep, keys = lc.classes(cands, m)

        def key(c):
            tm, tn = cands[rep[c]][:2]
            return self.cost(target, dims, cands[first[c]]), -min(tm, m), -tn, tm, rep[c]

        return cm.least_by_bound(lc.lower_bounds(target, m, k, n, keys, epi), key)

    def predict(self, op, tv, target, options, plan, at) -> float | None:
        """Cycles at symbol values `at` of the tiling chosen when planning for `plan`."""
        k, n, epi = tv.cols(0), tv.static(1, 0), Epilogue.of(op)
        best = self.choose(target, sy.evaluate(tv.rows(0), plan), k, n, epi, options)
        if best[0] is None:
            return None
        return self.cost(target, (sy.evaluate(tv.rows(0), at), k, n, epi), best[1])

    def tile(self, op, tv, target, options):
        k, n = tv.cols(0), tv.static(1, 0)
        if _bias_rows(n, target.max_cols) > target.max_rows:
            raise ValueError(f"a linear of {n} outputs: its bias row is loaded as no block a LOAD takes")
        m = sy.evaluate(tv.rows(0), plan_lengths(op))
        best = self.choose(target, m, k, n, Epilogue.of(op), options)
        if best[0] is None:
            best[2].check()
        (tm, tn, tk, ws, acc, ra, bt, ring), plan = best[1], best[2]
        m_grid = sy.ceildiv(tv.rows(0), tm)
        grid = (
            [sy.const(-(-n // tn)), m_grid, sy.const(k // tk)]
            if ws == 1
            else [m_grid, sy.const(-(-n // tn)), sy.const(k // tk)]
        )
        tiles = {"tm": tm, "tn": tn, "tk": tk, "ws": ws} | ({"acc_slots": min(acc, 2)} if acc > 1 else {})
        if acc == lc.SPREAD:
            tiles["spread"] = 1
        if ra:
            tiles["res_acc"] = 1
        if bt:
            tiles["bias_tile"] = 1
        if ring > 2:
            tiles["ring"] = ring
        return Tiling(tiles, grid, plan.buffers + resident.buffers(op))

    def macro(self, op, tv, t, b):
        start = len(b.ops)
        self._macro(op, tv, t, resident.wrap(b, op))
        _chain_loads(b.ops[start:])

    def _macro(self, op, tv, t, b):
        g = _Geometry(op, tv, t, b)
        emit_loads(g)
        at_first = first(0) + first(1) + first(2)
        pre_when = first(1) + first(2) if g.ws == 2 else []
        if g.epi.pre_norm:
            emit_prologue(g, at_first, pre_when)
        if g.spread:  # the previous block's epilogue, on the vector unit under this block's MATMULs
            emit_spread_epilogue(g, g.previous())
        elif g.deferred:  # the previous block's epilogue, on the vector unit under this block's first MATMUL
            emit_epilogue(g, g.previous(), ("res", "out", "bias"), [("eq", b.d(2)), ("ge", b.d(1) - 1)])
        acc = _acc_half(t, b)
        emit_matmul(g, acc)
        if g.epi.pre_norm:
            emit_prologue_tail(g, pre_when)
        current = (b.d(g.nd), g.rows, b.d(g.md) * g.tm, acc)
        if g.deferred:  # the epilogue of dim 1's last block, after its own MATMUL
            emit_epilogue(g, current, ("res2", "out2", "bias2"), last(1, g.grid[1]) + g.last_k)
        else:
            emit_epilogue(g, current, ("res", "out", "bias"), g.last_k)


def _chain_loads(ops) -> None:
    """Every LOAD of a step continues the load queue's DMA chain (docs/isa.md, LOAD `chain`): issued while
    the previous descriptor moves its data, so its latency is hidden there (one that pops a token still
    starts at the token). The weight tiles, the x tile and the bias of a step, and the next step's, move
    back to back: at M = 1 a linear is its weights' DRAM time plus one DMA latency, not one per LOAD."""
    for name, fields in ops:
        if name == "novella.dma_load":
            fields["chain"] = 1


class _Geometry:
    """One linear macro's tile sizes, loop order and the grid expressions of its blocks."""

    def __init__(self, op, tv, t, b):
        self.b, self.epi = b, Epilogue.of(op)
        self.tm, self.tn, self.tk = t.tiles["tm"], t.tiles["tn"], t.tiles["tk"]
        self.ws = t.tiles.get("ws", 1)
        self.deferred = t.tiles.get("acc_slots", 1) > 1
        self.res_acc = bool(t.tiles.get("res_acc", 0))
        self.bias_tile = bool(t.tiles.get("bias_tile", 0))
        self.nd, self.md = (0, 1) if self.ws == 1 else (1, 0)
        self.k, self.n, self.m_total = tv.cols(0), tv.static(1, 0), tv.rows(0)
        self.eps = op.attributes["norm_eps"].value if self.epi.norm or self.epi.pre_norm else 0.0
        self.has_residual = linear_epilogue(op)[0]
        self.rows = tile_rows(self.md, self.tm, self.m_total)
        m_grid = sy.ceildiv(self.m_total, self.tm)
        n_grid = sy.const(-(-self.n // self.tn))
        self.grid = [n_grid, m_grid] if self.ws == 1 else [m_grid, n_grid]
        self.last_k = last(2, sy.const(self.k // self.tk))
        self.spread = bool(t.tiles.get("spread", 0))
        self.direct = self.epi.direct  # the MATMULs read x where it is kept

    def cols(self, col):
        """Columns of output block `col` of tn: min(tn, n - col * tn) where the last block is partial."""
        return self.tn if self.n % self.tn == 0 else [sy.const(self.tn), sy.const(self.n) - col * self.tn]

    def previous(self):
        """(column block, rows, first row, accumulator offset) of the previous output block along grid dim 1
        (the epilogue deferred to this step is that block's: dim 1's first block has none)."""
        b, prev = self.b, [self.b.d(0), self.b.d(1) - sy.const(1)]
        rows = [sy.const(self.tm), self.m_total - prev[self.md] * self.tm]
        return prev[self.nd], rows, prev[self.md] * self.tm, sy.mod(b.d(1) + sy.const(1), 2) * (self.tm * self.tn)


def _acc_half(t, b):
    """The accumulator offset of this step's output block: the half of its parity along grid dim 1
    (None: one half)."""
    if t.tiles.get("acc_slots", 1) < 2:
        return None
    return sy.mod(b.d(1), 2) * (t.tiles["tm"] * t.tiles["tn"])


def _first_true(n: int, pred) -> int:
    """The least i in [0, n] with pred(i), for a pred that stays true once true (n: none)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pred(mid) else (mid + 1, hi)
    return lo


class _Usage(BufferPlan):
    """A BufferPlan that only adds up the sizes (the fitting test of the search)."""

    def add(self, name: str, mem: str, size: int, stream: bool = False, ring: int = 0) -> None:
        self.used[mem] += size * ((ring if ring and self.slots > 1 else self.slots) if stream else 1)


@memoized
def _choose(kernel, target, m, k, n, epi, tile_m):
    return kernel._search(target, m, k, n, epi, tile_m)


@memoized
def _fitting(kernel, target, k, n, epi, tile_m) -> tuple:
    """The candidates (tm, tn, tk, ws, acc_slots, res_acc, bias_tile, ring) whose buffers fit, in search order;
    they do not depend on M (memoized: the search runs for every planned M). `ring`: the slots of the streamed
    LOAD buffers (x's tile, the weight tile, a residual or bias tile), here 0 (the target's two); a third slot
    is priced beside the winner only (`Linear._ring`). `res_acc` (the residual loaded into the
    accumulator, `Epilogue.res_in_acc`) is a choice where the epilogue allows it and the k loop has two
    steps. `bias_tile` (each output block's bias columns loaded with its epilogue, not the whole row on the
    first step) only where it lets a larger tk fit: with the same tiles it is one DMA per block more."""
    tms = [tile_m] if tile_m else target.array_tiles(16)
    tns = ([n] if n <= target.max_cols else []) if epi.norm else target.col_tiles(n)
    tks = target.divisors(k, target.array_rows)
    cands = []
    for ws in (1, 0, 2) if k <= target.max_cols else (0,):  # 1 and 2 LOAD whole rows of k (the cols field)
        for acc in (lc.SPREAD, 2, 1) if target.buffer_slots > 1 else (1,):
            if epi.rms and ws == 1 and acc > 1:  # the deferred epilogue's rows are not this step's: their scales
                continue
            for ra in (0, 1) if epi.res_in_acc(2) else (0,):
                ra_tks = _k_tiles(tks, k, epi, ws, acc, ra)
                for tm in tms:
                    cands += _by_tn(kernel, target, k, n, epi, tns, ra_tks, (tm, ws, acc, ra, 0))
    if epi.direct and epi.pre_norm and any(c[3] == 2 for c in cands):  # the norm of x read in place: once per
        cands = [c for c in cands if c[3] == 2]  # row slab (else on every step, which the cost model underprices)
    return tuple(cands)


def _k_tiles(tks, k, epi, ws, acc, ra) -> list:
    """The k tiles of `tks` that (ws, acc_slots, res_acc) allows."""
    return [
        t
        for t in tks
        if (not ra or epi.res_in_acc(k // t))
        and (ws == 2 or t == k or not epi.pre_norm)
        and (acc != lc.SPREAD or epi.spreads(k // t, ra))
    ]


@memoized
def _rings(kernel, target, k, n, epi, cand) -> tuple:
    """`cand`'s tm, tn, ws and res_acc with a third slot for the streamed loads (`ring`), any tk, accumulator
    halves and bias form that fit (`_by_tn`), where both x and W tiles stream (output-stationary, x not
    resident) on a target of two slots. Where one operand stays on chip the model's gain from a third slot
    (a smaller tk to fit it) was within its error and lost in the simulator (whisper body, large config,
    T = 16: q, k, v and the out projection each +1k to +4k cycles)."""
    tm, tn, _, ws, _, ra = cand[:6]
    if target.buffer_slots != 2 or ws != 0 or epi.direct:
        return ()
    tks, out = target.divisors(k, target.array_rows), []
    for acc in (lc.SPREAD, 2, 1):
        out += _by_tn(kernel, target, k, n, epi, [tn], _k_tiles(tks, k, epi, ws, acc, ra), (tm, ws, acc, ra, 3))
    return tuple(out)


def _by_tn(kernel, target, k, n, epi, tns, tks, c) -> list:
    """`_fitting`'s candidates of c = (tm, ws, acc, res_acc, ring) over the column tiles `tns` and the k tiles `tks`
    (largest first): a smaller tn fits from the same tk on, or sooner, so the fitting tks of each are a
    tail of `tks`, found by bisection from the previous tn's (per bias form)."""
    tm, ws, acc, ra, ring = c
    out, firsts = [], [len(tks)] * 2
    # ws = 0: halves alternate over n; ws = 2: a slab read by one column block is ws = 0
    for tn in [t for t in tns if (acc == 1 or ws == 1 or n > t) and (ws != 2 or n > t)]:
        for bt in (0, 1) if n > tn else (0,):

            def fits(i, tn=tn, bt=bt) -> bool:
                return kernel._plan(target, (tm, tn, tks[i], ws, acc, ra, bt, ring), k, n, epi, _Usage).fits()

            firsts[bt] = _first_true(firsts[bt], fits)
        out += [(tm, tn, tk, ws, acc, ra, 0, ring) for tk in tks[firsts[0] :]]
        if n > tn:
            out += [(tm, tn, tk, ws, acc, ra, 1, ring) for tk in tks[firsts[1] : firsts[0]]]
    return out


# ------------------------------------------------------------------ epilogue fusion (--novella-legalize)


def _linear_producer(value, allow_residual: bool):
    """The `novella.linear` / `novella.fused_linear` (without a norm) that produces `value` and nothing
    else uses, or None."""
    producer = value.owner
    if not isinstance(producer, ir.OpView) or producer.operation.name not in LINEAR_OPS:
        return None
    residual, norm = linear_epilogue(producer)
    if norm or (residual and not allow_residual) or len(list(producer.results[0].uses)) != 1:
        return None
    return producer


def _fused(rewriter, at, producer, result_type, **extra):
    """A `novella.fused_linear` of `producer`'s operands and act (and its residual), plus `extra`."""
    x, w, bias, *rest = list(producer.operands)
    fields = {"residual": rest[0] if rest else None} | extra
    with rewriter.ip, at.location:
        return FusedLinearOp(x, w, bias, result_type, act=producer.attributes["act"], loc=producer.location, **fields)


LINEAR = Linear()  # the kernel of novella.linear and novella.fused_linear (the op table lists it)


def _fits(target, producer, epi: Epilogue) -> bool:
    """Some tiling of the linear with epilogue `epi` fits the SRAM (at the rows it is planned for)."""
    return _plan_choice(target, producer, epi)[0] is not None


def _plan_choice(target, producer, epi: Epilogue):
    tv = TensorView(producer)
    m = sy.evaluate(tv.rows(0), plan_lengths(producer))
    return LINEAR.choose(target, m, tv.cols(0), tv.static(1, 0), epi, {})


def _through_reshapes(value):
    """(the value under a chain of single-use row-major reshapes that keep the last dim, the reshapes)."""
    chain = []
    while isinstance(value.owner, ir.OpView) and value.owner.operation.name == "novella.reshape":
        inner = value.owner.operands[0]
        if len(list(value.owner.results[0].uses)) != 1 or not _same_rows(inner.type, value.type):
            break
        chain.append(value.owner)
        value = inner
    return value, chain


def _same_rows(a, b) -> bool:
    """Equal row-major 2-D views [rows, last dim] (a reshape between them is a DRAM alias)."""
    sa, sb = sy.shape_of(a), sy.shape_of(b)
    if not sa or not sb:  # rank 0 (or not a novella tensor yet)
        return False
    return sy.equal(sa[-1], sb[-1]) and sy.equal(sy.numel(sa[:-1]), sy.numel(sb[:-1]))


def _reshaped(rewriter, at, value, result_type):
    if value.type == result_type:
        return value
    with rewriter.ip, at.location:
        return ReshapeOp(input=value, result=result_type, loc=at.location).result


def residual_pattern(target):
    """`add(linear(h), x)` (either order, x of the sum's shape, the linear used only here, maybe through
    row-major reshapes) -> one `novella.fused_linear` with residual x, when a tiling with the residual tile
    fits. x is reshaped to the linear's result view and the sum back to the add's type (both aliases)."""

    def pattern(op, rewriter):
        y = op.results[0]
        for i in (0, 1):
            value, chain = _through_reshapes(op.operands[i])
            producer = _linear_producer(value, allow_residual=False)
            other = op.operands[1 - i]
            if producer is None or other == op.operands[i] or other == value:
                continue
            if not (
                sy.equal_shapes(sy.shape_of(other.type), sy.shape_of(y.type)) and _same_rows(other.type, value.type)
            ):
                continue
            if not _fits(target, producer, dataclasses.replace(Epilogue.of(producer), residual=True)):
                continue
            residual = _reshaped(rewriter, op, other, value.type)
            fused = _fused(rewriter, op, producer, value.type, residual=residual)
            rewriter.replace_op(op, [_reshaped(rewriter, op, fused.result, y.type)])
            for dead in [*chain, producer]:
                rewriter.erase_op(dead)
            return False
        return True

    return pattern


def norm_pattern(target):
    """`layer_norm(linear(...))` (the linear, maybe with a residual, used only here, maybe through
    row-major reshapes) -> one
    `novella.fused_linear` that normalizes its output tile, when a tiling with whole rows (tn = N)
    fits and the cost model predicts fewer cycles than the linear plus the layer norm kernel."""

    def pattern(op, rewriter):
        value, chain = _through_reshapes(op.operands[0])
        producer = _linear_producer(value, allow_residual=True)
        if producer is None:
            return True
        epi = Epilogue.of(producer)
        fused, alone = (
            _plan_choice(target, producer, dataclasses.replace(epi, norm=True)),
            _plan_choice(target, producer, epi),
        )
        if fused[0] is None or alone[0] is None:
            return True
        tv = TensorView(producer)
        rows = sy.evaluate(tv.rows(0), plan_lengths(producer))
        if fused[0][0] >= alone[0][0] + LayerNorm().best(target, rows, tv.static(1, 0))[0]:
            return True
        eps = ir.FloatAttr.get_f32(op.attributes["eps"].value)
        new = _fused(rewriter, op, producer, value.type, norm_weight=op.operands[1],
                     norm_bias=op.operands[2], norm_eps=eps)  # fmt: skip
        rewriter.replace_op(op, [_reshaped(rewriter, op, new.result, op.results[0].type)])
        for dead in [*chain, producer]:
            rewriter.erase_op(dead)
        return False

    return pattern
