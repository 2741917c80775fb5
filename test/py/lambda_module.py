"""`Lambda(fn)`: an nn.Module whose forward is `fn(*inputs)`, for tests that compile one expression."""

from __future__ import annotations

import torch


class Lambda(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)
