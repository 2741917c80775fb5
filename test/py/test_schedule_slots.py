"""Rings of more than two slots, end to end.

`--novella-tile=slots=3` gives every streamed buffer three slots: `--novella-schedule` writes
`slot = {field = [stride, 3]}` and token distance 3, the JIT cycles the slots by the step index mod 3,
the hazard checker (on in every simulation here) finds no race, and dropping one token of the ring is
caught. Without the option the linear's cost model chooses the ring per op (`ring` in `novella.tiles`)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from sim_setup import loaded
from torch_mlir import ir

from novella_mlir import compile_torch
from novella_mlir.dialects import fields
from novella_mlir.dialects.attrs import to_attr
from novella_mlir.dialects.context import make_context
from novella_mlir.kernels import linear
from novella_mlir.kernels.linear_cost import Epilogue
from novella_mlir.machine.target import Target
from novella_mlir.runtime import jit_kernel, tokens
from novella_mlir.testing import oracle, streams
from simulator import HazardError, isa, load_config

POP_NEXT = 1 << next(f.offset for f in isa.LAYOUT[isa.Opcode.NOP] if f.name == "pop_next")
PUSH_PREV = 1 << next(f.offset for f in isa.LAYOUT[isa.Opcode.NOP] if f.name == "push_prev")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).eval()


@pytest.fixture(scope="module")
def three():
    model = _mlp()
    npu = compile_torch(
        model, torch.randn(1, 16, 64), min_len=1, max_len=2048, buckets=False,
        pass_options={"novella-tile": {"slots": 3}},
    )  # fmt: skip
    return model, npu


def test_three_slots_in_the_ir(three):
    text = three[1].ir("novella-schedule")
    assert re.search(r"slot = \{sram_addr = \[\d+, 3\]\}", text)
    assert re.search(r'a = \["spad", \d+, \d+, 3\]', text)
    assert "load_slots = 3" in text and "store_slots = 3" in text
    assert all(m.schedule["load_slots"] == 3 for m in three[1].artifact.macros)


@pytest.mark.parametrize("length", [1, 37, 129, 2048])  # one row, odd, a partial last row tile, the max
def test_three_slots_match_eager(three, length):
    model, npu = three
    x = torch.randn(1, length, 64)
    torch.testing.assert_close(npu(x), model(x).detach(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("length", [1, 37, 700])
def test_three_slot_words_match_the_ir_oracle_and_the_reference(three, length):
    """The NumPy expansion against the oracle (which reads the IR) and the naive reference expansion, and the
    compiled kernel's words against it."""
    npu = three[1]
    words = npu.jit._build_numpy((length,)).words
    oracle.compare(words, oracle.instantiate(npu.ir("novella-schedule", at=[length]), [length]), what=f"T={length}")
    np.testing.assert_array_equal(words, streams.reference_words(npu.artifact, [length]))
    tables = jit_kernel.Tables(npu.artifact)
    tables.limit = 1 << 62  # the kernel at every length
    status, kernel_words, *_ = jit_kernel.instantiate(tables, (length,))
    assert tables.ok and status == jit_kernel.OK
    np.testing.assert_array_equal(kernel_words, words)


def test_dropped_three_slot_token_is_a_race(three):
    """Clear the C2L pop of a slotted load in the middle of the first linear: it then overwrites the slot
    that the compute of three steps before may still read."""
    sim, words = loaded(three[1], 700)
    sim.run(words)
    loads = [i for i, w in enumerate(words) if isa.decode(w).opcode == isa.Opcode.LOAD and int(w[0]) & POP_NEXT]
    words[loads[len(loads) // 4], 0] &= ~np.uint64(POP_NEXT)
    sim, _ = loaded(three[1], 700)
    with pytest.raises(HazardError, match="with no dependency token ordering them"):
        sim.run(words)


def test_token_rule_distance_is_the_load_slots():
    """Six steps of one load and one compute: with load_slots 3 the load of step k waits for the compute of
    step k - 3 (pops C2L from k = 3 on, pushed by computes 0..2); with 2, of step k - 2."""
    step = np.repeat(np.arange(6), 2)
    queue = np.tile([tokens.LOAD, tokens.COMPUTE], 6)
    for slots in (2, 3):
        bits = tokens.flags(step, queue, np.ones(12, bool), np.full(6, slots), np.ones(6, np.int64), np.full(6, -1))
        popped = [k for k in range(6) if int(bits[2 * k]) & POP_NEXT]
        pushed = [k for k in range(6) if int(bits[2 * k + 1]) & PUSH_PREV]
        assert popped == list(range(slots, 6)) and pushed == list(range(6 - slots)), (slots, popped, pushed)
    assert tokens.slot_of(512) == (512, 2) and tokens.slot_of([512, 3]) == (512, 3)


def test_the_cost_model_chooses_the_ring():
    """Whisper-tiny's fc2 shape at T = 2048 (DRAM-bound, x and W tiles streamed): a third slot lets the loads
    run two steps ahead, and the model takes it; fc1's (weight-stationary, compute-bound) keeps two. The
    third slot is no fitting candidate of its own: it is priced beside the two-slot winner only, with its
    tm, tn, ws and res_acc (`_rings`); none beside fc1's."""
    target = Target.from_config(load_config(None))
    fc2 = linear.LINEAR.choose(target, 2048, 1536, 384, Epilogue(act="relu"), {})
    assert fc2[1][-1] == 3 and {b.name: b.slots for b in fc2[2].buffers}["a"] == 3
    fc1 = linear.LINEAR.choose(target, 2048, 384, 1536, Epilogue(act="gelu"), {})
    assert fc1[1][-1] == 0 and {b.name: b.slots for b in fc1[2].buffers}["a"] == 2
    relu = Epilogue(act="relu")
    assert {c[-1] for c in linear._fitting(linear.LINEAR, target, 1536, 384, relu, 0)} == {0}
    rings = linear._rings(linear.LINEAR, target, 1536, 384, relu, fc2[1])
    same = [c[:2] + c[3:4] + c[5:6] == fc2[1][:2] + fc2[1][3:4] + fc2[1][5:6] for c in rings]  # tm, tn, ws, ra
    assert fc2[1] in rings and all(same) and {c[-1] for c in rings} == {3}
    assert linear._rings(linear.LINEAR, target, 384, 1536, Epilogue(act="gelu"), fc1[1]) == ()


def _buffers(entries: dict) -> ir.DictAttr:
    return ir.DictAttr.get({k: ir.ArrayAttr.get([to_attr(x) for x in v]) for k, v in entries.items()})


def test_the_verifier_bounds_the_slots():
    with make_context(), ir.Location.unknown():
        assert fields.buffer_entries(_buffers({"a": ["spad", 0, 64, 3]}))["a"] == ("spad", 0, 64, 3)
        for bad in (["spad", 0, 64, 5], ["spad", 0, 64, 3, 1], ["spad", 0, 64, 1]):
            with pytest.raises(fields.FieldError, match="slots 2..4"):
                fields.buffer_entries(_buffers({"a": bad}))
        layout = fields.INST_FIELDS["LOAD"]
        fields._check_slot(ir.DictAttr.get({"sram_addr": to_attr([64, 3])}), layout)
        for bad in ([64, 2], [0, 3], [64, 5], -1):
            with pytest.raises(fields.FieldError, match="strides >= 0 or"):
                fields._check_slot(ir.DictAttr.get({"sram_addr": to_attr(bad)}), layout)
