"""The flash-attention cost model prices what the kernel emits (issue 23): a step's VECs and MATMULs are read
from `flash_emit.Emit` (the score MATMUL, the mask and staircase adds, the online softmax, P @ V, the
normalization), and its LOADs and STORE (q, K, V, the mask, the output) from `flash_decode.load_query`,
`flash_emit.Steps.loads` and `flash_emit.store`, run into an `emit_trace.Trace`, so a change to the emitter
changes the predicted cycles with no second description to edit."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from novella_mlir.kernels import flash_cost as fc
from novella_mlir.kernels import flash_emit, forget
from novella_mlir.kernels.emit_trace import MMA, VEC
from novella_mlir.machine.target import Target
from simulator import load_config

OPENING, REST = {0: 0, 1: 1}, {0: 1, 1: 1}
DIAGONAL = {0: 1, 1: 0}


def _vecs(ops, point):
    return [(op.fn, op.rows, op.cols) for op in ops if op.kind == VEC and op.on(point)]


def test_the_trace_reads_the_emitted_softmax():
    forget()
    key = (64, 64, True, False, False, True)  # d, dv, masked, mask_row, causal, safe
    ops = fc.emitted(key, 16, 128, False, False)
    assert _vecs(ops["part1"], OPENING) == [("ADD", 16, 128), ("ROWMAX", 16, 128), ("MAX", 1, 16), ("SUB", 16, 128)]
    assert [fn for fn, *_ in _vecs(ops["part1"], REST)] == ["ADD", "ROWMAX", "MAX", "SUB"]  # the running max
    assert [fn for fn, *_ in _vecs(ops["part2"], OPENING)] == ["EXP", "ROWSUM"]
    rest = _vecs(ops["part2"], REST)
    assert [fn for fn, *_ in rest] == ["EXP", "SUB", "EXP", "COPY", "ROWSUM", "MUL", "ADD", "MUL"]
    assert rest[-1] == ("MUL", 16, 64)  # O rescaled, dv columns
    assert [(op.rows, op.k, op.cols) for op in ops["part2"] if op.kind == MMA and op.on(REST)] == [(16, 128, 64)]
    assert [(op.rows, op.k, op.cols) for op in ops["qk"]] == [(16, 64, 128)]
    out = [("MAX", 1, 16), ("FILL", 1, 16), ("DIV", 1, 16), ("MUL", 16, 64)]  # safe: the sums floored, 1 / l
    assert _vecs(ops["out"], DIAGONAL) == out
    assert not _vecs(ops["out"], REST)


def test_ones_and_expsub_move_work_between_the_units():
    forget()
    key = (64, 64, False, False, True, False)
    ops = fc.emitted(key, 32, 32, True, True)
    assert [fn for fn, *_ in _vecs(ops["part1"], DIAGONAL)] == ["ADD", "ROWMAX", "MAX", "EXPSUB"]  # the staircase
    assert [fn for fn, *_ in _vecs(ops["part1"], REST)] == ["ROWMAX", "MAX", "EXPSUB"]
    assert [fn for fn, *_ in _vecs(ops["part2"], REST)] == ["EXPSUB", "COPY", "MUL"]  # no EXP, no ROWSUM
    assert [op.cols for op in ops["part2"] if op.kind == MMA] == [65, 65]  # V's ones column: l on the array


def test_row_sums_on_the_array_leave_o_its_width():
    """`SUMS`: l (+)= P @ u, a MATMUL of one column beside P @ V (dv columns), so the rescale of O reads dv
    columns, not dv + 1, and l is rescaled as one row."""
    forget()
    key = (64, 64, False, False, False, False)
    ops = fc.emitted(key, 128, 128, flash_emit.SUMS, True)
    rest = _vecs(ops["part2"], REST)
    assert [fn for fn, *_ in rest] == ["EXPSUB", "COPY", "MUL", "MUL"]
    assert rest[-2:] == [("MUL", 1, 128), ("MUL", 128, 64)]  # l, then O with dv columns
    mms = [(op.rows, op.k, op.cols) for op in ops["part2"] if op.kind == MMA and op.on(REST)]
    assert mms == [(128, 128, 64), (128, 128, 1)]
    assert [fn for fn, *_ in _vecs(ops["part2"], OPENING)] == []  # the opening tile's l is its MATMUL's


def test_an_emitter_change_moves_the_price(monkeypatch):
    """One more VEC in the softmax emitter (no cost-model edit) costs its cycles on every tile."""
    target = Target.from_config(load_config())
    dims = fc.Dims(6, 256, 256, 64, 64, False, False, (True,) * 4)
    cand = (64, 64, False, False, 1, False)  # plain: the steps' VEC cycles add up
    forget()
    before = fc.cost(target, dims, *cand)
    part2 = flash_emit.Emit.part2

    def one_more(self, on, opening, rest):
        part2(self, on, opening, rest)
        self.tile("EXP", "p", "p", when=on)

    monkeypatch.setattr(flash_emit.Emit, "part2", one_more)
    forget()
    after = fc.cost(target, dims, *cand)
    forget()
    tiles = 6 * (256 // 64) * (256 // 64)
    assert after >= before + tiles * fc.cm.vec(target, 64, 64, "exp")


def test_a_step_of_several_heads_interleaves_their_units():
    """`interleaved` (a decode step of several heads, `flash_attention._heads_macro`): one head is its parts
    in series; two heads of a 17-key decode attention (QK 96, softmax 57 before P @ V, P @ V 96, the
    normalization 24: the simulator's figures of `bench/decode.py`'s LLaMA) take 408 cycles, as the
    simulator ran them, not 2 * 273: the second score MATMUL runs beside the first softmax."""
    assert fc.interleaved(1, 96, 57, 96, 24) == 96 + 57 + 96 + 24
    assert fc.interleaved(2, 96, 57, 96, 24) == 408
    assert fc.interleaved(4, 96, 57, 96, 24) == 8 * 96 + 24  # the matrix unit's work, then the last divide


def test_chained_ring_prices_several_heads_per_step_below_one():
    """At B = 32 (64 cache heads of 17 keys, two query rows each) one head per step waits for a DMA latency,
    its data and the compute of the head two before; two per step are bound by the DRAM channel."""
    t = Target.from_config(load_config())
    dims = fc.Dims(64, 2, 17, 32, 32, False, True, (True,) * 4, True, 16, True)
    one, two = (fc.cost(t, dims, 2, 64, False, False, 1, True, False, h, True) for h in (1, 2))
    channel = 64 * 2 * 17 * 32 * 4 / t.dram_bytes_per_cycle  # the K and V bytes alone
    assert channel < two < 1.25 * channel < one


ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("bench_costmodel", ROOT / "bench" / "costmodel.py")
bench = sys.modules.setdefault("bench_costmodel", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(bench)


def test_the_steps_loads_are_the_emitted_ones():
    """A pipelined step j loads K of tile j and V and the mask of tile j - 1: past either end of the key loop
    their rows are out of bounds (no data, still an issue and a latency); the query on the first step, the
    output's STORE on the last. A mask of one key tile is one contiguous run of DRAM rows, a broadcast one
    (one row read for each query row) is not."""
    forget()
    dims = fc.Dims(1, 40, 40, 32, 32, False, True, (True, True, True, False))
    steps = fc.emitted_dmas(dims, 16, 16, fc.Schedule(True, s_slots=2))
    q, k, mask = (16, 32, True), (16, 32, True), (16, 16, False)
    assert steps[16, (True, 16, None, False, False)] == ((q, k, (0, 32, True), (0, 16, False)), None)
    assert steps[16, (False, 16, 16, True, False)] == ((k, k, mask), None)
    assert steps[16, (False, None, 8, False, True)] == (((0, 32, True), (8, 32, True), (16, 8, False)), (16, 32, False))
    assert steps[8, (False, 8, 16, False, False)][0] == ((8, 32, True), k, (8, 16, False))  # the partial block
    one = fc.emitted_dmas(fc.Dims(1, 40, 16, 32, 32, False, True, (True,) * 4), 16, 16, fc.Schedule(False))
    assert one[16, (True, 16, 16, True, True)][0][-1] == (16, 16, True)
    broadcast = fc.Dims(1, 40, 16, 32, 32, False, True, (True,) * 4, mask_broadcast=True)
    assert fc.emitted_dmas(broadcast, 16, 16, fc.Schedule(False))[16, (True, 16, 16, True, True)][0][-1] == mask


def test_an_emitted_load_moves_the_price_as_it_moves_the_simulated_cycles(monkeypatch):
    """One more LOAD in the kernel's emitter (V's tile again, no cost-model edit) raises the prediction by
    about what it adds to the simulated cycles, for the pipelined and the plain schedule (edge, T = 37:
    +15,546 vs +17,490 and +24,456 vs +23,634)."""
    index, length = next(i for i, c in enumerate(bench.CASES) if c.name == "flash [6,T,64]"), 37
    t = Target.from_config(bench._config("edge"))
    dims = fc.Dims(6, length, length, 64, 64, False, False, (True,) * 4)
    cands = [(32, 16, True, False, 2, True), (16, 16, False, False, 1, True)]
    load_kv = flash_emit.load_kv

    def twice(b, g, name, *a, **f):
        load_kv(b, g, name, *a, **f)
        if name == "v":
            load_kv(b, g, name, *a, **f)

    def measure():
        forget()
        return [(fc.cost(t, dims, *c), bench.simulate((index, "edge", length, c))) for c in cands]

    before = measure()
    monkeypatch.setattr(flash_emit, "load_kv", twice)
    after = measure()
    for (p0, s0), (p1, s1) in zip(before, after):
        assert p1 > p0 and abs((p1 - p0) / (s1 - s0) - 1) <= 0.25, (p0, s0, p1, s1)
