"""The golden switch itself: without NOVELLA_UPDATE_GOLDEN a changed value fails with its diff;
with it the golden is rewritten, the change is reported loudly, and the comparison still runs."""

from __future__ import annotations

import json

import goldens
import pytest

HOW_TO = "changed {path}:\n{diff}"


def test_a_changed_value_fails_with_its_diff(tmp_path):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"T=1": {"cycles": 100}}))
    with pytest.raises(pytest.fail.Exception, match=r"T=1.cycles: 100 -> 150 \(\+50.00%\)"):
        goldens.check(path, {"T=1": {"cycles": 150}}, HOW_TO, update=False)
    goldens.check(path, {"T=1": {"cycles": 100}}, HOW_TO, update=False)
    with pytest.raises(pytest.fail.Exception, match="no golden"):
        goldens.check(tmp_path / "missing.json", {}, HOW_TO, update=False)


def test_update_rewrites_reports_and_never_skips(tmp_path, capsys):
    path = tmp_path / "g.json"
    path.write_text(json.dumps({"T=1": {"cycles": 100, "macs": 7}}))
    with pytest.warns(goldens.GoldenRewritten, match=r"REWROTE .*g.json(.|\n)*T=1.cycles: 100 -> 150"):
        goldens.check(path, {"T=1": {"cycles": 150, "macs": 7}}, HOW_TO, update=True)
    assert json.loads(path.read_text()) == {"T=1": {"cycles": 150, "macs": 7}}
    with pytest.warns(goldens.GoldenRewritten, match="new.json"):
        goldens.check(tmp_path / "new.json", {"a": 1}, HOW_TO, update=True)
    assert json.loads((tmp_path / "new.json").read_text()) == {"a": 1}
    # after rewriting, the comparison runs against what was written (a bad writer is caught)
    with pytest.warns(goldens.GoldenRewritten), pytest.raises(pytest.fail.Exception, match="not json"):
        goldens.check(path, {"x": 1}, HOW_TO, update=True, dumps=lambda x: '"not json"')
