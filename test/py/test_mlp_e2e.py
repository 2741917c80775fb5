"""The vertical slice: MLPs compiled once with a symbolic length, run on the simulator at many lengths."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from novella_mlir import CompileError, InputError, UnsupportedOpError, compile_torch, load
from simulator import load_config

LENGTHS = (1, 7, 16, 17, 63, 64, 65, 100, 1000, 2048)


def _mlp(d_in=64, d_hidden=256, d_out=64):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, d_hidden), torch.nn.GELU(), torch.nn.Linear(d_hidden, d_out), torch.nn.ReLU()
    ).eval()


@pytest.fixture(scope="module")
def mlp():
    model = _mlp()
    return model, compile_torch(model, torch.randn(1, 16, 64), dynamic_dim=1, min_len=1, max_len=2048)


@pytest.mark.parametrize("length", LENGTHS)
def test_mlp_matches_pytorch(mlp, length):
    model, npu = mlp
    x = torch.randn(1, length, 64)
    y = npu(x)
    assert y.shape == (1, length, 64)
    torch.testing.assert_close(y, model(x).detach(), rtol=1e-4, atol=1e-4)
    assert npu.last_run.symbols == {"T": length}


def _linear_tiles(npu, at=None) -> list[dict]:
    """Each linear's tiles in the program that runs at T = `at` (None: the generic one)."""
    ir = npu.ir("novella-tile", at=None if at is None else [at])
    found = [dict(re.findall(r"(\w+) = (\d+) : i64", body)) for body in re.findall(r"novella.tiles = \{([^}]*)\}", ir)]
    return [{"acc_slots": 1, **{k: int(v) for k, v in f.items()}} for f in found if "tk" in f]


def _row_tiles(npu, at) -> list[int]:
    """The row tile (tm) of each op of the program at T = `at`: the linears', or a fused MLP's row block."""
    ir = npu.ir("novella-tile", at=[at])
    return [int(tm) for tm in re.findall(r"novella.tiles = \{[^}]*\btm = (\d+) : i64", ir)]


def test_compiled_once_program_grows_with_length(mlp):
    """Within each program (a shape bucket, the generic one), the words grow with the row tiles (a short
    bucket's fused MLP: its row blocks)."""
    _, npu = mlp
    for prog in npu.artifact.programs:
        (lo, hi), tms = prog.ranges[0], _row_tiles(npu, at=prog.ranges[0][0])
        same = min(hi, *(-(-lo // tm) * tm for tm in tms))  # the last length with lo's row tile counts
        counts = {}
        for length in sorted({lo, same, same + 1, hi}):
            npu(torch.randn(1, length, 64))
            counts[length] = npu.last_run.program.n_words
        assert counts[lo] == counts[same], prog.ranges
        if same < hi:
            assert counts[same] < counts[same + 1] <= counts[hi], prog.ranges
    assert npu.last_run.stats.macs == 2 * 2048 * 64 * 256


def _expected(t, k, n, tile, act_ops):
    """Counts of one linear at T=t from its tiling: steps = row tiles x column blocks x k steps.
    The bias row loads once. Weight-stationary (ws=1) loads W once per column block and the x tile per
    step; output-stationary (ws=0) an x and a W tile per step; input-stationary (ws=2) the x row slab
    once per row tile and a W tile per step. The epilogue (bias add, activation, STORE) runs once per
    (row tile, column block), whatever the accumulator halves."""
    m_tiles, n_blocks, k_steps = -(-t // tile["tm"]), n // tile["tn"], k // tile["tk"]
    steps, blocks, ws = m_tiles * n_blocks * k_steps, m_tiles * n_blocks, tile["ws"]
    loads = 1 + (m_tiles if ws == 2 else steps) + (n_blocks if ws == 1 else steps)
    w_bytes = n * k * (1 if ws == 1 else m_tiles) + n
    return {
        "LOAD": loads,
        "MATMUL": steps,
        "VEC": blocks * (1 + act_ops),
        "STORE": blocks,
        "loaded": 4 * (w_bytes + t * k * (1 if ws == 2 else n_blocks)),
        "stored": 4 * t * n,
    }


def test_stats_follow_from_shapes_and_tiling(mlp):
    """At T=300 every count follows from the shapes and each linear's tiling and loop order
    (`novella.tiles`, chosen by the cost model): instruction counts by kind, DMA bytes, MACs."""
    _, npu = mlp
    t = 300
    npu(torch.randn(1, t, 64))
    s = npu.last_run.stats
    tiles = _linear_tiles(npu, at=t)
    assert len(tiles) == 2
    e1, e2 = _expected(t, 64, 256, tiles[0], 5), _expected(t, 256, 64, tiles[1], 1)
    assert s.macs == t * (64 * 256 + 256 * 64)
    assert s.dma_bytes_loaded == e1["loaded"] + e2["loaded"]
    assert s.dma_bytes_stored == e1["stored"] + e2["stored"]
    kinds = ("LOAD", "MATMUL", "VEC", "STORE")
    assert dict(s.by_mnemonic) == {**{k: e1[k] + e2[k] for k in kinds}, "NOP": 1}
    assert s.instructions == npu.last_run.program.n_words == sum(s.by_mnemonic.values())
    assert s.mac_utilization == s.macs / (256 * s.cycles)
    assert s.cycles >= max(s.busy.values()), "each unit runs one instruction at a time"


@pytest.mark.parametrize(
    "dims,length",
    [((32, 48, 16), 33), ((128, 512, 96), 130), ((16, 16, 16), 5), ((384, 1536, 384), 70)],
)
def test_mlp_shapes(dims, length):
    """Each linear's tiles divide its dims in the program that runs at `length`, and a case whose tiling
    there splits K (the MATMUL accumulate path) is among them; numerics at T=1 and a partial row tile."""
    model = _mlp(*dims)
    npu = compile_torch(model, torch.randn(1, 8, dims[0]), dynamic_dim=1, min_len=1, max_len=512)
    tiles = _linear_tiles(npu, at=length)
    for (k, n), tile in zip(zip(dims[:2], dims[1:]), tiles):
        assert k % tile["tk"] == 0 and n % tile["tn"] == 0, (dims, tile)
    if dims == (384, 1536, 384):
        assert any(k // tile["tk"] > 1 for k, tile in zip(dims[:2], tiles)), "a K split runs"
    for t in (1, length):
        x = torch.randn(1, t, dims[0])
        torch.testing.assert_close(npu(x), model(x).detach(), rtol=1e-4, atol=1e-4)


def test_ir_after_every_stage(mlp):
    _, npu = mlp
    assert "torch.aten.linear" in npu.ir("torch")
    assert "affine_map<()[s0] -> (1, s0, 64)>" in npu.ir("novella")
    assert 'act = "gelu"' in npu.ir("novella-legalize")
    assert "s0 ceildiv " in npu.ir("novella-tile")
    assert '"novella.dma_load"' in npu.ir("novella-macro-gen")
    assert '"novella.inst"' in npu.ir("novella-inst-gen")
    with pytest.raises(KeyError, match="stages"):
        npu.ir("no-such-stage")


def test_artifact_round_trip(mlp, tmp_path):
    model, npu = mlp
    path = tmp_path / "mlp.nvla"
    npu.save(path)
    again = load(path)
    assert again.artifact.nbytes == npu.artifact.nbytes > 0
    x = torch.randn(1, 77, 64)
    assert torch.equal(again(x), npu(x))


def test_length_out_of_bounds(mlp):
    _, npu = mlp
    with pytest.raises(InputError, match=r"T=2049 is outside the compiled bounds \[1, 2048\]"):
        npu(torch.randn(1, 2049, 64))


def test_wrong_static_dim(mlp):
    _, npu = mlp
    with pytest.raises(InputError, match=r"shape \[1, 10, 65\], expected \[1, 10, 64\]"):
        npu(torch.randn(1, 10, 65))
    with pytest.raises(InputError, match="rank 2"):
        npu(torch.randn(10, 64))


class _Digamma(torch.nn.Module):
    def forward(self, x):
        return torch.digamma(x) + 1.0


def test_unsupported_op_names_op_and_line():
    with pytest.raises(UnsupportedOpError, match=r"test_mlp_e2e.py:\d+: unsupported op 'torch.aten.digamma'"):
        compile_torch(_Digamma(), torch.randn(1, 8, 16), dynamic_dim=1, max_len=64)


def test_config_that_cannot_fit_a_tile(tmp_path):
    toml = tmp_path / "tiny.toml"
    toml.write_text("[scratchpad]\nbytes = 4096\n\n[accumulator]\nbytes = 4096\n")
    cfg = load_config(toml)
    with pytest.raises(CompileError, match="does not fit the SRAM of this config"):
        compile_torch(_mlp(), torch.randn(1, 8, 64), dynamic_dim=1, max_len=64, config=cfg)


def test_hazard_free_and_deterministic(mlp):
    _, npu = mlp
    x = np.random.default_rng(1).standard_normal((1, 129, 64)).astype(np.float32)
    a = npu(torch.from_numpy(x))
    words = npu.last_run.program.words.copy()
    b = npu(torch.from_numpy(x))
    assert torch.equal(a, b)
    assert np.array_equal(words, npu.last_run.program.words)


def _clear_flag(words, opcode, flag):
    from simulator import isa

    f = {x.name: x for x in isa.LAYOUT[opcode]}[flag]
    op = isa.opcodes(words)
    sel = op == np.uint64(int(opcode))
    words[sel, f.lane] &= ~np.uint64(1 << f.offset)


def test_dropped_token_is_a_hazard(mlp):
    """Without the load->compute tokens, a MATMUL reads SPAD the LOAD may still be writing."""
    from simulator import HazardError, Simulator, isa

    _, npu = mlp
    npu(torch.randn(1, 200, 64))
    words = npu.last_run.program.words.copy()
    _clear_flag(words, isa.Opcode.LOAD, "push_next")
    for opcode in (isa.Opcode.MATMUL, isa.Opcode.VEC, isa.Opcode.NOP):
        _clear_flag(words, opcode, "pop_prev")
    sim = Simulator(npu.config, 1 << 20)
    with pytest.raises(HazardError, match="RAW hazard"):
        sim.run(words)


def test_bounds_that_overflow_a_field_fail_at_compile_time():
    """The programs at both bounds are instantiated at compile time: a field overflow is a CompileError."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU())
    with pytest.raises(CompileError, match=r"upper bound \(T=10000000\) does not encode: LOAD: field 'row_start'"):
        compile_torch(model, torch.randn(1, 16, 64), dynamic_dim=1, max_len=10_000_000)


class _ScaleLastDim(torch.nn.Module):
    def forward(self, x):
        return x * 2.0


def test_dynamic_last_dim_runs_on_the_pointwise_kernel():
    npu = compile_torch(_ScaleLastDim(), torch.randn(1, 4, 16), dynamic_dim=2, max_len=600)
    assert 'kernel = "novella.scalar"' in npu.ir("novella-macro-gen") and "tc = 512" in npu.ir("novella-macro-gen")
    for length in (1, 513, 600):
        x = torch.randn(1, 4, length)
        assert torch.equal(npu(x), x * 2.0)
