"""Lowerings of batched matmul, softmax and attention."""

from __future__ import annotations
