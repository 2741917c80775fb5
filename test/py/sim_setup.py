"""A simulator set up by hand for tests that edit the instruction words before they run."""

from __future__ import annotations

import numpy as np

from novella_mlir.runtime import expr
from simulator import Simulator


def loaded(npu, length: int, check_hazards: bool = True):
    """(simulator, words): `npu`'s weights and a seeded [1, length, 64] input written to DRAM, and the JIT's
    instruction words for that length (a copy, free to edit)."""
    ex = npu.executor
    x = np.random.default_rng(0).standard_normal((1, length, 64)).astype(np.float32)
    syms = ex.bind([x])
    sim = Simulator(ex.config, int(expr.evaluate(ex.art.dram_size, syms)), check_hazards=check_hazards)
    for name, (off, _) in ex.art.weight_layout.items():
        sim.dram.write(off, ex.art.weights[name].ravel())
    sim.dram.write(int(expr.evaluate(ex.art.inputs[0].dram, syms)), x.ravel())
    return sim, ex.jit.instantiate(syms).words.copy()
