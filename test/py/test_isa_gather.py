"""GATHER (indexed-row LOAD) and the compare/select/math vector fns, against numpy."""

import numpy as np
import pytest

from simulator import Opcode, Simulator, SimulatorError, VecFn, VecMode, encode, load_config
from simulator.isa import decode, disassemble

CFG = load_config()


def _gather_program(n_idx, cols, table_rows, idx_dram, table_dram, out_dram):
    idx_spad, rows_spad = 0, 64
    return np.stack(
        [
            encode(
                Opcode.LOAD,
                sram_addr=idx_spad,
                sram_stride=1,
                dram_base=idx_dram,
                dram_stride=1,
                row_step=1,
                rows=n_idx,
                row_bound=n_idx,
                cols=1,
            ),  # fmt: skip
            encode(
                Opcode.GATHER,
                sram_addr=rows_spad,
                sram_stride=cols,
                idx_addr=idx_spad,
                rows=n_idx,
                dram_base=table_dram,
                dram_stride=cols,
                row_bound=table_rows,
                cols=cols,
                push_next=1,
            ),  # fmt: skip
            encode(
                Opcode.VEC,
                fn=VecFn.COPY,
                dst_addr=1024,
                a_addr=rows_spad,
                dst_stride=cols,
                a_stride=cols,
                rows=n_idx,
                cols=cols,
                pop_prev=1,
                push_next=1,
            ),  # fmt: skip
            encode(
                Opcode.STORE,
                sram_addr=1024,
                sram_stride=cols,
                dram_base=out_dram,
                dram_stride=cols,
                row_step=1,
                rows=n_idx,
                row_bound=n_idx,
                cols=cols,
                pop_prev=1,
            ),  # fmt: skip
        ]
    )


def _run_gather(ids, table):
    n, (rows, cols) = len(ids), table.shape
    sim = Simulator(CFG, 10000)
    sim.dram.write(0, np.asarray(ids, np.float32))
    sim.dram.write(100, table.ravel())
    stats = sim.run(_gather_program(n, cols, rows, 0, 100, 5000))
    return sim.dram.read(5000, n * cols).reshape(n, cols), stats


def test_gather_rows_match_numpy_take():
    table = np.arange(10 * 8, dtype=np.float32).reshape(10, 8)
    ids = [3, 0, 9, 3, 7]
    got, stats = _run_gather(ids, table)
    np.testing.assert_array_equal(got, table[ids])
    assert stats.dma_bytes_loaded == 4 * (len(ids) + len(ids) * 8)
    assert stats.by_mnemonic["GATHER"] == 1


@pytest.mark.parametrize("bad", [10, -1, 2.5])
def test_gather_bad_index_is_a_fault(bad):
    table = np.zeros((10, 4), np.float32)
    with pytest.raises(SimulatorError, match="GATHER.*not an integer in \\[0, 10\\)"):
        _run_gather([1, bad], table)


def test_gather_disassembles_and_round_trips():
    w = encode(Opcode.GATHER, sram_addr=5, idx_addr=7, idx_mem=1, rows=3, dram_base=9, dram_stride=4, cols=4)
    assert decode(w).fields["idx_addr"] == 7
    assert "GATHER" in disassemble(w[None]) and "acc[7]" in disassemble(w[None])


def _vec(fn, a, b=None, mode=VecMode.TENSOR, imm=0.0, dst=None):
    rows, cols = a.shape
    sim = Simulator(CFG, 10)
    sim.spad.data[: a.size] = a.ravel()
    if b is not None:
        sim.spad.data[1000 : 1000 + b.size] = b.ravel()
    if dst is not None:
        sim.spad.data[2000 : 2000 + dst.size] = dst.ravel()
    word = encode(Opcode.VEC, fn=fn, mode=mode, a_addr=0, b_addr=1000, dst_addr=2000, a_stride=cols,
                  b_stride=cols, dst_stride=cols, rows=rows, cols=cols, imm=imm)  # fmt: skip
    sim.run(word[None])
    return sim.spad.data[2000 : 2000 + a.size].reshape(rows, cols)


@pytest.mark.parametrize(
    "fn,ref",
    [
        (VecFn.LT, np.less),
        (VecFn.LE, np.less_equal),
        (VecFn.GT, np.greater),
        (VecFn.GE, np.greater_equal),
        (VecFn.EQ, np.equal),
        (VecFn.NE, np.not_equal),
        (VecFn.MIN, np.minimum),
    ],  # fmt: skip
)
def test_compare_fns_give_masks(fn, ref):
    a = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    b = np.array([[3, 2, 1], [4, 9, 0]], np.float32)
    np.testing.assert_array_equal(_vec(fn, a, b), ref(a, b).astype(np.float32))


def test_sel_keeps_unselected_dst_even_when_inf():
    cond = np.array([[1, 0, 1, 0]], np.float32)
    x = np.array([[1, 2, 3, 4]], np.float32)
    other = np.array([[-np.inf, -np.inf, 7, 8]], np.float32)
    np.testing.assert_array_equal(_vec(VecFn.SEL, cond, x, dst=other), [[1, -np.inf, 3, 8]])
    np.testing.assert_array_equal(
        _vec(VecFn.SEL, cond, mode=VecMode.SCALAR, imm=0.5, dst=other), [[0.5, -np.inf, 0.5, 8]]
    )


@pytest.mark.parametrize(
    "fn,ref",
    [(VecFn.SIN, np.sin), (VecFn.COS, np.cos), (VecFn.LOG, np.log), (VecFn.ABS, np.abs), (VecFn.EXPM1, np.expm1),
     (VecFn.LOG1P, np.log1p)],
)  # fmt: skip
def test_math_fns(fn, ref):
    a = np.linspace(0.1, 7, 12, dtype=np.float32).reshape(3, 4) * np.array([1, -1, 1, -1], np.float32)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(_vec(fn, a), ref(a).astype(np.float32))


@pytest.mark.parametrize("fn,naive", [(VecFn.EXPM1, lambda a: np.exp(a) - 1), (VecFn.LOG1P, lambda a: np.log(1 + a))])
def test_expm1_log1p_keep_relative_accuracy_near_0(fn, naive):
    a = np.array([[1e-30, -3e-12, 1e-8, -1e-7, 2e-5, 0.25, -0.5, 3.0]], np.float32)
    exact = np.expm1(a.astype(np.float64)) if fn == VecFn.EXPM1 else np.log1p(a.astype(np.float64))
    rel = np.abs(_vec(fn, a).astype(np.float64) - exact) / np.abs(exact)
    assert rel.max() < 2**-23  # within 1 ulp, where exp - 1 / log(1 + x) lose every digit:
    assert (np.abs(naive(a).astype(np.float64) - exact) / np.abs(exact)).max() > 0.5
