"""MATMUL's `rowmax` and VEC's `rowsum` (docs/isa.md): the row maxima of C and the row sums of a VEC's
result, written as a contiguous column beside the instruction's own result, at no extra cycles."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import Opcode, Simulator, SimulatorError, VecFn, VecMode, encode, load_config


def _sim():
    sim = Simulator(load_config(), 64)
    sim.spad.write(0, np.random.default_rng(0).standard_normal(2048).astype(np.float32))
    return sim


def _run(*words):
    sim = _sim()
    stats = sim.run(np.stack(words))
    return sim, stats


def test_rowmax_writes_the_row_maxima_of_c_at_no_cost():
    mm = dict(m=5, k=7, n=9, a_stride=7, b_addr=100, b_stride=7, acc_stride=9, transpose_b=1)
    sim, stats = _run(encode(Opcode.MATMUL, **mm, rowmax=1, max_addr=1000))
    c = sim.acc.read(0, 45).reshape(5, 9)
    np.testing.assert_array_equal(sim.spad.read(1000, 5), c.max(axis=1))
    a, b = sim.spad.read(0, 35).reshape(5, 7), sim.spad.read(100, 63).reshape(9, 7)
    np.testing.assert_array_equal(c, a @ b.T)
    assert stats.cycles == _run(encode(Opcode.MATMUL, **mm))[1].cycles


def test_rowsum_writes_what_rowsum_of_dst_writes_at_no_cost():
    vec = dict(fn=int(VecFn.EXPSUB), mode=int(VecMode.COL), rows=6, cols=40, a_stride=40, b_addr=600, b_stride=1)
    vec.update(dst_addr=700, dst_stride=41)
    sim, stats = _run(encode(Opcode.VEC, **vec, rowsum=1, sum_mem=1, sum_addr=50))
    dst = np.stack([sim.spad.read(700 + 41 * i, 40) for i in range(6)])
    rowsum = dict(fn=int(VecFn.ROWSUM), rows=6, cols=40, a_addr=700, a_stride=41, dst_addr=1500, dst_stride=1)
    ref, _ = _run(encode(Opcode.VEC, **vec), encode(Opcode.VEC, **rowsum))
    np.testing.assert_array_equal(sim.acc.read(50, 6), ref.spad.read(1500, 6))
    np.testing.assert_array_equal(dst, np.stack([ref.spad.read(700 + 41 * i, 40) for i in range(6)]))
    assert stats.cycles == _run(encode(Opcode.VEC, **vec))[1].cycles


@pytest.mark.parametrize("fn", [VecFn.ROWMAX, VecFn.TRANSPOSE])
def test_rowsum_of_a_non_elementwise_fn_is_an_error(fn):
    with pytest.raises(SimulatorError, match="no rowsum"):
        _run(encode(Opcode.VEC, fn=int(fn), rows=2, cols=4, a_stride=4, dst_addr=500, dst_stride=4, rowsum=1))
