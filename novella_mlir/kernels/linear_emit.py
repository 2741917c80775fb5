"""The ops of a linear's grid step (`kernels/linear.py`): its tile LOADs and MATMUL, the VECs (and the LOADs
and STOREs beside them) of its output blocks and input rows: the epilogue of one output block, on one k step
or spread over the next block's, and the prologue's layer norm of the input rows. The cost model
(`kernels/linear_cost.py`) prices what these write (`trace`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .. import symbolic as sy
from ..dialects.novella import GATED
from ..machine.target import MAX_COLS
from . import first, resident
from .elementwise import emit_act
from .emit_trace import Op, Trace, context
from .normalization import column, emit_norm


def emit_loads(g) -> None:
    """The step's tile LOADs before its prologue and epilogue: the weight tile (weight-stationary, the column
    block's slab on its first step), the x tile (input-stationary, the row slab on the row's first step) and,
    on the op's first step, the bias row (without bias tiles) and a layer norm's weight and bias."""
    b, tm, tn, tk, k, n = g.b, g.tm, g.tn, g.tk, g.k, g.n
    w_cols, when = (k, {"when": first(1) + first(2)}) if g.ws == 1 else (tk, {})
    w_at = sy.const(0) if g.ws == 1 else b.d(2) * tk
    if g.n % tn:  # the last column block is partial: its weight rows end at n
        b.load_rows("w", 1, dram_offset=w_at, dram_stride=k, row_start=b.d(g.nd) * tn, row_bound=sy.const(n),
                    rows=tn, cols=w_cols, **when)  # fmt: skip
    else:
        b.load_block("w", 1, dram_offset=b.d(g.nd) * (tn * k) + w_at, dram_stride=k, rows=tn, cols=w_cols, **when)
    if g.ws == 2 and not g.direct:  # the row slab, resident over the n and k loops
        b.load_rows("a", 0, dram_stride=k, row_start=b.d(g.md) * tm, row_bound=g.m_total, rows=g.rows, cols=k,
                    when=first(1) + first(2))  # fmt: skip
    elif not g.direct:  # g.direct: x is kept in the scratchpad (--novella-resident), the MATMULs read it there
        b.load_rows("a", 0, dram_offset=b.d(2) * tk, dram_stride=k, row_start=b.d(g.md) * tm,
                    row_bound=g.m_total, rows=g.rows, cols=tk)  # fmt: skip
    at_first = first(0) + first(1) + first(2)
    if not g.bias_tile:
        rows = _bias_rows(n, MAX_COLS)
        b.load_block("bias", 2, dram_offset=0, rows=rows, cols=n // rows, when=at_first)
    if g.epi.norm:
        for buf, operand in (("nw", 3 + g.epi.residual), ("nb", 4 + g.epi.residual)):
            b.load_block(buf, operand, dram_offset=0, rows=1, cols=n, when=at_first)


def emit_matmul(g, acc) -> None:
    """The step's MATMUL into the accumulator at `acc` (None: one half), after, with `res_acc`, the residual
    block LOADed into it on the block's first k step (the MATMULs add onto it)."""
    b, tm, tn, tk, k = g.b, g.tm, g.tn, g.tk, g.k
    if g.res_acc:  # the residual block is the accumulator's initial value
        b.load_rows("acc", 3, dram_offset=b.d(g.nd) * tn, dram_stride=g.n, row_start=b.d(g.md) * tm,
                    row_bound=g.m_total, rows=g.rows, cols=g.cols(b.d(g.nd)), sram_stride=tn, buf_offset=0 if acc is None else acc,
                    when=first(2))  # fmt: skip
    slab = {"lhs_offset": b.d(2) * tk} if g.ws == 2 else {}  # the k step's columns of the row slab
    lhs, a_stride = ("pa" if g.epi.rms else "a"), k if g.ws == 2 else tk
    if g.direct and not g.epi.pre_norm:  # an RMSNorm prologue's MATMULs read `pa`
        lhs, at = resident.x_rows(b, g.md, tm, k)
        a_stride, slab = k, {"lhs_offset": at + b.d(2) * tk}
    b.mma("acc", lhs, "w", acc_offset=acc, rhs_offset=b.d(2) * tk if g.ws == 1 else sy.const(0), **slab,
          a_stride=a_stride, b_stride=k if g.ws == 1 else tk, acc_stride=tn, m=g.rows, k=tk, n=g.cols(b.d(g.nd)),
          accumulate=sy.const(1) if g.res_acc else [b.d(2), sy.const(1)],
          transpose_b=1)  # fmt: skip


def _bias_rows(n: int, max_cols: int) -> int:
    """Rows the bias is loaded as (one contiguous [rows, n / rows] block): 1, or the fewest that make a row
    fit a LOAD's cols field."""
    return next(r for r in range(1, n + 1) if n % r == 0 and n // r <= max_cols)


def emit_epilogue(g, block, bufs, when) -> None:
    """Bias (the block's columns of the resident bias row, or of its bias tile), act, residual and norm of one
    output block (its column block, rows, first row and accumulator offset), loading its residual (and bias
    tile) into `bufs` (residual, output, bias) and storing it from the output."""
    b, (res, out, bias), (col, rows, row0, acc) = g.b, bufs, block
    tn, n, epi = g.tn, g.n, dataclasses.replace(g.epi, residual=False) if g.res_acc else g.epi
    out_tile = dict(dram_offset=col * tn, dram_stride=n, row_start=row0, row_bound=g.m_total, sram_stride=tn)
    cols = g.cols(col)
    geo = dict(rows=rows, cols=cols, dst_stride=tn, a_stride=tn, b_stride=tn, when=when)
    gate = _in_place(b, 3, out_tile) if epi.residual and epi.act == GATED else None
    if epi.residual and gate is None:
        b.load_rows(res, 3, **out_tile, rows=rows, cols=cols, when=when)
    fold = not epi.bias and not epi.rms and epi.residual and epi.act == "none"  # acc + res: no bias to add first
    if epi.rms:  # each row times its RMSNorm scale
        b.vop("MUL", out, "acc", "pss", mode="COL", a_offset=acc, **{**geo, "b_stride": 1})
    if epi.bias or not (epi.rms or fold):
        bias, at = _bias_at(g, col, cols, bias, when)
        b.vop(
            "ADD", out, out if epi.rms else "acc", bias, mode="ROW", **({} if epi.rms else {"a_offset": acc}), **at,
            **geo,
        )  # fmt: skip
    if epi.act == GATED:
        _emit_gate(b, out, gate or (res, None, tn), geo)
    else:
        emit_act(b, epi.act, out, "tmp", rows, cols, tn, when=when)
    if epi.residual and epi.act != GATED:
        b.vop("ADD", out, "acc" if fold else out, res, **({"a_offset": acc} if fold else {}), **geo)
    if epi.norm:
        emit_norm(b, out, "tmp", "mean", "var", "nw", "nb", out, rows, n, g.eps, when=when)
    if not _store_in_place(b, out, out_tile, rows, cols, when):
        b.store_rows(out, **out_tile, rows=rows, cols=cols, when=when)


def _in_place(b, tensor: int, tile: dict):
    """(buffer, offset, row stride) of a resident operand's tile where the epilogue reads it in place (None:
    it is not resident, or the builder is the cost model's)."""
    return resident.region_at(b, tensor, tile["dram_offset"], tile["row_start"], tile["dram_stride"])


def _store_in_place(b, out: str, tile: dict, rows, cols, when) -> bool:
    """Where the result is resident, the epilogue's last VEC (into `out`) writes its region instead (no COPY
    from `out`); whether it did."""
    region = _in_place(b, -1, tile)
    last = b.ops[-1] if region is not None and b.ops else None
    if last is None or last[0] != "novella.vop" or last[1]["dst"] != out or "dst_offset" in last[1]:
        return False
    name, offset, stride = region
    last[1].update(dst=name, dst_offset=offset, dst_stride=stride, rows=resident.clipped(rows, tile))
    return True


def _emit_gate(b, out: str, gate: tuple, geo: dict) -> None:
    """`out` times silu(gate) = gate / (1 + exp(-gate)), the generic kernel's VECs of SwiGLU's product
    (`tmp` the scratch; `gate`: (buffer, offset or None, row stride), read only)."""
    name, offset, stride = gate
    g = {"a_stride": stride} | ({"a_offset": offset} if offset is not None else {})
    b.vop("MUL", "tmp", name, mode="SCALAR", imm=-1.0, **{**geo, **g})
    b.vop("EXP", "tmp", "tmp", **geo)
    b.vop("ADD", "tmp", "tmp", mode="SCALAR", imm=1.0, **geo)
    b.vop("DIV", "tmp", name, "tmp", **{**geo, **g})
    b.vop("MUL", out, out, "tmp", **geo)


def emit_spread_epilogue(g, block) -> None:
    """`_epilogue` of the previous block over this block's k steps (`spread_steps`): bias and
    act in place in the block's accumulator half (which no MATMUL writes before the block after this one),
    the last VEC (the act's, or the residual add) into `out` on the last k step, with the residual's LOAD
    and the STORE (`out` and `res` alternate by step parity, the accumulator half by block)."""
    b, (col, rows, row0, acc) = g.b, block
    tn, n, k_steps = g.tn, g.n, g.k // g.tk
    epi = dataclasses.replace(g.epi, residual=False) if g.res_acc else g.epi
    out_tile = dict(dram_offset=col * tn, dram_stride=n, row_start=row0, row_bound=g.m_total, sram_stride=tn)
    geo = dict(rows=rows, cols=g.cols(col), dst_stride=tn, a_stride=tn, b_stride=tn)
    ops = _InAcc(acc)
    at = lambda j: [("eq", b.d(2) - j), ("ge", b.d(1) - 1)]  # noqa: E731
    if epi.rms:
        ops.vop("MUL", "acc", "acc", "pss", mode="COL", **{**geo, "b_stride": 1})
    if epi.bias:
        bias, offset = _bias_at(g, col, geo["cols"], "bias", at(0))
        ops.vop("ADD", "acc", "acc", bias, mode="ROW", **offset, **geo)
    emit_act(ops, epi.act, "acc", "tmp", geo["rows"], geo["cols"], tn, out="acc" if epi.residual else "out")
    if epi.residual:
        ops.vop("ADD", "out", "acc", "res", **geo)
    if epi.residual:
        b.load_rows("res", 3, **out_tile, rows=rows, cols=geo["cols"], when=at(k_steps - 1))
    for (args, kw), j in zip(ops.calls, spread_steps(len(ops.calls), k_steps)):
        b.vop(*args, **kw, when=at(j))
    b.store_rows("out", **out_tile, rows=rows, cols=geo["cols"], when=at(k_steps - 1))


def spread_steps(n_ops: int, k_steps: int) -> list[int]:
    """The k step of each of a spread epilogue's `n_ops` VECs (in order, the last one on the last step,
    with the residual load and the STORE): op i on step i * k_steps // n_ops."""
    return [i * k_steps // n_ops for i in range(n_ops - 1)] + [k_steps - 1]


def _bias_at(g, col, cols, tile: str, when) -> tuple[str, dict]:
    """(buffer, offset) of the bias ADD's operand: the block's columns of the resident row `bias`, or, with a
    bias tile, the tile `tile` this LOADs (under the epilogue's guard `when`)."""
    if not g.bias_tile:
        return "bias", {"b_offset": col * g.tn}
    g.b.load_block(tile, 2, dram_offset=col * g.tn, dram_stride=g.n, rows=1, cols=cols, sram_stride=g.tn, when=when)
    return tile, {}


class _InAcc:
    """Records `vop` calls, each operand `acc` at the block's half (`offset`), to emit them on their k steps."""

    def __init__(self, offset):
        self.offset, self.calls = offset, []

    def vop(self, fn, dst, a=None, b=None, **kw):
        kw.pop("when", None)
        for role, name in (("dst", dst), ("a", a), ("b", b)):
            if name == "acc" and self.offset is not None:
                kw[f"{role}_offset"] = self.offset
        self.calls.append(((fn, dst, a, b), kw))


def emit_prologue(g, at_first, when) -> None:
    """The layer norm of the input rows in `a` ([rows, K], in place) before the MATMULs read them: on each
    row slab's first step input-stationary, else on every step (tk = K); the squares are summed tk
    columns at a time in `psq` (its size in the plan). An RMSNorm (`_rms_prologue`) is split around the
    MATMUL."""
    if g.epi.rms:
        return _rms_prologue(g, at_first, when)
    b, k, rows, c = g.b, g.k, g.rows, g.tk
    for buf, operand in (("pw", 3 + g.has_residual), ("pb", 4 + g.has_residual)):
        b.load_block(buf, operand, dram_offset=0, rows=1, cols=k, when=at_first)
    guard = {"when": when} if when else {}
    tile = dict(rows=rows, cols=k, dst_stride=k, a_stride=k, b_stride=k, **guard)
    col = column(rows, when)
    b.vop("ROWSUM", "pmean", "a", rows=rows, cols=k, dst_stride=1, a_stride=k, **guard)
    b.vop("DIV", "pmean", "pmean", mode="SCALAR", imm=float(k), **col)
    b.vop("SUB", "a", "a", "pmean", mode="COL", **{**tile, "b_stride": 1})
    for j in range(k // c):
        sq = dict(rows=rows, cols=c, dst_stride=c, a_stride=k, b_stride=k, a_offset=j * c, b_offset=j * c, **guard)
        b.vop("MUL", "psq", "a", "a", **sq)
        b.vop("ROWSUM", "psum" if j else "pvar", "psq", rows=rows, cols=c, dst_stride=1, a_stride=c, **guard)
        if j:
            b.vop("ADD", "pvar", "pvar", "psum", **col)
    b.vop("DIV", "pvar", "pvar", mode="SCALAR", imm=float(k), **col)
    b.vop("ADD", "pvar", "pvar", mode="SCALAR", imm=float(g.eps), **col)
    b.vop("RSQRT", "pvar", "pvar", **col)
    b.vop("MUL", "a", "a", "pvar", mode="COL", **{**tile, "b_stride": 1})
    b.vop("MUL", "a", "a", "pw", mode="ROW", **tile)
    b.vop("ADD", "a", "a", "pb", mode="ROW", **tile)


def _rms_prologue(g, at_first, when) -> None:
    """An RMSNorm's part before the MATMUL: the rows in `a` times the norm's weight into `pa`, the MATMULs'
    A operand (they wait for this one VEC only)."""
    b, k, rows = g.b, g.k, g.rows
    b.load_block("pw", 3 + g.has_residual, dram_offset=0, rows=1, cols=k, when=at_first)
    tile = dict(rows=rows, cols=k, dst_stride=k, a_stride=k, b_stride=k, **({"when": when} if when else {}))
    src, at = _rows_of_x(g)
    b.vop("MUL", "pa", src, "pw", mode="ROW", **tile, **({"a_offset": at} if at is not None else {}))


def _rows_of_x(g) -> tuple:
    """(buffer, offset) of the input rows an RMSNorm prologue reads: `a`, or with `direct` (x kept in the
    scratchpad) the row slab's rows of x's region, read in place (no COPY into `a`)."""
    if not g.direct:
        return "a", None
    return resident.x_rows(g.b, g.md, g.tm, g.k)


def emit_prologue_tail(g, when) -> None:
    """An RMSNorm's part after the MATMUL, on the vector unit beside it: the rows in `a` squared in place,
    then each row's rsqrt(mean(x * x) + eps) into the column `pss`, which the epilogue multiplies its rows
    by (nothing for a layer norm). Input-stationary over several k steps (`when`: the row slab's first
    step), spread over the first output block's k steps: step j squares and sums the slab's j-th tk columns
    (into `pss`, later ones through `psum`), the last step turns the sum into the scale. So no step's
    compute holds the whole row's VECs: the loads two steps on wait for each step's retirement."""
    if not g.epi.rms:
        return
    b, rows, k, tk = g.b, g.rows, g.k, g.tk
    steps = k // tk if when else 1
    for j in range(steps):
        guard = {"when": [("eq", b.d(1)), ("eq", b.d(2) - j)]} if steps > 1 else {"when": when} if when else {}
        at = {"a_offset": j * tk} if steps > 1 else {}
        cols = tk if steps > 1 else k
        src, base = _rows_of_x(g)  # squared into `a` (read in place from x's region with `direct`)
        offs = {"dst_offset": j * tk, "a_offset": j * tk, "b_offset": j * tk} if at else {}
        if base is not None:
            offs.update(a_offset=base + sy.const(j * tk), b_offset=base + sy.const(j * tk))
        b.vop("MUL", "a", src, src, rows=rows, cols=cols, dst_stride=k, a_stride=k, b_stride=k, **offs, **guard)
        b.vop("ROWSUM", "psum" if j else "pss", "a", rows=rows, cols=cols, dst_stride=1, a_stride=k, **at, **guard)
        col = column(rows, guard.get("when"))
        if j:
            b.vop("ADD", "pss", "pss", "psum", **col)
    b.vop("MUL", "pss", "pss", mode="SCALAR", imm=1.0 / k, **col)
    b.vop("ADD", "pss", "pss", mode="SCALAR", imm=float(g.eps), **col)
    b.vop("RSQRT", "pss", "pss", **col)


# ------------------------------------------------------------------ the emission as the cost model reads it


@dataclass(frozen=True)
class TraceGeometry:
    """The `_Geometry` fields the epilogue and prologue emitters read, at one tile size (`rows`: the
    output block's; its columns `tn`)."""

    epi: object
    k: int
    n: int
    tk: int
    tn: int
    rows: int
    res_acc: bool
    bias_tile: bool
    has_residual: bool
    eps: float = 0.0
    m_total: int = 0
    ws: int = 0
    tm: int = 0
    direct: bool = False

    @property
    def nd(self) -> int:
        return 0 if self.ws == 1 else 1

    @property
    def md(self) -> int:
        return 1 if self.ws == 1 else 0

    def cols(self, col) -> int:
        return self.tn


def trace(emit, g: TraceGeometry, *args) -> tuple[Op, ...]:
    """The ops `emit(g with a Trace builder, *args)` emits."""
    b = Trace()
    with context():
        emit(_Bound(g, b), *args)
        return b.priced()


class _Bound:
    """A TraceGeometry with its builder `b`."""

    def __init__(self, g, b):
        self._g, self.b = g, b

    def __getattr__(self, name):
        return getattr(self._g, name)
