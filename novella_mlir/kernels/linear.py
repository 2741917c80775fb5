"""Linear layers on the MAC array, with a fused epilogue and a loop order chosen by the cost model."""

from __future__ import annotations

import functools

from .. import costmodel as cm
from .. import symbolic as sy
from . import BufferPlan, Tiling, first, last, plan_lengths, tile_rows
from .elementwise import emit_act

_ACT_FNS = {"none": (), "relu": ("relu",), "gelu": ("mul", "erf", "add", "mul", "mul")}


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

    def cost(self, target, m, k, n, tm, tn, tk, act, ws) -> float:
        """Predicted cycles of the whole op (cost model) for M = m rows."""
        m_tiles, n_blocks, k_steps = -(-m // tm), n // tn, k // tk
        rows = min(tm, m)
        a_load, a_dram = cm.dma(target, rows, tk, contiguous=tk == k)
        loads, dram = [a_load], a_dram
        if not ws:
            for r, c in ((tn, tk), (1, tn)):
                q, d = cm.dma(target, r, c, contiguous=tk == k)
                loads.append(q)
                dram += d
        mm = cm.matmul(target, rows, tk, tn)
        epi = sum(cm.vec(target, rows, tn, f) for f in ("add", *_ACT_FNS[act]))
        st, st_dram = cm.dma(target, rows, tn, contiguous=tn == n)
        plain = cm.StepCost(sum(loads), mm, 0, dram)
        last_step = cm.StepCost(sum(loads), mm + epi, st, dram + st_dram)
        blocks = m_tiles * n_blocks
        steps = [(plain, blocks * (k_steps - 1)), (last_step, blocks)]
        out = cm.total(steps, target.buffer_slots)
        if ws:  # each weight slab loads once, while the previous block's last compute waits
            w_load, w_dram = cm.dma(target, tn, k, contiguous=True)
            out += n_blocks * w_load
        return out

    def choose(self, target, m, k, n, act, options):
        """(key, (tm, tn, tk, ws), plan) of the cheapest fitting candidate for M = m rows, or (None, None, plan)
        (memoized: `--novella-buckets` and `--novella-tile` ask for the same candidates)."""
        return _choose(self, target, m, k, n, act, options.get("tile-m") or 0)

    def _search(self, target, m, k, n, act, tile_m):
        tms = [tile_m] if tile_m else target.array_tiles(16)
        best, plan = None, None
        for ws in (1, 0):
            for tm in tms:
                for tn in target.divisors(n, target.array_cols):
                    for tk in target.divisors(k, target.array_rows):
                        plan = self._plan(target, tm, tn, tk, k, act, ws)
                        if plan.fits():
                            key = (self.cost(target, m, k, n, tm, tn, tk, act, ws), -tm, -tn)
                            if best is None or key < best[0]:
                                best = (key, (tm, tn, tk, ws), plan)
        return best or (None, None, plan)

    def predict(self, op, tv, target, options, plan, at) -> float | None:
        """Cycles at symbol values `at` of the tiling chosen when planning for `plan`."""
        k, n, act = tv.cols(0), tv.static(1, 0), op.attributes["act"].value
        best = self.choose(target, sy.evaluate(tv.rows(0), plan), k, n, act, options)
        if best[0] is None:
            return None
        tm, tn, tk, ws = best[1]
        return self.cost(target, sy.evaluate(tv.rows(0), at), k, n, tm, tn, tk, act, ws)

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


@functools.lru_cache(maxsize=1024)
def _choose(kernel, target, m, k, n, act, tile_m):
    return kernel._search(target, m, k, n, act, tile_m)
