"""Layer normalization kernels."""

from __future__ import annotations
