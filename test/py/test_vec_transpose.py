"""The TRANSPOSE vector function (docs/isa.md): dst[c, r] = a[r, c] into a [cols x rows] tile, every
element's bits moved unchanged (inf, NaN, -0.0), on the readable and the fast path, priced as COPY;
and the last-two-dims transpose kernel, which uses it, bit for bit against eager on non-finite input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lambda_module import Lambda

from novella_mlir import compile_torch
from simulator import Opcode, Simulator, VecFn, encode, load_config

CFG = load_config()
ROWS, COLS, DST, DST_STRIDE = 5, 37, 3000, 7


def _data():
    a = np.random.default_rng(0).normal(0, 3, (ROWS, COLS)).astype(np.float32)
    a[0, 1], a[2, 3], a[4, 36], a[1, 0] = -np.inf, np.inf, np.nan, -0.0
    return a


def _run(fn, fast: bool, **kw):
    sim = Simulator(CFG, 10, fast=fast)
    sim.spad.data[: ROWS * COLS] = _data().ravel()
    sim.spad.data[DST : DST + 400] = 9.0
    f = {**dict(a_addr=0, a_stride=COLS, dst_addr=DST, dst_stride=DST_STRIDE, rows=ROWS, cols=COLS), **kw}
    stats = sim.run(np.stack([encode(Opcode.VEC, fn=fn, **f)]))
    return sim.spad.data[DST : DST + 400].copy(), stats


@pytest.mark.parametrize("fast", [False, True])
def test_transpose_moves_bits_into_a_cols_by_rows_tile(fast):
    got, _ = _run(VecFn.TRANSPOSE, fast)
    want = np.full(400, 9.0, np.float32)
    for c in range(COLS):
        want[c * DST_STRIDE : c * DST_STRIDE + ROWS] = _data()[:, c]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_transpose_costs_a_copy():
    _, transpose = _run(VecFn.TRANSPOSE, True)
    _, copy = _run(VecFn.COPY, True, dst_stride=COLS)
    assert transpose.cycles == copy.cycles
    assert "transpose" not in CFG.vector_fn_cycles


def test_swapping_the_last_two_dims_keeps_inf_nan_and_signed_zero():
    module = Lambda(lambda x: (x.transpose(1, 2) * 1.0, x.amax(1), x.amin(1)))
    npu = compile_torch(module, torch.randn(1, 6, 8), dynamic_dim=1, min_len=1, max_len=70, cache=False)
    for n in (1, 2, 37, 67):
        x = torch.randn(1, n, 8, generator=torch.Generator().manual_seed(n))
        x[0, 0, 1], x[0, n - 1, 3], x[0, n // 2, 5], x[0, 0, 6] = -torch.inf, torch.inf, torch.nan, -0.0
        for got, want in zip(npu(x), module(x)):
            assert torch.equal(got.view(torch.int32), want.contiguous().view(torch.int32)), f"T={n}"
