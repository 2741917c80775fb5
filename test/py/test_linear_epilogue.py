"""Epilogue fusion into linears (issue 10, part 4): a residual add and a post-norm layer norm become
one `novella.fused_linear`, whose output tile gets the sum (and the normalized rows) before its one
STORE; both match eager PyTorch at T = 1, odd, a partial last tile and the maximum, and each fusion
has a --novella-legalize switch."""

from __future__ import annotations

import pytest
import torch

from novella_mlir import compile_torch

MAX = 300
LENGTHS = (1, 37, 67, MAX)  # 1, odd, a partial last row tile, max


class Block(torch.nn.Module):
    """`x + fc2(act(fc1(x)))`, optionally post-normed (the BERT / nn.TransformerEncoder default)."""

    def __init__(self, d=64, h=160, norm=False, act=None):
        super().__init__()
        self.fc1, self.fc2, self.act = torch.nn.Linear(d, h), torch.nn.Linear(h, d), act or torch.nn.GELU()
        self.norm = torch.nn.LayerNorm(d) if norm else None

    def forward(self, x):
        y = x + self.fc2(self.act(self.fc1(x)))
        return self.norm(y) if self.norm is not None else y


def _compile(model, options=None, d=64):
    torch.manual_seed(0)
    opts = {"novella-legalize": options} if options else None
    return compile_torch(model.eval(), torch.randn(1, 16, d), min_len=1, max_len=MAX, pass_options=opts, cache=False)


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    out = {}
    for name, model in (("residual", Block()), ("post_norm", Block(norm=True)), ("relu", Block(act=torch.nn.ReLU()))):
        out[name] = (model, _compile(model))
    return out


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("name", ["residual", "post_norm", "relu"])
def test_fused_matches_eager(models, name, length):
    model, npu = models[name]
    x = torch.randn(1, length, 64, generator=torch.Generator().manual_seed(length))
    with torch.no_grad():
        ref = model(x)
    torch.testing.assert_close(npu(x), ref, rtol=1e-4, atol=1e-4)


def test_residual_and_norm_fold_into_the_linear(models):
    ir = models["post_norm"][1].ir("novella-legalize")
    assert ir.count('"novella.fused_linear"') == 1 and "operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1>" in ir
    assert '"novella.add"' not in ir and '"novella.layer_norm"' not in ir
    ir = models["residual"][1].ir("novella-legalize")
    assert "array<i32: 1, 1, 1, 1, 0, 0>" in ir and '"novella.add"' not in ir


def test_fusion_saves_the_traffic_of_the_separate_ops(models):
    """Fused, the sum is never stored and reloaded: the program moves less than with both fusions off."""
    model, fused = models["post_norm"]
    unfused = _compile(model, {"fuse-residual": 0, "fuse-norm": 0})
    ir = unfused.ir("novella-legalize")
    assert '"novella.fused_linear"' not in ir and '"novella.add"' in ir and '"novella.layer_norm"' in ir
    x = torch.randn(1, MAX, 64)
    y0, y1 = fused(x), unfused(x)
    torch.testing.assert_close(y0, y1, rtol=1e-4, atol=1e-4)
    s0, s1 = fused.last_run.stats, unfused.last_run.stats
    moved = [s.dma_bytes_loaded + s.dma_bytes_stored for s in (s0, s1)]
    # the add's 2 loads + store and the norm's load + store, less the residual tile load: 4 [T, 64] tensors
    # (the two programs' linears may tile differently, so within a few percent)
    assert moved[1] - moved[0] >= 0.95 * 4 * 4 * MAX * 64
    assert s0.cycles < s1.cycles


def test_norm_switch_keeps_the_residual():
    npu = _compile(Block(norm=True), {"fuse-norm": 0})
    ir = npu.ir("novella-legalize")
    assert "array<i32: 1, 1, 1, 1, 0, 0>" in ir and '"novella.layer_norm"' in ir


def test_transformer_encoder_post_norm():
    """nn.TransformerEncoder's post-norm layers: the attention output projection and fc2 each take the
    residual and the norm into their epilogue."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, norm_first=False, dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    npu = _compile(model)
    ir = npu.ir("novella-legalize")
    assert ir.count("array<i32: 1, 1, 1, 1, 1, 1>") == 4 and '"novella.layer_norm"' not in ir
    for length in (1, 37, MAX):
        x = torch.randn(1, length, 64)
        with torch.no_grad():
            ref = model(x)
        torch.testing.assert_close(npu(x), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("ws,acc", [(0, 1), (0, 2), (1, 1), (1, 2), (2, 1), (2, 2)])
def test_residual_in_the_accumulator_matches_eager(monkeypatch, ws, acc):
    """Each loop order and accumulator slot count forced with the residual loaded into the accumulator
    (`res_acc`: the MATMULs add onto it, no residual buffer, no residual VEC), hazard checker on: 1, odd,
    a partial last row tile and the maximum; with a layer norm after it too where the order allows whole
    rows (tn = N: one column block, which ws = 2 and ws = 0's two halves need more of)."""
    from novella_mlir.kernels.linear import Linear

    want = (ws, acc, 1)
    monkeypatch.setattr(Linear, "cost", lambda self, t, dims, cand: float(cand[3:6] != want or cand[6]))
    monkeypatch.setattr(Linear, "exhaustive", True)  # this cost is not above the search's bound
    whole_rows = ws == 1 or (ws, acc) == (0, 1)
    for model in (Block(h=256, act=torch.nn.ReLU()), Block(h=256, norm=True))[: 1 + whole_rows]:
        npu = _compile(model, {"fuse-norm": int(model.norm is not None)})
        ir = npu.ir("novella-tile")
        fused = [line for line in ir.splitlines() if '"novella.fused_linear"' in line]
        assert len(fused) == 1 and "res_acc = 1" in fused[0] and f"ws = {ws}" in fused[0]
        assert "res = " not in fused[0] and "res2 = " not in fused[0]  # no residual buffer in the scratchpad
        for length in LENGTHS:
            x = torch.randn(1, length, 64, generator=torch.Generator().manual_seed(length))
            with torch.no_grad():
                ref = model(x)
            torch.testing.assert_close(npu(x), ref, rtol=1e-4, atol=1e-4)


def test_cost_model_takes_the_residual_into_the_accumulator_where_it_pays():
    """Whisper's fc2 + residual (1536 -> 384) on the default config: the residual's scratchpad slots would
    leave the k tiles small; in the accumulator the k loop takes larger tiles and the model predicts fewer
    cycles than for the best tiling with the residual in the scratchpad (9% fewer: a step's LOADs are one
    DMA chain, so the small tiles' extra LOADs cost no latency each). With one k step (tk = K) the
    accumulator's LOAD would stall every step: no candidate has it."""
    from novella_mlir.kernels.linear import LINEAR, _fitting
    from novella_mlir.kernels.linear_cost import Epilogue
    from novella_mlir.machine.target import Target
    from simulator import load_config

    target, epi = Target.from_config(load_config(None)), Epilogue("none", residual=True)
    _, pick, plan = LINEAR._search(target, 256, 1536, 384, epi, 0)
    assert pick[5] == 1 and not any(b.name.startswith("res") for b in plan.buffers)
    cands = _fitting(LINEAR, target, 1536, 384, epi, 0)
    spad = min(LINEAR.cost(target, (256, 1536, 384, epi), c) for c in cands if not c[5])
    assert LINEAR.cost(target, (256, 1536, 384, epi), pick) < 0.92 * spad
    assert all(1536 // c[2] > 1 for c in cands if c[5])
    gelu = Epilogue("gelu", residual=True)  # act(x W + b) + r: the residual cannot start the sum
    assert not any(c[5] for c in _fitting(LINEAR, target, 1536, 384, gelu, 0))
