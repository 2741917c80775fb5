"""The measured tables of README.md and docs/performance.md, each written between its markers with the commit
and machine it was measured on.

    .venv/bin/python bench/tables.py                      # every table
    .venv/bin/python bench/tables.py goldens storage      # some of them (the names of TABLES)
    .venv/bin/python bench/tables.py --print goldens      # print, leave the files alone

A table sits in its file (`WHERE`, else README.md) between `<!-- table:NAME -->` and `<!-- /table:NAME -->`;
its last line names the command, the commit (with `+dirty` when the work tree had changes), the date and the
machine. Commit first, then regenerate, so the commit named is the code that produced the figures.
`test/py/test_readme.py` fails when a table has no such line, when the golden table disagrees with
`test/golden/cycles_<name>.json`, and when the storage, cycles or buckets tables' bytes, cycles and program
ranges are not what the code compiles today.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT / "bench"))

# The golden programs of test/py/test_cycles.py: name -> (model, max_len, lengths)
GOLDEN_PROGRAMS = {"mlp": ("mlp", 2048, (1, 100, 2048)), "mlp384": ("mlp384", 1500, (1, 100, 1500)),
                   "whisper_layer": ("layer", 1500, (2, 100, 1500))}  # fmt: skip
STORAGE_MODELS = (("mlp", "MLP 64-256-64"), ("layer", "Whisper layer"))
STORAGE_MAX_LENS = (1500, 15000)


def provenance(name: str) -> str:
    def git(*args):
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short=10", "HEAD") or "unknown"
    dirty = "+dirty" if git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!*.md") else ""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"measured by `bench/tables.py {name}` at commit {commit}{dirty}, {time.strftime('%Y-%m-%d')}, on "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f}"
    )


# ------------------------------------------------------------------ the tables


def goldens_table() -> str:
    """Cycles, DMA bytes and MACs of the golden programs, measured now (test_readme_tables compares them
    with test/golden/cycles_<name>.json, which test_cycles.py compares with the simulator)."""
    import models

    lines = ["| program | max_len | T | cycles | DMA loaded B | DMA stored B | MACs |", "|---|---|---|---|---|---|---|"]
    for name, (model, max_len, lengths) in GOLDEN_PROGRAMS.items():
        spec, _, npu = models.compile_model(model, max_len)
        for t in lengths:
            npu(spec.example(t))
            s = npu.last_run.stats
            lines.append(
                f"| {name} | {max_len} | {t} | {s.cycles:,} | {s.dma_bytes_loaded:,} | {s.dma_bytes_stored:,} "
                f"| {s.macs:,} |"
            )
    return "\n".join(lines)


def storage_table() -> str:
    """Static vs per-length vs JIT bytes (bench/storage.py; the static stream counted, bit-identical to it)."""
    import storage

    lines = [
        "| model | max_len | static @ max | per-length, all lengths | JIT (MacroMeta + TileMeta) | per-length / JIT |",
        "|---|---|---|---|---|---|",
    ]
    for model, label in STORAGE_MODELS:
        for max_len in STORAGE_MAX_LENS:
            r = storage.measure(model, max_len, "count")
            lines.append(
                f"| {label} | {max_len} | {storage._size(r['static'])} | {storage._size(r['per_length'])} "
                f"| {r['jit']:,} B | {r['per_length'] / r['jit']:,.0f}x |"
            )
    return "\n".join(lines)


def cycles_table() -> str:
    """bench/cycles.py's goal rows (simulated cycles against the compulsory roofline)."""
    import cycles

    with contextlib.redirect_stdout(io.StringIO()):
        rows = cycles.goals()
    head = f"{'workload':>9} {'config':>8} {'T':>5} {'goal':>5} {cycles.HEAD}"
    body = [f"{w:>9} {c:>8} {t:>5} {g:>5.2f} {cycles.row(r)}" for w, c, t, g, r in rows]
    return "```\n" + "\n".join([head, *body]) + "\n```"


def curve_table() -> str:
    """bench/cycles.py --curve: cycles / compulsory roofline at every length, both models, every config."""
    import cycles

    with contextlib.redirect_stdout(io.StringIO()):
        out = cycles.curve(list(cycles.CURVE_MODELS), ["edge", "default", "large"])
    cols = list(out)
    lengths = sorted({r["T"] for rows in out.values() for r in rows})
    lines = ["| T | " + " | ".join(f"{w} {c}" for w, c in cols) + " |", "|" + "---|" * (len(cols) + 1)]
    for t in lengths:
        cells = [next((f"{r['ratio']:.2f}" for r in out[k] if r["T"] == t), "-") for k in cols]
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    spread = [f"{max(r['ratio'] for r in out[k]):.2f} / {max(r['ratio'] for r in out[k]) / min(r['ratio'] for r in out[k]):.2f}"
              for k in cols]  # fmt: skip
    lines.append("| max / (max/min) | " + " | ".join(spread) + " |")
    return "\n".join(lines)


STOCK_LABELS = {"gpt2": "GPT2Model", "bert": "BertModel", "llama": "LlamaModel (GQA 4/2)",
                "opt": "OPTModel (positions from `cumsum`)", "encoder-post-norm": "TransformerEncoder, post-norm",
                "encoder-pre-norm": "TransformerEncoder, norm_first", "whisper-sdpa": "Whisper encoder, SDPA (frames)"}  # fmt: skip


def _stock_row(name: str) -> str:
    import stock_models
    import torch
    from decode import weight_bytes

    from novella_mlir import compile_torch
    from novella_mlir.tools.sweep import roofline

    model, make, dim, lo, hi = stock_models.build(name)
    t0 = time.perf_counter()
    npu = compile_torch(model, make(16 if dim == 1 else 101), dynamic_dim=dim, min_len=lo, max_len=hi, cache=False)
    cells, cycles, worst, ok = [f"{time.perf_counter() - t0:.1f} s"], [], (0.0, lo), True
    for n in stock_models.lengths(lo, hi).values():
        x = make(n, seed=5)
        with torch.no_grad():
            ref = model(x)
        y = npu(x)
        err = (y - ref).abs().max().item()
        ok &= torch.allclose(y, ref, atol=1e-4, rtol=1e-4)
        worst = max(worst, (err, n))
        cells.append(f"{err:.1e}")
        weights = weight_bytes(model, y.shape[1])
        r = roofline(npu.last_run.stats, npu.config, weights + 4 * (x.numel() + y.numel()))
        cycles.append(f"{r['cycles']:,} ({r['cyc/roof']:.2f}x)")
    label, verdict = STOCK_LABELS.get(name, name), "yes" if ok else "NO"
    return f"| {label} | {' | '.join(cells)} | {worst[0]:.1e} ({worst[1]}) | {cycles[0]} | {cycles[-1]} | {verdict} |"


def models_table() -> str:
    """bench/stock_models.py's models (2 layers, hidden 64), each compiled once and run at its five lengths."""
    import logging

    import stock_models

    logging.disable(logging.WARNING)
    head = (
        "| model | compile | err at min | at 2 | at 37 | at 67 | at max | max err (T) | cycles at min (/ roofline) "
        "| cycles at max (/ roofline) | all match |"
    )
    return "\n".join([head, "|" + "---|" * 11, *(_stock_row(name) for name in stock_models.MODELS)])


def demo_table() -> str:
    """The README's first command: the Whisper-encoder demo (4 layers, every default length)."""
    from novella_mlir.tools import demo

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = demo.main([])
    if code:
        raise SystemExit(f"the demo failed:\n{out.getvalue()}")
    return "```\n" + out.getvalue().rstrip("\n") + "\n```"


def host_table() -> str:
    """Host speed against the goals: a new length vs a repeated one and eager, the first compile vs
    torch.export, a cache hit (`bench/host.py --summary`; ~15 min on the shared host)."""
    import host

    return "\n".join(host.summary())


JIT_MODELS = (("mlp", "2,64,65,256,1024,1500"), ("layer", "2,64,65,256,1024,1500"), ("encoder", "2,256,1500"))


def jit_table() -> str:
    """bench/jit.py per model at max_len 1500: a new length, a first call, a cached one, against the NPU time."""
    import jit
    import models

    parts = []
    for name, lengths in JIT_MODELS:
        spec, _, npu = models.compile_model(name, 1500)
        rows = [jit.measure(npu, spec, int(t), 5, True) for t in lengths.split(",")]
        parts.append(f"**{name}** (max_len 1500)\n\n{jit.table(rows)}")
    return "\n\n".join(parts)


def buckets_table() -> str:
    """bench/buckets.py: each model compiled with and without shape buckets, simulated side by side."""
    import buckets
    from cycles import config_of

    config = config_of("default")
    runs = [buckets.measure(name, max_len, lengths, config) for name, max_len, lengths in buckets.DEFAULT]
    label = {"mlp384": "MLP 384-1536-384", "body": "whisper-tiny body (4 layers)"}
    lines = ["| model | T | program | cycles, one program | cycles, buckets | gain | cyc/roof off | cyc/roof on "
             "| moved MB off | moved MB on |", "|" + "---|" * 10]  # fmt: skip
    for r in runs:
        for i, w in enumerate(r["rows"]):
            lines.append(
                f"| {label[r['name']] if i == 0 else ''} | {w['T']} | #{w['program']} {w['range']} | {w['off']:,} "
                f"| {w['on']:,} | {w['off'] / w['on']:.2f}x | {w['off'] / w['roof']:.2f} | {w['on'] / w['roof']:.2f} "
                f"| {w['moved_off'] / 1e6:.2f} | {w['moved_on'] / 1e6:.2f} |"
            )
    lines += ["", "| model | program | range | MacroMeta B | TileMeta B | why |", "|" + "---|" * 6]
    for r in runs:
        g = r["generic"]
        lines.append(f"| {label[r['name']]} | without buckets | {g['range']} | {g['bytes'][0]:,} | {g['bytes'][1]:,} "
                     "| one generic program |")  # fmt: skip
        for i, p in enumerate(r["programs"]):
            lines.append(f"| | #{i} | {p['range']} | {p['bytes'][0]:,} | {p['bytes'][1]:,} | {p['reason']} |")
        extra = r["nbytes_on"] - r["nbytes_off"]
        lines.append(f"| | all | | {r['nbytes_off']:,} B without, {r['nbytes_on']:,} B with buckets "
                     f"| {extra:+,} B ({extra / r['nbytes_off']:+.0%}) | weights {r['weights']:,} B either way |")  # fmt: skip
    return "\n".join(lines)


def whisper_timing_table() -> str:
    """bench/models_e2e.py --whisper-timing: the frontend of the whisper-tiny encoder, best of 3."""
    import models_e2e

    lines = [
        "| decompositions | torch.export | decomposition step | FX import | compile_torch |",
        "|---|---|---|---|---|",
    ]
    for label, *secs in models_e2e.whisper_frontend_rows(3):
        lines.append(f"| {label} | " + " | ".join(f"{v:.2f} s" for v in secs) + " |")
    return "\n".join(lines)


TABLES = {
    "goldens": goldens_table,
    "storage": storage_table,
    "cycles": cycles_table,
    "curve": curve_table,
    "models": models_table,
    "demo": demo_table,
    "host": host_table,
    "whisper-timing": whisper_timing_table,
    "buckets": buckets_table,
    "jit": jit_table,
}
PERFORMANCE = ROOT / "docs" / "performance.md"
WHERE = {"buckets": PERFORMANCE, "jit": PERFORMANCE}  # the file a table lives in (README.md when not listed)


# ------------------------------------------------------------------ the files


def markers(name: str) -> tuple[str, str]:
    return f"<!-- table:{name} -->", f"<!-- /table:{name} -->"


def section(text: str, name: str) -> str:
    """The text between a table's markers (the table and its provenance line)."""
    begin, end = markers(name)
    m = re.search(re.escape(begin) + r"\n(.*?)\n" + re.escape(end), text, re.S)
    if m is None:
        raise KeyError(f"no {begin} ... {end} section")
    return m.group(1)


def replace(text: str, name: str, body: str) -> str:
    begin, end = markers(name)
    old = section(text, name)
    return text.replace(f"{begin}\n{old}\n{end}", f"{begin}\n{body}\n{end}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", choices=[*TABLES, []], help="tables to regenerate (default: all)")
    p.add_argument("--print", action="store_true", help="print the tables instead of writing their files")
    args = p.parse_args(argv)
    for name in args.names or TABLES:
        t0, where = time.perf_counter(), provenance(name)
        body = f"{TABLES[name]()}\n\n_{where}_"
        path = WHERE.get(name, README)
        if args.print:
            print(body)
        else:
            path.write_text(replace(path.read_text(), name, body))
        print(f"bench/tables.py: {name} in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
