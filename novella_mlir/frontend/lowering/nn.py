"""Lowerings of layer_norm, conv1d and other nn ops."""

from __future__ import annotations
