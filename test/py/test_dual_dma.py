"""A second DMA engine behind the load queue is a config change (simulator/configs/dual_dma.toml) plus
its timing rule (`timing.DmaQueue`): two loads in flight at once, their latencies overlapping, their
data on the one DRAM channel, retiring in order. The same words compute the same values (eager
PyTorch at lengths 1, odd, a partial last tile and the max, hazard checker on) and take fewer cycles
where loads overlap (two LOADs one after the other; an MLP's linears chain their LOADs, whose latencies
overlap on one engine already: the same cycles); a model compiled for the config (its Target and cost
model) matches eager too."""

from __future__ import annotations

import models
import numpy as np
import pytest
import torch
from goldens import ROOT

from novella_mlir import compile_torch
from novella_mlir.machine import costmodel as cm
from novella_mlir.machine.target import Target
from novella_mlir.runtime.executor import Executor
from simulator import Opcode, Simulator, encode, load_config
from simulator.config import ConfigError

DEFAULT = load_config()
DUAL = load_config(ROOT / "simulator" / "configs" / "dual_dma.toml")
MAX_LEN = 130
LENGTHS = (1, 17, 33, MAX_LEN)  # 1, odd, a partial last row tile (16-row tiles), the max


def test_dual_dma_is_the_default_with_two_load_engines():
    assert DUAL.dma_engines == {"load": 2, "store": 1} and DEFAULT.dma_engines == {"load": 1, "store": 1}
    d = DUAL.to_dict()
    assert d.pop("load_dma_engines") == 2 and d == DEFAULT.to_dict()
    assert "load_dma_engines" not in DEFAULT.to_dict()  # default configs keep their fingerprint
    assert Target.from_config(DUAL).load_dma_engines == 2


def test_engine_count_is_checked(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[queues]\nload_dma_engines = 0\n")
    with pytest.raises(ConfigError, match="queues.load_dma_engines' must be positive"):
        load_config(bad)


def _two_loads(push: bool) -> np.ndarray:
    loads = [encode(Opcode.LOAD, sram_addr=16 * i, sram_stride=16, rows=1, row_step=1, row_bound=1, cols=16,
                    dram_base=16 * i, dram_stride=16, push_next=int(push and i == 1)) for i in range(2)]  # fmt: skip
    tail = [encode(Opcode.VEC, fn=10, rows=1, cols=32, a_addr=0, a_stride=32, dst_addr=64, pop_prev=1)] if push else []
    return np.stack(loads + tail)


@pytest.mark.parametrize("push", [False, True])
def test_two_independent_loads_overlap_their_latency(push):
    c = DEFAULT
    data = 64 // c.dram_bytes_per_cycle  # one 64-byte burst each
    runs = {}
    for name, cfg in (("default", DEFAULT), ("dual", DUAL)):
        sim = Simulator(cfg, 64, check_hazards=True)
        sim.dram.write(0, np.arange(32, dtype=np.float32))
        runs[name] = sim.run(_two_loads(push))
        np.testing.assert_array_equal(sim.spad.read(0, 32), np.arange(32, dtype=np.float32))
        if push:
            np.testing.assert_array_equal(sim.spad.read(64, 32), np.arange(32, dtype=np.float32))
    vec = (c.issue_cycles + 32 // c.vector_lanes + c.vector_latency) if push else 0  # the COPY after the token
    loads_default = 2 * (c.issue_cycles + c.dma_latency + data)
    loads_dual = c.issue_cycles + c.dma_latency + 2 * data  # the second latency under the first
    assert runs["default"].cycles == loads_default + vec
    assert runs["dual"].cycles == loads_dual + vec


def test_cost_model_prices_the_overlap():
    one, two = Target.from_config(DEFAULT), Target.from_config(DUAL)
    moves = [(16, 64, True)] * 3
    q1, d1 = cm.dmas(one, moves)
    q2, d2 = cm.dmas(two, moves)
    assert d1 == d2 and q1 - q2 == one.dma_latency  # 3 loads: 2 exposed latencies instead of 3


@pytest.fixture(scope="module")
def mlp():
    spec = models.SPECS["mlp"]
    module = spec.build(MAX_LEN)
    lo, hi = spec.bounds(MAX_LEN)
    compile_for = lambda cfg: compile_torch(module, spec.example(16), dynamic_dim=spec.dynamic_dim,  # noqa: E731
                                            min_len=lo, max_len=hi, config=cfg, cache=False)  # fmt: skip
    return spec, module, compile_for(DEFAULT), compile_for(DUAL)


def test_same_words_same_values_with_two_load_engines(mlp):
    spec, module, npu, _ = mlp
    dual = Executor(npu.artifact, config=DUAL)
    cycles = {}
    for t in LENGTHS:
        x = spec.example(t)
        with torch.no_grad():
            want = module(x).numpy()
        got = npu(x).numpy()
        got_dual = dual.run([x.numpy()], check_hazards=True)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(got_dual, got)
        cycles[t] = (npu.last_run.stats.cycles, dual.last_run.stats.cycles)
    print("T: (default cycles, dual_dma cycles)", cycles)
    # every LOAD of a linear continues the DMA chain (`linear._chain_loads`): its latency is hidden under the
    # previous LOAD's data on one engine, so the second engine has none left to overlap
    assert all(d == s for s, d in cycles.values()), cycles


def test_compiled_for_dual_dma_matches_eager(mlp):
    spec, module, _, npu = mlp
    assert Target.from_config(npu.config).load_dma_engines == 2
    for t in LENGTHS:
        x = spec.example(t)
        with torch.no_grad():
            want = module(x).numpy()
        np.testing.assert_allclose(npu(x).numpy(), want, rtol=1e-4, atol=1e-4)
