"""Lowerings of shape and data-movement ops (view, permute, transpose, slice, ...)."""

from __future__ import annotations
