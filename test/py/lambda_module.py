"""`Lambda(fn)`: an nn.Module whose forward is `fn(*inputs)`, for tests that compile one expression."""

from __future__ import annotations

import torch


class Lambda(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def at_length(shape, dim: int, n: int) -> torch.Tensor:
    """A random input of `shape` with dim `dim` set to `n`, seeded by `n`."""
    size = list(shape)
    size[dim] = n
    return torch.randn(size, generator=torch.Generator().manual_seed(n))


def matches_eager(npu, model, shape, dim: int, lengths, *, hazards_at=None, atol: float = 1e-4) -> None:
    """`npu` equals eager `model` (shape and values, within `atol`/1e-4) at every length of `lengths`,
    with the hazard checker on at `hazards_at`."""
    for n in lengths:
        x = at_length(shape, dim, n)
        with torch.no_grad():
            want = model(x)
        got = npu(x, check_hazards=n == hazards_at)
        assert got.shape == want.shape, f"T={n}: {list(got.shape)} vs eager {list(want.shape)}"
        torch.testing.assert_close(got, want, rtol=1e-4, atol=atol, msg=lambda m, n=n: f"T={n}: {m}")


def stock_model_matches(hf, vocab: int, lengths, max_len: int = 70) -> None:
    """A transformers base model `hf` (ids -> last_hidden_state, no cache) compiled once from length 16
    matches eager within 1e-4 at every length of `lengths`."""
    from novella_mlir import compile_torch

    model = Lambda(lambda ids: hf(input_ids=ids, use_cache=False).last_hidden_state)

    def ids(n):
        return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(n))

    npu = compile_torch(model, ids(16), dynamic_dim=1, min_len=1, max_len=max_len, cache=False)
    for n in lengths:
        with torch.no_grad():
            want = model(ids(n))
        assert torch.allclose(npu(ids(n)), want, atol=1e-4, rtol=1e-4), f"T={n}"
