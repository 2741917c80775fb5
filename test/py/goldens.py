"""The golden-file switch shared by the golden tests.

`NOVELLA_UPDATE_GOLDEN=1` rewrites a golden whose value changed, reports the
change loudly (on the terminal and as a pytest warning, with the diff), and
then runs the comparison and every other check of the test as usual: it never
skips. Review the rewrite with `git diff test/golden/` and justify it in the
commit message.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "test" / "golden"
UPDATE = os.environ.get("NOVELLA_UPDATE_GOLDEN") == "1"


class GoldenRewritten(UserWarning):
    """A golden file was rewritten by NOVELLA_UPDATE_GOLDEN=1."""


def flatten(x, prefix: str = "") -> dict:
    """{"a.b.c": leaf} of nested dicts (lists stay leaves)."""
    if not isinstance(x, dict):
        return {prefix: x}
    out = {}
    for k in sorted(x):
        out.update(flatten(x[k], f"{prefix}.{k}" if prefix else str(k)))
    return out


def leaf_diff(old, new, limit: int = 80) -> str:
    """One line per changed leaf: `key: old -> new (+x%)`."""
    a, b = flatten(old or {}), flatten(new)
    lines = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k, "<absent>"), b.get(k, "<absent>")
        if va == vb:
            continue
        pct = ""
        if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va:
            pct = f" ({(vb - va) / va:+.2%})"
        lines.append(f"  {k}: {va} -> {vb}{pct}")
    more = f"\n  ... {len(lines) - limit} more" if len(lines) > limit else ""
    return "\n".join(lines[:limit]) + more


def check(path: Path, now, how_to: str, dumps=None, diff=leaf_diff, update: bool | None = None) -> None:
    """Compares `now` with the JSON golden at `path` (after rewriting it if NOVELLA_UPDATE_GOLDEN=1)."""
    update = UPDATE if update is None else update
    dumps = dumps or (lambda x: json.dumps(x, indent=1, sort_keys=True))
    rel = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    old = json.loads(path.read_text()) if path.exists() else None
    if update and old != now:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dumps(now) + "\n")
        msg = f"NOVELLA_UPDATE_GOLDEN: REWROTE {rel}; review `git diff {rel}` and justify it in the commit:\n"
        msg += diff(old, now)
        print("\n" + msg, file=sys.__stderr__, flush=True)
        warnings.warn(GoldenRewritten(msg), stacklevel=2)
        old = json.loads(path.read_text())
    if old is None:
        pytest.fail(f"no golden {rel}; create it with NOVELLA_UPDATE_GOLDEN=1 and review it", pytrace=False)
    if old != now:
        pytest.fail(how_to.format(path=rel, diff=diff(old, now)), pytrace=False)
