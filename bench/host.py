"""Host speed, side by side in one run: simulator vs torch eager, JIT vs NPU time, compile vs torch.export.

    .venv/bin/python bench/host.py [--positions 750,751,1500] [--sim-models encoder,body] [--repeat 3]
                                   [--jit-models mlp,mlp384,layer,encoder] [--jit-lengths 1,2,3,...]
                                   [--skip-compile] [--skip-sim] [--skip-jit]
    .venv/bin/python bench/host.py --summary     # the README's table of figures against goals (bench/tables.py host)

Every figure is the median of `--repeat` runs, measured in this process
(fresh-process figures: in new processes), so ratios are comparable even on a
shared host; CPU-time ratios (what the load of others adds least to) are beside
the wall-clock ones. Eager torch runs with `torch.set_num_threads(1)`, as the
simulator runs BLAS on one thread.

* simulator: `npu(x)` host time for the whisper-tiny encoder (mel frames 2T) and
  its body (the 4 layers and final norm on [1, T, 384]) at T positions, against
  eager torch: a new length (the JIT builds the program, a new simulator prepares
  it; `_forget`), the same length repeated (hazards on, as shipped) and hazards
  off, interleaved run by run; and the very first call at that length in the
  process (numba's kernels loaded, DRAM grown);
* JIT: instantiation of a length the JIT has not cached (median of at least 21), against the
  simulated NPU time of the same program (cycles / clock);
* compile: the first `compile_torch` of the encoder in a fresh process against
  `torch.export` alone in a fresh process (each after `import torch` and
  building the model, its own imports timed; at least 5 pairs, with the range
  of their ratios and the full garbage collections each call ran); then, in this process,
  `compile_torch` against `torch.export` alone, and a second compile of the
  same model in a new process (persistent cache). The first call of each in
  the process (torch's setup; novella's imports) is timed apart. Each timed
  call then starts after `gc.collect()` (untimed): the young-generation
  collections a call causes are in its time, but a full collection owed to
  the garbage of earlier runs (~0.3 s with torch loaded) is not, in either.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from models import ROOT, SPECS, compile_model

from novella_mlir.frontend import importer
from novella_mlir.runtime.jit import Jit

MAX_POSITIONS = 1500
# every length 1..64 (where fixed per-call costs matter), then both sides of each tile boundary up to max
JIT_LENGTHS = ",".join(
    map(str, [*range(1, 65), 65, 96, 127, 128, 129, 255, 256, 257, 511, 512, 513, 750, 1023, 1024, 1025, 1499, 1500])
)


def median_times(fn, repeat: int) -> tuple[float, float]:
    """Medians of (wall, CPU) seconds over `repeat` calls (CPU time: what the load of others does not add)."""
    runs = [_timed(fn) for _ in range(repeat)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def _timed(fn) -> tuple[float, float]:
    """(wall, CPU) seconds of one call."""
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def _forget(npu) -> None:
    """Makes the next call take the path of a new length, as if the previous call had had another one: no
    program in the JIT cache, and the kept simulator marked as of another DRAM size, so the call makes a
    new simulator (on the kept one's memories, `Executor._simulator`) and prepares the program again. What
    stays is what a new length also finds: the artifact's JIT tables and numba's loaded kernels."""
    npu.executor.jit.cache.clear()
    sim = getattr(npu.executor._local, "sim", None)
    if sim is not None:
        sim.dram.size = -1  # this simulator is not used again


def simulator_rows(positions, repeat: int, models=("encoder",)) -> list[str]:
    """Per model and length, interleaved run by run (so load changes hit all alike): eager; a new length
    (`_forget` first), hazards on; the same length again, hazards on; and hazards off."""
    lines = [
        "| model | T (positions) | instructions | eager, 1 thread | new length, hazards on | repeated, hazards on "
        "| new / repeated | new / eager | repeated / eager | hazards off / eager | CPU-time ratios new/rep, new/eager, "
        "rep/eager, off/eager | first call in the process | NPU time (1 GHz) | load |",
        "|" + "---|" * 14,
    ]
    for name in models:
        lines += [_simulator_row(r) for r in simulator_runs(name, positions, repeat)]
    return lines


def simulator_runs(name: str, positions, repeat: int) -> list[dict]:
    """Per length: medians of wall (`w`) and CPU (`c`) seconds of eager, new, rep(eated) and off (hazards
    off), the first call at that length in the process, the run's stats and the load average after."""
    torch.set_num_threads(1)
    spec, module, npu = compile_model(name, MAX_POSITIONS)
    return [_simulator_runs(name, spec, module, npu, t, repeat) for t in positions]


def _simulator_runs(name, spec, module, npu, t: int, repeat: int) -> dict:
    x = spec.example(t)
    arr = x.numpy()

    def call(check_hazards=True):
        npu.executor.run([arr], check_hazards=check_hazards)

    _forget(npu)
    first = _timed(call)[0]
    runs = {"eager": [], "new": [], "rep": [], "off": []}
    for _ in range(repeat):
        with torch.no_grad():
            runs["eager"].append(_timed(lambda: module(x)))
        _forget(npu)
        runs["new"].append(_timed(call))
        runs["rep"].append(_timed(call))
        runs["off"].append(_timed(lambda: call(False)))
    w = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
    c = {k: statistics.median(r[1] for r in v) for k, v in runs.items()}
    stats = npu.last_run.stats
    npu_ms = stats.cycles / (npu.config.clock_ghz * 1e9) * 1e3
    return dict(name=name, t=t, w=w, c=c, first=first, stats=stats, npu_ms=npu_ms, load=os.getloadavg()[0])


def _simulator_row(r: dict) -> str:
    w, c = r["w"], r["c"]
    cpu = ", ".join(f"{a:.2f}" for a in (c["new"] / c["rep"], c["new"] / c["eager"], c["rep"] / c["eager"]))
    return (
        f"| {r['name']} | {r['t']} | {r['stats'].instructions:,} | {w['eager']:.3f} s | {w['new']:.3f} s "
        f"| {w['rep']:.3f} s | **{w['new'] / w['rep']:.2f}** | **{w['new'] / w['eager']:.2f}x** "
        f"| {w['rep'] / w['eager']:.2f}x | {w['off'] / w['eager']:.2f}x | {cpu}, {c['off'] / c['eager']:.2f} "
        f"| {r['first']:.3f} s | {r['npu_ms']:.1f} ms | {r['load']:.1f} |"
    )


def jit_rows(models, lengths, repeat: int) -> list[str]:
    lines = [
        "| model | T | words | JIT, new length | NPU time (1 GHz) | JIT / NPU | CPU time / NPU |",
        "|" + "---|" * 7,
    ]
    worst, worst_cpu = {}, {}
    for name in models:
        spec, _, npu = compile_model(name, MAX_POSITIONS)
        lo, hi = spec.bounds(MAX_POSITIONS)
        for t in lengths:
            x = spec.example(t).numpy()
            if not lo <= x.shape[spec.dynamic_dim] <= hi:
                continue
            syms = npu.executor.bind([x])
            jit = Jit(npu.artifact, cache_size=0)
            jit.instantiate([s + 1 if s < hi else s - 1 for s in syms])
            new, cpu = median_times(lambda jit=jit, syms=syms: jit.instantiate(syms), max(repeat, 21))
            npu.executor.run([x], check_hazards=False)
            npu_s = npu.last_run.stats.cycles / (npu.config.clock_ghz * 1e9)
            worst[name] = max(worst.get(name, (0.0, 0)), (new / npu_s, t))
            worst_cpu[name] = max(worst_cpu.get(name, (0.0, 0)), (cpu / npu_s, t))
            lines.append(
                f"| {name} | {t} | {npu.last_run.program.n_words:,} | {new * 1e3:.3f} ms | {npu_s * 1e3:.3f} ms "
                f"| {new / npu_s:.3f} | {cpu / npu_s:.3f} |"
            )
    lines.append("")
    lines.append("worst JIT / NPU per model (at T): " + ", ".join(f"{k} {v:.3f} ({t})" for k, (v, t) in worst.items()))
    lines.append("the same in CPU time: " + ", ".join(f"{k} {v:.3f} ({t})" for k, (v, t) in worst_cpu.items()))
    lines.append(f"load average after: {os.getloadavg()[0]:.2f}")
    return lines


_CACHED = """
import sys, time
t0 = time.perf_counter()
sys.path.insert(0, {bench!r})
from models import SPECS
from novella_mlir import compile_torch
print("import", time.perf_counter() - t0)
spec = SPECS["encoder"]
module = spec.build({maxp})
lo, hi = spec.bounds({maxp})
t0 = time.perf_counter()
compile_torch(module, spec.example(16), dynamic_dim=spec.dynamic_dim, min_len=lo, max_len=hi)
print(time.perf_counter() - t0)
"""


def _cached_compile(repeat: int) -> tuple[float, float, float] | None:
    """(first compile into an empty cache dir, median of later compiles, median import time of novella_mlir),
    each in a new process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code = _CACHED.format(bench=str(ROOT / "bench"), maxp=MAX_POSITIONS)
    with tempfile.TemporaryDirectory() as cache:
        env["NOVELLA_CACHE_DIR"], env["NOVELLA_CACHE"] = cache, "1"
        times, imports = [], []
        for _ in range(repeat + 1):
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            if out.returncode:
                print(out.stderr[-2000:], file=sys.stderr)
                return None
            times.append(float(out.stdout.split()[-1]))
            imports.append(float(out.stdout.split()[1]))
    return times[0], statistics.median(times[1:]), statistics.median(imports)


_FRESH = """
import gc, sys, time
sys.path.insert(0, {bench!r})
import torch
from models import SPECS
spec = SPECS["encoder"]
module = spec.build({maxp})
lo, hi = spec.bounds({maxp})
x = spec.example(16)
full, t0 = [0, 0.0], [0.0]
def collected(phase, info):
    if info["generation"] == 2:
        if phase == "start":
            t0[0] = time.process_time()
        else:
            full[0], full[1] = full[0] + 1, full[1] + time.process_time() - t0[0]
gc.callbacks.append(collected)
w, c = time.perf_counter(), time.process_time()
if {novella}:
    from novella_mlir import compile_torch
    compile_torch(module, x, dynamic_dim=spec.dynamic_dim, min_len=lo, max_len=hi)
else:
    import torch.export
    from torch.fx.experimental import _config
    with _config.patch(backed_size_oblivious=True):  # as novella's export (a strided conv's sizes)
        dim = torch.export.Dim.DYNAMIC(min=lo, max=hi)
        torch.export.export(module, (x,), dynamic_shapes=({{spec.dynamic_dim: dim}},), strict=False)
w, c = time.perf_counter() - w, time.process_time() - c
print(w, c, full[0], full[1], "numba" in sys.modules)
"""


def fresh_runs(repeat: int) -> dict | None:
    """The first call in a fresh process (after `import torch` and building the model; the imports the call
    needs are in its time): `torch.export` alone and `compile_torch` (no compile cache), processes
    interleaved, `repeat` pairs: per pair (wall, CPU, full collections, their CPU seconds) of each, the load
    average after it. Python writes and reads its bytecode caches as by default (this environment may set
    PYTHONDONTWRITEBYTECODE, which would recompile every novella module in each process, ~0.1 s CPU); one
    untimed pair first, so both caches (bytecode, numba's) are as a second process finds them."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), NOVELLA_CACHE="0")
    no_bytecode = env.pop("PYTHONDONTWRITEBYTECODE", None)
    pairs, loads, numba = [], [], False
    for k in range(repeat + 1):
        pair = []
        for novella in (False, True):
            code = _FRESH.format(bench=str(ROOT / "bench"), maxp=MAX_POSITIONS, novella=novella)
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
            if out.returncode:
                print(out.stderr[-2000:], file=sys.stderr)
                return None
            wall, cpu, n_full, full_s, loaded = out.stdout.split()[-5:]
            pair.append((float(wall), float(cpu), int(n_full), float(full_s)))
            numba |= novella and loaded == "True"
        if k:
            pairs.append(pair)
            loads.append(os.getloadavg()[0])
    return {"pairs": pairs, "loads": loads, "numba": numba, "no_bytecode": no_bytecode}


def fresh_ratios(runs: dict) -> dict:
    """Medians and ranges over the pairs: wall and CPU of each call, and the per-pair ratios."""
    pairs = runs["pairs"]

    def med(i, j):
        return statistics.median(p[i][j] for p in pairs)

    ratio = {j: sorted(p[1][j] / p[0][j] for p in pairs) for j in (0, 1)}
    return {
        "export": (med(0, 0), med(0, 1)), "compile": (med(1, 0), med(1, 1)),
        "wall": (statistics.median(ratio[0]), ratio[0][0], ratio[0][-1]),
        "cpu": (statistics.median(ratio[1]), ratio[1][0], ratio[1][-1]),
        "full": tuple((statistics.median(p[i][2] for p in pairs), med(i, 3)) for i in (0, 1)),
        "loads": (min(runs["loads"]), max(runs["loads"])), "n": len(pairs),
    }  # fmt: skip


def fresh_rows(repeat: int) -> list[str]:
    runs = fresh_runs(repeat)
    if runs is None:
        return ["fresh-process compile failed (see stderr)"]
    r = fresh_ratios(runs)
    (ew, ec), (cw, cc) = r["export"], r["compile"]
    (en, es), (cn, cs) = r["full"]
    return [
        "| first call in a fresh process | wall | CPU | / torch.export, wall (range) | / torch.export, CPU (range) "
        "| full GC collections in the call (CPU) |",
        "|---|---|---|---|---|---|",
        f"| torch.export alone | {ew:.2f} s | {ec:.2f} s | 1.00 | 1.00 | {en:g} ({es:.2f} s) |",
        f"| compile_torch (with `import novella_mlir`) | {cw:.2f} s | {cc:.2f} s | **{_range(r['wall'])}** "
        f"| {_range(r['cpu'])} | {cn:g} ({cs:.2f} s) |",
        f"\nmedians of {r['n']} pairs; numba loaded by the compile: {'yes' if runs['numba'] else 'no'}; "
        f"PYTHONDONTWRITEBYTECODE here: {runs['no_bytecode'] or 'unset'} (unset in these processes); load average "
        f"{r['loads'][0]:.1f}-{r['loads'][1]:.1f}",
    ]


def _range(v) -> str:
    """`median (lo-hi)` of a ratio."""
    return f"{v[0]:.2f} ({v[1]:.2f}-{v[2]:.2f})"


def compile_rows(repeat: int) -> list[str]:
    spec = SPECS["encoder"]
    module = spec.build(MAX_POSITIONS)
    lo, hi = spec.bounds(MAX_POSITIONS)
    example = (spec.example(16),)
    from novella_mlir import compile_torch

    kw = dict(dynamic_dim=spec.dynamic_dim, min_len=lo, max_len=hi)
    warm = _timed(lambda: importer.export(module, example, spec.dynamic_dim, lo, hi))[0]  # torch's first-call setup
    warm_compile = _timed(lambda: compile_torch(module, *example, **kw))[0]  # imports, numba's cached kernels
    runs = {"export": [], "compile": []}
    for _ in range(repeat):  # interleaved, so load changes hit both alike
        gc.collect()  # each run starts from a collected heap: no full collection owed by earlier runs' garbage
        runs["export"].append(_timed(lambda: importer.export(module, example, spec.dynamic_dim, lo, hi)))
        gc.collect()
        runs["compile"].append(_timed(lambda: compile_torch(module, *example, **kw)))
    (export, export_cpu), (full, full_cpu) = (
        (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for v in runs.values()
    )
    lines = [
        "| what | time | / torch.export | CPU time / torch.export's |",
        "|---|---|---|---|",
        f"| torch.export alone (first call in the process: {warm:.2f} s) | {export:.2f} s | 1.00 | 1.00 |",
        f"| compile_torch (no cache; first call in the process: {warm_compile:.2f} s) | {full:.2f} s "
        f"| {full / export:.2f} | {full_cpu / export_cpu:.2f} |",
    ]
    cached = _cached_compile(repeat)
    if cached is None:
        lines.append("| compile_torch, new process, cached | failed (see stderr) | - | - |")
    else:
        lines.append(f"| compile_torch, new process, cold cache | {cached[0]:.2f} s | {cached[0] / export:.2f} | - |")
        lines.append(f"| compile_torch, new process, cached | {cached[1]:.3f} s | {cached[1] / export:.3f} | - |")
        lines.append(
            f"| (import of novella_mlir + torch in that process, not in the figure) | {cached[2]:.2f} s | - | - |"
        )
    lines.append(f"\nload average after: {os.getloadavg()[0]:.2f}")
    return lines


def summary(positions=(750, 751, 1500), repeat: int = 3, fresh_repeat: int = 5, hit_repeat: int = 3) -> list[str]:
    """The README's host-speed table: each figure against its goal, wall-clock ratios with the CPU-time
    ones beside them, every figure measured in this one run (`bench/tables.py host`)."""
    import cache_hit

    ts = ", ".join(map(str, positions))
    sims = {name: simulator_runs(name, positions, repeat) for name in ("encoder", "body")}

    def ratios(rows, a, b):
        return ", ".join(f"{r['w'][a] / r['w'][b]:.2f}x" for r in rows), ", ".join(
            f"{r['c'][a] / r['c'][b]:.2f}x" for r in rows
        )

    runs = fresh_runs(fresh_repeat)
    if runs is None:
        raise SystemExit("the fresh-process compile failed (see stderr)")
    f = fresh_ratios(runs)
    (en, es), (cn, cs) = f["full"]
    hits = {name: cache_hit.measure(name, hit_repeat) for name in ("mlp", "encoder")}
    loads = [r["load"] for rows in sims.values() for r in rows] + list(f["loads"])
    lines = [
        f"Medians of {repeat} runs (the compile: of {f['n']} fresh-process pairs, with the range of their ratios), "
        f"side by side in one run on the shared host at load {min(loads):.0f}-{max(loads):.0f}; CPU-time ratios "
        "in brackets; eager is single-threaded PyTorch; hazard checking on, as shipped.",
        "",
        "| figure | goal | now |",
        "|---|---|---|",
    ]
    for name, what in (("encoder", "encoder"), ("body", "encoder body")):
        wall, cpu = ratios(sims[name], "new", "rep")
        lines.append(f"| {what}, a new length / the same length repeated, T={ts} | <= 1.3x | {wall} ({cpu}) |")
        if name == "encoder":
            wall, cpu = ratios(sims[name], "new", "eager")
            lines.append(f"| encoder, a new length / eager, T={ts} | <= 3x | {wall} ({cpu}) |")
    lines.append(
        f"| first `compile_torch` of the encoder in a fresh process / `torch.export` alone | <= 1.5x "
        f"| {f['wall'][0]:.2f}x, range {f['wall'][1]:.2f}x-{f['wall'][2]:.2f}x ({f['cpu'][0]:.2f}x, range "
        f"{f['cpu'][1]:.2f}x-{f['cpu'][2]:.2f}x); full GC collections in the call: export {en:g}, "
        f"compile {cn:g} ({cs:.2f} s CPU) |"
    )
    hit = ", ".join(f"{r['hit'][0] / r['export'][0]:.2f}x ({r['hit'][2] / r['export'][2]:.2f}x) ({name})"
                    for name, r in hits.items())  # fmt: skip
    lines.append(
        f"| a compile-cache hit in a new process / `torch.export` alone (`bench/cache_hit.py`) | - | {hit}: a hit "
        "replays the export and loads |"
    )
    return lines


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--positions", default="750,751,1500", help="lengths (positions) for the simulator table")
    p.add_argument("--sim-models", default="encoder,body", help="models of the simulator table (bench/models.py)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--jit-models", default="mlp,mlp384,layer,encoder")
    p.add_argument("--jit-lengths", default=JIT_LENGTHS)
    p.add_argument("--skip-sim", action="store_true")
    p.add_argument("--skip-jit", action="store_true")
    p.add_argument("--skip-compile", action="store_true")
    p.add_argument("--summary", action="store_true", help="only the README's table of figures against goals")
    args = p.parse_args(argv)
    os.environ["NOVELLA_CACHE"] = "0"  # every compile in this process is a real one
    if args.summary:
        print("\n".join(summary([int(v) for v in args.positions.split(",")], args.repeat)))
        return
    print(f"host: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; median of {args.repeat} runs")
    sections = []
    if not args.skip_sim:
        sections.append(
            (
                "simulator vs torch eager (whisper-tiny encoder, and its body: the 4 layers and final norm)",
                lambda p, r: simulator_rows(p, r, args.sim_models.split(",")),
                [int(v) for v in args.positions.split(",")],
            )
        )
    if not args.skip_jit:
        lengths = [int(v) for v in args.jit_lengths.split(",")]
        sections.append(
            ("JIT new length vs NPU time", lambda r: jit_rows(args.jit_models.split(","), lengths, r), None)
        )
    if not args.skip_compile:
        sections.append(
            ("first compile in a fresh process vs torch.export (encoder)", lambda r: fresh_rows(max(r, 5)), None)
        )
        sections.append(("compile vs torch.export (encoder)", compile_rows, None))
    for title, fn, arg in sections:
        print(f"\n## {title}\n", flush=True)
        lines = fn(arg, args.repeat) if arg is not None else fn(args.repeat)
        print("\n".join(lines), flush=True)


if __name__ == "__main__":
    main()
