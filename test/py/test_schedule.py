"""Double buffering end to end: the schedule's slots and token distances on a compiled MLP.

The hazard checker runs on every simulation here. Two slots must overlap loads and stores
with compute and stay race-free; dropping one token of the two-slot protocol must be caught."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sim_setup import loaded

from novella_mlir import compile_torch
from simulator import HazardError, isa

POP_NEXT = 1 << next(f.offset for f in isa.LAYOUT[isa.Opcode.NOP] if f.name == "pop_next")


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)).eval()


def _variants(pass_name: str, option: str, values) -> tuple:
    """The MLP and one program of it per value of the pass option (no shape bucket: tests drive the
    executor directly)."""
    model = _mlp()
    x = torch.randn(1, 16, 64)
    opts = {v: {pass_name: {option: v}} for v in values}
    return model, {
        v: compile_torch(model, x, min_len=1, max_len=2048, buckets=False, pass_options=o) for v, o in opts.items()
    }


@pytest.fixture(scope="module")
def compiled():
    return _variants("novella-tile", "slots", (1, 2))


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


def test_dropped_two_slot_token_is_a_race(compiled):
    """Clear the C2L pop of a slotted load in the middle of the first linear: the load then
    overwrites the slot that the compute of two steps before may still read."""
    _, npus = compiled
    sim, words = loaded(npus[2], 700)
    sim.run(words)  # clean as compiled
    loads = [i for i, w in enumerate(words) if isa.decode(w).opcode == isa.Opcode.LOAD and int(w[0]) & POP_NEXT]
    victim = loads[len(loads) // 4]
    words[victim, 0] &= ~np.uint64(POP_NEXT)
    sim, _ = loaded(npus[2], 700)
    with pytest.raises(HazardError, match="with no dependency token ordering them"):
        sim.run(words)


@pytest.fixture(scope="module")
def early():
    """The MLP compiled with and without loads before the barrier (`--novella-schedule=early`)."""
    return _variants("novella-schedule", "early", (0, 2))


def test_early_loads_pass_the_barrier_and_stay_exact(early):
    """A weight load of the second linear may start before the barrier (tier 1 or 2 in `schedule.early`);
    its activation load reads what the macro before writes, so it keeps tier 0. Results stay exact at
    every length class, the hazard checker finds no race, and the program is shorter."""
    model, npus = early
    ir_text = npus[2].ir("novella-schedule")
    assert "early = [" in ir_text and "early = [" not in npus[0].ir("novella-schedule")
    cycles = {}
    for length in (1, 17, 1000, 2048):
        x = torch.randn(1, length, 64)
        ref = model(x).detach()
        for e, npu in npus.items():
            torch.testing.assert_close(npu(x), ref, rtol=1e-4, atol=1e-4)
            cycles[e, length] = npu.last_run.stats.cycles
    assert all(cycles[2, t] < cycles[0, t] for t in (1, 17, 1000, 2048)), cycles


def test_early_tiers_that_ignore_sram_are_a_race(monkeypatch):
    """The SRAM half of the analysis is load-bearing: let every load whose DRAM is safe pass the barrier
    (tier 2, SPAD buffers left in place), and one of them overwrites a buffer the macro before still
    reads; the hazard checker catches it."""
    from novella_mlir.transforms import novella_schedule

    monkeypatch.setattr(novella_schedule, "_apart", lambda xs, ys: True)
    model = _mlp()
    npu = compile_torch(model, torch.randn(1, 16, 64), min_len=1, max_len=2048, buckets=False, cache=False,
                        pass_options={"novella-schedule": {"early": 1}})  # fmt: skip
    assert "early = [2" in npu.ir("novella-schedule")
    sim, words = loaded(npu, 700)
    with pytest.raises(HazardError, match="with no dependency token ordering them"):
        sim.run(words)
