"""Simulator tests: hand-assembled programs checked against numpy."""

import json
import math

import numpy as np
import pytest

from simulator import (
    DeadlockError,
    HazardError,
    Opcode,
    Simulator,
    SimulatorError,
    VecFn,
    VecMode,
    encode,
    load_config,
)
from simulator.config import ConfigError

RNG = np.random.default_rng(7)
CFG = load_config()


def load(**kw):
    kw.setdefault("row_step", 1)
    return encode(Opcode.LOAD, **kw)


def store(**kw):
    kw.setdefault("row_step", 1)
    return encode(Opcode.STORE, **kw)


def prog(*words):
    return np.stack(words)


def _tiled_matmul_program(drop=None):
    """C[100x48] = A[100x40] @ B[40x48], two 64-row tiles, one A buffer.

    `drop` removes one token pair: "L2C" (LOAD A0 -> MATMUL0), "C2S"
    (MATMUL0 -> STORE0) or "C2L" (MATMUL0 -> reload of the A buffer).
    """
    m, k, n, tile = 100, 40, 48, 64
    a_dram, b_dram, c_dram, b_spad = 0, 4000, 6000, 4096
    words = [
        load(
            sram_addr=b_spad,
            sram_stride=n,
            dram_base=b_dram,
            dram_stride=n,
            rows=k,
            row_bound=k,
            cols=n,
        )
    ]
    for t in range(2):
        first = t == 0
        words.append(
            load(
                sram_stride=k,
                dram_base=a_dram,
                dram_stride=k,
                rows=tile,
                row_start=t * tile,
                row_bound=m,
                cols=k,
                push_next=1,
                pop_next=int(not first and drop != "C2L"),
            )
        )
        words.append(
            encode(
                Opcode.MATMUL,
                acc_stride=n,
                a_stride=k,
                b_addr=b_spad,
                b_stride=n,
                m=tile,
                k=k,
                n=n,
                push_next=1,
                pop_prev=int(not (first and drop == "L2C")),
                push_prev=int(first and drop != "C2L"),
                pop_next=int(not first),
            )
        )
        words.append(
            store(
                mem=1,
                sram_stride=n,
                dram_base=c_dram,
                dram_stride=n,
                rows=tile,
                row_start=t * tile,
                row_bound=m,
                cols=n,
                pop_prev=int(not (first and drop == "C2S")),
                push_prev=int(first),
            )
        )
    if drop == "L2C":
        words.append(encode(Opcode.NOP, pop_prev=1))
    if drop == "C2S":
        words.append(store(pop_prev=1))
    return prog(*words), (m, k, n, a_dram, b_dram, c_dram)


def _matmul_sim(drop=None, **kw):
    words, (m, k, n, a_dram, b_dram, c_dram) = _tiled_matmul_program(drop)
    sim = Simulator(CFG, 12000, **kw)
    a = RNG.standard_normal((m, k)).astype(np.float32)
    b = RNG.standard_normal((k, n)).astype(np.float32)
    sim.dram.write(a_dram, a)
    sim.dram.write(b_dram, b)
    sim.dram.write(c_dram, np.full(m * n + 100, 7.0, dtype=np.float32))
    return sim, words, a @ b, c_dram


def test_tiled_matmul_with_partial_tile():
    sim, words, expect, c_dram = _matmul_sim()
    stats = sim.run(words)
    got = sim.dram.read(c_dram, 100 * 48).reshape(100, 48)
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)
    assert np.all(sim.dram.read(c_dram + 100 * 48, 100) == 7.0)
    assert stats.macs == 2 * 64 * 40 * 48
    assert stats.dma_bytes_stored == 100 * 48 * 4
    assert stats.dma_bytes_loaded == (40 * 48 + 100 * 40) * 4
    assert stats.by_mnemonic == {"LOAD": 3, "MATMUL": 2, "STORE": 2}


def test_matmul_transpose_b_and_accumulate():
    sim = Simulator(CFG, 16)
    a = RNG.standard_normal((5, 7)).astype(np.float32)
    bt = RNG.standard_normal((3, 7)).astype(np.float32)
    sim.spad.write(0, a)
    sim.spad.write(100, np.hstack([bt, np.zeros((3, 1), np.float32)]))
    sim.acc.write(0, np.ones((5, 3), np.float32))
    w = encode(
        Opcode.MATMUL,
        transpose_b=1,
        accumulate=1,
        a_stride=7,
        b_addr=100,
        b_stride=8,
        acc_stride=3,
        m=5,
        k=7,
        n=3,
    )
    sim.run(prog(w))
    np.testing.assert_allclose(sim.acc.read(0, 15).reshape(5, 3), a @ bt.T + 1, rtol=1e-5)


ROWS, COLS, STRIDE = 5, 7, 9
A_ADDR, B_ADDR, D_ADDR = 0, 1000, 2000


def _vec_sim(a, b):
    sim = Simulator(CFG, 16)
    sim.spad.data[:] = 0
    for i in range(ROWS):
        sim.spad.write(A_ADDR + i * STRIDE, a[i])
    for i in range(b.shape[0]):
        sim.acc.write(B_ADDR + i * STRIDE, b[i])
    return sim


def _run_vec(fn, mode=VecMode.TENSOR, imm=0.0, a=None, b_rows=ROWS, b_cols=COLS):
    a = RNG.uniform(0.1, 2.0, (ROWS, COLS)).astype(np.float32) if a is None else a
    b = RNG.uniform(0.5, 2.0, (b_rows, b_cols)).astype(np.float32)
    sim = _vec_sim(a, b)
    w = encode(
        Opcode.VEC,
        fn=fn,
        mode=mode,
        dst_addr=D_ADDR,
        dst_stride=STRIDE,
        a_addr=A_ADDR,
        a_stride=STRIDE,
        b_mem=1,
        b_addr=B_ADDR,
        b_stride=STRIDE,
        rows=ROWS,
        cols=COLS,
        imm=imm,
    )
    stats = sim.run(prog(w))
    assert stats.by_vec_fn == {VecFn(fn).name: 1}
    cols = 1 if fn in (VecFn.ROWSUM, VecFn.ROWMAX) else COLS
    got = np.stack([sim.spad.read(D_ADDR + i * STRIDE, cols) for i in range(ROWS)])
    return a, b, got


BINARY = {
    VecFn.ADD: np.add,
    VecFn.SUB: np.subtract,
    VecFn.MUL: np.multiply,
    VecFn.DIV: np.divide,
    VecFn.MAX: np.maximum,
}


@pytest.mark.parametrize("fn", list(BINARY))
@pytest.mark.parametrize("mode", list(VecMode))
def test_vec_binary_modes(fn, mode):
    shape = {VecMode.ROW: (1, COLS), VecMode.COL: (ROWS, 1)}.get(mode, (ROWS, COLS))
    a, b, got = _run_vec(fn, mode, imm=1.25, b_rows=shape[0], b_cols=shape[1])
    if mode == VecMode.SCALAR:
        b = np.float32(1.25)
    np.testing.assert_allclose(got, BINARY[fn](a, b), rtol=1e-6)


def test_vec_col_mode_uses_b_stride():
    sim = Simulator(CFG, 16)
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    sim.spad.write(0, a)
    sim.spad.write(50, [10.0])
    sim.spad.write(53, [20.0])
    sim.run(
        prog(
            encode(
                Opcode.VEC,
                fn=VecFn.ADD,
                mode=VecMode.COL,
                dst_addr=100,
                dst_stride=3,
                a_stride=3,
                b_addr=50,
                b_stride=3,
                rows=2,
                cols=3,
            )
        )
    )
    np.testing.assert_array_equal(sim.spad.read(100, 6).reshape(2, 3), a + [[10], [20]])


UNARY = {
    VecFn.EXP: np.exp,
    VecFn.RSQRT: lambda a: 1 / np.sqrt(a),
    VecFn.TANH: np.tanh,
    VecFn.RELU: lambda a: np.maximum(a, 0),
    VecFn.COPY: lambda a: a,
}


@pytest.mark.parametrize("fn", list(UNARY))
def test_vec_unary(fn):
    a = RNG.uniform(-3, 3, (ROWS, COLS)).astype(np.float32)
    if fn == VecFn.RSQRT:
        a = np.abs(a) + 0.1
    _, _, got = _run_vec(fn, a=a)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, UNARY[fn](a), rtol=2e-6, atol=1e-7)


def test_vec_erf_matches_math_erf():
    a = np.linspace(-5, 5, ROWS * COLS, dtype=np.float32).reshape(ROWS, COLS)
    _, _, got = _run_vec(VecFn.ERF, a=a)
    expect = np.vectorize(math.erf)(a.astype(np.float64))
    assert np.max(np.abs(got - expect)) < 1e-6


def test_vec_reductions_and_fill():
    a, _, got = _run_vec(VecFn.ROWSUM)
    np.testing.assert_allclose(got[:, 0], a.sum(axis=1), rtol=1e-6)
    a, _, got = _run_vec(VecFn.ROWMAX)
    np.testing.assert_array_equal(got[:, 0], a.max(axis=1))
    _, _, got = _run_vec(VecFn.FILL, imm=-2.5)
    assert np.all(got == -2.5)


def test_load_negative_row_start_step2_zero_fill():
    sim = Simulator(CFG, 200)
    src = np.arange(1, 101, dtype=np.float32).reshape(10, 10)
    sim.dram.write(0, src)
    sim.spad.write(0, np.full(60, 9.0, dtype=np.float32))
    sim.run(
        prog(
            load(
                sram_stride=6,
                dram_stride=10,
                rows=8,
                row_start=-3,
                row_step=2,
                row_bound=9,
                cols=6,
            )
        )
    )
    got = sim.spad.read(0, 48).reshape(8, 6)
    expect = np.zeros((8, 6), dtype=np.float32)
    for j in range(8):
        r = -3 + 2 * j
        if 0 <= r < 9:
            expect[j] = src[r, :6]
    np.testing.assert_array_equal(got, expect)
    assert sim.spad.read(48, 12).tolist() == [9.0] * 12


# Program: 0 LOAD B, 1 LOAD A0, 2 MATMUL0, 3 STORE0, 4 LOAD A1 (same SPAD buffer as A0), 5 MATMUL1, 6 STORE1.
# Dropping a channel's token leaves exactly the pair it orders unordered; the checker must name that
# pair, the access kind and the memory range (instructions run in simulation order, so the later
# instruction of the pair is the one that trips the check).
MISSING_TOKEN = {
    # L2C: MATMUL0 reads its SPAD operands (B at 4096) before the loads of step 0 are known to be done
    "L2C": r"RAW hazard: compute instruction 2 \(MATMUL\) reads spad\[4096, 6016\) last written by load "
    r"instruction 0 \(LOAD\)",
    # C2S: STORE0 reads acc[0, 64*48) with no order against MATMUL0's write of it
    "C2S": r"WAR hazard: compute instruction 2 \(MATMUL\) writes acc\[0, 3072\) last read by store instruction 3 "
    r"\(STORE\)",
    # C2L: LOAD A1 overwrites A's buffer spad[0, 64*40) while MATMUL0 may still read it
    "C2L": r"RAW hazard: compute instruction 2 \(MATMUL\) reads spad\[0, 2560\) last written by load "
    r"instruction 4 \(LOAD\)",
}


@pytest.mark.parametrize("drop", sorted(MISSING_TOKEN))
def test_missing_token_is_a_hazard(drop):
    sim, words, _, _ = _matmul_sim(drop)
    with pytest.raises(HazardError, match=MISSING_TOKEN[drop] + " with no dependency token ordering them"):
        sim.run(words)


def test_hazard_checking_can_be_disabled():
    """Without the checker the racy program (C2L dropped) runs to the end, and the race really happens:
    LOAD A1 overwrites A0 before MATMUL0 reads it, so the result is wrong. With it, the same words raise."""
    sim, words, expect, c_dram = _matmul_sim("C2L", check_hazards=False)
    stats = sim.run(words)
    assert sim.hazards is None and stats.by_mnemonic == {"LOAD": 3, "MATMUL": 2, "STORE": 2}
    got = sim.dram.read(c_dram, 100 * 48).reshape(100, 48)
    assert not np.allclose(got[:64], expect[:64], atol=1e-3), "the dropped token should have raced"
    np.testing.assert_allclose(got[64:], expect[64:], rtol=1e-5, atol=1e-5)
    with pytest.raises(HazardError, match=MISSING_TOKEN["C2L"]):
        _matmul_sim("C2L")[0].run(words)


def test_pop_without_push_deadlocks():
    words = prog(
        load(rows=1, cols=1, row_bound=1),
        encode(Opcode.MATMUL, m=1, k=1, n=1, pop_prev=1),
    )
    with pytest.raises(DeadlockError, match=r"compute queue.*instruction 1 \(MATMUL\).*L2C"):
        Simulator(CFG, 16).run(words)


def test_out_of_range_sram_address():
    words = prog(
        load(
            sram_addr=65000,
            sram_stride=60,
            rows=10,
            row_bound=10,
            cols=60,
            dram_stride=60,
        )
    )
    msg = r"instruction 0 \(LOAD\).*\[65000, 65600\) exceeds scratchpad size 65536"
    with pytest.raises(SimulatorError, match=msg):
        Simulator(CFG, 1000).run(words)


def test_out_of_range_dram_and_bad_token_flag():
    with pytest.raises(SimulatorError, match="DRAM size 100"):
        Simulator(CFG, 100).run(prog(store(rows=2, row_bound=2, cols=60, dram_stride=60)))
    with pytest.raises(SimulatorError, match="instruction 0 \\(LOAD\\).*pop_prev"):
        Simulator(CFG, 100).run(prog(load(pop_prev=1)))


def test_single_load_timing():
    words = prog(load(sram_stride=64, dram_stride=64, rows=64, row_bound=64, cols=64))
    stats = Simulator(CFG, 64 * 64).run(words)
    assert stats.cycles == 1 + 100 + 64 * 64 * 4 // 16  # issue + dma_latency + whole 64 B bursts
    assert stats.busy["load"] == stats.cycles
    assert stats.dram_busy == 64 * 64 * 4 // 16, "the DRAM channel carries data only in the data phase"
    assert stats.busy_fraction["dram"] == stats.dram_busy / stats.cycles


def _tiled_matmul_timeline() -> dict:
    """End cycles of the tiled-matmul program, worked out by hand from docs/isa.md's timing model
    (default config: issue 1 cycle, DMA latency 100, 16 B/cycle in whole 64 B bursts, one shared
    DRAM channel; MATMUL issue + 16 (first weight load) + ceil(k/16)*ceil(n/16)*max(m, 16) + 16)."""
    mm = 1 + 16 + 3 * 3 * 64 + 16  # k=40, n=48, m=64 (the program runs the full tile on the partial one too)
    lat = 1 + 100  # issue + DMA latency; every transfer here is a whole number of 64 B bursts
    load_b = lat + 40 * 48 * 4 // 16  # 581
    load_a0 = max(load_b + lat, load_b) + 64 * 40 * 4 // 16  # starts when the load queue frees: 1322
    mm0 = load_a0 + mm  # pops L2C from LOAD A0
    load_a1 = max(mm0 + lat, load_a0) + 36 * 40 * 4 // 16  # pops C2L from MATMUL0; 36 in-bound rows
    store0 = max(mm0 + lat, load_a1) + 64 * 48 * 4 // 16  # pops C2S at mm0, waits for the channel
    mm1 = max(mm0, load_a1, store0) + mm  # pops L2C (A1) and S2C (STORE0)
    store1 = max(mm1 + lat, store0) + 36 * 48 * 4 // 16
    return {
        "cycles": store1,
        "busy": {
            "load": load_b + (load_a0 - load_b) + (load_a1 - mm0),
            "matrix": 2 * (mm - 1),  # the unit runs after the compute queue's issue cycle
            "vector": 0,
            "store": (store0 - mm0) + (store1 - mm1),
        },
        "dram_busy": (40 * 48 + 64 * 40 + 36 * 40 + 64 * 48 + 36 * 48) * 4 // 16,  # each transfer's data phase
    }


def test_overlap_and_exports():
    sim, words, _, _ = _matmul_sim(trace=True)
    stats = sim.run(words)
    expect = _tiled_matmul_timeline()
    assert (stats.cycles, stats.busy) == (expect["cycles"], expect["busy"]), "timing model != docs/isa.md by hand"
    assert stats.dram_busy == expect["dram_busy"]
    assert stats.cycles < sum(stats.busy.values()), "the queues overlap"
    assert stats.roofline_cycles == max(stats.macs / 256, (stats.dma_bytes_loaded + stats.dma_bytes_stored) / 16)
    # a wait is charged to the latest-ready token popped: MATMUL0 waits for L2C from 0, LOAD A1 for C2L from
    # 1322, STOREs for C2S from 0 and from 3160, MATMUL1 for S2C (ready after its L2C) from 1323: waits are
    # measured at issue, and the compute queue can issue again one cycle after MATMUL0 issued at 1322
    assert stats.token_waits == {
        "L2C": {"count": 1, "cycles": 1322},
        "C2L": {"count": 1, "cycles": 1931 - 1322},
        "C2S": {"count": 2, "cycles": 1931 + (3769 - 3160)},
        "S2C": {"count": 1, "cycles": 3160 - 1323},
    }
    data = json.loads(stats.to_json())
    assert data["cycles"] == stats.cycles and data["macs"] == stats.macs
    assert 0 < data["mac_utilization"] <= 1
    assert sum(w["count"] for w in data["token_waits"].values()) > 0
    trace = json.loads(sim.trace.to_json())
    insts = [e for e in trace["traceEvents"] if e["ph"] == "X" and "index" in e["args"]]
    assert len(insts) == len(words)
    end = max(e["ts"] + e["dur"] for e in insts)
    assert end == pytest.approx(stats.cycles / (CFG.clock_ghz * 1000))
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"DMA load", "matrix", "vector", "DMA store"}
    assert any(e["name"].startswith("wait ") for e in trace["traceEvents"])
    assert "cycles" in str(stats)


def test_config_validation(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[scratchpad]\nbytes = -4\n")
    with pytest.raises(ValueError, match=r"bad\.toml.*scratchpad\.bytes"):
        load_config(bad)
    bad.write_text("[dram]\nbandwidth = 3\n")
    with pytest.raises(ConfigError, match=r"dram\.bandwidth"):
        load_config(bad)
    ok = tmp_path / "ok.toml"
    ok.write_text("[dram]\nbytes_per_cycle = 32\n")
    cfg = load_config(ok)
    assert cfg.dram_bytes_per_cycle == 32 and cfg.spad_elems == 65536
    assert cfg.fingerprint() != CFG.fingerprint() == load_config().fingerprint()
    assert CFG.acc_elems == 16384 and CFG.macs_per_cycle == 256
