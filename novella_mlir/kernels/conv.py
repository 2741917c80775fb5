"""1-D convolution on the MAC array, channels-last, with a fused bias + activation epilogue.

Legalize turns PyTorch's NCW `novella.conv1d` into transpose -> NWC conv ->
transpose; the transposes between convs (and the Whisper stem's
`permute(0, 2, 1)`) then cancel, leaving one transpose of the input.
"""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.novella import Conv1dOp
from ..machine import costmodel as cm
from ..machine.target import MAX_COLS, MAX_ROWS
from . import BufferPlan, Tiling, first, memoized, module_symbols, tile_rows
from .data_movement import make_transpose, typed
from .elementwise import ACT_FNS, emit_act, nominal_rows


def _attr(op, name):
    return op.attributes[name].value


def _dims(op, tv):
    """(cin, cout, taps, stride, padding, input length, output length)."""
    if tv.static(0, 0) != 1:
        raise ValueError(f"conv1d needs batch 1, got {[str(e) for e in tv.shape(0)]}")
    cout, cin, k = (tv.static(1, i) for i in range(3))
    if cin > MAX_COLS or cout > MAX_COLS:
        raise ValueError(f"conv1d channels {cin} -> {cout} exceed the {MAX_COLS} MATMUL field")
    return cin, cout, k, _attr(op, "stride"), _attr(op, "padding"), tv.shape(0)[1], tv.shape(-1)[1]


class Conv1d:
    """`y[t, co] = act(b[co] + sum_k x[stride*t + k - pad, :] . w[co, :, k])`, layout nwc.

    Grid (n, t): the weight block of `tn` output channels is gathered into
    per-tap [tn, Cin] matrices (LOADs of single elements with DRAM stride K)
    once per n-block and stays resident while the row tiles stream through.
    One LOAD brings the (tm-1)*stride + K input rows of a tile (out-of-range
    rows read as zeros: the padding), and tap k is the SRAM view starting
    at row k with row stride `stride`."""

    def _plan(self, op, target, tm, tn, cin, k, stride):
        plan = BufferPlan(target)
        plan.add("w", "spad", k * tn * cin)
        plan.add("x", "spad", ((tm - 1) * stride + k) * cin)
        plan.add("bias", "spad", tn)
        plan.add("out", "spad", tm * tn)
        if _attr(op, "act") == "gelu":
            plan.add("tmp", "spad", tm * tn)
        plan.add("acc", "acc", tm * tn)
        return plan

    def tile(self, op, tv, target, options):
        if _attr(op, "layout") != "nwc":
            raise ValueError("conv1d runs channels-last (layout nwc); legalize converts ncw")
        cin, cout, k, stride, _, _, _ = _dims(op, tv)
        tms = [options["tile-m"]] if options.get("tile-m") else target.array_tiles(16, max(target.array_rows // 2, 1))
        tms = [tm for tm in tms if (tm - 1) * stride + k <= MAX_ROWS] or [max(1, (MAX_ROWS - k) // stride + 1)]
        tns = target.divisors(cout, target.array_cols)
        dims = (cin, cout, k, stride, nominal_rows(op, tv), _attr(op, "act"))
        best = None
        for tm in tms:
            for tn in tns:
                plan = self._plan(op, target, tm, tn, cin, k, stride)
                if not plan.fits():
                    continue
                key = (self.cost(target, dims, (tm, tn)), -tm * tn)
                if best is None or key < best[0]:
                    best = (key, tm, tn, plan)
        if best is None:
            self._plan(op, target, tms[-1], tns[-1], cin, k, stride).check()
        _, tm, tn, plan = best
        grid = [sy.const(cout // tn), sy.ceildiv(tv.shape(-1)[1], tm)]
        return Tiling({"tm": tm, "tn": tn}, grid, plan.buffers)

    @memoized
    def cost(self, target, dims, cand) -> float:
        """Predicted cycles (cost model) of cand = (tm, tn) over dims = (Cin, Cout, taps, stride, output
        length, act): single-slot buffers; the first step of each column block gathers its weights."""
        cin, cout, k, stride, length, act = dims
        tm, tn = cand
        group = max(1, MAX_COLS // cin)
        gather = [(min(group, tn - c0) * cin, 1, False) for _ in range(k) for c0 in range(0, tn, group)]

        def step(r, n, gathers=False):
            lq, ld = cm.dmas(target, [((r - 1) * stride + k, cin, True)] + (gather + [(1, tn, True)]) * gathers)
            sq, sd = cm.dma(target, r, tn, contiguous=tn == cout)
            mm = k * cm.matmul(target, r, cin, tn)
            epi = cm.vecs(target, [(f, r, tn) for f in ("add", *ACT_FNS[act])])
            return cm.Group(lq, mm + epi, sq, ld + sd, n * (cout // tn), 1, 1)

        head = dataclasses.replace(step(min(tm, length), 1, True), count=cout // tn)
        groups = cm.row_groups(length, tm, step)
        groups[0] = dataclasses.replace(groups[0], count=groups[0].count - cout // tn)
        return cm.pipeline(target, [head, *groups])

    def macro(self, op, tv, t, b):
        cin, cout, k, stride, pad, length, out_len = _dims(op, tv)
        tm, tn = t.tiles["tm"], t.tiles["tn"]
        rows = tile_rows(1, tm, out_len)
        resident = first(1)
        _gather_weights(b, cin, k, tn, resident)
        b.load_block("bias", 2, dram_offset=b.d(0) * tn, rows=1, cols=tn, when=resident)
        x_rows = [sy.const((tm - 1) * stride + k), (out_len - b.d(1) * tm) * stride + sy.const(k - stride)]
        b.load(
            "x",
            0,
            dram_offset=0,
            dram_stride=cin,
            row_start=b.d(1) * (tm * stride) - sy.const(pad),
            row_step=1,
            row_bound=length,
            rows=x_rows,
            cols=cin,
            sram_stride=cin,
        )
        for tap in range(k):
            b.mma(
                "acc",
                "x",
                "w",
                lhs_offset=tap * cin,
                rhs_offset=tap * tn * cin,
                a_stride=stride * cin,
                b_stride=cin,
                acc_stride=tn,
                m=rows,
                k=cin,
                n=tn,
                accumulate=int(tap > 0),
                transpose_b=1,
            )
        geo = dict(rows=rows, cols=tn, dst_stride=tn, a_stride=tn, b_stride=tn)
        b.vop("ADD", "out", "acc", "bias", mode="ROW", **geo)
        emit_act(b, _attr(op, "act"), "out", "tmp", rows, tn, tn)
        b.store(
            "out",
            -1,
            dram_offset=b.d(0) * tn,
            dram_stride=cout,
            row_start=b.d(1) * tm,
            row_step=1,
            row_bound=out_len,
            rows=rows,
            cols=tn,
            sram_stride=tn,
        )


def _gather_weights(b, cin: int, k: int, tn: int, when) -> None:
    """w[co, ci, tap] (PyTorch layout) -> SRAM [tap][co][ci]: element (co, ci) of tap k is at
    DRAM (co*cin + ci)*k + tap, a uniform stride k over co*cin + ci."""
    group = max(1, MAX_COLS // cin)
    for tap in range(k):
        for c0 in range(0, tn, group):
            n = min(group, tn - c0) * cin
            b.load(
                "w",
                1,
                dram_offset=(b.d(0) * tn + c0) * (cin * k) + tap,
                dram_stride=k,
                row_start=0,
                row_step=1,
                row_bound=n,
                rows=n,
                cols=1,
                sram_stride=1,
                buf_offset=(tap * tn + c0) * cin,
                when=when,
            )


# ------------------------------------------------------------------ legalize patterns


def _conv(op, x, layout: str, act: str, n_syms: int) -> ir.Value:
    attrs = {
        "stride": op.attributes["stride"],
        "padding": op.attributes["padding"],
        "layout": ir.StringAttr.get(layout),
    }
    w, bias = op.operands[1], op.operands[2]
    rt = typed("novella.conv1d", [x, w, bias], attrs, n_syms)
    return Conv1dOp(
        input=x,
        weight=w,
        bias=bias,
        result=rt,
        stride=attrs["stride"],
        padding=attrs["padding"],
        layout=attrs["layout"],
        act=ir.StringAttr.get(act),
    ).result


def conv_to_channels_last(op, rewriter):
    """conv1d_ncw(x) -> transpose(conv1d_nwc(transpose(x)))."""
    if _attr(op, "layout") != "ncw":
        return True
    n_syms = len(module_symbols(op))
    with rewriter.ip, op.location:
        x = make_transpose(op.operands[0], [0, 2, 1], n_syms)
        y = _conv(op, x, "nwc", _attr(op, "act"), n_syms)
        out = make_transpose(y, [0, 2, 1], n_syms)
    rewriter.replace_op(op, [out])
    return False


def fuse_gelu_into_conv(op, rewriter):
    """gelu(conv1d(x)) -> conv1d(x) {act = "gelu"} when the conv has no other user."""
    conv = op.operands[0].owner
    if not isinstance(conv, ir.OpView) or conv.operation.name != "novella.conv1d":
        return True
    if _attr(conv, "act") != "none" or len(list(conv.results[0].uses)) != 1:
        return True
    with rewriter.ip, op.location:
        fused = _conv(conv, conv.operands[0], _attr(conv, "layout"), "gelu", len(module_symbols(op)))
    rewriter.replace_op(op, [fused])
    rewriter.erase_op(conv)
    return False
