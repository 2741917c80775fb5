"""`Lambda(fn)`: an nn.Module whose forward is `fn(*inputs)`, for tests that compile one expression."""

from __future__ import annotations

import torch


class Lambda(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


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
