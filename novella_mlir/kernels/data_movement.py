"""Transpose, reshape and slice kernels."""

from __future__ import annotations
