"""Batched matmul, softmax and attention kernels."""

from __future__ import annotations
