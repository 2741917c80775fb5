"""Golden snapshots of the instruction metadata (MacroMeta + TileMeta + the DRAM plan).

Each model is recompiled (seeded weights) and its metadata compared exactly
with `test/golden/<model>.json`. Regenerate with

    NOVELLA_UPDATE_GOLDEN=1 .venv/bin/python -m pytest test/py/test_golden.py

which rewrites the snapshots that changed, prints the change loudly and
still runs every comparison (see `goldens.py`; it never skips); then review
`git diff test/golden/` and justify every change in the commit.
"""

from __future__ import annotations

import difflib
import json

import goldens
import models
import pytest
from goldens import GOLDEN

KEYS = ("symbols", "inputs", "outputs", "dram_size", "weight_layout", "macros", "tiles")
MODELS = {"mlp": ("mlp", 2048), "mlp384": ("mlp384", 1500), "whisper_layer": ("layer", 1500)}

HOW_TO = """\
The instruction metadata differs from {path}.
If the change is intended (new tiling, DRAM layout, template fields, ...):
  1. regenerate:  NOVELLA_UPDATE_GOLDEN=1 .venv/bin/python -m pytest test/py/test_golden.py
  2. review:      git diff test/golden/   (each changed template / tile should follow from your change)
  3. check:       .venv/bin/python -m pytest test/py/test_bit_identity.py test/py/test_jit.py
  4. justify the snapshot change in the commit message (what changed and why).
If it is not intended, it is a regression; the diff (golden -> now) starts:
{diff}"""


def snapshot(artifact) -> dict:
    """The deterministic, weight-free instruction metadata of an artifact (JSON types only): one program's
    fields at the top level, several programs as a list with their ranges and reasons."""
    progs = [artifact.program_metadata(i) for i in range(len(artifact.programs))]
    meta = {"symbols": artifact.symbols}
    if len(progs) == 1:
        out = {"symbols": meta["symbols"], **{k: progs[0][k] for k in KEYS[1:]}}
    else:
        out = {
            "symbols": meta["symbols"],
            "programs": [{k: p[k] for k in ("ranges", "reason", *KEYS[1:])} for p in progs],
        }
    return json.loads(json.dumps(out))


def dumps(x, indent: int = 0) -> str:
    """JSON with sorted keys: a value on one line if short, else one entry per line."""
    flat = json.dumps(x, sort_keys=True)
    if len(flat) <= 150 or not isinstance(x, (dict, list)) or not x:
        return flat
    pad = " " * (indent + 1)
    if isinstance(x, dict):
        items = [f"{pad}{json.dumps(k)}: {dumps(x[k], indent + 1)}" for k in sorted(x)]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 1) for v in x]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


@pytest.mark.parametrize("name", sorted(MODELS))
def test_golden(name):
    model, max_len = MODELS[name]
    _, _, npu = models.compile_model(model, max_len)
    now = snapshot(npu.artifact)
    goldens.check(GOLDEN / f"{name}.json", now, HOW_TO, dumps=dumps, diff=_text_diff)


def _text_diff(golden, now) -> str:
    diff = difflib.unified_diff(dumps(golden).splitlines(), dumps(now).splitlines(), "golden", "now", lineterm="")
    return "\n".join(list(diff)[:60])


def test_snapshot_format_is_deterministic_and_round_trips():
    _, _, npu = models.compile_model("mlp", 2048)
    text = dumps(snapshot(npu.artifact))
    assert json.loads(text) == snapshot(npu.artifact)
    assert dumps(json.loads(text)) == text
