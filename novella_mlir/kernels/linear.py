"""Linear layers on the MAC array: weight-stationary tiles with a fused epilogue."""

from __future__ import annotations

from .. import symbolic as sy
from . import BufferPlan, Tiling, first, last, tile_rows
from .elementwise import emit_act


class Linear:
    """`y[M, N] = act(x[M, K] @ W[N, K]^T + b)`.

    Grid (n, m, k): the weight slab W[n-block, :] and the bias block stay in
    the scratchpad while the row tiles of x stream through; the K loop
    accumulates in the accumulator and the epilogue (bias, activation,
    store) runs on its last step."""

    def _plan(self, op, target, tm, tn, tk, k, act):
        plan = BufferPlan(target)
        plan.add("w", "spad", tn * k)
        plan.add("a", "spad", tm * tk, stream=True)
        plan.add("bias", "spad", tn)
        plan.add("out", "spad", tm * tn, stream=True)
        if act == "gelu":
            plan.add("tmp", "spad", tm * tn)
        plan.add("acc", "acc", tm * tn)
        return plan

    def tile(self, op, tv, target, options):
        k, n = tv.cols(0), tv.static(1, 0)
        act = op.attributes["act"].value
        tms = [options["tile-m"]] if options.get("tile-m") else target.array_tiles(4)
        plan = None
        for tm in tms:
            for tn in target.divisors(n, target.array_cols):
                for tk in target.divisors(k, target.array_rows):
                    plan = self._plan(op, target, tm, tn, tk, k, act)
                    if plan.fits():
                        grid = [sy.const(n // tn), sy.ceildiv(tv.rows(0), tm), sy.const(k // tk)]
                        return Tiling({"tm": tm, "tn": tn, "tk": tk}, grid, plan.buffers)
        plan.check()

    def macro(self, op, tv, t, b):
        tm, tn, tk = t.tiles["tm"], t.tiles["tn"], t.tiles["tk"]
        k, n, m_total = tv.cols(0), tv.static(1, 0), tv.rows(0)
        rows = tile_rows(1, tm, m_total)
        resident = first(1) + first(2)
        b.load_block("w", 1, dram_offset=b.d(0) * (tn * k), rows=tn, cols=k, when=resident)
        b.load_block("bias", 2, dram_offset=b.d(0) * tn, rows=1, cols=tn, when=resident)
        b.load_rows(
            "a", 0, dram_offset=b.d(2) * tk, dram_stride=k, row_start=b.d(1) * tm, row_bound=m_total, rows=rows, cols=tk
        )
        b.mma(
            "acc",
            "a",
            "w",
            rhs_offset=b.d(2) * tk,
            a_stride=tk,
            b_stride=k,
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
            dram_offset=b.d(0) * tn,
            dram_stride=n,
            row_start=b.d(1) * tm,
            row_bound=m_total,
            rows=rows,
            cols=tn,
            when=epilogue,
        )
