"""The compute queue's two units (docs/isa.md "Timing model"): in-order issue into a matrix and a vector
unit that run concurrently, the address-range scoreboard between them, the FIFO depth and in-order
retirement. Cycles are written out from the formulas with the default config's numbers; every program
runs on the readable loop (whose trace gives each instruction's unit span), the fast path's compiled
issue loop and its Python loop, which must agree cycle for cycle."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import Opcode, Simulator, VecFn, encode, fast, load_config

CFG = load_config()
ISSUE = CFG.issue_cycles
MM = CFG.matrix_rows + 16 + CFG.matmul_latency  # work of a 16x16x16 MATMUL: first weights, one pass, drain
VW = 4 * (32 // CFG.vector_lanes) + CFG.vector_latency  # work of a 4x32 ADD
ACC, SPAD = 1, 0


def _mm(acc_addr=0, a_addr=0, **kw):
    return encode(Opcode.MATMUL, m=16, k=16, n=16, a_addr=a_addr, a_stride=16, b_addr=4096, b_stride=16,
                  acc_addr=acc_addr, acc_stride=16, **kw)  # fmt: skip


def _add(dst_mem=SPAD, dst_addr=10000, a_mem=SPAD, a_addr=8192, dst_stride=32, **kw):
    return encode(Opcode.VEC, fn=int(VecFn.ADD), rows=4, cols=32, a_mem=a_mem, a_addr=a_addr, a_stride=32,
                  b_addr=9000, b_stride=32, dst_mem=dst_mem, dst_addr=dst_addr, dst_stride=dst_stride, **kw)  # fmt: skip


def _load(**kw):
    return encode(Opcode.LOAD, rows=4, row_bound=4, row_step=1, cols=16, sram_addr=20000, sram_stride=16,
                  dram_stride=16, **kw)  # fmt: skip


def _store(**kw):
    return encode(Opcode.STORE, rows=4, row_bound=4, row_step=1, cols=16, sram_addr=30000, sram_stride=16,
                  dram_base=64, dram_stride=16, **kw)  # fmt: skip


DMA = ISSUE + CFG.dma_latency + 4 * 16 * 4 // CFG.dram_bytes_per_cycle  # one 4x16 LOAD or STORE alone


def _spans(words, config=CFG):
    """{index: (begin, end)} of each instruction on its unit, the same on all three issue loops."""
    words = np.stack(words)
    sim = Simulator(config, 4096, fast=False, trace=True)
    quick = Simulator(config, 4096)
    for s in (sim, quick):
        rng = np.random.default_rng(3)
        for unit in (s.spad, s.acc, s.dram):
            unit.write(0, rng.standard_normal(unit.size).astype(np.float32))
    stats = sim.run(words)
    us = config.clock_ghz * 1000
    got = {}
    for e in sim.trace.events:
        if e["ph"] == "X" and "index" in e["args"]:
            got[e["args"]["index"]] = (round(e["ts"] * us), round((e["ts"] + e["dur"]) * us))
    assert quick.run(words).to_dict() == stats.to_dict()
    for a, b in ((sim.spad, quick.spad), (sim.acc, quick.acc), (sim.dram, quick.dram)):
        assert np.array_equal(a.data.view(np.uint32), b.data.view(np.uint32))
    quick._reset()
    plan = fast.prepare(quick, words)
    _, _, begin, end, _, _ = fast._schedule(quick, plan)
    loop = fast._Loop(quick, plan)
    loop.run()
    for i, (b, e) in got.items():
        assert (begin[i], end[i]) == (b, e) == (loop.begin[i], loop.end[i]), i
    assert stats.cycles == max(e for _, e in got.values())
    return got


def test_matmul_and_independent_vec_overlap():
    t = _spans([_mm(), _add()])
    assert t == {0: (ISSUE, ISSUE + MM), 1: (2 * ISSUE, 2 * ISSUE + VW)}, "the VEC issues one cycle later"
    t = _spans([_add(), _mm()])
    assert t == {0: (ISSUE, ISSUE + VW), 1: (2 * ISSUE, 2 * ISSUE + MM)}


def test_one_unit_runs_in_order_under_a_pipelined_issue():
    """A chain on one unit: each instruction starts when the previous ends (its issue cycle is hidden under
    that one's work; the old shared queue paid it in series)."""
    t = _spans([_mm(), _mm(acc_addr=256), _mm(acc_addr=512)])
    assert [t[i] for i in range(3)] == [(ISSUE + k * MM, ISSUE + (k + 1) * MM) for k in range(3)]
    t = _spans([_add(), _add(dst_addr=11000), _add(dst_addr=12000)])
    assert t[2] == (ISSUE + 2 * VW, ISSUE + 3 * VW)


def test_raw_vec_reads_the_accumulator_the_matmul_writes():
    t = _spans([_mm(), _add(a_mem=ACC, a_addr=128)])
    assert t[1] == (ISSUE + MM, ISSUE + MM + VW)


def test_war_matmul_overwrites_what_an_older_vec_reads():
    t = _spans([_add(a_mem=ACC, a_addr=0), _mm()])
    assert t[1] == (ISSUE + VW, ISSUE + VW + MM)
    t = _spans([_add(a_mem=ACC, a_addr=256), _mm()])  # reads acc[256, 384): after the MATMUL's [0, 256)
    assert t[1] == (2 * ISSUE, 2 * ISSUE + MM)


def test_waw_and_read_read():
    t = _spans([_add(dst_mem=ACC, dst_addr=200), _mm()])
    assert t[1] == (ISSUE + VW, ISSUE + VW + MM), "WAW"
    t = _spans([_add(a_mem=SPAD, a_addr=0), _mm()])  # both read spad[0, 256): no order
    assert t[1] == (2 * ISSUE, 2 * ISSUE + MM)


def test_scoreboard_compares_bounds_not_elements():
    """A VEC writing columns 16..31 of acc rows the MATMUL writes columns 0..15 of: no common element, but
    the bounding intervals overlap, so the range comparators order them."""
    mm = encode(Opcode.MATMUL, m=16, k=16, n=16, a_stride=16, b_addr=4096, b_stride=16, acc_stride=32)
    vec = encode(Opcode.VEC, fn=int(VecFn.FILL), rows=16, cols=16, dst_mem=ACC, dst_addr=16, dst_stride=32)
    t = _spans([mm, vec])
    assert t[1][0] == ISSUE + MM


def test_fifo_depth_stalls_issue(tmp_path):
    """Depth 2: the third MATMUL waits for the first to start, the fourth for the second (so the VEC after
    them issues only then); with the default depth the VEC issues right away."""
    cfg = tmp_path / "hw.toml"
    cfg.write_text("[compute]\nunit_queue_depth = 2\n")
    small = load_config(cfg)
    prog = [_mm(), _mm(acc_addr=256), _mm(acc_addr=512), _mm(acc_addr=768), _add()]
    t = _spans(prog, small)
    assert t[4][0] == ISSUE + MM + 2 * ISSUE, "VEC issues once MATMUL 1 has started at 1 + MM"
    assert _spans(prog)[4][0] == 5 * ISSUE
    for bad in ("0", "-1", "2.5", "true"):
        cfg.write_text(f"[compute]\nunit_queue_depth = {bad}\n")
        with pytest.raises(ValueError, match="compute.unit_queue_depth"):
            load_config(cfg)


def test_tokens_retire_in_order():
    """A fast VEC after a slow independent MATMUL ends first, but its tokens are ready at the MATMUL's end:
    the STORE and the LOAD popping them start only then."""
    prog = [_mm(), _add(push_next=1, push_prev=1), _store(pop_prev=1), _load(pop_next=1)]
    t = _spans(prog)
    assert t[1][1] == 2 * ISSUE + VW < t[0][1] == ISSUE + MM
    assert t[2][0] == ISSUE + MM and t[3][0] == ISSUE + MM
    nop = [_mm(), encode(Opcode.NOP, push_next=1), _store(pop_prev=1)]
    t = _spans(nop)
    assert t[1] == (2 * ISSUE, 2 * ISSUE), "a NOP runs on no unit"
    assert t[2][0] == ISSUE + MM


def test_a_pop_is_a_fence_for_younger_instructions():
    """A VEC popping the token of a LOAD issues at its end; the independent MATMUL after it cannot issue
    before that."""
    t = _spans([_load(push_next=1), _add(pop_prev=1), _mm()])
    assert t[1][0] == DMA + ISSUE and t[2][0] == DMA + 2 * ISSUE
