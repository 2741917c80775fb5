"""`slice_scatter` with a step on a static dim (Qwen3-VL's interleaved M-RoPE: `freqs_thw[..., 1:6:3] =
freq[1, ..., 1:6:3]`, where `freqs_thw` is a view of `freq`), checked against eager at lengths 1, an odd
length, a partial last tile and the maximum: a range that ends on a whole step, one whose last step runs
past the dim's end, and a step on a dim that is not the last."""

from __future__ import annotations

import torch
from lambda_module import Lambda

from novella_mlir import compile_torch

LENGTHS = (1, 37, 67, 130)


def mrope(x):
    freq = torch.stack([x, x * 2 - 1, x.sin()])  # [3, 1, T, 8], as the rotary embedding's freqs
    thw = freq[0]
    thw[..., 1:6:3] = freq[1, ..., 1:6:3]  # positions 1, 4: whole steps
    thw[..., 2::3] = freq[2, ..., 2::3]  # positions 2, 5: the range ends on the dim's end
    thw[..., 7::4] = freq[1, ..., 7::4] * 5  # position 7 alone: the last step runs past the end
    return torch.cat((thw, thw), dim=-1)


def inner_dim(x):
    y = x.transpose(1, 2).clone()  # [1, 8, T]: the step on dim 1, before the length
    y[:, 1::3] = x.transpose(1, 2)[:, :3] * 3
    return y


def _check(fn):
    module = Lambda(fn)
    npu = compile_torch(module, torch.randn(1, 16, 8), dynamic_dim=1, min_len=1, max_len=130, cache=False)
    for n in LENGTHS:
        x = torch.randn(1, n, 8, generator=torch.Generator().manual_seed(n))
        want, got = module(x), npu(x)
        assert got.shape == want.shape, f"T={n}"
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), f"T={n}: max err {(got - want).abs().max():.2e}"


def test_interleaved_mrope_sections():
    _check(mrope)


def test_a_step_on_a_dim_before_the_length():
    _check(inner_dim)
