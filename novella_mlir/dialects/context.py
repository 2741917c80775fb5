"""MLIR context set-up shared by the frontend, the passes and the tools."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import torch as torch_d

from . import novella


def make_context() -> ir.Context:
    """A context with the torch and novella dialects available."""
    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    novella.load(ctx)
    return ctx
