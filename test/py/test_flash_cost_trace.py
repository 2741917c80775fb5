"""The flash-attention cost model prices what the kernel emits (issue 23): a step's VECs and MATMULs are read
from `flash_emit.Emit` (the score MATMUL, the mask and staircase adds, the online softmax, P @ V, the
normalization) run into an `emit_trace.Trace`, so a change to the emitter changes the predicted cycles with
no second description to edit."""

from __future__ import annotations

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
    assert _vecs(ops["out"], DIAGONAL) == [("MAX", 1, 16), ("DIV", 16, 64)]  # safe: the sums floored first
    assert not _vecs(ops["out"], REST)


def test_ones_and_expsub_move_work_between_the_units():
    forget()
    key = (64, 64, False, False, True, False)
    ops = fc.emitted(key, 32, 32, True, True)
    assert [fn for fn, *_ in _vecs(ops["part1"], DIAGONAL)] == ["ADD", "ROWMAX", "MAX", "EXPSUB"]  # the staircase
    assert [fn for fn, *_ in _vecs(ops["part1"], REST)] == ["ROWMAX", "MAX", "EXPSUB"]
    assert [fn for fn, *_ in _vecs(ops["part2"], REST)] == ["SUB", "EXP", "COPY", "MUL"]  # no EXP, no ROWSUM
    assert [op.cols for op in ops["part2"] if op.kind == MMA] == [65, 65]  # V's ones column: l on the array


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
