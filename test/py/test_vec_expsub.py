"""The EXPSUB vector function (docs/isa.md): exp(a - b) equals SUB then EXP bit for bit, in every
operand-b mode, on the readable and the fast path, and costs what EXP costs."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import Opcode, Simulator, VecFn, VecMode, encode, load_config

CFG = load_config()
ROWS, COLS = 5, 37


def _program(mode, fns):
    """VEC words over a [ROWS, COLS] tile at 0 (b at 1000, result at 2000 then 3000)."""
    f = dict(mode=mode, b_addr=1000, a_stride=COLS, b_stride=COLS if mode == VecMode.TENSOR else 1, dst_stride=COLS,
             rows=ROWS, cols=COLS, imm=1.75)  # fmt: skip
    if len(fns) == 1:
        return np.stack([encode(Opcode.VEC, fn=fns[0], a_addr=0, dst_addr=2000, **f)])
    sub = encode(Opcode.VEC, fn=VecFn.SUB, a_addr=0, dst_addr=3000, **f)
    exp = encode(Opcode.VEC, fn=VecFn.EXP, a_addr=3000, dst_addr=2000, **{**f, "mode": VecMode.TENSOR})
    return np.stack([sub, exp])


def _run(words, fast: bool):
    rng = np.random.default_rng(0)
    sim = Simulator(CFG, 10, fast=fast)
    sim.spad.data[: ROWS * COLS] = rng.normal(0, 20, ROWS * COLS).astype(np.float32)
    sim.spad.data[1000 : 1000 + ROWS * COLS] = rng.normal(0, 20, ROWS * COLS).astype(np.float32)
    sim.spad.data[0] = -np.inf
    stats = sim.run(words)
    return sim.spad.data[2000 : 2000 + ROWS * COLS].copy(), stats


@pytest.mark.parametrize("mode", list(VecMode))
@pytest.mark.parametrize("fast", [False, True])
def test_expsub_is_sub_then_exp_bit_for_bit(mode, fast):
    fused, _ = _run(_program(mode, [VecFn.EXPSUB]), fast)
    two, _ = _run(_program(mode, [VecFn.SUB, VecFn.EXP]), fast)
    np.testing.assert_array_equal(fused.view(np.uint32), two.view(np.uint32))
    assert fused[0] == 0.0  # exp(-inf - b) = 0


def test_expsub_costs_an_exp():
    _, fused = _run(_program(VecMode.COL, [VecFn.EXPSUB]), True)
    exp = encode(Opcode.VEC, fn=VecFn.EXP, a_addr=0, dst_addr=2000, a_stride=COLS, dst_stride=COLS, rows=ROWS,
                 cols=COLS)  # fmt: skip
    _, alone = _run(np.stack([exp]), True)
    assert fused.cycles == alone.cycles
    assert CFG.vector_fn_cycles["expsub"] == CFG.vector_fn_cycles["exp"] == 4
