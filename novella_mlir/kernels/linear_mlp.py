"""The fused MLP (--novella-fuse `fuse-mlp`): `linear2(act1(linear1(x)))` as one kernel, `novella.fused_mlp`,
whose hidden rows never go to DRAM. A row block of x [tm, K] stays in the scratchpad while the hidden
units go by in chunks of hc, output-stationary: the output block [tm, N] accumulates over the chunks in
the accumulator. Grid (m, c), c in [0, H / hc); step c

* MATMULs chunk c + 1 of the hidden rows, x @ w1[c + 1]^T, into its accumulator half (the chunk's
  parity), and adds b1 and act1 on the vector unit into its hidden half [tm, hc] (the first step does
  chunk 0 first, from its own w1 buffer `w10`);
* MATMULs chunk c's hidden half by w2[:, c]^T onto the output block: the matrix unit does it while the
  vector unit works on chunk c + 1;
* on the last step adds b2, act and the residual and STOREs the block.

Where [tm, N] is more than the accumulator, the split form (`linear_mlp_split`) sums the output block in the
scratchpad instead; the cost model picks the form and its tiles.

Each step LOADs w1's next chunk [hc, K] and w2's chunk [N, hc] (two slots, under the previous step's
MATMULs; unguarded, so `--novella-schedule` pipelines them: the last step's w1 LOAD has no rows). The weights are read once per row block, so the cost model (`FusedMlp.cost`) makes the
fusion only where a program's rows fit few row blocks (`fuse_mlp`: fewer predicted cycles than the
two linears alone, at the length the program's tiles are planned for)."""

from __future__ import annotations

import math

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.attrs import from_attr
from ..dialects.novella import FusedMlpOp, linear_epilogue
from ..machine import costmodel as cm
from ..machine.target import MAX_COLS
from ..symbolic.box import value_range
from . import BufferPlan, TensorView, Tiling, first, last, memoized, module_symbols, plan_lengths, resident, tile_rows
from . import linear_mlp_split as split
from .elementwise import ACT_FNS, emit_act
from .linear import LINEAR_OPS, _chain_loads, _plan_choice
from .linear_cost import Epilogue
from .linear_emit import _bias_rows
from .linear_prologue import NORMS, _consumers
from .linear_prologue import _gain as _norm_gain
from .support import _pieces, replace_fused

ACTS = ("none", "relu", "gelu")


class FusedMlp:
    """The kernel of `novella.fused_mlp` (module docstring); tiles {tm, hc}, chosen by `cost`."""

    def _plan(self, target, tm, hc, k, h, n, residual, plan_type=BufferPlan, direct=0):
        plan = plan_type(target)
        if not direct:  # x's rows, unless read where --novella-resident keeps them
            plan.add("a", "spad", tm * k)
        plan.add("w10", "spad", hc * k)
        plan.add("w1", "spad", hc * k, stream=True)
        plan.add("w2", "spad", n * hc, stream=True)
        plan.add("b1", "spad", h)
        plan.add("b2", "spad", n)
        plan.add("hb", "spad", tm * hc)
        plan.add("tmp", "spad", tm * hc)
        plan.add("h", "spad", 2 * tm * hc)  # two halves, by the parity of the chunk
        plan.add("out", "spad", tm * n, stream=True)
        if residual:
            plan.add("res", "spad", tm * n)
        plan.add("acch", "acc", 2 * tm * hc)
        plan.add("accy", "acc", tm * n)
        return plan

    def candidates(self, target, k, h, n, residual, direct=0) -> list[tuple[int, int]]:
        """(tm, hc) whose buffers fit, largest first (none where a row of x or of the output is more than a
        LOAD's or a MATMUL's columns: x's rows and the output block are taken whole)."""
        if max(k, n) > MAX_COLS:
            return []
        hcs = [d for d in target.divisors(h) if d % target.array_cols == 0 and d <= MAX_COLS]
        return [
            (tm, hc)
            for tm in target.array_tiles(16)
            for hc in hcs
            if self._plan(target, tm, hc, k, h, n, residual, direct=direct).fits()
        ]

    def choose(self, target, m, k, h, n, acts, residual, direct=0):
        """(cycles, (tm, hc) or (tm, hc, pn)) of the cheapest fitting candidate for m rows, of both forms (the
        output block in the accumulator, or summed in the scratchpad: `linear_mlp_split`), or (inf, None).
        `direct` (`_direct`): x is read where `--novella-resident` keeps it (no buffer, no LOAD of its rows)."""
        return min(_choose(self, target, m, k, h, n, acts, residual, direct),
                   split.choose(target, m, k, h, n, acts, residual, direct), key=lambda c: c[0])  # fmt: skip

    def cost(self, target, m, k, h, n, acts, residual, tm, hc, direct=0) -> float:
        """Predicted cycles: per row piece, its first step (the x rows and w1's first chunk too, and that
        chunk's MATMUL and VECs before the rest), its middle steps (w1's next chunk and w2's chunk LOADed
        under the MATMULs of both, the next chunk's VECs beside the second) and its last (w2's last
        chunk, the epilogue and the STORE)."""
        chunks = h // hc
        groups = []
        for r, count in _pieces(m, tm):
            mm1, mm2 = cm.matmul(target, r, k, hc), cm.matmul(target, r, hc, n)
            hv = cm.vecs(target, _act_vecs(acts[0], r, hc))
            ev = cm.vecs(target, _act_vecs(acts[1], r, n, copy=False)) + residual * cm.vec(target, r, n)
            w1, w2, x = (hc, k, True), (n, hc, hc == h), [(r, k, True)] * (not direct)
            step = mm1 + max(mm2, hv)
            if chunks > 1:
                groups.append(_group(target, [*x, w1, w1, w2], mm1 + hv + step, count, slots=1))
                groups.append(_group(target, [w1, w2], step, count * (chunks - 2)))
            tail = [w2] + [(r, n, True)] * residual + [*x, w1] * (chunks == 1)
            head = mm1 + hv if chunks == 1 else 0.0
            groups.append(_group(target, tail, head + mm2 + ev, count, store=cm.dma(target, r, n, True)))
        return cm.pipeline(target, groups)

    def tile(self, op, tv, target, options):
        k, h, n, residual = _dims(tv, op)
        m, direct = sy.evaluate(tv.rows(0), plan_lengths(op)), _direct(op)
        _, tiles = self.choose(target, m, k, h, n, _acts(op), residual, direct)
        if tiles is None:
            self._plan(target, target.array_rows, target.array_cols, k, h, n, residual, direct=direct).check()
        tm, hc, *pn = tiles
        kept = resident.buffers(op)
        if pn:
            grid = [sy.ceildiv(tv.rows(0), tm), sy.const(2 * (h // hc) + 1)]
            plan = split.plan(target, tm, hc, pn[0], k, h, n, residual, direct=direct, act=_acts(op)[1])
            return Tiling({"tm": tm, "hc": hc, "pn": pn[0]}, grid, plan.check() + kept)
        grid = [sy.ceildiv(tv.rows(0), tm), sy.const(h // hc)]
        plan = self._plan(target, tm, hc, k, h, n, residual, direct=direct)
        return Tiling({"tm": tm, "hc": hc}, grid, plan.check() + kept)

    def macro(self, op, tv, t, b):
        start, b = len(b.ops), resident.wrap(b, op)
        if "pn" in t.tiles:
            split.emit(b, tv, _dims(tv, op), _acts(op), t.tiles, _direct(op))
        else:
            _emit(op, tv, t, b)
        _chain_loads(b.ops[start:])


def _group(target, loads, chain, count, slots=2, store=(0.0, 0.0)) -> cm.Group:
    """`count` steps LOADing `loads` (one DMA chain) whose compute chain takes `chain` cycles: chunk c's
    VECs run beside chunk c - 1's MATMUL (`chain` is the longer of the two after chunk c's MATMUL)."""
    _, ld = cm.dmas(target, loads)
    lq = ld + target.issue_cycles * len(loads)  # one DMA chain (`linear._chain_loads`): latency in the fill
    st, sd = store
    return cm.Group(lq, chain, st, ld + sd, count, slots, 2, overlap=True, issues=8)


def _act_vecs(act: str, r: int, c: int, copy: bool = True) -> list:
    """The VECs (fn, rows, cols) of + bias and `act` on [r, c] (`emit_act`; `copy`: into another buffer)."""
    fns = ACT_FNS[act] or ("copy",) * copy
    return [("add", r, c)] + [(fn, r, c) for fn in fns]


def _dims(tv, op) -> tuple[int, int, int, bool]:
    return tv.cols(0), tv.static(1, 0), tv.static(3, 0), len(op.operands) > 5


def _direct(op) -> int:
    """The rows of x's region where x is kept in the scratchpad (`--novella-resident`: its rows at the lengths
    the tiles are planned for, which bound the symbols), whose rows the MATMULs read there, else 0."""
    kept = resident.regions(op).get("x")
    return kept[1] // TensorView(op).cols(0) if kept else 0


def _acts(op) -> tuple[str, str]:
    return ir.StringAttr(op.attributes["act1"]).value, ir.StringAttr(op.attributes["act"]).value


@memoized
def _choose(kernel, target, m, k, h, n, acts, residual, direct):
    best = (math.inf, None)
    for tm, hc in kernel.candidates(target, k, h, n, residual, direct):
        key = (kernel.cost(target, m, k, h, n, acts, residual, tm, hc, direct), -min(tm, m), tm, -hc)
        if best[1] is None or key < best[0]:
            best = (key, (tm, hc))
    return (best[0][0] if best[1] else math.inf), best[1]


def _emit(op, tv, t, b) -> None:
    k, h, n, residual = _dims(tv, op)
    act1, act = _acts(op)
    tm, hc = t.tiles["tm"], t.tiles["hc"]
    chunks, m_total = h // hc, tv.rows(0)
    rows = tile_rows(0, tm, m_total)
    c = b.d(1)
    ahead = [("ge", sy.const(chunks - 2) - c)]  # steps 0 .. chunks - 2: the next chunk's hidden units
    at_last = last(1, sy.const(chunks))
    direct = _direct(op)
    if not direct:
        b.load_rows("a", 0, dram_stride=k, row_start=b.d(0) * tm, row_bound=m_total, rows=rows, cols=k, when=first(1))
    for buf, operand, width in (("b1", 2, h), ("b2", 4, n)):
        r = _bias_rows(width, MAX_COLS)
        b.load_block(buf, operand, dram_offset=0, rows=r, cols=width // r, when=first(0) + first(1))
    b.load_block("w10", 1, dram_offset=0, dram_stride=k, rows=hc, cols=k, when=first(1))
    # the next chunk's w1 rows (none past H: the last step's LOAD has no rows), this chunk's w2 columns
    nxt = (c + sy.const(1)) * hc
    b.load_rows(
        "w1", 1, dram_stride=k, row_start=nxt, row_bound=sy.const(h), rows=[sy.const(hc), sy.const(h) - nxt], cols=k
    )
    b.load_block("w2", 3, dram_offset=c * hc, dram_stride=h, rows=n, cols=hc)
    out_tile = dict(dram_offset=0, dram_stride=n, row_start=b.d(0) * tm, row_bound=m_total, cols=n, rows=rows)
    if residual:
        b.load_rows("res", 5, **out_tile, when=at_last)
    x = split.x_operand(b, direct, tm, k)
    _hidden(b, act1, rows, k, tm, hc, "w10", sy.const(0), first(1), x)
    _hidden(b, act1, rows, k, tm, hc, "w1", c + sy.const(1), ahead, x, mma_only=True)
    b.mma("accy", "h", "w2", lhs_offset=sy.mod(c, 2) * (tm * hc), a_stride=hc, b_stride=hc, acc_stride=n, m=rows,
          k=hc, n=n, accumulate=[c, sy.const(1)], transpose_b=1)  # fmt: skip
    _hidden(b, act1, rows, k, tm, hc, "w1", c + sy.const(1), ahead, x, vec_only=True)
    geo = dict(rows=rows, cols=n, dst_stride=n, a_stride=n, b_stride=n, when=at_last)
    b.vop("ADD", "out", "accy", "b2", mode="ROW", **geo)
    emit_act(b, act, "out", "tmp", rows, n, n, when=at_last)
    if residual:
        b.vop("ADD", "out", "out", "res", **geo)
    b.store_rows("out", **out_tile, when=at_last)


def _hidden(b, act1, rows, k, tm, hc, w, chunk, when, x, mma_only=False, vec_only=False) -> None:
    """Hidden chunk `chunk`: x @ `w`^T into its accumulator half, then + b1 and act1 into its hidden half
    (`x`: the buffer of x's rows and its offset field, `linear_mlp_split.x_operand`)."""
    half = sy.mod(chunk, 2) * (tm * hc)
    if not vec_only:
        b.mma("acch", x[0], w, acc_offset=half, a_stride=k, b_stride=k, acc_stride=hc, m=rows, k=k, n=hc,
              accumulate=0, transpose_b=1, when=when, **x[1])  # fmt: skip
    if not mma_only:
        geo = dict(rows=rows, cols=hc, dst_stride=hc, a_stride=hc, b_stride=hc, when=when)
        b.vop("ADD", "hb", "acch", "b1", mode="ROW", a_offset=half, b_offset=chunk * hc, **geo)
        emit_act(b, act1, "hb", "tmp", rows, hc, hc, when=when, out="h", out_offset=half)


# ------------------------------------------------------------------ the fusion (--novella-fuse `fuse-mlp`)

FUSED_MLP = FusedMlp()


def _mlp_pair(op):
    """(linear1, linear2) when `op` is a linear (act none, relu or gelu; no residual, no norm) whose result is
    used once, as the input of a linear (act none or relu, maybe a residual, no norm), else None."""
    if op.operation.name not in LINEAR_OPS or len(list(op.results[0].uses)) != 1:
        return None
    use = next(iter(op.results[0].uses))
    second = use.owner
    if second.name not in LINEAR_OPS or use.operand_number != 0:
        return None
    if any(linear_epilogue(x)[1] for x in (op, second)) or linear_epilogue(op)[0]:
        return None
    acts = [ir.StringAttr(x.attributes["act"]).value for x in (op, second)]
    if acts[0] not in ACTS or acts[1] not in ("none", "relu"):
        return None
    return op, second


def _gain(target, first_op, second) -> tuple[float, int]:
    """(predicted cycles saved: the two linears' (their chosen tilings) less the fused kernel's, its row
    block tm)."""
    alone = [_plan_choice(target, x, Epilogue.of(x))[0] for x in (first_op, second)]
    if any(a is None for a in alone):
        return -math.inf, 0
    tv = TensorView(first_op)
    m = sy.evaluate(tv.rows(0), plan_lengths(first_op))
    k, h, n = tv.cols(0), tv.static(1, 0), TensorView(second).static(1, 0)
    acts = tuple(ir.StringAttr(x.attributes["act"]).value for x in (first_op, second))
    budget = second.attributes["novella.sram_budget"]  # the fused op's (tile plans within it)
    fused, tiles = FUSED_MLP.choose(target.with_budget(from_attr(budget)), m, k, h, n, acts, linear_epilogue(second)[0])
    if tiles is None:
        return -math.inf, 0
    return alone[0][0] + alone[1][0] - fused - _prologue_gain(target, first_op), tiles[0]


def _prologue_gain(target, first_op) -> float:
    """What `fuse-prenorm` would save on the first linear (`fuse-mlp` runs before it and takes the linear
    without the norm): its norm's predicted gain when the norm feeds only this linear, else 0."""
    norm = first_op.operands[0].owner
    if not isinstance(norm, ir.OpView) or norm.operation.name not in NORMS:
        return 0.0
    users = _consumers(norm)
    return max(_norm_gain(target, norm, users), 0.0) if users == [first_op] else 0.0


def _one_block(op, tm: int) -> bool:
    """The rows of `op`'s input fit one row block of tm at every length of the program: the kernel LOADs
    them all on its first step, before its first STORE, so its result may take their DRAM block."""
    rows = TensorView(op).rows(0)
    return value_range(rows, module_symbols(op))[1] <= tm


def fuse_mlp(target, op, safe) -> bool:
    """`linear2(linear1(x))` -> `fused_mlp(x)` in linear2's place, with its DRAM offset and SRAM budget,
    when `_gain` is positive and `safe(linear1, linear2)` (the caller's DRAM check: nothing from linear1
    up to linear2 writes over x, which the fused kernel reads row block by row block), or x fits one row block."""
    pair = _mlp_pair(op)
    gain, tm = _gain(target, *pair) if pair else (0.0, 0)
    if gain <= 0 or not (_one_block(pair[0], tm) or safe(*pair)):
        return False
    first_op, second = pair
    x, w1, b1 = list(first_op.operands)
    _, w2, b2, *res = list(second.operands)
    with ir.InsertionPoint(second), second.location:
        new = FusedMlpOp(x, w1, b1, w2, b2, second.results[0].type, act1=first_op.attributes["act"],
                         act=second.attributes["act"], residual=res[0] if res else None, loc=second.location)  # fmt: skip
    replace_fused(new, second)
    first_op.operation.erase()
    return True
