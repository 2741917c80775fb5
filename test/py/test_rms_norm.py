"""RMSNorm as one kernel (`novella.rms_norm`, formed by --novella-fuse-elementwise from the square, the row
mean and the pointwise tail, `kernels/norm_fusion.py`): transformers' LlamaRMSNorm against eager at T = 1,
odd, a partial last row tile and the maximum, and a decode step's [B, 1, C] rows; Gemma's `1 + w` (folded
into one weight by the frontend) too; a norm the pass must not take (a centred variance, a scale that is
not a weight row) stays in the pointwise kernels and matches eager too."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from novella_mlir import compile_torch

MAX = 300
LENGTHS = (1, 37, 67, MAX)
C = 96


class OffsetNorm(torch.nn.Module):
    """Gemma's RMSNorm: the weight is applied as 1 + w."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(C) - 0.5)

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + self.weight)


class Gated(torch.nn.Module):
    """An RMSNorm times a second input, not a weight row."""

    def forward(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g


class Centred(torch.nn.Module):
    """A variance about the mean: not an RMSNorm."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(C) + 0.5)

    def forward(self, x):
        d = x - x.mean(-1, keepdim=True)
        return x * torch.rsqrt((d * d).mean(-1, keepdim=True) + 1e-5) * self.weight


def _llama(eps: float = 1e-6):
    torch.manual_seed(0)
    m = LlamaRMSNorm(C, eps=eps).eval()
    with torch.no_grad():
        m.weight.uniform_(0.5, 1.5)
    return m


def _compile(model, *example, **kw):
    return compile_torch(model, *example, cache=False, **kw)


@pytest.fixture(scope="module")
def llama():
    model = _llama(1e-5)
    return model, _compile(model, torch.randn(1, 16, C), min_len=1, max_len=MAX, dynamic_dim=1)


def test_llama_rms_norm_is_one_kernel(llama):
    _, npu = llama
    text = npu.ir("novella-fuse-elementwise")
    assert text.count('"novella.rms_norm"') == 1 and "eps = 9.99999974E-6" in text
    assert "novella.reduce" not in text and "novella.generic" not in text and "novella.mul" not in text


@pytest.mark.parametrize("length", LENGTHS)
def test_llama_rms_norm_matches_eager(llama, length):
    model, npu = llama
    x = torch.randn(1, length, C, generator=torch.Generator().manual_seed(length)) * 3.0
    assert torch.allclose(npu(x), model(x), rtol=1e-5, atol=1e-5), (npu(x) - model(x)).abs().max()


def test_decode_rows_match_eager_and_save_cycles():
    model = _llama()
    x = torch.randn(32, 1, C, generator=torch.Generator().manual_seed(1))
    npu = _compile(model, x)
    plain = _compile(model, x, pass_options={"novella-fuse-elementwise": {"fuse-elementwise": 0}})
    assert '"novella.rms_norm"' in npu.ir("novella-fuse-elementwise")
    assert '"novella.rms_norm"' not in plain.ir("novella-fuse-elementwise")
    assert torch.allclose(npu(x), model(x), rtol=1e-5, atol=1e-5)
    assert torch.allclose(plain(x), model(x), rtol=1e-5, atol=1e-5)
    assert npu.last_run.stats.cycles < plain.last_run.stats.cycles / 2
    assert npu.last_run.stats.dma_bytes_loaded < plain.last_run.stats.dma_bytes_loaded


@pytest.mark.parametrize("cls", [OffsetNorm, Centred, Gated], ids=["offset-weight", "centred", "gated"])
def test_other_norms(cls):
    torch.manual_seed(0)
    model = cls().eval()
    n_in = 2 if cls is Gated else 1
    npu = _compile(model, *[torch.randn(1, 16, C)] * n_in, min_len=1, max_len=MAX, dynamic_dim=1)
    assert ('"novella.rms_norm"' in npu.ir("novella-fuse-elementwise")) == (cls is OffsetNorm)
    for length in (1, 67):
        g = torch.Generator().manual_seed(length)
        xs = [torch.randn(1, length, C, generator=g) for _ in range(n_in)]
        assert torch.allclose(npu(*xs), model(*xs), rtol=1e-5, atol=1e-5)


def test_a_row_wider_than_a_load_stays_pointwise():
    """C = 4500 is wider than a LOAD's `cols`: the norm stays in the column-tiled pointwise kernels."""
    model = LlamaRMSNorm(4500).eval()
    x = torch.randn(3, 1, 4500, generator=torch.Generator().manual_seed(2))
    npu = _compile(model, x)
    assert '"novella.rms_norm"' not in npu.ir("novella-fuse-elementwise")
    assert torch.allclose(npu(x), model(x), rtol=1e-5, atol=1e-5)
