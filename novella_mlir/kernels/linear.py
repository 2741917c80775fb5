"""Linear layers on the MAC array, with a fused epilogue and a loop order chosen by the cost model."""

from __future__ import annotations

from .. import costmodel as cm
from .. import symbolic as sy
from . import BufferPlan, Tiling, first, last, memoized, plan_lengths, tile_rows
from .attention import _pieces
from .elementwise import ACT_FNS as _ACT_FNS
from .elementwise import emit_act


class Linear:
    """`y[M, N] = act(x[M, K] @ W[N, K]^T + b)`, in one of two loop orders (`novella.tiles` ws):

    * ws = 1, grid (n, m, k), weight-stationary: the weight slab W[n-block, :] and the bias block
      stay in the scratchpad while the row tiles of x stream through (x is read N / tn times);
    * ws = 0, grid (m, n, k), output-stationary: tiles of x and W both stream through two slots
      each while an [tm, tn] block accumulates (x is read N / tn times, W ceil(M / tm) times),
      so the weight slab need not fit and every load runs under the previous step's compute.

    The K loop accumulates in the accumulator; the epilogue (bias, activation) writes a
    two-slot output buffer on the last k step, whose STORE runs under the next step's compute.
    The cost model (`novella_mlir/costmodel.py`) scores every order and tile size at the planned
    length (`plan_lengths`: the nominal length, or a shape bucket's upper end) and the cheapest
    fitting one wins."""

    exhaustive = False  # score every fitting candidate, no bound (bench/costmodel.py, which replaces `cost`)

    def _plan(self, target, tm, tn, tk, k, act, ws):
        plan = BufferPlan(target)
        if ws:
            plan.add("w", "spad", tn * k)
            plan.add("bias", "spad", tn)
        else:
            plan.add("w", "spad", tn * tk, stream=True)
            plan.add("bias", "spad", tn, stream=True)
        plan.add("a", "spad", tm * tk, stream=True)
        plan.add("out", "spad", tm * tn, stream=True)
        if act == "gelu":
            plan.add("tmp", "spad", tm * tn)
        plan.add("acc", "acc", tm * tn)
        return plan

    @memoized
    def cost(self, target, dims, cand) -> float:
        """Predicted cycles of the whole op (cost model): dims = (M, K, N, act), cand = (tm, tn, tk, ws).
        Weight-stationary, the first step of each column block also loads the weight slab and bias
        (single slot: those loads wait for the previous compute); the last k step runs the epilogue
        and stores."""
        (m, k, n, act), (tm, tn, tk, ws) = dims, cand
        n_blocks, k_steps = n // tn, k // tk
        groups = []

        def add(r, count, last, slab, j):
            moves = [(r, tk, tk == k)] + [(tn, tk, tk == k), (1, tn, True)] * (not ws)
            moves += [(tn, k, True), (1, tn, True)] * slab
            lq, ld = cm.dmas(target, moves)
            epi = cm.vecs(target, [(f, r, tn) for f in ("add", *_ACT_FNS[act])]) if last else 0.0
            st, sd = cm.dma(target, r, tn, contiguous=tn == n)
            if k_steps > 1:  # the store's data shares the DRAM with the next block's first loads
                ld += sd * (j == 0)
                sd = 0.0
            c = cm.matmul(target, r, tk, tn) + epi
            groups.append(cm.Group(lq, c, st * last, ld + sd * last, count, 1 if slab else 2, 2, n_dma=len(moves)))

        ks = [(0, 1)] + [(1, k_steps - 2)] * (k_steps > 2) + [(k_steps - 1, 1)] * (k_steps > 1)
        for j, cnt in ks:
            for i, (r, nr) in enumerate(_pieces(m, tm)):
                last, slab = j == k_steps - 1, bool(ws) and j == 0 and i == 0
                add(r, n_blocks * cnt, last, True, j) if slab else None
                add(r, n_blocks * (nr - slab) * cnt, last, False, j)
        return cm.pipeline(target, groups)

    def choose(self, target, m, k, n, act, options):
        """(key, (tm, tn, tk, ws), plan) of the cheapest fitting candidate for M = m rows, or (None, None, plan)
        (memoized: `--novella-buckets` and `--novella-tile` ask for the same candidates)."""
        return _choose(self, target, m, k, n, act, options.get("tile-m") or 0)

    def _search(self, target, m, k, n, act, tile_m):
        """The first, in the loop order below, of the fitting candidates with the least (cost, -tm, -tn).
        Exact shortcuts: a candidate's SRAM use grows with tk and tn, so the fitting tks of (ws, tm, tn)
        are a tail of the list, no shorter than for a larger tn (found by bisection); candidates are scored in the order of a lower bound of their cost
        (`_lower_bound`, at most the cost), until that bound exceeds the best cost."""
        cands = _fitting(self, target, k, n, act, tile_m)
        if not cands:
            tms = [tile_m] if tile_m else target.array_tiles(16)
            tns, tks = target.divisors(n, target.array_cols), target.divisors(k, target.array_rows)
            return None, None, self._plan(target, tms[-1], tns[-1], tks[-1], k, act, 0)
        bounds = [_lower_bound(target, m, k, n, c) for c in cands]
        best = None
        for i in sorted(range(len(cands)), key=bounds.__getitem__):
            if best is not None and bounds[i] > best[0][0] * (1 + 1e-9) and not self.exhaustive:
                break
            tm, tn = cands[i][:2]
            key = (self.cost(target, (m, k, n, act), cands[i]), -tm, -tn, i)
            if best is None or key < best[0]:
                best = (key, cands[i])
        tm, tn, tk, ws = best[1]
        return best[0][:3], best[1], self._plan(target, tm, tn, tk, k, act, ws)

    def predict(self, op, tv, target, options, plan, at) -> float | None:
        """Cycles at symbol values `at` of the tiling chosen when planning for `plan`."""
        k, n, act = tv.cols(0), tv.static(1, 0), op.attributes["act"].value
        best = self.choose(target, sy.evaluate(tv.rows(0), plan), k, n, act, options)
        if best[0] is None:
            return None
        tm, tn, tk, ws = best[1]
        return self.cost(target, (sy.evaluate(tv.rows(0), at), k, n, act), (tm, tn, tk, ws))

    def tile(self, op, tv, target, options):
        k, n = tv.cols(0), tv.static(1, 0)
        m = sy.evaluate(tv.rows(0), plan_lengths(op))
        best = self.choose(target, m, k, n, op.attributes["act"].value, options)
        if best[0] is None:
            best[2].check()
        (tm, tn, tk, ws), plan = best[1], best[2]
        m_grid = sy.ceildiv(tv.rows(0), tm)
        grid = [sy.const(n // tn), m_grid, sy.const(k // tk)] if ws else [m_grid, sy.const(n // tn), sy.const(k // tk)]
        return Tiling({"tm": tm, "tn": tn, "tk": tk, "ws": ws}, grid, plan.buffers)

    def macro(self, op, tv, t, b):
        tm, tn, tk = t.tiles["tm"], t.tiles["tn"], t.tiles["tk"]
        ws = t.tiles.get("ws", 1)
        nd, md = (0, 1) if ws else (1, 0)
        k, n, m_total = tv.cols(0), tv.static(1, 0), tv.rows(0)
        rows = tile_rows(md, tm, m_total)
        if ws:
            resident = first(1) + first(2)
            b.load_block("w", 1, dram_offset=b.d(nd) * (tn * k), rows=tn, cols=k, when=resident)
            b.load_block("bias", 2, dram_offset=b.d(nd) * tn, rows=1, cols=tn, when=resident)
        else:
            b.load_block("w", 1, dram_offset=b.d(nd) * (tn * k) + b.d(2) * tk, dram_stride=k, rows=tn, cols=tk)
            b.load_block("bias", 2, dram_offset=b.d(nd) * tn, rows=1, cols=tn)
        b.load_rows(
            "a",
            0,
            dram_offset=b.d(2) * tk,
            dram_stride=k,
            row_start=b.d(md) * tm,
            row_bound=m_total,
            rows=rows,
            cols=tk,
        )
        b.mma(
            "acc",
            "a",
            "w",
            rhs_offset=b.d(2) * tk if ws else sy.const(0),
            a_stride=tk,
            b_stride=k if ws else tk,
            acc_stride=tn,
            m=rows,
            k=tk,
            n=tn,
            accumulate=[b.d(2), sy.const(1)],
            transpose_b=1,
        )
        epilogue = last(2, sy.const(k // tk))
        geo = dict(rows=rows, cols=tn, dst_stride=tn, a_stride=tn, b_stride=tn, when=epilogue)
        b.vop("ADD", "out", "acc", "bias", mode="ROW", **geo)
        emit_act(b, op.attributes["act"].value, "out", "tmp", rows, tn, tn, when=epilogue)
        b.store_rows(
            "out",
            dram_offset=b.d(nd) * tn,
            dram_stride=n,
            row_start=b.d(md) * tm,
            row_bound=m_total,
            rows=rows,
            cols=tn,
            when=epilogue,
        )


def _first_true(n: int, pred) -> int:
    """The least i in [0, n] with pred(i), for a pred that stays true once true (n: none)."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if pred(mid) else (mid + 1, hi)
    return lo


def _lower_bound(target, m, k, n, cand) -> float:
    """At most `Linear.cost` of `cand`: the larger of its MATMUL cycles and its DRAM data cycles without
    burst rounding (each step's period is at least its compute and its DRAM data; the fill is not negative)."""
    tm, tn, tk, ws = cand
    pieces = _pieces(m, tm)
    mac = (n // tn) * (k // tk) * sum(nr * cm.matmul(target, r, tk, tn) for r, nr in pieces)
    w_reads = 1 if ws else sum(nr for _, nr in pieces)
    elems = (n // tn) * m * k + w_reads * n * k + m * n
    return max(mac, elems * 4 / target.dram_bytes_per_cycle)


@memoized
def _choose(kernel, target, m, k, n, act, tile_m):
    return kernel._search(target, m, k, n, act, tile_m)


@memoized
def _fitting(kernel, target, k, n, act, tile_m) -> tuple:
    """The candidates (tm, tn, tk, ws) whose buffers fit, in search order; they do not depend on M
    (memoized: the search runs for every planned M)."""
    tms = [tile_m] if tile_m else target.array_tiles(16)
    tns, tks = target.divisors(n, target.array_cols), target.divisors(k, target.array_rows)
    cands = []
    for ws in (1, 0):
        for tm in tms:
            first = len(tks)
            for tn in tns:  # largest first: a smaller tn fits from the same tk on, or sooner
                fits = lambda i, tm=tm, tn=tn, ws=ws: kernel._plan(target, tm, tn, tks[i], k, act, ws).fits()  # noqa: E731
                first = _first_true(first, fits)
                cands += [(tm, tn, tk, ws) for tk in tks[first:]]
    return tuple(cands)
