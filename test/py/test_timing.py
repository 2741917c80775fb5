"""The four timing corrections of docs/isa.md, each on one instruction, on both simulator paths.

Expected cycles are written out from the formulas in docs/isa.md "Timing model" with the
default config's numbers, so a change to either side fails here.
"""

import numpy as np
import pytest

from simulator import Opcode, Simulator, VecFn, encode, load_config
from simulator.config import ConfigError

CFG = load_config()
ISSUE, DMA_LAT, BW, BURST = CFG.issue_cycles, CFG.dma_latency, CFG.dram_bytes_per_cycle, CFG.dram_burst_bytes


def _cycles(*words, fast=False, config=CFG):
    return Simulator(config, 8192, fast=fast).run(np.stack(words)).cycles


def _both(*words, config=CFG):
    slow, quick = _cycles(*words, config=config), _cycles(*words, fast=True, config=config)
    assert slow == quick, "fast path timing differs from the readable path"
    return slow


def _vec(fn, rows=4, cols=32):
    return encode(Opcode.VEC, fn=int(fn), rows=rows, cols=cols, a_stride=cols, b_stride=cols, dst_stride=cols,
                  dst_addr=2048, b_addr=1024)  # fmt: skip


@pytest.mark.parametrize("fn", ["exp", "erf", "tanh", "div", "rsqrt", "log", "sin", "cos"])
def test_transcendental_vec_costs_per_element_from_the_config(fn):
    beats = 4 * (32 // CFG.vector_lanes)
    per_beat = CFG.vector_fn_cycles[fn]
    assert per_beat > 1
    assert _both(_vec(VecFn[fn.upper()])) == ISSUE + beats * per_beat + CFG.vector_latency
    assert _both(_vec(VecFn.ADD)) == ISSUE + beats + CFG.vector_latency


def test_fn_cycles_table_is_read_and_checked(tmp_path):
    cfg = tmp_path / "hw.toml"
    cfg.write_text("[vector]\nfn_cycles = { exp = 10 }\n")
    config = load_config(cfg)
    assert _both(_vec(VecFn.EXP), config=config) == ISSUE + 8 * 10 + config.vector_latency
    assert _both(_vec(VecFn.ERF), config=config) == ISSUE + 8 + config.vector_latency  # unlisted: 1 per beat
    cfg.write_text("[vector]\nfn_cycles = { expo = 2 }\n")
    with pytest.raises(ConfigError, match="unknown VEC function 'expo'"):
        load_config(cfg)
    cfg.write_text("[vector]\nfn_cycles = { exp = 0 }\n")
    with pytest.raises(ConfigError, match="exp must be an int >= 1"):
        load_config(cfg)


def _load(rows, cols, dram_stride, **kw):
    return encode(Opcode.LOAD, rows=rows, row_bound=rows, row_step=1, cols=cols, sram_stride=cols,
                  dram_stride=dram_stride, **kw)  # fmt: skip


def test_dma_moves_whole_bursts():
    assert BURST == 64
    # one element: a whole burst, not 4 bytes
    assert _both(_load(1, 1, 1)) == ISSUE + DMA_LAT + BURST // BW
    # 8 strided rows of 3 elements: 8 runs of one burst each
    assert _both(_load(8, 3, 100)) == ISSUE + DMA_LAT + 8 * BURST // BW
    # the same 24 elements contiguous: one 96 B run = 2 bursts
    assert _both(_load(8, 3, 3)) == ISSUE + DMA_LAT + 2 * BURST // BW
    # rows of 20 elements (80 B) at a stride: 2 bursts each
    assert _both(_load(4, 20, 64)) == ISSUE + DMA_LAT + 4 * 2 * BURST // BW
    stats = Simulator(CFG, 8192).run(np.stack([_load(1, 1, 1)]))
    assert stats.dma_bytes_loaded == 4, "the stats count the data, the timing the bursts"


def test_min_burst_from_config(tmp_path):
    cfg = tmp_path / "hw.toml"
    cfg.write_text("[dram]\nburst_bytes = 4\n")
    config = load_config(cfg)
    assert _both(_load(8, 3, 100), config=config) == ISSUE + DMA_LAT + 8 * 12 // BW  # 4 B bursts: data only


def _mm(m, k, n):
    return encode(Opcode.MATMUL, m=m, k=k, n=n, a_stride=k, b_addr=4096, b_stride=n, acc_stride=n)


@pytest.mark.parametrize("m", [1, 8, 16, 64])
def test_weight_stationary_matmul_pays_its_weight_loads(m):
    r, c = CFG.matrix_rows, CFG.matrix_cols
    passes = (64 // r) * (48 // c)
    # first weight tile shifted in (r cycles), then each pass max(m, r): the next weights load under it
    expect = ISSUE + r + passes * max(m, r) + CFG.matmul_latency
    assert _both(_mm(m, 64, 48)) == expect
    if m == 1:
        assert expect > passes * 16, "m = 1 is not nearly free: each pass loads 16 weight rows"


def test_every_instruction_issues_in_at_least_one_cycle(tmp_path):
    assert ISSUE >= 1
    assert _both(encode(Opcode.NOP)) == ISSUE
    assert _both(*[encode(Opcode.NOP)] * 5) == 5 * ISSUE
    cfg = tmp_path / "hw.toml"
    cfg.write_text("[clock]\nissue_cycles = 0\n[matrix]\nlatency = 0\n[vector]\nlatency = 0\n")
    with pytest.raises(ConfigError, match="issue_cycles' must be positive"):
        load_config(cfg)
    cfg.write_text("[clock]\nissue_cycles = 3\n[dram]\ndma_latency = 0\n")
    config = load_config(cfg)
    rows = Simulator(config, 8192).run(np.stack([encode(Opcode.LOAD, rows=0, cols=4)]))
    assert rows.cycles == 3, "an empty DMA still issues"
