"""The simulator's fast path against its readable path, bit for bit, and the interval hazard checker.

Every program here runs on both (`Simulator(fast=False)` is the readable
`exec_<mnemonic>` loop): the memories after the run, the cycles and every
stat must be identical, or both must raise the same error. The cycle counts
of the golden programs are pinned in `test/golden/cycles.json`, recorded
before the speed work (the timing model must not change).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
import goldens  # noqa: E402
import models  # noqa: E402
import test_simulator as hand  # noqa: E402

from novella_mlir.runtime import expr  # noqa: E402
from simulator import HazardError, Opcode, Simulator, SimulatorError, VecFn, VecMode, encode, fast, fast_plan, isa  # noqa: E402

CYCLE_KEYS = ("cycles", "dma_bytes_loaded", "dma_bytes_stored", "instructions", "macs")
CASES = {
    "mlp": (2048, (1, 7, 17, 65, 2048)),
    "mlp384": (1500, (1, 65)),
    "layer": (1500, (2, 65)),
    "encoder": (1500, (3, 16)),
}


def _run(words, setup, fast_path: bool, **kw):
    sim = setup(fast_path, **kw)
    try:
        stats = sim.run(words)
    except SimulatorError as e:
        return type(e).__name__, str(e)
    mems = tuple(u.data.view(np.uint32).copy() for u in (sim.dram, sim.spad, sim.acc))
    return mems, stats.to_dict(), str(stats)


def assert_same(words, setup, **kw):
    """Runs `words` on both paths (setup(fast, **kw) -> a loaded Simulator); returns the fast result."""
    slow, quick = _run(words, setup, False, **kw), _run(words, setup, True, **kw)
    if isinstance(slow[0], str) or isinstance(quick[0], str):
        assert slow == quick
        return quick
    for a, b in zip(slow[0], quick[0]):
        assert np.array_equal(a, b), "memories differ"
    assert slow[1:] == quick[1:]
    return quick


def _model_setup(npu, x):
    ex = npu.executor
    syms = ex.bind([x])
    prog = ex.program(syms)  # the program (shape bucket) that runs this length

    def setup(fast_path, **kw):
        sim = Simulator(ex.config, int(expr.evaluate(prog.dram_size, syms)), fast=fast_path, **kw)
        for name, (off, _) in prog.weight_layout.items():
            sim.dram.write(off, ex.art.weights[name].ravel())
        sim.dram.write(int(expr.evaluate(prog.inputs[0].dram, syms)), x.ravel())
        return sim

    return ex.jit.instantiate(syms).words, setup


def _model(name):
    return models.compile_model(name, CASES[name][0])


@pytest.mark.parametrize("name", sorted(CASES))
def test_models_bit_identical_and_cycles_unchanged(name):
    spec, _, npu = _model(name)
    path = ROOT / "test" / "golden" / "cycles.json"
    now = json.loads(path.read_text())
    for t in CASES[name][1]:
        words, setup = _model_setup(npu, spec.example(t).numpy())
        _, stats, _ = assert_same(words, setup)
        now[f"{name}/{CASES[name][0]}/{t}"] = {k: stats[k] for k in CYCLE_KEYS}
    goldens.check(path, now, f"{name}: timing changed ({{path}}):\n{{diff}}\nNOVELLA_UPDATE_GOLDEN=1 rewrites it.")


@pytest.mark.parametrize("drop", [None, "L2C", "C2S", "C2L"])
@pytest.mark.parametrize("check_hazards", [True, False])
def test_hand_programs_bit_identical(drop, check_hazards):
    words, _ = hand._tiled_matmul_program(drop)

    def setup(fast_path, **kw):
        hand.RNG = np.random.default_rng(7)  # the same data on both paths
        sim, _, _, _ = hand._matmul_sim(drop, fast=fast_path, **kw)
        return sim

    assert_same(words, setup, check_hazards=check_hazards)


def _vec(fn, mode=VecMode.TENSOR, **kw):
    base = dict(fn=int(fn), mode=int(mode), rows=5, cols=7, a_stride=9, b_addr=200, b_stride=9)
    return encode(Opcode.VEC, **{**base, "dst_addr": 400, "dst_stride": 11, **kw})


def _spad_setup(fast_path, **kw):
    sim = Simulator(hand.CFG, 4096, fast=fast_path, **kw)
    sim.spad.write(0, np.random.default_rng(3).standard_normal(1024).astype(np.float32) * 3)
    sim.acc.write(0, np.random.default_rng(4).standard_normal(1024).astype(np.float32))
    return sim


VEC_WORDS = [
    *(_vec(fn, mode, imm=1.5) for fn in (VecFn.ADD, VecFn.SUB, VecFn.MUL, VecFn.DIV, VecFn.MAX) for mode in VecMode),
    *(_vec(fn) for fn in (VecFn.EXP, VecFn.RSQRT, VecFn.TANH, VecFn.ERF, VecFn.RELU, VecFn.COPY)),
    _vec(VecFn.ROWSUM),
    _vec(VecFn.ROWMAX, a_mem=1),
    *(_vec(fn, a_stride=7, dst_stride=1) for fn in (VecFn.ROWSUM, VecFn.ROWMAX)),  # contiguous: reduced in place
    _vec(VecFn.ROWSUM, a_stride=7, dst_addr=3, dst_stride=1),  # the output inside its input
    _vec(VecFn.COPY, a_stride=7, dst_addr=5, dst_stride=7),  # overlapping tiles (NumPy buffers the copy)
    _vec(VecFn.FILL, imm=-2.25, dst_mem=1),
    _vec(VecFn.COPY, dst_addr=2, dst_stride=3),  # overlapping rows: the readable path
    _vec(VecFn.TRANSPOSE, dst_stride=5),  # into a [cols x rows] tile
    _vec(VecFn.TRANSPOSE, a_mem=1, dst_mem=1, dst_addr=3, dst_stride=9),  # overlapping its source
    _vec(VecFn.ADD, mode=VecMode.COL, b_stride=0),  # a broadcast column
    _vec(VecFn.MUL, mode=VecMode.COL, dst_addr=0, dst_stride=9),  # in place (the compiled broadcast loop)
    _vec(VecFn.DIV, mode=VecMode.SCALAR, imm=0.0),  # division by zero, bit for bit
    _vec(VecFn.SUB, mode=VecMode.ROW, b_addr=402),  # the row inside the destination: NumPy's loop
    _vec(VecFn.ROWSUM, cols=0),  # an error on both paths
    _vec(VecFn.EXP, dst_addr=65530),  # out of range on both paths
    encode(Opcode.MATMUL, m=5, k=7, n=3, a_stride=9, b_addr=100, b_stride=8, acc_stride=3, transpose_b=1),
    encode(Opcode.MATMUL, m=4, k=6, n=5, a_stride=6, b_addr=300, b_stride=5, acc_stride=20, accumulate=1),
    encode(Opcode.MATMUL, m=5, k=7, n=3, a_stride=9, b_addr=100, b_stride=8, acc_stride=3, rowmax=1, max_addr=600),
    encode(
        Opcode.MATMUL,
        m=4,
        k=6,
        n=5,
        a_stride=6,
        b_addr=300,
        b_stride=5,
        acc_stride=20,
        accumulate=1,
        rowmax=1,
        max_addr=7,
    ),  # five accesses (the maxima inside A): the readable path
    _vec(VecFn.EXPSUB, mode=VecMode.COL, b_stride=1, rowsum=1, sum_addr=700),
    _vec(VecFn.ADD, rowsum=1, sum_mem=1, sum_addr=3),
    _vec(VecFn.MUL, mode=VecMode.SCALAR, imm=0.5, rowsum=1, sum_addr=402),  # the sums inside dst
    _vec(VecFn.ROWSUM, rowsum=1, sum_addr=700),  # an error on both paths
    encode(Opcode.LOAD, sram_stride=6, dram_stride=10, rows=8, row_start=-3, row_step=2, row_bound=9, cols=6),
    encode(Opcode.LOAD, sram_stride=6, dram_stride=10, rows=4, row_start=9, row_step=1, row_bound=9, cols=6),
    encode(Opcode.LOAD, sram_stride=6, dram_stride=10, rows=3, row_start=2, row_step=0, row_bound=9, cols=6),
    encode(
        Opcode.STORE,
        mem=1,
        sram_stride=6,
        dram_base=500,
        dram_stride=7,
        rows=5,
        row_start=-1,
        row_step=1,
        row_bound=3,
        cols=6,
    ),
    encode(Opcode.STORE, sram_stride=6, dram_base=500, dram_stride=2, rows=3, row_bound=3, cols=6),  # overlap
    encode(Opcode.NOP),
]


@pytest.mark.parametrize("k", range(len(VEC_WORDS)))
def test_single_instructions_bit_identical(k):
    assert_same(VEC_WORDS[k][None, :], _spad_setup)


def test_instruction_sequence_bit_identical():
    ok = [w for w in VEC_WORDS if "error" not in str(_run(w[None, :], _spad_setup, False)[0])]
    words = np.stack([w for w in ok if isinstance(_run(w[None, :], _spad_setup, False)[0], tuple)])
    assert len(words) > 30
    assert_same(words, _spad_setup)


@pytest.mark.parametrize("checks", [(True, False, True), (False, True, False)])
def test_a_rerun_reuses_the_schedule_bit_identical(checks):
    """Running the same program again on one simulator (its plan and issue schedule kept, hazards on or off)
    gives the readable path's memories and stats each time."""
    spec, _, npu = _model("layer")
    words, setup = _model_setup(npu, spec.example(65).numpy())
    words.flags.writeable = False  # what the JIT hands the simulator: a plan kept for the next run
    want = _run(words, setup, False)
    sim = setup(True)
    start = [u.data.copy() for u in (sim.dram, sim.spad, sim.acc)]
    for check in checks:
        for u, d in zip((sim.dram, sim.spad, sim.acc), start):
            u.data[:] = d
        sim.check_hazards = check
        stats = sim.run(words)
        assert all(np.array_equal(a, u.data.view(np.uint32)) for a, u in zip(want[0], (sim.dram, sim.spad, sim.acc)))
        assert (stats.to_dict(), str(stats)) == want[1:]
    assert sim._plan is not None and sim._plan[1].schedules


def test_a_checked_rerun_checks_again(monkeypatch):
    """Only unchecked runs reuse a kept schedule: every run with hazard checking on runs the checker."""
    from simulator import _fast_numba

    spec, _, npu = _model("mlp")
    words, setup = _model_setup(npu, spec.example(65).numpy())
    words.flags.writeable = False
    checked = []
    real = _fast_numba.schedule
    monkeypatch.setattr(_fast_numba, "schedule", lambda *a: checked.append(a[-1]) or real(*a))
    sim = setup(True)
    for check in (True, True, False, True, False):
        sim.check_hazards = check
        sim.run(words)
    assert checked == [True, True, True]


def test_opcodes_without_a_fast_form_take_the_readable_path(monkeypatch):
    """An opcode the fast path does not prepare (e.g. one just added to the ISA) runs via exec_<mnemonic>."""
    spec, _, npu = _model("mlp")
    words, setup = _model_setup(npu, spec.example(65).numpy())
    before = assert_same(words, setup)
    monkeypatch.setattr(fast_plan, "FAST_OPS", frozenset({Opcode.NOP, Opcode.LOAD}))
    calls = []
    real = fast._Loop._readable
    monkeypatch.setattr(fast._Loop, "_readable", lambda self, i: calls.append(i) or real(self, i))
    after = assert_same(words, setup)
    assert calls and after[1] == before[1]


def _drop_token(words, queue_of, rng):
    """Clears one pop flag and the push it would have received (FIFO channels): a dropped dependency."""
    from simulator.units import TOKEN_ROUTES

    head = {x.name: x for x in isa.HEADER}
    routes = [(q, flag, ch) for (q, flag), ch in TOKEN_ROUTES.items()]
    pops = [(q, f, ch) for q, f, ch in routes if f.startswith("pop")]
    q, flag, ch = pops[rng.integers(len(pops))]
    ((pq, pflag),) = [(pq, pf) for pq, pf, c in routes if c == ch and pf.startswith("push")]

    def flagged(queue, name):
        f = head[name]
        on = (words[:, 0] >> np.uint64(f.offset)) & np.uint64(1)
        return np.flatnonzero((on == 1) & (queue_of == queue))

    consumers, producers = flagged(q, flag), flagged(pq, pflag)
    if not len(consumers):
        return None
    k = int(rng.integers(len(consumers)))
    out = words.copy()
    out[consumers[k], 0] &= ~np.uint64(1 << head[flag].offset)
    out[producers[k], 0] &= ~np.uint64(1 << head[pflag].offset)
    return out


@pytest.mark.parametrize("name,t", [("mlp", 200), ("layer", 65)])
def test_random_token_faults_are_caught(name, t):
    """A dropped dependency either races (a HazardError on both paths) or is redundant, and then the
    outputs are those of the intact program."""
    spec, _, npu = _model(name)
    words, setup = _model_setup(npu, spec.example(t).numpy())
    clean = _run(words, setup, True)
    queue_of = np.array([isa.QUEUE_OF[isa.Opcode(int(c))] for c in isa.opcodes(words)])
    rng = np.random.default_rng(11)
    caught = 0
    for _ in range(12):
        bad = _drop_token(words, queue_of, rng)
        if bad is None:
            continue
        got = assert_same(bad, setup)
        if got[0] == "HazardError":
            caught += 1
            assert "hazard" in got[1]
        else:
            assert not isinstance(got[0], str), got
            assert all(np.array_equal(a, b) for a, b in zip(got[0], clean[0])), "a race no checker saw"
    assert caught >= 4


def _strided(sram_addr, cols, push=0, pop=0, write_vec=False):
    if write_vec:
        return encode(Opcode.VEC, fn=int(VecFn.FILL), rows=8, cols=cols, dst_addr=sram_addr, dst_stride=16, imm=1.0)
    return encode(
        Opcode.LOAD, sram_addr=sram_addr, sram_stride=16, dram_stride=8, rows=8, row_step=1, row_bound=8, cols=cols
    )


def test_interval_checker_sees_elements_not_just_ranges():
    """Unordered LOAD and VEC writing interleaved columns of the same rows: ranges overlap, elements do not."""
    disjoint = np.stack([_strided(0, 8), _strided(8, 8, write_vec=True)])
    Simulator(hand.CFG, 64).run(disjoint)
    Simulator(hand.CFG, 64, fast=False).run(disjoint)
    clash = np.stack([_strided(0, 8), _strided(7, 8, write_vec=True)])
    for fast_path in (True, False):
        with pytest.raises(HazardError, match=r"WAW hazard.*spad\[7, 120\).*load instruction 0"):
            Simulator(hand.CFG, 64, fast=fast_path).run(clash)


def test_fields_without_a_fast_form_take_the_readable_path(monkeypatch):
    """A field the fast form does not know (e.g. a mode bit just added to LOAD) sends the words that set
    it through exec_<mnemonic>, with the readable timing."""
    spec, _, npu = _model("mlp")
    words, setup = _model_setup(npu, spec.example(65).numpy())
    before = assert_same(words, setup)
    known = dict(fast_plan.FAST_FIELDS)
    known[Opcode.LOAD] = known[Opcode.LOAD] - {"row_step"}
    monkeypatch.setattr(fast_plan, "FAST_FIELDS", known)
    calls = []
    real = fast._Loop._readable
    monkeypatch.setattr(fast._Loop, "_readable", lambda self, i: calls.append(i) or real(self, i))
    after = assert_same(words, setup)
    loads = np.flatnonzero(isa.opcodes(words) == Opcode.LOAD)
    assert sorted(set(calls)) == loads.tolist() and after[1] == before[1]


def test_compiled_erf_bit_identical():
    """The fast path's compiled ERF does the hardware erf's fp32 operations in order: every bit pattern
    class (normal, denormal, +-0, +-inf, NaN, beyond the clamp), in place and strided."""
    from simulator import _fast_numba
    from simulator.functional import _ERF_P, _ERF_Q, erf_f32

    rng = np.random.default_rng(5)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 4.0, -4.0, 1e-45, -1e-40, 3.9999998], np.float32)
    x = np.concatenate([bits, special, rng.uniform(-5, 5, 100_000).astype(np.float32)])
    x = x[: len(x) // 100 * 100].reshape(-1, 100)
    with np.errstate(all="ignore"):
        want = erf_f32(x).view(np.uint32)
    got = np.empty_like(x)
    _fast_numba.erf_into(x, got, _ERF_P, _ERF_Q)
    assert np.array_equal(got.view(np.uint32), want)
    y = x.copy()
    _fast_numba.erf_into(y[:, ::3], y[:, ::3], _ERF_P, _ERF_Q)
    assert np.array_equal(y[:, ::3].view(np.uint32), want[:, ::3]) and np.array_equal(
        y[:, 1::3].view(np.uint32), x[:, 1::3].view(np.uint32)
    )


def _issue_both(words, setup, check=True):
    """(compiled issue loop's status, order, start, begin, end, waits), and the Python loop's (order, start,
    begin, end, waits) or its error."""
    from simulator import _fast_numba

    sim = setup(True, check_hazards=check)
    sim._reset()
    plan = fast.prepare(sim, words)
    assert plan.compiled
    data = sim.timing.dma_cycles(plan.charged)
    c = sim.config
    got = _fast_numba.schedule(
        plan.queue, plan.pop_ch, plan.push_ch, plan.fixed, data, plan.chain, c.issue_cycles + c.dma_latency,
        plan.unit, c.issue_cycles, c.unit_queue_depth, plan.acc_ids, plan.span_rows, plan.win_off, check,
    )  # fmt: skip
    loop = fast._Loop(sim, plan)
    try:
        loop.run()
    except SimulatorError as e:
        return got, type(e).__name__
    return got, (loop.order, loop.start, loop.begin, loop.end, loop.waits)


@pytest.mark.parametrize("name,t", [("mlp", 200), ("layer", 65)])
def test_compiled_issue_loop_agrees_with_python_loop(name, t):
    """Order, cycles and token waits of the compiled issue loop are the Python loop's; it reports a race
    exactly when the Python checker raises one (on the intact program and on dropped tokens)."""
    from simulator import _fast_numba

    spec, _, npu = _model(name)
    words, setup = _model_setup(npu, spec.example(t).numpy())
    (status, order, start, begin, end, waits), py = _issue_both(words, setup)
    assert status == _fast_numba.OK and order.tolist() == py[0]
    assert start.tolist() == py[1] and begin.tolist() == py[2] and end.tolist() == py[3] and waits.tolist() == py[4]
    queue_of = np.array([isa.QUEUE_OF[isa.Opcode(int(c))] for c in isa.opcodes(words)])
    rng = np.random.default_rng(12)
    races = 0
    for _ in range(12):
        bad = _drop_token(words, queue_of, rng)
        if bad is None:
            continue
        (status, *_), py = _issue_both(bad, setup)
        races += py == "HazardError"
        assert (status == _fast_numba.HAZARD) == (py == "HazardError")
        assert status != _fast_numba.DEADLOCK
    assert races >= 4


def test_new_lengths_on_one_executor_match_fresh_executors():
    """An executor that runs a new length builds a new simulator on the last one's memories (DRAM a prefix
    of the largest buffer so far): outputs and stats are those of a fresh executor, bit for bit, going down
    and back up in length."""
    from novella_mlir.runtime.executor import Executor

    spec, _, npu = _model("mlp")
    ex = Executor(npu.artifact, npu.config)
    for t in (65, 7, 1, 65, 17):
        x = spec.example(t).numpy()
        got = ex.run([x])
        fresh = Executor(npu.artifact, npu.config)
        want = fresh.run([x])
        assert all(np.array_equal(a.view(np.uint32), b.view(np.uint32)) for a, b in zip(got, want))
        assert ex.last_run.stats.to_dict() == fresh.last_run.stats.to_dict()
    sim = ex._local.sim
    assert sim.dram.data.base is not None and sim.dram.data.base.size > sim.dram.size  # 17 on 65's buffer
