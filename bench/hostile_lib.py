"""Shared parts of bench/hostile.py: the case registry and the outcome classes."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OPT = [sys.executable, "-c", "import sys; from novella_mlir.tools.novella_opt import main; sys.exit(main())"]
CASES: list = []


def case(category: str):
    def deco(fn):
        CASES.append((category, fn.__name__, fn))
        return fn

    return deco


class Wrong(Exception):
    """The case was accepted or answered wrongly."""
