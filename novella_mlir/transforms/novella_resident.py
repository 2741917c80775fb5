"""--novella-resident: activations kept in the scratchpad between macros, never round-tripping DRAM.

After `--novella-fuse` (each program decides on its own graph, at its own planned length). The result of a
linear (`novella.linear` / `novella.fused_linear`), a row norm (`novella.layer_norm` / `rms_norm`), an
attention (`novella.flash_attention`), a `novella.generic` or a `novella.gather_rows` whose every reader
is an op reading it in a role of `READS` (through row-major reshapes, which alias it: an attention's
heads-minor q, k, v and output are strided views of the projections' rows; an attention over a paged KV cache,
a decode step's, reads its query only: `PAGED_READS`), or a generic reading it whole as its input 0 (RoPE of a decode step's q and k; its
`rotate_half` twin is rotated in SRAM), is kept whole in a SPAD
region when, at the lengths its tiles are planned for (which must bound the symbols: a shape bucket's
upper ends, or the nominal length), it fits below the budget of every op from the producer to its
last reader and the cost model predicts fewer cycles:
* the producer writes each output tile into the region with a VEC COPY instead of its STORE (a result
  another op or the function returns is read from DRAM, and stays there: keeping a copy on chip for some
  readers only lowered the budget of every op in between for one LOAD less, a loss on the encoder body);
* each reader COPYs its x (or residual) tiles from the region into the SRAM buffer its LOAD filled (an
  append COPYs its new rows straight into the buffer it STOREs from);
* but a linear's MATMULs read a resident x where it is (unless it normalizes x in place), as a fused MLP's
  do (`IN_PLACE`), an attention (`IN_PLACE`) uses its resident q, k, v and output where they are, with no
  COPY (`kernels/flash_emit.py`), and a generic's VECs read its resident input 0 (of whole rows) and write
  its resident result where they are kept (`generic.in_place`; `_gain` still prices their COPYs: it errs
  towards keeping less);
* every op from the producer to the last reader tiles below the region (its `novella.sram_budget` ends at
  the region's offset), so nothing else writes it while it is live; regions live at once stack downward
  from the top of the scratchpad, and together take at most `share` percent of it (50) where an op without a
  cost model tiles under them (a norm, a fused MLP, a decode step's attention: what tiling below it costs them
  is not priced). Beyond it, per program (a shape bucket's plan), only where every op under the region has one
  and none but an attention reading it in place is predicted to lose anything (at the plan 512 of `large`,
  a k of 75% of the scratchpad was predicted to cost its two linears 10K cycles each and cost them 54K at
  T = 256): on the encoder body, q of the T <= 64 program beside the norm's result, 2284K cycles at T = 64
  on the default config instead of 2311K (1.27x to 1.26x), 1848K at T = 16 instead of 1872K.

The decision is `novella.resident` on the producer (`out`, `out_size`) and on each reader (its role, `x`,
`res`, `k`, `v` or `new`, and its size): SPAD offsets the kernels read (`kernels/resident.py`), which become buffers of the
macros (`fields.RESIDENT`) that `--novella-schedule` never moves. Priced as the DMA cycles of the STORE
and LOADs it removes (`costmodel.dma`) against the COPYs (`costmodel.vec`) and, for ops with a cost model
(`predict`, a prefill attention's `predicted`), their predicted cycles below the lowered budget against their
own; an attention that reads the region in place is priced reading it there, in place of its LOAD's DMA."""

from __future__ import annotations

import dataclasses

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.attrs import from_attr
from ..dialects.novella import linear_epilogue
from ..errors import TileFitError
from ..kernels import TensorView, plan_lengths
from ..kernels.generic import resident_role
from ..kernels.kv_cache import PAGED_ATTR, paged_operand
from ..kernels.linear import LINEAR_OPS
from ..kernels.resident import ATTR
from ..machine import costmodel as cm
from ..machine.target import Target
from ..optable import get_kernel
from ..symbolic.box import symbols_in, value_range
from .common import body_ops, check_symbols, functions, require_stage, set_attr

NORMS = ("novella.layer_norm", "novella.rms_norm")  # a row tile LOADed from x, one STOREd, as a linear's
ATTENTION = "novella.flash_attention"  # prefill / encoder (no paged KV cache): q, k, v and its output in place
GENERIC = "novella.generic"
MLP = "novella.fused_mlp"  # its MATMULs read a resident x where it is kept (`kernels/linear_mlp.py`)
# op -> {operand index: the role it reads the operand in, where kept}; a linear's residual only with its
# epilogue's, an append's new rows only into a paged cache, a generic's by `generic.resident_role`
READS = {
    **{op: {0: "x", 3: "res"} for op in LINEAR_OPS},
    **{op: {0: "x"} for op in NORMS},
    ATTENTION: {0: "x", 1: "k", 2: "v"},
    MLP: {0: "x"},
    "novella.kv_append": {1: "new"},
}
PAGED_READS = {0: "x"}  # an attention over a paged KV cache (a decode step): its query only
PRODUCERS = (*LINEAR_OPS, *NORMS, ATTENTION, GENERIC, "novella.gather_rows")
IN_PLACE = {ATTENTION, MLP}  # ops that read (and write) their resident tensors where they are kept: no COPY
OPTIONS = {
    "enable": (int, 1, "keep activations (the PRODUCERS' results) in the scratchpad for their readers", (0, 1)),
    "share": (int, 50, "percent of the scratchpad the regions live at once may take together", (0, 100)),
    "priced": (int, 1, "past `share` where every op under the region is priced and loses nothing", (0, 1)),
}
BUDGET = "novella.sram_budget"


def run(module_op, options, config) -> None:
    symbols = check_symbols(module_op)
    require_stage(module_op, "novella-resident", BUDGET, "novella-allocate")
    if not options.get("enable", 1):
        return
    target = Target.from_config(config)
    for fn in functions(module_op):
        ops, placed = body_ops(fn), []
        for i, op in enumerate(ops):
            if op.operation.name in PRODUCERS:
                _decide(ops, i, target, symbols, placed, options.get("share", 50), options.get("priced", 1))


def readers(value) -> tuple[list, bool]:
    """([(op, role in `novella.resident`)] that could read `value` (through reshapes) from the scratchpad
    (`_role`); whether anything else reads it (another op, the function's result)."""
    out, other = [], False
    for use in value.uses:
        user = use.owner
        if user.name == "novella.reshape":
            more, o = readers(user.results[0])
            out, other = out + more, other or o
        else:
            role = _role(user, use.operand_number)
            out += [(user, role)] if role else []
            other = other or role is None
    return out, other


def _role(user, n: int) -> str | None:
    """The role in which operand `n` of `user` reads a resident tensor (`READS`), "" where it reads nothing
    more (a generic's `rotate_half` of its input 0), None if it cannot."""
    if user.name == GENERIC:
        return resident_role(user.opview, n)
    role = READS.get(user.name, {}).get(n)
    if role == "res" and not linear_epilogue(user)[0]:
        return None
    if role == "new" and PAGED_ATTR not in user.attributes:
        return None
    if _paged(user):
        return PAGED_READS.get(n)
    return role


def _paged(op) -> bool:
    return op.name == ATTENTION and any(paged_operand(op, i) is not None for i in (1, 2))


def _decide(ops, i: int, target, symbols, placed: list, share: int, priced: int) -> None:
    """Keeps the result of `ops[i]` resident if it pays and the regions live with it take at most `share`
    percent of the scratchpad (more if `priced`, see the module docstring); `placed`: (first op, last op,
    offset, size) of the regions so far."""
    producer = ops[i]
    found, other = readers(producer.results[0])
    if not found or other or not _rows_of(producer.results[0]):
        return
    last = max(j for j in range(i, len(ops)) if any(ops[j].operation == r.operation for r, _ in found))
    live = [o for o in ops[i : last + 1] if BUDGET in o.attributes]
    size = _planned_size(producer, symbols)
    if size is None:
        return
    offset = _highest(target.spad_elems, size, [(o, n) for a, z, o, n in placed if a <= last and i <= z])
    above = offset < target.spad_elems * (100 - share) // 100  # only where every op below is priced
    if offset < 0 or (above and (not priced or any(_pricer(o) is None for o in live))):
        return
    if _gain(target, producer, found, live, offset, size, above) <= 0:
        return
    placed.append((i, last, offset, size))
    for o in live:
        budget = from_attr(o.attributes[BUDGET])
        set_attr(o, BUDGET, {**budget, "spad": min(budget["spad"], offset)})
    _mark(producer, {"out": offset, "out_size": size})
    for r, role in found:
        _mark(r, {role: offset, f"{role}_size": size})


def _rows_of(value) -> bool:
    """Whether `value` is a tensor of rows: a region holds rows of its last dim, which must be static (a
    scalar has none; a generic's result may have a dynamic one)."""
    t = ir.RankedTensorType(value.type)
    return t.rank >= 1 and not t.is_dynamic_dim(t.rank - 1)


def _planned_size(op, symbols) -> int | None:
    """The result's largest size up to the lengths its tiles are planned for (`plan_lengths`: a shape
    bucket's upper ends, else the nominal length); None when the bounds of a symbol it reads exceed them.
    Sized there, not at the bounds, the decision does not change with max_len, and a compile for one length
    decides as its bucket's program does (the JIT's words bit for bit, docs/design.md)."""
    plan, size = plan_lengths(op), sy.numel(sy.shape_of(ir.RankedTensorType(op.results[0].type)))
    used = [s for s in symbols if s.position in symbols_in(size)]
    if any(s.hi > plan[s.position] for s in used):
        return None
    return value_range(size, [dataclasses.replace(s, lo=1, hi=plan[s.position]) for s in used])[1]


def _highest(spad: int, size: int, taken: list) -> int:
    """The highest offset of `size` elements below `spad` clear of the (offset, size) regions `taken`."""
    for at in sorted([spad - size] + [o - size for o, _ in taken], reverse=True):
        if at >= 0 and all(at + size <= o or o + n <= at for o, n in taken):
            return at
    return -1


def _mark(op, entries: dict) -> None:
    old = from_attr(op.attributes[ATTR]) if ATTR in op.attributes else {}
    set_attr(op, ATTR, {**old, **entries})


def _gain(target, producer, found, live, offset: int, size: int, above: bool = False) -> float:
    """Predicted cycles saved: the DMA of the STORE and of each reader's LOADs, less the COPYs and what the
    lowered budget costs the ops that tile under it (none of them may stop fitting). An attention reading the
    region prices it itself: its cycles reading it in place below `offset` against its cycles now. `above`
    the share, no other op may lose anything (-1)."""
    rows, cols = _view(producer)
    dma = cm.dma(target, rows, cols, True)[1]
    saved = (len(found) + 1) * dma
    copied = [op for op in (producer, *(r for r, _ in found)) if op.operation.name not in IN_PLACE]
    copies = len(copied) * cm.vec(target, rows, cols, "copy")
    roles = {r: role for r, role in found if r.name == ATTENTION and _pricer(r) is not None}
    lost = 0.0
    for o in sorted(live, key=lambda o: o.operation.name == ATTENTION):  # the dearest to price last
        role = roles.get(o.operation)
        extra = _loss(target, o, offset, role and {role: offset, f"{role}_size": size})
        if extra is None or (above and extra > 0 and not role):
            return -1.0
        lost += extra - (dma if role else 0.0)
    return saved - copies - lost


def _view(op) -> tuple[int, int]:
    tv, at = TensorView(op), plan_lengths(op)
    return sy.evaluate(tv.rows(-1), at), tv.cols(-1)


def _loss(target, op, offset: int, kept: dict | None = None) -> float | None:
    """Predicted cycles `op` loses tiling below `offset` (0 without a cost model), None if it no longer fits;
    `kept`: the region's entries in its `novella.resident` (an attention reading it in place), priced with them."""
    kernel = get_kernel(op.operation.name)
    budget = from_attr(op.attributes[BUDGET])
    low = target.with_budget({**budget, "spad": min(budget["spad"], offset)})
    price = _pricer(op)
    full = price(target.with_budget(budget)) if price else 0.0
    old = op.attributes[ATTR] if ATTR in op.attributes else None
    if kept:
        _mark(op, kept)
    try:
        if op.operation.name != ATTENTION or not price:  # an attention's price is its tile's choice
            kernel.tile(op, TensorView(op), low, {})
        less = price(low) if price else 0.0
    except (TileFitError, ValueError):
        return None
    finally:
        if kept and old is None:
            del op.attributes[ATTR]
        elif kept:
            op.attributes[ATTR] = old
    return less - full if kept else max(less - full, 0.0)


def _pricer(op):
    """target -> `op`'s predicted cycles at its plan lengths under `target`'s budget; None without a cost model
    (such ops keep the scratchpad's `share`: what a lower budget costs them is not priced)."""
    kernel, tv, at = get_kernel(op.operation.name), TensorView(op), plan_lengths(op)
    if hasattr(kernel, "predict"):
        return lambda t: kernel.predict(op, tv, t, {}, at, at) or 0.0
    if op.operation.name == ATTENTION and not _paged(op.operation):
        return lambda t: kernel.predicted(op, tv, t)
    return None
