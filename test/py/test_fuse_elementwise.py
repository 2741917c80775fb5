"""Elementwise fusion (--novella-fuse-elementwise): chains of pointwise ops become one `novella.generic`
whose body holds the chain. A LLaMA block's RMSNorm, RoPE and SwiGLU (transformers' own modules) against
eager at T = 1, odd, a partial last row tile and the maximum, hazard checker on; the fused program runs
fewer kernels and fewer cycles than the unfused one."""

from __future__ import annotations

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaConfig, LlamaMLP, LlamaRMSNorm, apply_rotary_pos_emb

from novella_mlir import compile_torch

MAX = 300
LENGTHS = (1, 37, 67, MAX)
D, HEADS = 64, 2


class Block(torch.nn.Module):
    """RMSNorm -> q projection -> RoPE, and RMSNorm -> SwiGLU MLP, summed with the residual."""

    def __init__(self):
        super().__init__()
        cfg = LlamaConfig(hidden_size=D, intermediate_size=96, num_attention_heads=HEADS, hidden_act="silu")
        self.norm, self.norm2 = LlamaRMSNorm(D), LlamaRMSNorm(D)
        self.q = torch.nn.Linear(D, D, bias=False)
        self.mlp = LlamaMLP(cfg)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm2.weight.uniform_(0.5, 1.5)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q(self.norm(x)).view(b, t, HEADS, D // HEADS).transpose(1, 2)
        q, _ = apply_rotary_pos_emb(q, q, cos, sin)
        return x + q.transpose(1, 2).reshape(b, t, D) + self.mlp(self.norm2(x))


def _inputs(t: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    angles = torch.rand(1, t, D // HEADS // 2, generator=g) * 6.0
    emb = torch.cat((angles, angles), dim=-1)
    return torch.randn(1, t, D, generator=g), emb.cos(), emb.sin()


def _compile(fuse: int):
    torch.manual_seed(0)
    opts = {"novella-fuse-elementwise": {"fuse-elementwise": fuse}}
    model = Block().eval()
    npu = compile_torch(model, *_inputs(16), min_len=1, max_len=MAX, dynamic_dim=1, pass_options=opts, cache=False)
    return model, npu


@pytest.fixture(scope="module")
def fused():
    return _compile(1)


@pytest.mark.parametrize("length", LENGTHS)
def test_fused_chains_match_eager(fused, length):
    model, npu = fused
    xs = _inputs(length, seed=length)
    out = npu(*xs)
    assert torch.allclose(out, model(*xs), rtol=1e-4, atol=1e-4), (out - model(*xs)).abs().max()


def _bodies(npu) -> list[str]:
    """The body ops of each novella.generic after the pass, in order."""
    text = npu.ir("novella-fuse-elementwise")
    out = []
    for chunk in text.split('"novella.generic"')[1:]:
        body = chunk.split('"novella.yield"')[0]
        out.append(" ".join(w for w in body.split() if w.startswith(("arith.", "math."))))
    return out


def test_chains_are_one_generic_each(fused):
    _, npu = fused
    bodies = _bodies(npu)
    text = npu.ir("novella-fuse-elementwise")
    # SwiGLU: silu(gate) * up in one body (sigmoid's four VEC ops, then both products)
    assert "arith.negf math.exp arith.addf arith.divf arith.mulf arith.mulf" in bodies
    # RoPE: q * cos + rotate_half(q) * sin in one body
    assert "arith.mulf arith.mulf arith.addf" in bodies
    # RMSNorm: the square, the mean and the tail x * rsqrt(ms + eps) * w are one rms_norm each
    assert text.count('"novella.rms_norm"') == 2 and "novella.reduce" not in text
    assert not any("math.rsqrt" in b for b in bodies)
    assert "novella.scalar" not in text
    # rotate_half (two slices, a neg, a concat) is read by the RoPE generic: its input marked, the four ops gone
    assert "novella.rotate_half = [" in text and 'fn = "neg"' not in text and '"novella.concat"' not in text


def test_fusion_saves_cycles_and_kernels(fused):
    model, npu = fused
    _, plain = _compile(0)
    for length in (1, MAX):
        xs = _inputs(length)
        assert torch.allclose(plain(*xs), model(*xs), rtol=1e-4, atol=1e-4)
        npu(*xs)
        assert npu.last_run.stats.cycles < plain.last_run.stats.cycles
        assert npu.last_run.stats.dma_bytes_stored < plain.last_run.stats.dma_bytes_stored
    for m in (npu, plain):
        assert len(m.artifact.programs) == 2  # a shape bucket for short lengths, the generic program
    macros = [[len(m.artifact.programs[i].macros) for i in (0, 1)] for m in (npu, plain)]
    assert all(a < b for a, b in zip(*macros)), macros


class ColumnChain(torch.nn.Module):
    """A [1, T, 1] column against [1, T, C] on both sides of a chain of four ops: one generic."""

    def forward(self, x, y):
        return (y - x) * y + x / (y * y + 1.0)


def test_column_broadcast_chain_is_one_generic_and_matches_eager():
    model = ColumnChain().eval()
    g = torch.Generator().manual_seed(3)
    make = lambda t: (torch.randn(1, t, 1, generator=g), torch.randn(1, t, 16, generator=g))  # noqa: E731
    npu = compile_torch(model, *make(16), min_len=1, max_len=MAX, dynamic_dim=1, cache=False)
    text = npu.ir("novella-fuse-elementwise")
    assert text.count('"novella.generic"') == 1 and "novella.mul" not in text and "novella.add" not in text
    for length in LENGTHS:
        xs = make(length)
        assert torch.allclose(npu(*xs), model(*xs), rtol=1e-5, atol=1e-5)


class Rotations(torch.nn.Module):
    """rotate_half of q read by a product (one generic with a rotated input), and two look-alikes that
    are not it: the halves swapped without the negation, and halves taken from two tensors."""

    def forward(self, q, k, s):
        h = q.shape[-1] // 2
        rot = torch.cat((-q[..., h:], q[..., :h]), dim=-1)
        swap = torch.cat((q[..., h:], q[..., :h]), dim=-1)
        mixed = torch.cat((-k[..., h:], q[..., :h]), dim=-1)
        return q * s + rot * s, swap * s, mixed * s


def test_rotate_half_is_read_in_place_and_look_alikes_are_not():
    model = Rotations().eval()

    def inputs(t: int):
        g = torch.Generator().manual_seed(t)
        return tuple(torch.randn(1, 2, t, 32, generator=g) for _ in range(3))

    npu = compile_torch(model, *inputs(16), min_len=1, max_len=70, dynamic_dim=2, cache=False)
    text = npu.ir("novella-fuse-elementwise")
    assert text.count("novella.rotate_half = [") == 1 and text.count('"novella.concat"') == 2
    for t in (1, 7, 33, 70):
        xs = inputs(t)
        for got, want in zip(npu(*xs), model(*xs)):
            assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (t, (got - want).abs().max())
