"""Running a compiled model: check and bind the inputs, JIT the program, simulate, read the outputs.

Thread safety: one Executor may be called from several threads at once.
Each call builds its own simulator; the JIT's per-length cache is guarded
by a lock; `last_run` is per thread (each thread sees the run of its own
last call), and `run_with_result` returns the run itself."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from dataclasses import dataclass

import numpy as np

from simulator import Simulator, load_config
from simulator.config import NovellaConfig

from ..errors import InputError
from ..frontend import dtypes
from . import expr
from .jit import Jit, Program


@dataclass
class RunResult:
    """What one call did: the program, the simulator's stats, host times, and the trace if asked."""

    symbols: dict
    program: Program
    stats: object
    jit_seconds: float
    sim_seconds: float
    trace: object = None


class Executor:
    """Runs an artifact on the Novella simulator."""

    def __init__(self, artifact, config: NovellaConfig | None = None):
        self.art = artifact
        self.config = config or NovellaConfig(**_config_fields(artifact.config))
        self.jit = Jit(artifact)
        self._local = threading.local()
        self._jit_lock = threading.Lock()

    @property
    def last_run(self) -> RunResult | None:
        """The RunResult of the calling thread's last call (None before its first)."""
        return getattr(self._local, "run", None)

    @last_run.setter
    def last_run(self, run: RunResult | None) -> None:
        self._local.run = run

    def bind(self, inputs: list[np.ndarray]) -> list[int]:
        """Symbol values from the input shapes; refuses wrong ranks, static dims and lengths out of bounds.
        A dim is a symbol's size when some program's input shape is that bare symbol, or c times it (a
        `c * Dim` of torch.export's dynamic_shapes: a size that must be a multiple of c)."""
        first = self.art.programs[0].inputs
        check_count(inputs, first)
        syms, scaled_dims = [None] * len(self.art.symbols), []
        for i, x in enumerate(inputs):
            if x.ndim != len(first[i].shape):
                what = "a 0-d array (a scalar)" if x.ndim == 0 else f"rank {x.ndim}"
                raise InputError(f"input #{i} is {what}, the model was compiled for rank {len(first[i].shape)}")
            for prog in self.art.programs:
                for d, p in enumerate(prog.inputs[i].shape):
                    if len(p) == 1 and isinstance(p[0], str) and p[0].startswith("s"):
                        syms[int(p[0][1:])] = int(x.shape[d])
                    elif (scaled := _scaled_symbol(p)) is not None:
                        scaled_dims.append((i, d, *scaled))
        for i, d, k, c in scaled_dims:
            n = int(inputs[i].shape[d])
            if syms[k] is None and n % c:
                name = self.art.symbols[k][0]
                raise InputError(f"input #{i} dim {d} is {n}, not a multiple of {c}: the model was compiled for "
                                 f"{c} * {name}; pad or crop it to a multiple of {c}")  # fmt: skip
            if syms[k] is None:
                syms[k] = n // c
        bad = [
            f"{name}={v} is outside the compiled bounds [{lo}, {hi}]"
            if v is not None
            else f"{name} is not the size of any input dim"
            for (name, lo, hi), v in zip(self.art.symbols, syms)
            if v is None or not lo <= v <= hi
        ]
        if bad:
            raise InputError(
                f"length {'; '.join(bad)}; recompile with wider bounds "
                "(min_len/max_len, or the Dim's min/max in dynamic_shapes)"
            )
        for i, (x, meta) in enumerate(zip(inputs, self.program(syms).inputs)):
            want = [int(expr.evaluate(p, syms)) for p in meta.shape]
            if list(x.shape) != want:
                raise InputError(f"input #{i} has shape {list(x.shape)}, expected {want} for {self._named(syms)}")
        return syms

    def program(self, syms):
        """The artifact's program for these symbol values (`Artifact.pick`)."""
        return self.art.programs[self.art.pick(syms)]

    def _simulator(self, dram_elems: int, check_hazards: bool, trace: bool) -> Simulator:
        """A simulator with zeroed memories. The last one is reused when the DRAM size matches (it keeps the
        prepared program of the last length); at another size the new one takes over its memories (DRAM a
        prefix of the largest so far), so a new length does not pay the page faults of fresh memory (~0.25 s
        for the encoder at T=1500). Each thread has its own."""
        sim = getattr(self._local, "sim", None)
        if trace or sim is None or sim.dram.size != dram_elems:
            new = Simulator(self.config, dram_elems, check_hazards=check_hazards, trace=trace)
            if sim is not None and not trace:
                _take_memories(new, sim)
            self._local.sim = None if trace else new
            return new
        for unit in (sim.dram, sim.spad, sim.acc):
            unit.data.fill(0)
        sim.check_hazards = check_hazards
        return sim

    def _named(self, syms) -> str:
        return ", ".join(f"{s[0]}={v}" for s, v in zip(self.art.symbols, syms))

    def run(self, inputs: list[np.ndarray], **options) -> list[np.ndarray]:
        """The outputs of `run_with_result` (same options); the run is `last_run`."""
        return self.run_with_result(inputs, **options)[0]

    def run_with_result(
        self,
        inputs: list[np.ndarray],
        *,
        trace: bool = False,
        check_hazards: bool = True,
        progress: bool | None = None,
        cast: bool = False,
    ) -> tuple[list[np.ndarray], RunResult]:
        """(outputs, this call's RunResult): the thread-safe way to get a run's stats. Inputs must have the
        compiled dtypes (others only with `cast=True`); `check_hazards=False` skips the race checker (same
        results and cycles, faster); `progress`: a tqdm bar of executed instructions (None: only on a
        terminal, for long programs)."""
        if any(p.kv for p in self.art.programs):
            raise InputError(
                "this program keeps its KV cache in pages of NPU DRAM (--novella-kv-cache); run it in a "
                "session (novella_mlir.causal_lm.compile_causal_lm(...).generate), not as a single call"
            )
        metas = self.art.programs[0].inputs
        check_count(inputs, metas)
        inputs = [check_input(x, i, cast, m.dtype) for i, (x, m) in enumerate(zip(inputs, metas))]
        syms = self.bind(inputs)
        prog = self.program(syms)
        for i, (x, meta) in enumerate(zip(inputs, prog.inputs)):
            check_limit(x, i, meta.limit)
        t0 = time.perf_counter()
        with self._jit_lock:
            program = self.jit.instantiate(syms)
        t1 = time.perf_counter()
        sim = self._simulator(int(expr.evaluate(prog.dram_size, syms)), check_hazards, trace)
        for name, (offset, _) in prog.weight_layout.items():
            sim.dram.write(offset, self.art.weights[name].ravel())
        for x, meta in zip(inputs, prog.inputs):
            sim.dram.write(int(expr.evaluate(meta.dram, syms)), x.ravel())
        with progress_bar(program.n_words, progress) as bar:
            sim.progress = bar
            stats = sim.run(program.words)
            if bar is not None:
                bar.update(bar.total - bar.n)
        outs = []
        for meta in prog.outputs:
            shape = [int(expr.evaluate(p, syms)) for p in meta.shape]
            off = int(expr.evaluate(meta.dram, syms))
            outs.append(dtypes.from_npu(sim.dram.read(off, int(np.prod(shape))).reshape(shape), meta.dtype))
        t2 = time.perf_counter()
        named = {s[0]: v for s, v in zip(self.art.symbols, syms)}
        run = RunResult(named, program, stats, t1 - t0, t2 - t1, sim.trace if trace else None)
        self.last_run = run
        return outs, run


def _take_memories(new: Simulator, old: Simulator) -> None:
    """Gives `new` (just made, zeroed) the memories of `old`, zeroed: the scratchpad and accumulator, and
    as DRAM the first `new.dram.size` elements of `old`'s DRAM buffer when it is large enough. `old` is
    not used again."""
    buf = old.dram.data if old.dram.data.base is None else old.dram.data.base
    if buf.size >= new.dram.size:
        new.dram.data = buf[: new.dram.size]
        new.dram.data.fill(0)
    for unit, mine in ((old.spad, new.spad), (old.acc, new.acc)):
        if unit.size == mine.size:
            unit.data.fill(0)
            mine.data = unit.data


def check_count(inputs, metas) -> None:
    """Refuses a call with another number of inputs than the compiled program's (the module's forward)."""
    if len(inputs) != len(metas):
        raise InputError(f"expected {len(metas)} inputs (as the module's forward), got {len(inputs)}")


def check_input(x, i: int, cast: bool = False, want: str = "float32") -> np.ndarray:
    """Input #i as the contiguous float32 array the NPU holds. Its dtype must be `want`, the compiled one,
    unless `cast`; lossy casts are refused even then, and integers must be exact in fp32 (frontend/dtypes.py)."""
    if not isinstance(x, np.ndarray):
        if not cast or x is None:
            what = "None" if x is None else f"a {type(x).__name__}"
            raise InputError(
                f"input #{i} is {what}; pass a {want} torch.Tensor or numpy array"
                + ("" if x is None else " (or cast=True to convert it)")
            )
        try:
            x = np.asarray(x)
        except (ValueError, TypeError) as e:
            raise InputError(f"input #{i} cannot be converted to an array: {e}") from None
    target = np.dtype(want)
    if x.dtype != target:
        if not cast:
            raise InputError(
                f"input #{i} has dtype torch.{x.dtype}, the model was compiled for torch.{want}; "
                f"convert it (x.to(torch.{want})) or pass cast=True"
            )
        x = _cast(x, i, target)
    if x.dtype.kind in "biu":
        dtypes.check_exact(x.astype(np.int64), f"input #{i}")
    return np.asarray(x, np.float32, order="C")


def check_limit(x: np.ndarray, i: int, limit: list) -> None:
    """Refuses input #i (as the NPU holds it) above the program's `limit` ([max |value|, why], written by
    the frontend for an integer scan of the input)."""
    top = float(np.abs(x).max()) if x.size else 0.0
    if limit and top > limit[0]:
        held = f"the integer {int(top)}" if top.is_integer() else f"the value {top:.9g}"
        raise InputError(
            f"input #{i} holds {held}, above {limit[0]}: {limit[1]}, so its values must stay within +-{limit[0]}"
        )


def _cast(x: np.ndarray, i: int, target: np.dtype) -> np.ndarray:
    kind = x.dtype.kind
    if kind not in "biuf":
        why = "it would drop the imaginary part" if kind == "c" else "it is not numeric"
        raise InputError(f"input #{i} has dtype torch.{x.dtype}, which cannot be cast to torch.{target}: {why}")
    with np.errstate(over="ignore", invalid="ignore"):
        y = x.astype(target)
    if kind == "f" and target.kind == "f" and np.count_nonzero(np.isfinite(x)) != np.count_nonzero(np.isfinite(y)):
        raise InputError(f"input #{i} ({x.dtype}) has values beyond the {target} range; cast=True would make them inf")
    return y


PROGRESS_MIN_WORDS = 20_000


@contextlib.contextmanager
def progress_bar(total: int, enabled: bool | None, desc: str = "npu"):
    """A tqdm bar over `total` instructions, or None. enabled=None: only when stderr is a terminal and the
    program is long (>= PROGRESS_MIN_WORDS words); NOVELLA_PROGRESS=0/1 overrides that default."""
    if enabled is None:
        env = os.environ.get("NOVELLA_PROGRESS")
        enabled = env == "1" if env in ("0", "1") else sys.stderr.isatty() and total >= PROGRESS_MIN_WORDS
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, desc=desc, unit="inst", unit_scale=True, leave=False, mininterval=0.25) as bar:
        yield bar


def _config_fields(d: dict) -> dict:
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in d.items()}


def default_config():
    return load_config()


def _scaled_symbol(p: list) -> tuple[int, int] | None:
    """(symbol index, c) of a postfix size `c * s<k>` (either order, c > 1 a constant), else None."""
    if len(p) != 3 or p[2] != "*":
        return None
    a, b = p[:2] if isinstance(p[1], int) else p[1::-1]
    if isinstance(a, str) and a.startswith("s") and isinstance(b, int) and b > 1:
        return int(a[1:]), b
    return None
