"""The token rule: dependency-token flags of a whole program from its step structure.

The one implementation, used by the JIT (`jit.py`) and the reference
expansion (`testing/streams.py`); the numba kernel (`_jit_numba.py`) is a compiled
copy, tested bit for bit against it. Its inputs are what the IR says:
each word's step, queue, whether it loads into a ring of slots
(`slot` of its template) and how early it may load (`early` of its macro's
`schedule`), and each step's `load_slots` / `store_slots` (the `schedule`
field of its macro; 1 on barrier steps).

With L/C/S the load, compute and store instructions of step k (a barrier
NOP is a compute-only step; `b` is the barrier before k's macro, -1 for the
first macro):
* L waits for the compute of step need_l(k) = max(k - d, b), where d is
  `load_slots` (2 to MAX_SLOTS: its buffers' fewest slots) if every load of
  the step is slotted, else 1: step k's slot was last read by step k - d. Compute
  runs in order, so one token from that step suffices: the first L pops C2L
  unless an earlier load already waited for that compute (or a later
  one), and the last C of step need_l(k) pushes it.
* Early loads: in the first step of a macro (k = b + 1), its leading loads
  (in queue order, up to its first load of tier 0) whose template has tier
  `early` > 0 wait for less: tier 1 for the compute of step b - 1 (the
  last step of the macro before; its stores may still run), tier 2 for the
  compute of `before`[k] (the barrier before that macro, -1 if none). The
  caller gives tier 0 to the words of a macro that has no barrier, or whose
  IR predecessor has no words at this length (the compiler's tiers hold
  against that predecessor only). Later steps' loads keep their wait: were
  they early, their DRAM traffic would delay the previous macro's stores,
  which the barrier and the macro's first compute wait for.
* C waits for the stores of need_s(k) = k - `store_slots`: the first C pops
  S2C from the latest store step <= need_s(k) that no earlier compute waited
  for; the last S of that step pushes it.
* The last L of a step pushes L2C, popped by its first C; the last C pushes
  C2S if the step stores, popped by its first S.
"""

from __future__ import annotations

import numpy as np

from simulator import isa

_HEADER = {f.name: f for f in isa.LAYOUT[isa.Opcode.NOP]}
LOAD, COMPUTE, STORE = 0, 1, 2


def slot_of(v) -> tuple[int, int]:
    """(stride, slots) of a template's `slot` entry: a stride (two slots) or [stride, slots]; step k
    adds stride * (k mod slots) to the field."""
    return (int(v[0]), int(v[1])) if isinstance(v, (list, tuple)) else (int(v), 2)


def _edges(step, queue, q, n_steps):
    """(first word, last word) of queue q per step; -1 where the step has none."""
    first = np.full(n_steps, -1, np.int64)
    last = np.full(n_steps, -1, np.int64)
    idx = np.flatnonzero(queue == q)
    if len(idx):
        s = step[idx]
        change = s[1:] != s[:-1]
        head, tail = np.concatenate(([True], change)), np.concatenate((change, [True]))
        first[s[head]] = idx[head]
        last[s[tail]] = idx[tail]
    return first, last


def _once(need, valid):
    """need[k] where it exceeds every earlier valid need (a new wait), else -1."""
    v = np.where(valid, need, -1)
    before = np.concatenate(([-1], np.maximum.accumulate(v)[:-1]))
    return np.where(valid & (v > before) & (v >= 0), v, -1)


def _load_needs(step, tier, dist, barrier_before, before):
    """The compute step each load word waits for (`tier`: the loads' early tiers), in queue order."""
    k = step
    bar = barrier_before[k]
    need = np.maximum(k - dist[k], bar)
    if not len(k):
        return need
    cand = (tier > 0) & (bar >= 0) & (k == bar + 1)
    blocked = np.cumsum(~cand)  # loads of tier 0 so far
    start = np.concatenate(([True], bar[1:] != bar[:-1]))  # a macro's first load
    first = np.maximum.accumulate(np.where(start, np.arange(len(k)), 0))
    leading = cand & (blocked == blocked[first] - ~cand[first])
    return np.where(leading, np.where(tier == 1, bar - 1, before[k]), need)


def flags(step, queue, slotted, load_slots, store_slots, barrier_before, early=None, before=None) -> np.ndarray:
    """Header bits (uint64, to OR into lane 0) of every word.

    step, queue, slotted, early (tier, 0: none): per word; load_slots, store_slots, barrier_before,
    before (the barrier before the previous macro): per step."""
    n_steps = len(load_slots)
    n = len(step)
    fl, ll = _edges(step, queue, LOAD, n_steps)
    fc, lc = _edges(step, queue, COMPUTE, n_steps)
    fs, ls = _edges(step, queue, STORE, n_steps)
    if (fc < 0).any():
        raise RuntimeError(f"steps {np.flatnonzero(fc < 0)[:5]} have no compute instruction")
    ks = np.arange(n_steps)
    unslotted = np.zeros(n_steps, bool)
    is_load = queue == LOAD
    np.logical_or.at(unslotted, step[is_load & ~slotted], True)
    dist = np.where(unslotted, 1, np.asarray(load_slots, np.int64))
    loads = np.flatnonzero(is_load)
    tier = np.zeros(len(loads), np.int64) if early is None else np.asarray(early)[loads]
    need_l = _load_needs(step[loads], tier, dist, barrier_before, barrier_before if before is None else before)
    need_l = _once(need_l, np.ones(len(loads), bool))
    store_steps = np.flatnonzero(fs >= 0)
    need_s = ks - store_slots
    if len(store_steps):
        at = np.searchsorted(store_steps, need_s, side="right") - 1
        latest = np.where(at >= 0, store_steps[np.maximum(at, 0)], -1)
    else:
        latest = np.full(n_steps, -1)
    need_s = _once(latest, np.ones(n_steps, bool))
    bits = {name: np.zeros(n, bool) for name in ("pop_prev", "pop_next", "push_prev", "push_next")}
    waits = need_l >= 0
    bits["pop_next"][loads[waits]] = True  # L pops C2L
    bits["push_prev"][lc[need_l[waits]]] = True  # C pushes C2L
    has_l = fl >= 0
    bits["push_next"][ll[has_l]] = True  # L pushes L2C
    bits["pop_prev"][fc[has_l]] = True  # C pops L2C
    has_s = fs >= 0
    bits["push_next"][lc[has_s]] = True  # C pushes C2S
    bits["pop_prev"][fs[has_s]] = True  # S pops C2S
    waits = need_s >= 0
    bits["pop_next"][fc[waits]] = True  # C pops S2C
    bits["push_prev"][ls[need_s[waits]]] = True  # S pushes S2C
    header = np.zeros(n, np.uint64)
    for name, mask in bits.items():
        header |= mask.astype(np.uint64) << np.uint64(_HEADER[name].offset)
    return header
