"""Simulated cycles against the compulsory roofline, with the moved bytes beside it.

    .venv/bin/python bench/cycles.py                       # the goal figures of issue 10, side by side
    .venv/bin/python bench/cycles.py --model mlp --lengths 1,64,65,500,2048 [--config hw.toml]
    .venv/bin/python bench/cycles.py --curve [--models body --configs default]   # issue 22's curve
    .venv/bin/python bench/cycles.py --attention [--configs default]              # attention bytes / compulsory
    .venv/bin/python bench/cycles.py --per-op --model body --lengths 64,129 [--config large]  # where the time goes

`--curve` runs the whisper-tiny encoder body (compiled once over [1, 1500]) and the MLP 384-1536-384
(once over [1, 2048]) at T = 1, 2, 16, ..., 1500 (and 2048 for the MLP) on the edge, default and large
configs in one run: cycles over the compulsory roofline, the moved bytes over the compulsory ones, and
each unit's busy fraction (load / store queues, matrix and vector units, and `dram`, the share of the
run the DRAM channel carries data), then per model and config the worst ratio, max / min over the
curve and the goal of issue 22.

`matrix` and `vector` are the two compute units' busy cycles: `cycles` below their sum is their overlap.

The compulsory roofline of a run is max(model MACs / MACs-per-cycle, compulsory bytes /
DRAM bytes-per-cycle), where the compulsory bytes are the weights, the input and the
output, each moved once; the model MACs are torch's FlopCounterMode count of the eager
module, so MACs a kernel adds (the ones column of fused attention) are not in it, and
`MAC util` is model MACs per cycle over the array's. `cyc/roof` divides by it. Beside it: the bytes the program
actually moves, their roofline max(MACs / MACs-per-cycle, moved bytes / bandwidth) and
the ratio to that (which hides traffic the schedule adds, so it is never the headline).
Every row is measured in this run; host seconds are JIT + simulation.

`--per-op` splits one run by op (the program's tile spans, equal ops of one macro template summed, e.g.
the four layers' q projections): each op's span (its first instruction's start, or the op before's end
where its early loads ran under that op, to its last's end: the spans do not overlap), the
bytes it loads and stores, the DRAM data cycles of those bytes and the span beyond them, and its units'
busy cycles; then what the spans leave uncovered (the barriers between ops).
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import models  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from novella_mlir import compile_torch  # noqa: E402
from simulator import isa, load_config  # noqa: E402

CONFIGS = ROOT / "simulator" / "configs"
# (workload, config, T, goal ratio); T counts positions (the encoder body's input rows)
GOALS = (
    ("mlp384", "default", 2048, 1.15),
    ("mlp384", "default", 1, 1.5),
    ("body", "default", 1500, 1.3),
    ("body", "default", 1, 1.5),
    ("mlp384", "edge", 2048, 1.5),
    ("mlp384", "large", 2048, 1.5),
    ("body", "edge", 1500, 1.5),
    ("body", "large", 1500, 1.5),
)


CURVE = (1, 2, 16, 64, 128, 256, 500, 1000, 1500)
CURVE_MODELS = {"body": (CURVE, 1500), "mlp384": ((*CURVE, 2048), 2048)}


def curve_goal(workload: str, config: str) -> str:
    if config != "default":
        return "<= 1.30x"
    return "<= 1.15x, max/min <= 1.15" if workload == "body" else "<= 1.15x, <= 1.05x at T=2048"


def curve_met(workload: str, config: str, rows: list[dict]) -> bool:
    ratios = [r["ratio"] for r in rows]
    if config != "default":
        return max(ratios) <= 1.3
    if workload == "body":
        return max(ratios) <= 1.15 and max(ratios) / min(ratios) <= 1.15
    return max(ratios) <= 1.15 and all(r["ratio"] <= 1.05 for r in rows if r["T"] == 2048)


CURVE_HEAD = (
    f"{'model':>6} {'config':>7} {'T':>5} {'cycles':>11} {'roof':>10} {'cyc/roof':>8} {'bound':>7} "
    f"{'compul B':>10} {'moved B':>11} {'mov/comp':>8} {'load':>5} {'matrix':>6} {'vector':>6} {'store':>5} {'dram':>5}"
)


def curve(workloads, configs) -> dict:
    """Issue 22's curve, every row measured in this run; returns {(workload, config): rows}."""
    print(CURVE_HEAD)
    print("-" * len(CURVE_HEAD))
    out = {}
    for workload in workloads:
        lengths, max_len = CURVE_MODELS[workload]
        for cfg in configs:
            if config_of(cfg) is None:
                continue
            rows = out[(workload, cfg)] = []
            for t in lengths:
                r = measure(workload, cfg, t, max_len)
                f = r["fraction"]
                print(
                    f"{workload:>6} {cfg:>7} {t:>5} {r['cycles']:>11} {int(r['roof']):>10} {r['ratio']:>8.3f} "
                    f"{r['bound']:>7} {r['compulsory']:>10} {r['moved']:>11} {r['moved'] / r['compulsory']:>8.2f} "
                    f"{f['load']:>5.0%} {f['matrix']:>6.0%} {f['vector']:>6.0%} {f['store']:>5.0%} {f['dram']:>5.0%}",
                    flush=True,
                )
                rows.append(r)
    print()
    head = f"{'model':>6} {'config':>7} {'max cyc/roof':>12} {'at T':>5} {'max/min':>7}  {'goal':<28} met"
    print(head)
    print("-" * len(head))
    for (workload, cfg), rows in out.items():
        worst = max(rows, key=lambda r: r["ratio"])
        spread = worst["ratio"] / min(r["ratio"] for r in rows)
        met = "yes" if curve_met(workload, cfg, rows) else "no"
        print(
            f"{workload:>6} {cfg:>7} {worst['ratio']:>12.3f} {worst['T']:>5} {spread:>7.3f}  {curve_goal(workload, cfg):<28} {met}"
        )
    return out


ATTN_LENGTHS = (64, 128, 256, 500, 1000)


def attention_traffic(configs, lengths=ATTN_LENGTHS) -> dict:
    """Issue 22 item 2: the fused attention's DMA bytes in the encoder body (compiled over [1, 1500]) over its
    compulsory bytes (q, k, v read once, the output written once: 4 T x 384 fp32 per layer), counted from the
    JIT's LOAD / STORE words (rows inside the tensor x cols), with the flash tiles of the program at T."""
    print(f"{'config':>7} {'T':>5} {'attn moved B':>12} {'compul B':>10} {'mov/comp':>8}  the program at T")
    out = {}
    for cfg in configs:
        if config_of(cfg) is None:
            continue
        spec, npu, _ = compiled("body", cfg, 1500)
        for t in lengths:
            prog = npu.jit.instantiate([spec.symbol(t)])
            moved = sum(_dma_bytes(prog.words[a:b]) for name, a, b in prog.spans if name.startswith("flash"))
            compulsory = 4 * 4 * t * 384 * sum(name.startswith("flash") for name, _, _ in prog.spans)
            out[(cfg, t)] = moved / compulsory
            print(f"{cfg:>7} {t:>5} {moved:>12} {compulsory:>10} {moved / compulsory:>8.2f}  {_flash_tiles(npu, t)}")
    return out


def _dma_bytes(words) -> int:
    total = 0
    for inst in isa.decode_program(words):
        f = inst.fields
        if inst.opcode in (isa.Opcode.LOAD, isa.Opcode.STORE):
            rows = f["row_start"] + np.arange(f["rows"]) * f["row_step"]
            total += int(((rows >= 0) & (rows < f["row_bound"])).sum()) * f["cols"] * 4
    return total


def _flash_tiles(npu, t: int) -> str:
    prog = npu.artifact.programs[npu.artifact.pick([t])]
    macro = prog.macros[next(t.macro for t in prog.tiles if t.name.startswith("flash"))]
    halves = any(i.opcode == "LOAD" and i.slot == {"sram_addr": 0} for i in macro.insts)
    ((lo, hi),) = prog.ranges
    return f"program [{lo}, {hi}]: q alternating {'yes' if halves else 'no'}"


def per_op(workload: str, config_name: str, length: int, max_len: int) -> list[dict]:
    """One traced run split by op (see the module docstring): a row per macro template, in program order."""
    spec, npu, _ = compiled(workload, config_name, max_len)
    _, run = npu.run(spec.example(length), trace=True, check_hazards=False)
    prog, cfg = run.program, npu.config
    tiles = npu.artifact.programs[npu.artifact.pick([spec.symbol(length)])].tiles
    macro_of = {t.name: t.macro for t in tiles}
    owner = np.full(len(prog.words), -1)
    for i, (_, a, b) in enumerate(prog.spans):
        owner[a:b] = i
    per_cycle = cfg.clock_ghz * 1000.0
    first, last = np.full(len(prog.spans), np.inf), np.zeros(len(prog.spans))
    busy = np.zeros((len(prog.spans), 4))
    dmas = []  # (start, end, op) of every LOAD's and STORE's data phase (it ends the transfer)
    data_cycles = _data_cycles(prog.words, cfg.dram_bytes_per_cycle)
    for ev in run.trace.events:
        i = owner[ev["args"]["index"]] if ev.get("ph") == "X" and "index" in ev.get("args", {}) else -1
        if i >= 0:
            start, end = ev["ts"] * per_cycle, (ev["ts"] + ev["dur"]) * per_cycle
            first[i], last[i] = min(first[i], start), max(last[i], end)
            busy[i, ev["tid"] - 1] += end - start
            data = data_cycles.get(ev["args"]["index"])
            if data is not None:
                dmas.append((end - data, end, i, ev["tid"] == 1))
    ends = np.maximum.accumulate(last)
    first = np.maximum(first, np.concatenate(([0.0], ends[:-1])))
    rows: dict = {}
    for i, (name, a, b) in enumerate(prog.spans):
        words = prog.words[a:b]
        loads = _dma_bytes([w for w, inst in zip(words, isa.decode_program(words)) if inst.opcode == isa.Opcode.LOAD])
        r = rows.setdefault(macro_of[name], dict(op=name, count=0, span=0.0, loaded=0, stored=0, busy=np.zeros(4)))
        r["count"] += 1
        r["span"] += max(last[i] - first[i], 0.0) if last[i] > 0 else 0.0
        r["loaded"] += loads
        r["stored"] += _dma_bytes(words) - loads
        r["busy"] += busy[i]
    out = list(rows.values())
    for r in out:
        r["data"] = (r["loaded"] + r["stored"]) / cfg.dram_bytes_per_cycle
    print(f"{workload} {config_name} T={length}: {run.stats.cycles} cycles")
    head = (f"{'op':>22} {'count':>5} {'span cyc':>10} {'share':>6} {'loaded B':>11} {'stored B':>10} {'data cyc':>10} "
            f"{'beyond':>9} {'load':>9} {'matrix':>9} {'vector':>9} {'store':>9}")  # fmt: skip
    print(head)
    print("-" * len(head))
    for r in out:
        print(
            f"{r['op'][:22]:>22} {r['count']:>5} {int(r['span']):>10} {r['span'] / run.stats.cycles:>6.1%} {r['loaded']:>11} "
            f"{r['stored']:>10} {int(r['data']):>10} {int(r['span'] - r['data']):>9} "
            + " ".join(f"{int(v):>9}" for v in r["busy"])
        )
    covered = sum(r["span"] for r in out)
    print(f"{'between ops':>22} {'':>5} {int(run.stats.cycles - covered):>10} {1 - covered / run.stats.cycles:>6.1%}")
    idle = _dram_idle(dmas)
    print("DRAM channel idle: " + ", ".join(f"{k} {int(v)} ({v / run.stats.cycles:.1%})" for k, v in idle.items()))
    return out


def _data_cycles(words, bytes_per_cycle) -> dict:
    """{word index: DRAM data cycles} of every LOAD and STORE (the rows inside the tensor, no burst rounding)."""
    out = {}
    for i, inst in enumerate(isa.decode_program(words)):
        if inst.opcode in (isa.Opcode.LOAD, isa.Opcode.STORE):
            out[i] = _dma_bytes([words[i]]) / bytes_per_cycle
    return out


def _dram_idle(dmas) -> dict:
    """Cycles in which the DRAM channel moves no data, from the first transfer (start, end, op, is_load) to
    the last: `at barriers`, in gaps whose neighbouring transfers belong to different ops; `op tails`, within an
    op after its last LOAD's data (what loading the next op's first tiles early could fill); `in ops`, the
    rest (an op's own pipeline)."""
    last_load = {}
    for _, e, i, load in dmas:
        if load:
            last_load[i] = max(last_load.get(i, 0.0), e)
    out = dict.fromkeys(("at barriers", "op tails", "in ops"), 0.0)
    end, op = None, None
    for s, e, i, _ in sorted(dmas):
        if end is not None and s > end:
            if i != op:
                out["at barriers"] += s - end
            else:
                tail = max(0.0, s - max(end, last_load.get(i, end)))
                out["op tails"] += tail
                out["in ops"] += s - end - tail
        if end is None or e >= end:
            end, op = e, i
    return out


def config_of(name: str):
    path = CONFIGS / f"{name}.toml"
    if name != "default" and not path.exists():
        return None
    return load_config(None if name == "default" else path)


@functools.cache
def compiled(workload: str, config_name: str, max_len: int):
    spec = models.SPECS[workload]
    module = spec.build(max_len)
    lo, hi = spec.bounds(max_len)
    t0 = time.perf_counter()
    npu = compile_torch(
        module, spec.example(16), dynamic_dim=spec.dynamic_dim, min_len=lo, max_len=hi, config=config_of(config_name)
    )
    return spec, npu, time.perf_counter() - t0


@functools.cache
def model_macs(workload: str, length: int, max_len: int) -> int:
    """The model's MACs at this length (torch's FlopCounterMode, SDPA on its math backend): the
    roofline's compute term counts the model's work, not extra MACs a kernel chooses (e.g. a ones column)."""
    spec = models.SPECS[workload]
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as flops:
        spec.build(max_len)(spec.example(length))
    return flops.get_total_flops() // 2


def measure(workload: str, config_name: str, length: int, max_len: int) -> dict:
    spec, npu, _ = compiled(workload, config_name, max_len)
    x = spec.example(length)
    t0 = time.perf_counter()
    y = npu(x)
    host = time.perf_counter() - t0
    s, cfg = npu.last_run.stats, npu.config
    compulsory = npu.artifact.weight_nbytes + x.numel() * 4 + y.numel() * 4
    moved = s.dma_bytes_loaded + s.dma_bytes_stored
    macs = model_macs(workload, length, max_len)
    compute = macs / cfg.macs_per_cycle
    roof = max(compute, compulsory / cfg.dram_bytes_per_cycle)
    roof_moved = max(compute, moved / cfg.dram_bytes_per_cycle)
    return dict(
        T=length, words=s.instructions, cycles=s.cycles, roof=roof, ratio=s.cycles / roof, compulsory=compulsory,
        moved=moved, roof_moved=roof_moved, ratio_moved=s.cycles / roof_moved, util=macs / (cfg.macs_per_cycle * s.cycles), extra_macs=s.macs - macs, host=host,
        matrix=s.busy["matrix"], vector=s.busy["vector"], fraction=s.busy_fraction,
        bound="compute" if compute >= compulsory / cfg.dram_bytes_per_cycle else "memory",
    )  # fmt: skip


HEAD = (
    f"{'cycles':>12} {'roof':>11} {'cyc/roof':>8} {'bound':>7} {'compul B':>11} {'moved B':>12} "
    f"{'roof(moved)':>11} {'cyc/moved':>9} {'MAC util':>8} {'matrix':>11} {'vector':>11} {'host s':>7}"
)


def row(r: dict) -> str:
    return (
        f"{r['cycles']:>12} {int(r['roof']):>11} {r['ratio']:>8.2f} {r['bound']:>7} {r['compulsory']:>11} "
        f"{r['moved']:>12} {int(r['roof_moved']):>11} {r['ratio_moved']:>9.2f} {r['util']:>8.1%} "
        f"{r['matrix']:>11} {r['vector']:>11} {r['host']:>7.2f}"
    )


def goals(names=None) -> list[tuple]:
    head = f"{'workload':>9} {'config':>8} {'T':>5} {'goal':>5} {HEAD} {'met':>4}"
    print(head)
    print("-" * len(head))
    out = []
    for workload, cfg, length, goal in GOALS:
        if names and workload not in names or config_of(cfg) is None:
            continue
        r = measure(workload, cfg, length, 2048 if workload.startswith("mlp") else 1500)
        met = "yes" if r["ratio"] <= goal else "no"
        print(f"{workload:>9} {cfg:>8} {length:>5} {goal:>5.2f} {row(r)} {met:>4}", flush=True)
        out.append((workload, cfg, length, goal, r))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=sorted(models.SPECS), help="one model over --lengths (default: the goals)")
    p.add_argument("--lengths", default="1,64,65,500,2048")
    p.add_argument("--config", default="default", help="default, edge, large (simulator/configs/<name>.toml)")
    p.add_argument("--max-len", type=int, default=2048)
    p.add_argument("--only", help="goal workloads to run, comma-separated (mlp384, body)")
    p.add_argument("--curve", action="store_true", help="issue 22's curve: both models, all lengths and configs")
    p.add_argument("--models", default="body,mlp384", help="--curve: the models, comma-separated")
    p.add_argument("--configs", default="edge,default,large", help="--curve: the configs, comma-separated")
    p.add_argument("--attention", action="store_true", help="the encoder body's attention bytes over compulsory")
    p.add_argument("--per-op", action="store_true", help="--model at --lengths split by op (bytes, spans, busy units)")
    args = p.parse_args(argv)
    if args.attention:
        attention_traffic(args.configs.split(","))
        return
    if args.curve:
        curve(args.models.split(","), args.configs.split(","))
        return
    if args.per_op:
        for t in (int(v) for v in args.lengths.split(",")):
            per_op(args.model or "body", args.config, t, args.max_len)
        return
    if args.model is None:
        goals(args.only.split(",") if args.only else None)
        return
    spec, npu, secs = compiled(args.model, args.config, args.max_len)
    print(f"model={args.model} config={args.config}  compile {secs:.1f} s  artifact {npu.artifact.nbytes} B")
    head = f"{'T':>6} {'words':>8} {HEAD}"
    print(head)
    print("-" * len(head))
    lo, hi = spec.bounds(args.max_len)
    for t in (int(v) for v in args.lengths.split(",")):
        r = measure(args.model, args.config, t, args.max_len)
        print(f"{t:>6} {r['words']:>8} {row(r)}", flush=True)


if __name__ == "__main__":
    main()
