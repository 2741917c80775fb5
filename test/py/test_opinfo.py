"""OpInfo as a differential oracle (a fixed fast subset; bench/opinfo.py runs every claimed op),
and docs/ops.md kept in step with the op table and the recorded OpInfo results."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

pytest.importorskip("expecttest")  # torch.testing._internal needs it
ROOT = Path(__file__).resolve().parents[2]

import opinfo  # noqa: E402  (bench/opinfo.py)
import opinfo_harness as h  # noqa: E402


@pytest.fixture(scope="module")
def infos():
    logging.disable(logging.WARNING)
    return h.op_infos()


@pytest.mark.parametrize("name,limit", h.CI_SUBSET, ids=[n for n, _ in h.CI_SUBSET])
def test_opinfo_subset_matches_eager(infos, name, limit):
    t = h.run_op(infos[name], limit)
    assert t.passed > 0, f"{name}: no (sample, dim) pair was run"
    assert t.failed == 0, f"{name}: {t.failed} failed: {dict(t.reasons)}"


def test_every_claimed_op_has_an_opinfo(infos):
    assert not [n for n in h.CLAIMED if n not in infos]


def test_ops_md_is_current():
    results = json.loads(opinfo.RESULTS.read_text())
    assert sorted(results["ops"]) == sorted(h.CLAIMED), "docs/opinfo.json is stale: run bench/opinfo.py"
    assert opinfo.OPS_MD.read_text() == opinfo.render(results), (
        "docs/ops.md is stale: run `python bench/opinfo.py --render-only` (or the full bench)"
    )
