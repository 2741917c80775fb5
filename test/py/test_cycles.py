"""Cycle and work goldens (process replay for the timing model) and analytic checks that need no golden.

Every golden program of `test_golden.py` runs on the simulator at its lower
bound, at a length with a partial last row tile (100 = 64 + 36) and at its
max. Pinned in `test/golden/cycles_<name>.json`: total cycles, busy cycles
per unit, DMA bytes loaded and stored, MACs, instruction counts by mnemonic
and by vector fn. A change to the timing model, the tiling or a kernel shows
up as a golden diff to review: `NOVELLA_UPDATE_GOLDEN=1` rewrites, prints
the change per field (old -> new, %) and still runs every check here.

Checked against independent expectations, at the same lengths:
* executed MACs == the model's MACs, counted on eager PyTorch by
  `torch.utils.flop_counter.FlopCounterMode` (SDPA on its math backend so
  that attention's two matmuls are counted);
* no DMA row falls outside its tensor, so a partial tile's LOAD/STORE
  moves exactly its valid rows; and no MATMUL `m` / VEC `rows` of a grid
  step exceeds the valid rows of that step's DMA tiles (no wasted work on a
  partial tile); steps come from the IR oracle (`novella_mlir.testing`);
* DMA bytes >= compulsory bytes: loaded >= weights + inputs, stored >= outputs.
"""

from __future__ import annotations

import functools
import re
from collections import Counter

import goldens
import models
import numpy as np
import pytest
import torch
from goldens import GOLDEN
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from novella_mlir.testing import oracle
from simulator import isa

PROGRAMS = {
    "mlp": ("mlp", 2048, (1, 100, 2048)),
    "mlp384": ("mlp384", 1500, (1, 100, 1500)),
    "whisper_layer": ("layer", 1500, (2, 100, 1500)),
}
STATS = ("cycles", "busy", "dma_bytes_loaded", "dma_bytes_stored", "macs", "by_mnemonic", "by_vec_fn")

HOW_TO = """\
Simulated cycles / work differ from {path} (golden -> now):
{diff}
If the change is intended (timing model, tiling, kernel):
  NOVELLA_UPDATE_GOLDEN=1 .venv/bin/python -m pytest test/py/test_cycles.py
then review `git diff test/golden/` and say in the commit why each number moved.
If not, it is a regression in the timing model or in the program the compiler emits."""


@functools.cache
def run(name: str, length: int):
    """(stats dict, model MACs, compulsory (load, store) bytes, JIT words, IR-oracle program, (NPU, eager))."""
    model, max_len, _ = PROGRAMS[name]
    spec, module, npu = models.compile_model(model, max_len)
    x = spec.example(length)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as flops:
        ref = module(x)
    y = npu(x)
    stats = npu.last_run.stats.to_dict()
    compulsory = (npu.artifact.weight_nbytes + x.numel() * 4, y.numel() * 4)
    program = oracle.instantiate(npu.ir("novella-schedule", at=[spec.symbol(length)]), [spec.symbol(length)])
    return stats, flops.get_total_flops() // 2, compulsory, npu.last_run.program.words, program, (y, ref)


def _lengths(name):
    return PROGRAMS[name][2]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_outputs_match_eager(name):
    """The runs whose cycles are pinned compute the right thing."""
    for t in _lengths(name):
        y, ref = run(name, t)[5]
        torch.testing.assert_close(y, ref, rtol=1e-4, atol=1e-4, msg=lambda m, t=t: f"{name} T={t}: {m}")


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cycle_and_work_golden(name):
    now = {f"T={t}": {k: run(name, t)[0][k] for k in STATS} for t in _lengths(name)}
    for t in _lengths(name):
        s = now[f"T={t}"]
        assert sum(s["by_mnemonic"].values()) == len(run(name, t)[3]), "every word executes once"
    goldens.check(GOLDEN / f"cycles_{name}.json", now, HOW_TO)


def _macs_by_tile(words, program) -> str:
    per = Counter()
    for inst, w in zip(program.insts, words):
        if isa.decode(w).opcode == isa.Opcode.MATMUL:
            f = isa.decode(w).fields
            per[inst.origin.tile] += f["m"] * f["k"] * f["n"]
    return ", ".join(f"{k}={v}" for k, v in per.items())


def _ones_macs(ir_text: str, words, program) -> int:
    """MACs a flash-attention tile adds by design when its tiles have `ones`: V carries a column of ones, so
    each P @ V (the MATMUL without transpose) computes one more column, the row sums (m * k MACs)."""
    macros = [ln for ln in ir_text.splitlines() if 'kernel = "novella.' in ln and "tiles = {" in ln]
    kernel = [re.search(r'kernel = "novella\.(\w+)"', ln).group(1) for ln in macros]
    with_ones = {f"{k}_{i}" for i, (k, ln) in enumerate(zip(kernel, macros)) if re.search(r"\bones = 1 ", ln)}
    extra = 0
    for inst, w in zip(program.insts, words):
        d = isa.decode(w)
        if d.opcode == isa.Opcode.MATMUL and inst.origin.tile in with_ones and not d.fields["transpose_b"]:
            extra += d.fields["m"] * d.fields["k"]
    return extra


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_executed_macs_equal_model_macs(name):
    """Executed MACs are the model's, plus the ones column of a flash tile that chose it (`_ones_macs`)."""
    for t in _lengths(name):
        stats, model_macs, _, words, program, _ = run(name, t)
        model, max_len, _ = PROGRAMS[name]
        spec, _, npu = models.compile_model(model, max_len)
        model_macs += _ones_macs(npu.ir("novella-schedule", at=[spec.symbol(t)]), words, program)
        assert stats["macs"] == model_macs, (
            f"{name} T={t}: the NPU executed {stats['macs']} MACs, the model has {model_macs} "
            f"(torch FlopCounterMode); MATMUL m*k*n by tile: {_macs_by_tile(words, program)}"
        )


def _valid_rows(f: dict) -> int:
    """Rows j of a DMA whose logical row row_start + j*row_step lies in [0, row_bound)."""
    r = f["row_start"] + np.arange(f["rows"]) * f["row_step"]
    return int(((r >= 0) & (r < f["row_bound"])).sum())


def _wasted(words, program, where: str) -> list[str]:
    insts = [isa.decode(w) for w in words]
    origin = [w.origin for w in program.insts] if len(insts) == len(program.insts) else None
    out = []
    for i, inst in enumerate(insts):
        f = inst.fields
        at = origin[i] if origin else f"word {i}"
        if inst.opcode in (isa.Opcode.LOAD, isa.Opcode.STORE) and f["row_start"] >= 0 and f["row_step"] > 0:
            if _valid_rows(f) != f["rows"]:
                out.append(
                    f"{where} {at} {inst.mnemonic}: rows={f['rows']} but only {_valid_rows(f)} are inside the "
                    f"tensor (row_start {f['row_start']}, row_bound {f['row_bound']}): wasted work on a partial tile"
                )
    if origin is None:
        return out + [f"{where}: the JIT's words differ in number from the IR oracle's; see test_oracle.py"]
    held = {}  # per tile: the most valid rows a DMA of it moved so far (a resident buffer, e.g. a query block)
    for step in program.steps:
        dma = [_valid_rows(insts[i].fields) for i in step if insts[i].opcode in (isa.Opcode.LOAD, isa.Opcode.STORE)]
        tile = origin[step[0]].tile if len(step) else None
        if dma:
            held[tile] = max(held.get(tile, 0), *dma)
        for i in step if dma else ():
            name = {isa.Opcode.MATMUL: "m", isa.Opcode.VEC: "rows"}.get(insts[i].opcode)
            if name and insts[i].fields[name] > max(*dma, held[tile]):
                out.append(
                    f"{where} {origin[i]} {insts[i].mnemonic}: {name}={insts[i].fields[name]} exceeds the "
                    f"{max(*dma, held[tile])} valid rows of the tile's DMAs so far: wasted work on a partial tile"
                )
    return out


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_no_wasted_rows_on_partial_tiles(name):
    bad = []
    for t in _lengths(name):
        _, _, _, words, program, _ = run(name, t)
        bad += _wasted(words, program, f"{name} T={t}:")
    assert not bad, f"{len(bad)} instructions do wasted work:\n" + "\n".join(bad[:10])


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_dma_bytes_at_least_compulsory(name):
    for t in _lengths(name):
        stats, _, (load, store), _, _, _ = run(name, t)
        assert stats["dma_bytes_loaded"] >= load, f"{name} T={t}: loaded {stats['dma_bytes_loaded']} < {load} B"
        assert stats["dma_bytes_stored"] >= store, f"{name} T={t}: stored {stats['dma_bytes_stored']} < {store} B"
