"""Double buffering end to end: the schedule's slots and token distances on a compiled MLP.

The hazard checker runs on every simulation here. Two slots must overlap loads and stores
with compute and stay race-free; dropping one token of the two-slot protocol must be caught."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.runtime import expr
from simulator import HazardError, Simulator, isa

POP_NEXT = 1 << next(f.offset for f in isa.LAYOUT[isa.Opcode.NOP] if f.name == "pop_next")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).eval()


@pytest.fixture(scope="module")
def compiled():
    model = _mlp()
    x = torch.randn(1, 16, 64)
    return model, {
        slots: compile_torch(
            model, x, min_len=1, max_len=2048, buckets=False, pass_options={"novella-tile": {"slots": slots}}
        )
        for slots in (1, 2)  # one program each (no shape bucket): the tests drive its executor directly
    }


def test_two_slots_match_eager_and_overlap(compiled):
    model, npus = compiled
    x = torch.randn(1, 1000, 64)
    ref = model(x).detach()
    stats = {}
    for slots, npu in npus.items():
        torch.testing.assert_close(npu(x), ref, rtol=1e-4, atol=1e-4)
        stats[slots] = npu.last_run.stats
    assert "load_slots = 2" in npus[2].ir("novella-schedule") and "slot = {" in npus[2].ir("novella-schedule")
    assert "slot = {" not in npus[1].ir("novella-schedule")
    s1, s2 = stats[1], stats[2]
    assert s2.macs == s1.macs
    # the loads of step k+1 run under the compute of step k: the queues' busy time overlaps more
    overlap = {k: sum(s.busy.values()) / s.cycles for k, s in stats.items()}
    assert overlap[2] > overlap[1], overlap
    assert s2.token_waits["C2L"]["cycles"] < s1.token_waits["C2L"]["cycles"], "loads wait less for compute"


def _sim(npu, length, check_hazards=True):
    ex = npu.executor
    x = np.random.default_rng(0).standard_normal((1, length, 64)).astype(np.float32)
    syms = ex.bind([x])
    sim = Simulator(ex.config, int(expr.evaluate(ex.art.dram_size, syms)), check_hazards=check_hazards)
    for name, (off, _) in ex.art.weight_layout.items():
        sim.dram.write(off, ex.art.weights[name].ravel())
    sim.dram.write(int(expr.evaluate(ex.art.inputs[0].dram, syms)), x.ravel())
    return sim, ex.jit.instantiate(syms).words.copy()


def test_dropped_two_slot_token_is_a_race(compiled):
    """Clear the C2L pop of a slotted load in the middle of the first linear: the load then
    overwrites the slot that the compute of two steps before may still read."""
    _, npus = compiled
    sim, words = _sim(npus[2], 700)
    sim.run(words)  # clean as compiled
    loads = [i for i, w in enumerate(words) if isa.decode(w).opcode == isa.Opcode.LOAD and int(w[0]) & POP_NEXT]
    victim = loads[len(loads) // 4]
    words[victim, 0] &= ~np.uint64(POP_NEXT)
    sim, _ = _sim(npus[2], 700)
    with pytest.raises(HazardError, match="with no dependency token ordering them"):
        sim.run(words)
