"""Three ways to get the instruction stream for length T, to compare them bit for bit.

* **static**: compile the model with T fixed (bounds [T, T]) and expand
  that artifact (`static_words`).
* **per-length**: compile once with `?` and pre-generate, store and ship the
  expanded stream of every length in a set (`PerLength`). The streams are
  expanded by `reference_words`, a deliberately naive loop per grid point and
  per instruction (scalar expression evaluation, `isa.encode`, tokens by the
  rule written out step by step), so it is an independent check of the
  vectorized JIT. For the whole range [1, max], `count_words_range` counts
  the words of every length exactly, without expanding any.
* **jit**: MacroMeta + TileMeta instantiated for T (`Jit.instantiate`).

All three must give identical words for every T in bounds.
"""

from __future__ import annotations

import itertools

import numpy as np

from simulator import isa

from ..runtime import expr, tokens
from ..runtime.jit import Jit

# ------------------------------------------------------------------ static


def compile_static(module, *example_args, dynamic_dim: int = 1, config=None):
    """Compiles `module` with its length fixed to that of `example_args`: bounds [T, T].

    The dim stays a symbol so that the graph is the one the dynamic compile
    sees (a truly static export folds size-dependent ops, e.g. a slice of the
    whole positional table); nothing in the backend may depend on the bounds,
    which is what the bit-identity tests check."""
    from ..pipeline import compile_torch

    length = int(example_args[0].shape[dynamic_dim])
    return compile_torch(module, *example_args, dynamic_dim=dynamic_dim, min_len=length, max_len=length, config=config)


def static_words(module, *example_args, dynamic_dim: int = 1, config=None) -> np.ndarray:
    """The fully expanded words of a static compile for the shapes of `example_args`."""
    return expand_static(compile_static(module, *example_args, dynamic_dim=dynamic_dim, config=config))


def expand_static(model) -> np.ndarray:
    """The words of a model compiled for one length (every symbol's bounds are [T, T])."""
    syms = model.artifact.symbols
    if any(lo != hi for _, lo, hi in syms):
        raise ValueError(f"not a static compile: symbols {syms}")
    return model.jit.instantiate([lo for _, lo, _ in syms]).words


# ------------------------------------------------------------------ per-length


class PerLength:
    """Pre-generated streams for a set of lengths (what shipping every length would store)."""

    def __init__(self, artifact, lengths):
        self.art = artifact
        self.streams = {int(t): reference_words(artifact, [int(t)]) for t in lengths}

    def words(self, length: int) -> np.ndarray:
        return self.streams[int(length)]

    @property
    def nbytes(self) -> int:
        return sum(w.nbytes for w in self.streams.values())


def program_of(artifact, syms):
    """The one-program artifact that runs `syms` (itself when it holds one program)."""
    return artifact if len(artifact.programs) == 1 else artifact.view(artifact.pick(syms))


def count_words(artifact, syms) -> int:
    """Words of the program for `syms`, counted from grid extents and guards without encoding."""
    artifact = program_of(artifact, syms)
    total, n_macros = 0, 0
    for tile in artifact.tiles:
        extents = [int(expr.evaluate(g, syms)) for g in tile.grid]
        n = sum(_count_points(t, syms, extents) for t in artifact.macros[tile.macro].insts)
        total += n
        n_macros += n > 0
    return total + max(n_macros - 1, 0)


def count_words_range(artifact, lo: int, hi: int) -> np.ndarray:
    """Words of the program for every length in [lo, hi] (one symbol), without expanding any.

    Vectorized over the lengths: a template's count is the product over grid
    dims of the values of that dim passing the guards that refer to it alone;
    a template with a guard over several dims is counted point by point."""
    if len(artifact.programs) > 1:
        parts = []
        for i, p in enumerate(artifact.programs):
            a, b = max(lo, p.ranges[0][0]), min(hi, p.ranges[0][1])
            if a <= b:
                parts.append(count_words_range(artifact.view(i), a, b))
        return np.concatenate(parts)
    ts = np.arange(lo, hi + 1, dtype=np.int64)
    total = np.zeros(len(ts), np.int64)
    macros = np.zeros(len(ts), np.int64)
    for tile in artifact.tiles:
        extents = [np.broadcast_to(expr.evaluate(g, [ts]), ts.shape) for g in tile.grid]
        words = sum(_count_template(t, ts, extents) for t in artifact.macros[tile.macro].insts)
        total += words
        macros += words > 0
    return total + np.maximum(macros - 1, 0)


def _count_template(t, ts, extents) -> np.ndarray:
    by_dim = [[] for _ in extents]
    count = np.ones(len(ts), np.int64)
    for kind, prog in t.when:
        used = {int(tok[1:]) for tok in prog if isinstance(tok, str) and tok[0] == "d"}
        if len(used) > 1:
            return np.array([_count_points(t, [int(x)], [int(e[i]) for e in extents]) for i, x in enumerate(ts)])
        if used:
            by_dim[used.pop()].append((kind, prog))
        else:
            count *= _holds(kind, np.broadcast_to(expr.evaluate(prog, [ts]), ts.shape))
    for i, e in enumerate(extents):
        d = np.arange(max(int(e.max()), 0), dtype=np.int64)[:, None]
        ok = d < e[None, :]
        dims = [d if j == i else 0 for j in range(len(extents))]
        for kind, prog in by_dim[i]:
            ok &= _holds(kind, expr.evaluate(prog, [ts[None, :]], dims))
        count *= ok.sum(axis=0)
    return count


def _holds(kind: str, v) -> np.ndarray:
    return (v == 0) if kind == "eq" else (v >= 0)


def _count_points(t, syms, extents) -> int:
    n = int(np.prod(extents)) if extents else 1
    if n <= 0:
        return 0
    dims = np.unravel_index(np.arange(n, dtype=np.int64), extents)
    m = np.ones(n, bool)
    for kind, prog in t.when:
        m &= _holds(kind, expr.evaluate(prog, syms, dims))
    return int(m.sum())


def per_length_nbytes(artifact, lo: int, hi: int) -> int:
    """Bytes of storing the stream of every length in [lo, hi] (one symbol), counted exactly."""
    return int(count_words_range(artifact, lo, hi).sum()) * isa.WORD_BYTES


# ------------------------------------------------------------------ reference expansion


def _eval(program, syms, point) -> int:
    return int(expr.evaluate(program, syms, point))


def _guard(t, syms, point) -> bool:
    for kind, prog in t.when:
        v = _eval(prog, syms, point)
        if (kind == "eq" and v != 0) or (kind != "eq" and v < 0):
            return False
    return True


def _step_insts(mm, syms, point, bases, index: int, early: bool) -> list:
    """[(queue, fields, opcode, slotted, early tier), ...] of one grid point, in template order."""
    out = []
    tiers = mm.schedule.get("early") if early else None
    for j, t in enumerate(mm.insts):
        if not _guard(t, syms, point):
            continue
        fields = dict(t.const)
        for name, progs in t.var.items():
            fields[name] = min(_eval(p, syms, point) for p in progs)
        for name, entry in t.slot.items():
            stride, n = tokens.slot_of(entry)
            fields[name] = fields.get(name, 0) + stride * (index % n)
        if t.tensor is not None:
            fields["dram_base"] = fields.get("dram_base", 0) + bases[t.tensor]
        op = isa.Opcode[t.opcode]
        out.append((isa.QUEUE_OF[op], fields, op, "sram_addr" in t.slot, tiers[j] if tiers else 0))
    return out


_BARRIER = [("compute", {}, isa.Opcode.NOP, False, 0)]


def reference_steps(artifact, syms) -> list[tuple]:
    """The program as a list of (step, schedule) (grid points with instructions; barrier NOPs between macros).
    A macro's early tiers apply only behind its IR predecessor (when that one has words)."""
    artifact = program_of(artifact, syms)
    steps, ran = [], False
    for tile in artifact.tiles:
        mm = artifact.macros[tile.macro]
        extents = [_eval(g, syms, ()) for g in tile.grid]
        bases = {int(k): _eval(p, syms, ()) for k, p in tile.bases.items()}
        schedule = (mm.schedule.get("load_slots", 1), mm.schedule.get("store_slots", 1))
        macro = []
        for point in itertools.product(*(range(e) for e in extents)):
            insts = _step_insts(mm, syms, point, bases, len(macro), ran)
            if insts:
                macro.append((insts, schedule))
        if macro and steps:
            steps.append((_BARRIER, None))
        steps.extend(macro)
        ran = bool(macro)
    return steps


def reference_words(artifact, syms) -> np.ndarray:
    """Naive expansion: one `isa.encode` per instruction word, tokens by `runtime/tokens.py`."""
    steps = reference_steps(artifact, syms)
    flat = [(k, inst) for k, (step, _) in enumerate(steps) for inst in step]
    q = {"load": tokens.LOAD, "compute": tokens.COMPUTE, "store": tokens.STORE}
    barrier, before, last, prev = [], [], -1, -1
    for k, (_, schedule) in enumerate(steps):
        if schedule is None:
            last, prev = k, last
        barrier.append(last)
        before.append(prev)
    header = tokens.flags(
        np.array([k for k, _ in flat], np.int64),
        np.array([q[inst[0]] for _, inst in flat], np.int64),
        np.array([inst[3] for _, inst in flat], bool),
        np.array([1 if s is None else s[0] for _, s in steps], np.int64),
        np.array([1 if s is None else s[1] for _, s in steps], np.int64),
        np.array(barrier, np.int64),
        np.array([inst[4] for _, inst in flat], np.int64),
        np.array(before, np.int64),
    )
    words = [isa.encode(op, **fields) for _, (_, fields, op, _, _) in flat]
    words = np.array(words, np.uint64).reshape(-1, isa.LANES)
    words[:, 0] |= header
    return words


def three_streams(static_model, dynamic_artifact, length: int) -> dict:
    """{"static", "per_length", "jit"} words for `length` (the static model compiled for it)."""
    return {
        "static": expand_static(static_model),
        "per_length": PerLength(dynamic_artifact, [length]).words(length),
        "jit": Jit(dynamic_artifact).instantiate([length]).words,
    }
