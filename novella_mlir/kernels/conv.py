"""1-D convolution kernels."""

from __future__ import annotations
