"""Fully masked attention rows: SDPA (and `aten._safe_softmax`) give 0 for a row whose scores are
all -inf, where a plain softmax gives NaN. Checked against eager, hazard checker on, at several
lengths, on the fused kernel (`novella.flash_attention`), the unfused softmax and a left-padded OPT."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

from novella_mlir import compile_torch
from simulator import load_config

LENGTHS = (1, 37, 67, 128)  # 1, odd, a partial last tile, the maximum compiled for
T = Dim("T", min=1, max=128)


def _row_mask(n: int) -> torch.Tensor:
    """[1, 1, n, n] keep-mask: the first half of the query rows keep no key; the others keep all but the last."""
    keep = torch.ones(1, 1, n, n, dtype=torch.bool)
    keep[..., : (n + 1) // 2, :] = False
    if n > 2:
        keep[..., (n + 1) // 2 :, -1] = False
    return keep


def _qkv(n: int):
    g = torch.Generator().manual_seed(n)
    return tuple(torch.randn(1, 2, n, 16, generator=g) for _ in range(3))


class BoolMask(torch.nn.Module):
    def forward(self, q, k, v, keep):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keep > 0.5)


class AdditiveMask(torch.nn.Module):
    def forward(self, q, k, v, bias):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def _sdpa_inputs(kind: str, n: int):
    """`bool`: a keep-mask; `additive`: 0 / -inf (masked rows give 0); `finfo`: 0 / finfo(f32).min, as
    transformers' eager masks (masked rows are not all -inf: a uniform average of the values)."""
    keep = _row_mask(n)
    neg = -math.inf if kind != "finfo" else torch.finfo(torch.float32).min
    mask = keep.float() if kind == "bool" else torch.where(keep, 0.0, neg)
    return (*_qkv(n), mask)


def _check(npu, module, args, n, what):
    with torch.no_grad():
        ref = module(*args)
    y = npu(*args, check_hazards=True)
    assert not torch.isnan(ref).any()
    err = (y - ref).abs().max().item()
    assert torch.allclose(y, ref, atol=1e-5, rtol=1e-4), f"{what} at T={n}: max error {err}"


@pytest.mark.parametrize("fuse", [1, 0], ids=["fused", "unfused"])
@pytest.mark.parametrize("kind", ["bool", "additive", "finfo"])
def test_sdpa_fully_masked_rows_are_zero(kind, fuse):
    module = BoolMask() if kind == "bool" else AdditiveMask()
    npu = compile_torch(module, *_sdpa_inputs(kind, 16), dynamic_shapes=({2: T}, {2: T}, {2: T}, {2: T, 3: T}),
                        pass_options={"novella-legalize": {"fuse-attention": fuse}}, cache=False)  # fmt: skip
    legal = npu.stages.texts["novella-legalize"]
    assert ('"novella.flash_attention"' in legal) == bool(fuse)
    assert "safe = true" in legal
    for n in LENGTHS:
        _check(npu, module, _sdpa_inputs(kind, n), n, f"sdpa {kind} mask (fuse={fuse})")


@pytest.mark.parametrize("ones", [0, 2], ids=["rowsum", "sums"])
def test_flash_row_sums_off_the_ones_column(monkeypatch, ones):
    """The row sums by ROWSUM on the vector unit (`ones = 0`) or by l (+)= P @ u on the array (`ones = 2`),
    forced (`default` picks V's ones column, checked above), on `edge`: the same zero rows."""
    from novella_mlir.kernels.flash_attention import FlashAttention

    monkeypatch.setattr(FlashAttention, "cost", lambda self, t, dims, cand: float(cand[3] != ones))
    monkeypatch.setattr(FlashAttention, "exhaustive", True)
    module, ds = BoolMask(), ({2: T}, {2: T}, {2: T}, {2: T, 3: T})
    cfg = load_config(Path(__file__).resolve().parents[2] / "simulator" / "configs" / "edge.toml")
    npu = compile_torch(module, *_sdpa_inputs("bool", 16), dynamic_shapes=ds, config=cfg, cache=False)
    assert f"ones = {ones}" in "".join(t for k, t in npu.stages.texts.items() if k.startswith("novella-tile"))
    for n in LENGTHS:
        _check(npu, module, _sdpa_inputs("bool", n), n, f"sdpa on edge, ones = {ones}")


class SafeSoftmax(torch.nn.Module):
    def forward(self, x):
        return torch.ops.aten._safe_softmax(x, -1)


class Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1)


def _scores(n: int) -> torch.Tensor:
    x = torch.randn(1, 2, n, n, generator=torch.Generator().manual_seed(n))
    return x.masked_fill(~_row_mask(n), -math.inf)


def test_safe_softmax_gives_zero_rows():
    """A dynamic row length (the chunked two-pass softmax)."""
    module = SafeSoftmax()
    npu = compile_torch(module, _scores(16), dynamic_shapes=({2: T, 3: T},), cache=False)
    for n in LENGTHS:
        _check(npu, module, (_scores(n),), n, "_safe_softmax")


def test_safe_softmax_static_rows():
    """A static row length (one pass per row tile): rows 0, 3, 6, ... are all -inf."""
    module = SafeSoftmax()

    def scores(n):
        x = torch.randn(1, 2, n, 24, generator=torch.Generator().manual_seed(n))
        x[:, :, ::3] = -math.inf
        return x

    npu = compile_torch(module, scores(16), dynamic_shapes=({2: T},), cache=False)
    assert "chunked = 0" in "".join(t for k, t in npu.stages.texts.items() if k.startswith("novella-tile"))
    for n in LENGTHS:
        _check(npu, module, (scores(n),), n, "_safe_softmax, static rows")


def test_plain_softmax_keeps_torch_nan_rows():
    """torch.softmax of an all -inf row is NaN; the compiled one agrees (it is not the safe variant)."""
    module = Softmax()
    npu = compile_torch(module, _scores(16), dynamic_shapes=({2: T, 3: T},), cache=False)
    for n in (37, 128):
        x = _scores(n)
        ref, y = module(x), npu(x, check_hazards=True)
        assert torch.equal(torch.isnan(y), torch.isnan(ref)) and torch.isnan(ref).any()
        assert torch.allclose(y.nan_to_num(), ref.nan_to_num(), atol=1e-6)


class PaddedOPT(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def opt(request):
    """SDPA masks with -inf (padded query rows: every key masked, output 0); transformers' eager
    attention adds finfo(f32).min instead (those rows: a uniform average of the values)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.OPTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128,
                                 vocab_size=1000, max_position_embeddings=128, word_embed_proj_dim=64)  # fmt: skip
    cfg._attn_implementation = request.param
    model = PaddedOPT(transformers.OPTModel(cfg)).eval()
    npu = compile_torch(model, *_left_padded(16, 3), dynamic_shapes=({1: T}, {1: T}), cache=False)
    return model, npu


def _left_padded(n: int, pad: int):
    ids = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(n))
    mask = torch.ones(1, n, dtype=torch.long)
    mask[:, :pad] = 0
    return ids, mask


@pytest.mark.parametrize("n", LENGTHS)
def test_opt_left_padded_matches_eager(opt, n):
    model, npu = opt
    pads = {0} if n == 1 else {1, n // 2, n - 1}
    for pad in sorted(pads):
        _check(npu, model, _left_padded(n, pad), n, f"OPT left-padded by {pad}")
