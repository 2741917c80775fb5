"""Prologue fusion (--novella-fuse `fuse-prenorm`): a layer norm whose every use is a linear's input
becomes the linears' prologue; the normalized rows stay in the scratchpad as the MATMULs' A operand.
Checked against eager at T = 1, odd, a partial last row tile and the maximum, hazard checker on."""

from __future__ import annotations

import pytest
import torch

from novella_mlir import compile_torch

MAX = 300
LENGTHS = (1, 37, 67, MAX)


class PreNorm(torch.nn.Module):
    """`x + out(gelu(sum_i fc_i(LN(x))))`: the norm feeds `heads` linears (as q, k, v do)."""

    def __init__(self, d=64, h=160, heads=3):
        super().__init__()
        self.ln = torch.nn.LayerNorm(d)
        self.fcs = torch.nn.ModuleList(torch.nn.Linear(d, h) for _ in range(heads))
        self.out = torch.nn.Linear(h, d)
        with torch.no_grad():  # a norm whose affine part is not the identity
            self.ln.weight.normal_()
            self.ln.bias.normal_()

    def forward(self, x):
        y = self.ln(x)
        return x + self.out(torch.nn.functional.gelu(sum(f(y) for f in self.fcs)))


def _compile(model, fuse=1, d=64):
    torch.manual_seed(0)
    opts = {"novella-fuse": {"fuse-prenorm": fuse}}
    return compile_torch(model.eval(), torch.randn(1, 16, d), min_len=1, max_len=MAX, pass_options=opts, cache=False)


def _check(model, npu, d=64):
    for length in LENGTHS:
        x = torch.randn(1, length, d, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            ref = model(x)
        torch.testing.assert_close(npu(x), ref, rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def prenorm():
    torch.manual_seed(0)
    model = PreNorm()
    return model, _compile(model), _compile(model, fuse=0)


def test_prenorm_fuses_and_matches_eager(prenorm):
    model, npu, _ = prenorm
    ir = npu.ir("novella-fuse")
    assert '"novella.layer_norm"' not in ir and ir.count("norm_input = true") == 3
    assert '"novella.layer_norm"' in npu.ir("novella-buckets")
    _check(model, npu)


def test_prologue_saves_the_norms_round_trip(prenorm):
    """The norm's STORE and the three linears' LOADs of its result are gone; they LOAD x instead."""
    model, fused, alone = prenorm
    x = torch.randn(1, 67, 64)
    out = [npu(x) for npu in (fused, alone)]
    torch.testing.assert_close(out[0], out[1], rtol=1e-5, atol=1e-5)
    (f, a) = (npu.last_run.stats for npu in (fused, alone))
    assert f.dma_bytes_stored == a.dma_bytes_stored - 67 * 64 * 4
    assert f.dma_bytes_loaded < a.dma_bytes_loaded


@pytest.mark.parametrize("ws,tk", [(0, 64), (1, 64), (2, 64), (2, 16)])
def test_prologue_in_each_order(monkeypatch, ws, tk):
    """Each loop order forced with the prologue: input-stationary normalizes each row slab once (with tk <
    K its squares are summed tk columns at a time), the others each x tile (tk = K)."""
    from novella_mlir.kernels import linear_prologue
    from novella_mlir.kernels.linear import Linear

    monkeypatch.setattr(
        Linear, "cost", lambda self, t, dims, c: float((c[3], c[2]) != (ws, tk) or not dims[3].pre_norm) + c[4]
    )
    monkeypatch.setattr(Linear, "exhaustive", True)
    monkeypatch.setattr(linear_prologue, "_gain", lambda target, op, users: 1.0)
    torch.manual_seed(0)
    model = PreNorm(heads=1)
    npu = _compile(model)
    line = next(li for li in npu.ir("novella-tile").splitlines() if "norm_input = true" in li)
    assert f"ws = {ws}" in line and f"tk = {tk} " in line
    _check(model, npu)


def test_cost_model_keeps_whispers_qkv_norm_at_short_lengths():
    """Whisper's q, k, v (384 -> 384) at T = 64 on the default config: each would normalize the rows
    again before its first MATMUL, which costs more than the layer-norm kernel saves."""
    from novella_mlir.kernels.linear import LINEAR
    from novella_mlir.kernels.linear_cost import Epilogue
    from novella_mlir.kernels.normalization import LayerNorm
    from novella_mlir.machine.target import Target
    from simulator import load_config

    target = Target.from_config(load_config(None))
    alone = LINEAR._search(target, 64, 384, 384, Epilogue(), 0)[0][0]
    fused = LINEAR._search(target, 64, 384, 384, Epilogue(pre_norm=True), 0)[0][0]
    assert 3 * (fused - alone) > LayerNorm().best(target, 64, 384)[0]


class RmsNorm(torch.nn.Module):
    """LLaMA's RMSNorm (`novella.rms_norm` after --novella-fuse-elementwise)."""

    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class PreRms(torch.nn.Module):
    """`x + down(relu(sum_i fc_i(rms(x))))`, the linears without a bias (as LLaMA's), or with one."""

    def __init__(self, d=64, h=160, heads=3, bias=False):
        super().__init__()
        self.norm = RmsNorm(d)
        self.fcs = torch.nn.ModuleList(torch.nn.Linear(d, h, bias=bias) for _ in range(heads))
        self.out = torch.nn.Linear(h, d)

    def forward(self, x):
        y = self.norm(x)
        return x + self.out(torch.relu(sum(f(y) for f in self.fcs)))


def _force_prologue(monkeypatch, ws=None):
    """The prologue fused whatever it costs (and with `ws`, that loop order chosen)."""
    from novella_mlir.kernels import linear_prologue
    from novella_mlir.kernels.linear import Linear

    monkeypatch.setattr(linear_prologue, "_gain", lambda target, op, users: 1.0)
    if ws is not None:
        monkeypatch.setattr(Linear, "cost", lambda self, t, dims, c: float(c[3] != ws or not dims[3].pre_norm) + c[4])
        monkeypatch.setattr(Linear, "exhaustive", True)


@pytest.mark.parametrize("ws,bias", [(None, False), (0, True), (1, False), (2, False)])
def test_rms_prologue_matches_eager(monkeypatch, ws, bias):
    """The RMSNorm in each linear's prologue (without norm_bias): the rows times the norm's weight before
    the MATMULs, each output row times its rsqrt(mean(x * x) + eps) in the epilogue."""
    _force_prologue(monkeypatch, ws)
    torch.manual_seed(0)
    model = PreRms(bias=bias)
    npu = _compile(model)
    ir = npu.ir("novella-fuse")
    assert '"novella.rms_norm"' not in ir and ir.count("norm_input = true") == 3
    assert "array<i32: 1, 1, 1, 0, 1, 0>" in ir
    if ws is not None:
        line = next(li for li in npu.ir("novella-tile").splitlines() if "norm_input = true" in li)
        assert f"ws = {ws}" in line
    _check(model, npu)


def test_rms_prologue_off_keeps_the_norm():
    torch.manual_seed(0)
    npu = _compile(PreRms(), fuse=0)
    ir = npu.ir("novella-fuse")
    assert '"novella.rms_norm"' in ir and "norm_input = true" not in ir


def test_cost_model_takes_the_rms_prologue_for_llamas_batched_decode():
    """At M = 32 rows of 128 (a batched decode step's q, k and v), three linears with the RMSNorm's
    prologue cost less than the norm's kernel saves: the MATMULs wait for two VECs only."""
    from novella_mlir.kernels.linear import LINEAR
    from novella_mlir.kernels.linear_cost import Epilogue
    from novella_mlir.kernels.normalization import RmsNorm as Kernel
    from novella_mlir.machine.target import Target
    from simulator import load_config

    target = Target.from_config(load_config(None))
    extra = sum(
        LINEAR._search(target, 32, 128, n, Epilogue(pre_norm=True, rms=True), 0)[0][0]
        - LINEAR._search(target, 32, 128, n, Epilogue(), 0)[0][0]
        for n in (128, 64, 64)
    )
    assert 0 < extra < Kernel().best(target, 32, 128)[0]


@pytest.mark.parametrize("tk,acc", [(16, 2), (32, 1), (64, 2)])
def test_rms_row_sums_spread_over_the_first_blocks_k_steps(monkeypatch, tk, acc):
    """Input-stationary with tk < K, the RMSNorm's squares and row sums run on the first output block's k
    steps, tk columns each (the last one also takes the rsqrt), so no step holds the whole row's VECs;
    with tk = K all on the slab's first step. Several row tiles (300 rows), one or two accumulator halves."""
    from novella_mlir.kernels import linear_prologue
    from novella_mlir.kernels.linear import Linear

    def cost(self, t, dims, c):
        return float((c[3], c[2], c[4]) != (2, tk, acc) or not dims[3].pre_norm) + c[0] / 1e4

    monkeypatch.setattr(Linear, "cost", cost)
    monkeypatch.setattr(Linear, "exhaustive", True)
    monkeypatch.setattr(linear_prologue, "_gain", lambda target, op, users: 1.0)
    torch.manual_seed(0)
    model = PreRms(heads=1)
    npu = _compile(model)
    macro = next(m for m in npu.ir("novella-macro-gen").split('"novella.macro"') if "norm_input" in m or '"pss"' in m)
    sums = macro.count('fn = "ROWSUM"')
    assert sums == 64 // tk and macro.count('fn = "RSQRT"') == 1
    assert ('psum = ["spad"' in macro) == (tk < 64)
    _check(model, npu)


def test_linear_rows_in_one_tile_take_the_smallest_tile_that_holds_them():
    """At M = 32 (a batched decode step) the tiles that differ only in a tm >= 32 cost the same: the search
    takes tm = 32, not the largest, so the row slab is no larger than the rows (and the next macro's
    buffers fit above it: its loads may start before the barrier); the exhaustive search agrees."""
    from novella_mlir.kernels.linear import LINEAR, Linear
    from novella_mlir.kernels.linear_cost import Epilogue
    from novella_mlir.machine.target import Target
    from simulator import load_config

    target = Target.from_config(load_config(None))
    exhaustive = Linear()
    exhaustive.exhaustive = True
    for m, epi in ((32, Epilogue()), (32, Epilogue(pre_norm=True, rms=True)), (4096, Epilogue())):
        cand = LINEAR._search(target, m, 128, 256, epi, 0)[1]
        assert cand[0] == 32 or m > 256
        assert exhaustive._search(target, m, 128, 256, epi, 0)[1] == cand
