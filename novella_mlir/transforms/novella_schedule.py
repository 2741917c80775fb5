"""--novella-schedule: ping-pong slots and step distances of the dependency tokens.

Runs after `--novella-inst-gen`. For every macro whose tiling gave a buffer
n >= 2 slots (`novella.buffers` entry `[mem, offset, size, n]`), each
instruction template that addresses that buffer gets `slot = {field = size}`
(two slots) or `slot = {field = [size, n]}`: at grid step k (counted over the
macro's steps) the JIT adds `size * (k mod n)` to that address field, so step
k uses slot k mod n.

A buffer whose kernel alternates its two slots itself (`novella.buffers`
entry `[mem, offset, size, 2, 1]`, e.g. a query block's rows by head
parity) gets no slot fields; a LOAD into it gets `slot = {sram_addr = 0}`:
it counts as slotted for the token rule (it never writes what the step
before reads), its address is the kernel's.

A two-slot buffer that a guarded LOAD writes (loaded once, then resident)
keeps one slot: its second slot stays unused. Unless every other template
that addresses it runs under the same guard (e.g. a linear's residual tile,
loaded and read on each output block's last k step): its data then never
outlives the step, so it keeps its two slots.

The macro's declared `schedule = {load_slots, store_slots}` (1 and 1 from
`--novella-macro-gen`) becomes the step
distances of the token rule (docs/design.md, "Dependency tokens"):
* `load_slots = n` when every LOAD into a streamed buffer is slotted, n the
  fewest slots of the buffers they write: the loads of step k then wait only
  for the compute of step k - n (the last user of their slot), so they run
  up to n - 1 steps ahead. A step that also loads a single-slot (resident)
  buffer waits for step k - 1.
* `store_slots = n` when every STORE reads a slotted buffer (n: the fewest
  slots of those): the compute of step k then waits only for the stores of
  step k - n, so stores run under the next steps' compute.
Barriers between macros are steps of their own (one NOP): a macro's loads
wait for the barrier, the barrier for every store before it.

`schedule.early` (present when some template gets a tier > 0) lets a macro's
leading loads start before that barrier, by what they could conflict with in
the macro before it in the IR (P):
* a LOAD or GATHER whose tensor's DRAM range is disjoint from P's result at
  every length in bounds (weights, and activations P does not write; the
  paged KV caches count as one range), and
* whose SRAM buffers (its destination, a gather's index) are disjoint from
  every buffer of P: tier 2, it waits for the barrier before P only;
* or only from the buffers P's STOREs read: tier 1, it waits for P's last
  compute (P's stores may still run).
The JIT lets them pass only while they lead the load queue of the macro's
first step, and only behind P itself (`runtime/tokens.py`). With `early=2`
(the default) a macro's SPAD buffers move above P's when both fit and that
raises a tier, and its tier > 0 loads go in front of tier-0 ones whose
buffers they do not touch.
"""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.fields import EARLY, MEMS, RESIDENT, ROLES, i64, result_dram
from ..kernels.kv_cache import PAGED_VBASE
from ..machine.target import DRAM_LIMIT, Target
from ..symbolic import box as sb
from .common import body_ops, from_attr, functions, ir_memo, remember, set_attr, to_attr
from .novella_macro_gen import tiling_of

# opcode -> {address field: the field naming its memory, or the memory the opcode fixes}
_ADDRESS = {op: {addr: mem for _, addr, mem in roles.values()} for op, roles in ROLES.items()}
_MEMS = {int(code): name for name, code in MEMS.items()}


OPTIONS = {
    "early": (int, 2, "loads before the barrier: 0 none, 1 early tiers, 2 also move a macro's SPAD buffers "
              "clear of the previous macro's when both fit", (0, 2)),
}  # fmt: skip


def run(module_op, options, config) -> None:
    box = sy.symbol_box(sy.read_symbols(module_op))
    early = options.get("early", 2)
    spad = Target.from_config(config).spad_elems
    for fn in functions(module_op):
        regions, before = _dram_regions(fn), None
        top = min([spad] + [b.offset for m in _macros(fn) for b in tiling_of(m).buffers if b.name in _KEPT])
        for op in body_ops(fn):
            if op.operation.name == "novella.macro":
                held = _drop_reloads(op, before, regions, box) if before is not None else set()
                tiers = _early_tiers(op, before, regions, box) if early and before is not None else []
                if early == 2 and before is not None and not held:
                    tiers = _clear_of(op, before, regions, box, top, tiers)
                if any(tiers) and _lead(op, tiers):
                    tiers = _early_tiers(op, before, regions, box)
                _schedule(op, tiers, held)
                before = op


_KEPT = frozenset(RESIDENT.values())


def _macros(fn) -> list:
    return [op for op in body_ops(fn) if op.operation.name == "novella.macro"]


_BASES = ir_memo()  # address map -> its value at grid point 0 (equal layers, programs)


def _base(attr) -> int:
    """An address field's value at grid point 0 (its buffer's base plus the first offset)."""
    if isinstance(attr, ir.IntegerAttr):
        return attr.value
    return remember(_BASES, attr, _map_base, attr)


def _map_base(attr) -> int:
    m = ir.AffineMapAttr(attr).value
    zero = [0] * (m.n_dims + m.n_symbols)
    return min(sy.evaluate(e, zero[m.n_dims :], zero[: m.n_dims]) for e in m.results)


def _mem(attrs, key: str) -> str:
    return key if key in MEMS else _MEMS[ir.IntegerAttr(attrs[key]).value]


def _addresses(attrs) -> list[tuple[str, str, int]]:
    """(address field, memory, value at grid point 0) of each address field of an inst (its attributes)."""
    out = []
    for name, mem_key in _ADDRESS[ir.StringAttr(attrs["opcode"]).value].items():
        if name not in attrs or (mem_key not in ("spad", "acc") and mem_key not in attrs):
            continue
        out.append((name, _mem(attrs, mem_key), _base(attrs[name])))
    return out


def _slots_of(addresses, slotted) -> dict[str, tuple[int, int]]:
    """{address field: (slot stride, slots)} of the fields (`_addresses`) that point into a slotted buffer."""
    out = {}
    for name, mem, addr in addresses:
        for b in slotted:
            if b.mem == mem and b.offset <= addr < b.offset + b.size:
                out[name] = (b.size, b.slots)
    return out


def _slot_attr(fields: dict) -> dict:
    """The `slot` attribute of `_slots_of`: a stride for two slots, [stride, slots] for more."""
    return {k: stride if n == 2 else [stride, n] for k, (stride, n) in fields.items()}


def _resident(insts, slotted) -> set[str]:
    """Two-slot buffers that a guarded LOAD writes and a template under another guard (or none) addresses:
    their data outlives the load's step (they stay where step 0 put them), so one slot. `insts`: the
    (attributes, `_addresses`) of each template."""
    out = set()
    for i, (attrs, addresses) in enumerate(insts):
        if "when" in attrs and ir.StringAttr(attrs["opcode"]).value in ("LOAD", "GATHER"):
            fields = _slots_of(addresses, slotted)
            held = [b for b in slotted if "sram_addr" in fields and _holds(b, attrs)]
            out |= {b.name for b in held if not _same_step(insts, b, i)}
    return out


def _same_step(insts, b, load: int) -> bool:
    """Every template but the `load`-th that addresses buffer `b` runs under the guard of that load (its
    `when` has every constraint of the load's, and maybe more)."""
    when = insts[load][0]["when"]
    for i, (attrs, addresses) in enumerate(insts):
        if i != load and _slots_of(addresses, [b]):
            if "when" not in attrs or not _implies(attrs["when"], when):
                return False
    return True


def _implies(a, b) -> bool:
    """Integer set `a` has every constraint of `b` (so a point in `a` is in `b`)."""
    return a == b or set(sy.integer_set_constraints(b)) <= set(sy.integer_set_constraints(a))


def _holds(b, attrs) -> bool:
    return b.mem == _mem(attrs, "mem") and b.offset <= _base(attrs["sram_addr"]) < b.offset + b.size * b.slots


def _schedule(macro, tiers: list[int], held: frozenset = frozenset()) -> None:
    ops = list(macro.regions[0].blocks[0].operations)
    buffers = tiling_of(macro).buffers
    alternating = [b for b in buffers if b.alternate]
    slotted = [b for b in buffers if b.slots > 1 and not b.alternate]
    insts = [(op.attributes, _addresses(op.attributes) if slotted else []) for op in ops]
    resident = _resident(insts, slotted) | held
    slotted = [b for b in slotted if b.name not in resident]
    loads, stores = [], []  # the slots of each LOAD's / STORE's buffer (1: unslotted)
    for op, (attrs, addresses) in zip(ops, insts):
        fields = _slots_of(addresses, slotted) if slotted else {}
        opcode = ir.StringAttr(attrs["opcode"]).value
        if opcode == "LOAD" and any(_holds(b, attrs) for b in alternating):
            fields["sram_addr"] = (0, 2)
        if fields:
            set_attr(op, "slot", _slot_attr(fields))
        n = fields["sram_addr"][1] if "sram_addr" in fields else 1
        if opcode in ("LOAD", "GATHER") and ("when" not in attrs or "sram_addr" in fields):
            loads.append(n)  # a guarded load into slots (its data used in its step only) counts too
        elif opcode == "STORE":
            stores.append(n)
    schedule = {"load_slots": min(loads, default=1), "store_slots": min(stores, default=1)}
    if any(tiers):
        schedule[EARLY] = tiers
    macro.operation.attributes["schedule"] = to_attr(schedule)


def _drop_reloads(macro, prev, regions: dict, box: dict) -> set[str]:
    """Erases the guarded LOADs of `macro` that repeat one of `prev` (the macro right before it in the IR): the
    same template (fields, guard, tensor), whose SRAM buffer no other template of either macro writes, from a
    tensor `prev` does not write, where `prev`'s grid is not empty at any length (so its LOAD ran); e.g. RoPE's
    cos and sin, loaded at the first step of the q rotation and again of the k one. Returns the names of the
    macro's buffers so kept (one slot: the data stays where `prev` put it)."""
    mine, theirs = _templates(macro), _templates(prev)
    written = regions.get(prev.results[0])
    if written is None or any(
        sy.as_int(e) is None or sy.as_int(e) < 1 for e in sy.map_results(prev.attributes["grid"])
    ):
        return set()
    ours, others, dropped = tiling_of(macro).buffers, tiling_of(prev).buffers, []
    for inst in mine:
        twin = next((t for t in theirs if _same_load(inst, t)), None)
        src = regions.get(inst.operands[0]) if twin is not None else None
        if src is None or "slot" in twin.attributes or not sb.disjoint(src, written, box):
            continue
        buf, their = _buffer_of(inst, ours), _buffer_of(twin, others)
        if buf is None or their is None or _writes(theirs, their, twin):
            continue
        if not _writes(mine, buf, inst) and not _writes(mine, their, inst):
            dropped.append((inst, buf.name))
    for inst, _ in dropped:
        inst.operation.erase()
    return {name for _, name in dropped}


def _templates(macro) -> list:
    return list(macro.regions[0].blocks[0].operations)


def _same_load(inst, twin) -> bool:
    """`inst` and `twin` are guarded LOADs of one tensor with equal fields."""
    a, b = inst.attributes, twin.attributes
    if ir.StringAttr(a["opcode"]).value != "LOAD" or "when" not in a or len(inst.operands) != 1:
        return False
    if len(twin.operands) != 1 or inst.operands[0] != twin.operands[0]:
        return False
    keys = _names(a) - {"slot"}
    return keys == _names(b) - {"slot"} and all(a[k] == b[k] for k in keys)


def _names(attrs) -> set[str]:
    return {n if isinstance(n, str) else n.name for n in attrs}


def _buffer_of(inst, buffers):
    """The buffer a LOAD writes (None if none holds its address)."""
    attrs = inst.attributes
    return next((b for b in buffers if _holds(b, attrs)), None)


_WRITES = {"dst_addr", "acc_addr"}


def _writes(insts, buffer, but) -> bool:
    """Some template of `insts` but `but` writes into `buffer` (a VEC's dst, a MATMUL's accumulator, a LOAD's
    or GATHER's destination)."""
    lo, hi = buffer.offset, buffer.offset + buffer.size * buffer.slots
    for inst in insts:
        if inst.operation == but.operation:
            continue
        opcode = ir.StringAttr(inst.attributes["opcode"]).value
        for name, mem, at in _addresses(inst.attributes):
            writes = name in _WRITES or (name == "sram_addr" and opcode in ("LOAD", "GATHER"))
            if writes and mem == buffer.mem and lo <= at < hi:
                return True
    return False


def _dram_regions(fn) -> dict:
    """value -> (DRAM offset, size) of the function's arguments and op results (a paged cache: the whole
    paged window, shared by every cache)."""
    block = fn.regions[0].blocks[0]
    places = []
    if "arg_attrs" in fn.attributes:
        attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
        places = [(a, ir.DictAttr(d)["novella.dram"]) for a, d in zip(block.arguments, attrs)]
    places += [(op.results[0], result_dram(op)) for op in body_ops(fn) if len(op.results) == 1]
    out = {}
    for v, attr in places:
        shape = sy.shape_of(ir.RankedTensorType(v.type)) if attr is not None else None
        if shape is not None:
            lo = sy.map_results(attr)[0]
            paged = sy.as_int(lo) is not None and sy.as_int(lo) >= PAGED_VBASE
            out[v] = (PAGED_VBASE, DRAM_LIMIT) if paged else (lo, sy.numel(shape))
    return out


def _early_tiers(macro, prev, regions: dict, box: dict, shift: int = 0) -> list[int]:
    """The early tier of each template of `macro` behind `prev` (the module docstring); `shift`: as if
    the macro's SPAD buffers moved by that many elements."""
    written = regions.get(prev.results[0])
    theirs = tiling_of(prev).buffers
    every = [_extent(b) for b in theirs]
    stored = _store_extents(prev, theirs)
    mine = tiling_of(macro).buffers
    tiers = []
    for inst in macro.regions[0].blocks[0].operations:
        attrs, tier = inst.attributes, 0
        if ir.StringAttr(attrs["opcode"]).value in ("LOAD", "GATHER") and written and len(inst.operands) == 1:
            src = regions.get(inst.operands[0])
            sram = _touched(attrs, mine, shift)
            if src is not None and sram is not None and sb.disjoint(src, written, box):
                tier = 2 if _apart(sram, every) else 1 if stored is not None and _apart(sram, stored) else 0
        tiers.append(tier)
    return tiers


def _extent(b, shift: int = 0) -> tuple[str, int, int]:
    at = b.offset + (shift if b.mem == "spad" else 0)
    return b.mem, at, at + b.size * b.slots


def _touched(attrs, buffers, shift: int = 0) -> list | None:
    """The extents of the buffers an inst's SRAM addresses point into (SPAD ones moved by `shift`);
    None if one is in none."""
    out = []
    for _, mem, addr in _addresses(attrs):
        hit = [_extent(b, shift) for b in buffers if b.mem == mem and b.offset <= addr < _extent(b)[2]]
        if not hit:
            return None
        out += hit
    return out or None


def _clear_of(macro, prev, regions: dict, box: dict, spad: int, tiers: list[int]) -> list[int]:
    """Moves the SPAD buffers of `macro` above those of `prev` when both fit below `spad` (the scratchpad, or
    the lowest resident tensor's region) and that raises an early tier; returns the tiers."""
    mine, theirs = _free_extents(macro), _free_extents(prev)
    if not mine or not theirs:
        return tiers
    lo, hi = min(e[1] for e in mine), max(e[2] for e in mine)
    top = max(e[2] for e in theirs)
    if top + hi - lo > spad or top <= lo or not _movable(macro):
        return tiers
    moved = _early_tiers(macro, prev, regions, box, top - lo)
    if sum(moved) <= sum(tiers):
        return tiers
    _move(macro, top - lo)
    return moved


def _lead(macro, tiers: list[int]) -> bool:
    """Moves the LOAD / GATHER templates of tier > 0 that follow a tier-0 one in front of it, where the
    loads they pass touch other SRAM buffers (a chained LOAD is a LOAD but in time); whether any moved."""
    ops = list(macro.regions[0].blocks[0].operations)
    loads = [i for i, op in enumerate(ops) if ir.StringAttr(op.attributes["opcode"]).value in ("LOAD", "GATHER")]
    buffers = tiling_of(macro).buffers
    head, passed, moved = None, [], False
    for i in loads:
        extents = _touched(ops[i].attributes, buffers)
        if head is None and tiers[i] > 0:
            continue
        if head is not None and tiers[i] > 0 and extents and all(_apart(extents, p) for p in passed):
            ops[i].operation.move_before(ops[head].operation)
            moved = True
            continue
        head = i if head is None else head
        passed.append(extents or [(mem, 0, 2**62) for mem in MEMS])
    return moved


def _move(macro, delta: int) -> None:
    """Adds `delta` to every SPAD address of the macro's templates and to its SPAD buffers' offsets, but the
    resident buffers' and the addresses into them (`_movable`)."""
    kept = _free_top(macro)
    for inst in macro.regions[0].blocks[0].operations:
        attrs = inst.attributes
        for name, mem, at in _addresses(attrs):
            if mem == "spad" and at < kept:
                attrs[name] = _plus(attrs[name], delta)
    buffers = from_attr(macro.attributes["buffers"])
    for name, v in buffers.items():
        v[1] += delta if v[0] == "spad" and name not in _KEPT else 0
    macro.attributes["buffers"] = to_attr(buffers)


def _free_extents(macro) -> list:
    """`_extent` of each of the macro's SPAD buffers but the resident ones."""
    return [_extent(b) for b in tiling_of(macro).buffers if b.mem == "spad" and b.name not in _KEPT]


def _free_top(macro) -> int:
    """The end of the macro's SPAD buffers but the resident ones."""
    return max((e[2] for e in _free_extents(macro)), default=0)


def _movable(macro) -> bool:
    """The macro's addresses into its resident buffers (`fields.RESIDENT`) can be told from the others by
    their value at grid point 0: at least `_free_top`. An address at grid point 0 is at most its own, and at
    least its buffer's less one block (a previous block's, `(d1 - 1) * tn`, below its buffer), less than a
    resident tensor's size; so it holds when no address lies in [the lowest resident offset less the largest
    resident size, `_free_top`) (none can where a gap of that size lies below the resident buffers)."""
    kept = [b for b in tiling_of(macro).buffers if b.name in _KEPT]
    if not kept:
        return True
    low, top = min(b.offset for b in kept) - max(b.size for b in kept), _free_top(macro)
    if top <= low:
        return True
    return not any(
        mem == "spad" and low <= at < top
        for inst in macro.regions[0].blocks[0].operations
        for _, mem, at in _addresses(inst.attributes)
    )


def _plus(attr, delta: int):
    if isinstance(attr, ir.IntegerAttr):
        return i64(attr.value + delta)
    m = ir.AffineMapAttr(attr).value
    return ir.AffineMapAttr.get(ir.AffineMap.get(m.n_dims, m.n_symbols, [e + sy.const(delta) for e in m.results]))


def _store_extents(macro, buffers) -> list | None:
    """The extents of the buffers the STOREs of `macro` read; None if one reads outside its buffers."""
    out = []
    for inst in macro.regions[0].blocks[0].operations:
        if ir.StringAttr(inst.attributes["opcode"]).value == "STORE":
            hit = _touched(inst.attributes, buffers)
            if hit is None:
                return None
            out += hit
    return out


def _apart(xs: list, ys: list) -> bool:
    return all(m != n or hi <= lo2 or hi2 <= lo for m, lo, hi in xs for n, lo2, hi2 in ys)
