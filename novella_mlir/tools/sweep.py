"""Sweeps: models x lengths x configs on the simulator, as one table (CSV and markdown) and plots.

    novella sweep mypkg.models:build --example-shape 1,16,384 --lengths 1,17,500 --configs edge,default,large

A *job* is one model compiled for one config (lengths symbolic, once) and run
at every length; each run is checked against PyTorch eager and reported
against the compulsory roofline max(MACs / MACs-per-cycle, (weights + inputs +
outputs) bytes / DRAM bytes-per-cycle), with the bytes it moved beside it.

The engine is Ray (`pip install 'novella-mlir[sweep]'`): a local Ray instance
by default, the cluster at `address` when given (novella-mlir must be
installed on its nodes; `working_dir` ships the user's model modules). Without
Ray, or with `in_process=True` (CI), the tasks run one after another in this
process. `run_tasks` is the engine for any picklable function, so the cost
model's validation (bench/costmodel.py) runs on it too.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[2] / "simulator" / "configs"

COLUMNS = (
    "model", "config", "T", "ok", "max_err", "cycles", "roof", "cyc/roof", "bound", "compulsory_B", "moved_B",
    "cyc/moved", "mac_util", "words", "compile_s", "sim_s", "error",
)  # fmt: skip


class SweepError(Exception):
    """A bad sweep request (unknown config, Ray missing for a cluster): printed as a one-line error."""


def ray_available() -> bool:
    return importlib.util.find_spec("ray") is not None


def config_file(name: str) -> str | None:
    """A shipped config name (`edge`, `default`, `large`) or a TOML path -> the path (None: the default)."""
    if name == "default":
        return None
    shipped = CONFIG_DIR / f"{name}.toml"
    if shipped.exists():
        return str(shipped)
    if Path(name).is_file():
        return str(Path(name).resolve())
    names = ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.toml")))
    raise SweepError(f"config '{name}': neither a shipped config ({names}) nor a TOML file")


# ------------------------------------------------------------------ the engine


def run_tasks(
    fn: Callable,
    items: Iterable,
    *,
    address: str | None = None,
    in_process: bool = False,
    working_dir: str | None = None,
    num_cpus: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> list:
    """[fn(item) for item in items], in order, as Ray tasks (or in this process, see the module docstring).

    `fn` must be importable by name (a module-level function) and its items and results picklable."""
    items = list(items)
    if in_process or not items:
        return _in_process(fn, items, progress)
    if not ray_available():
        if address:
            raise SweepError("--address needs Ray: pip install 'novella-mlir[sweep]' (or run with --in-process)")
        print("novella sweep: Ray is not installed; running in-process", file=sys.stderr)
        return _in_process(fn, items, progress)
    return _on_ray(fn, items, address, working_dir, num_cpus, progress)


def _in_process(fn, items, progress) -> list:
    out = []
    for i, item in enumerate(items):
        out.append(fn(item))
        if progress:
            progress(i + 1, len(items))
    return out


def _on_ray(fn, items, address, working_dir, num_cpus, progress) -> list:
    import ray

    started = not ray.is_initialized()
    if started:
        env = {"working_dir": working_dir} if working_dir else {}
        if not address:  # local workers import this checkout the way the driver does
            env["env_vars"] = {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p and Path(p).is_dir())}
        ray.init(
            address=address, num_cpus=None if address else num_cpus, runtime_env=env or None,
            include_dashboard=False, logging_level="ERROR", log_to_driver=False,
        )  # fmt: skip
    try:
        task = ray.remote(num_cpus=1)(fn)
        refs = [task.remote(item) for item in items]
        pending, done = list(refs), 0
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            done += len(ready)
            if progress:
                progress(done, len(items))
        return ray.get(refs)
    finally:
        if started:
            ray.shutdown()


# ------------------------------------------------------------------ one job: compile once, run each length


@dataclass(frozen=True)
class ModelSpec:
    """What `novella compile` takes: MODULE:FACTORY (or file.py:FACTORY), example input shapes, the dynamic dim."""

    target: str
    example_shapes: tuple[tuple[int, ...], ...]
    dynamic_dim: int = 1
    min_len: int = 1
    max_len: int = 2048

    @property
    def name(self) -> str:
        module, _, factory = self.target.rpartition(":")
        return f"{Path(module).stem}:{factory}" if module.endswith(".py") else self.target


@dataclass(frozen=True)
class Job:
    model: ModelSpec
    config: str
    lengths: tuple[int, ...]
    sys_path: tuple[str, ...] = ()  # where the driver found the model's module


def jobs(models, configs, lengths) -> list[Job]:
    for c in configs:
        config_file(c)
    bad = [t for t in lengths for m in models if not m.min_len <= t <= m.max_len]
    if bad:
        raise SweepError(f"--lengths {bad[0]} is outside [min-len, max-len] of a model; raise --max-len")
    cwd = (os.getcwd(),)
    return [Job(m, c, tuple(lengths), cwd) for m in models for c in configs]


def run_job(job: Job) -> list[dict]:
    """One row per length; a failure (compile or run) is a row with `error` set, never an exception."""
    for p in job.sys_path:
        if p not in sys.path and Path(p).is_dir():
            sys.path.insert(0, p)
    base = {"model": job.model.name, "config": job.config}
    try:
        model, npu, compile_s = _compile(job)
    except Exception as e:  # reported in the table, the sweep goes on
        return [{**base, "T": t, "ok": False, "error": _message(e, "compile")} for t in job.lengths]
    rows = []
    for t in job.lengths:
        try:
            rows.append({**base, "T": t, **measure(model, npu, job.model, t), "compile_s": round(compile_s, 2)})
        except Exception as e:
            rows.append({**base, "T": t, "ok": False, "error": _message(e, f"run at T={t}")})
    return rows


def _message(e: Exception, what: str) -> str:
    if os.environ.get("NOVELLA_DEBUG"):
        traceback.print_exc()
    return f"{what}: {type(e).__name__}: {e}".replace("\n", " ")


def _compile(job: Job):
    import torch

    from simulator import load_config

    from .. import compile_torch
    from .cli import load_factory

    m = job.model
    model = load_factory(m.target)()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"'{m.target}' returned {type(model).__name__}, expected a torch.nn.Module")
    model.eval()
    examples = [torch.randn(*s) for s in m.example_shapes]
    t0 = time.perf_counter()
    npu = compile_torch(
        model, *examples, dynamic_dim=m.dynamic_dim, min_len=m.min_len, max_len=m.max_len,
        config=load_config(config_file(job.config)),
    )  # fmt: skip
    return model, npu, time.perf_counter() - t0


def _inputs(spec: ModelSpec, length: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed + length)
    shapes = [list(s) for s in spec.example_shapes]
    for s in shapes:
        s[spec.dynamic_dim] = length
    return [torch.randn(*s, generator=g) for s in shapes]


def measure(model, npu, spec: ModelSpec, length: int) -> dict:
    """Cycles against the compulsory roofline, the moved bytes beside it, and the check against eager."""
    import torch

    xs = _inputs(spec, length)
    t0 = time.perf_counter()
    y = npu(*xs, check_hazards=False)
    sim_s = time.perf_counter() - t0
    with torch.no_grad():
        ref = model(*xs)
    ys, refs = (y, ref) if isinstance(y, tuple) else ((y,), (ref,))
    err = max(float((a - b).abs().max()) if a.numel() else 0.0 for a, b in zip(ys, refs))
    ok = all(torch.allclose(a, b, rtol=1e-4, atol=1e-4) for a, b in zip(ys, refs))
    s, cfg = npu.last_run.stats, npu.config
    compulsory = npu.artifact.weight_nbytes + sum(x.numel() * 4 for x in xs) + sum(a.numel() * 4 for a in ys)
    return {**roofline(s, cfg, compulsory), "ok": ok, "max_err": err, "sim_s": round(sim_s, 2), "error": ""}


def roofline(stats, cfg, compulsory: int) -> dict:
    moved = stats.dma_bytes_loaded + stats.dma_bytes_stored
    compute = stats.macs / cfg.macs_per_cycle
    roof = max(compute, compulsory / cfg.dram_bytes_per_cycle)
    roof_moved = max(compute, moved / cfg.dram_bytes_per_cycle)
    return {
        "cycles": stats.cycles, "roof": round(roof), "cyc/roof": round(stats.cycles / roof, 3),
        "bound": "compute" if compute >= compulsory / cfg.dram_bytes_per_cycle else "memory",
        "compulsory_B": compulsory, "moved_B": moved, "cyc/moved": round(stats.cycles / roof_moved, 3),
        "mac_util": round(stats.mac_utilization, 4), "words": stats.instructions,
    }  # fmt: skip


def sweep(job_list: list[Job], **engine) -> list[dict]:
    """Every job on the engine (`run_tasks` options), the rows in job order."""
    return [row for rows in run_tasks(run_job, job_list, **engine) for row in rows]


# ------------------------------------------------------------------ outputs


def _cell(v) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def markdown(rows: list[dict], columns=COLUMNS) -> str:
    cols = [c for c in columns if any(r.get(c) not in (None, "") for r in rows)]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def write_table(rows: list[dict], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    path_csv, path_md = out_dir / "sweep.csv", out_dir / "sweep.md"
    with path_csv.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    path_md.write_text(markdown(rows) + "\n")
    return [path_csv, path_md]


def write_plots(rows: list[dict], out_dir: Path) -> list[Path]:
    """Per model: cycles / compulsory roofline vs length, one line per config (PNG). [] without matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        print("novella sweep: matplotlib is not installed; no plots (pip install matplotlib)", file=sys.stderr)
        return []
    from .plots import series_vs_length

    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        series = {}
        for r in rows:
            if r["model"] == model and not r.get("error"):
                series.setdefault(r["config"], []).append((r["T"], r["cyc/roof"]))
        if not series:
            continue
        fig = None
        for config, points in series.items():
            ts, ratios = zip(*sorted(points))
            ax = fig.axes[0] if fig else None
            fig = series_vs_length(list(ts), {config: list(ratios)}, ylabel="cycles / compulsory roofline", ax=ax,
                                   title=f"{model}: cycles / compulsory roofline")  # fmt: skip
        path = out_dir / f"{_safe(model)}.png"
        fig.savefig(path)
        out.append(path)
    return out


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
