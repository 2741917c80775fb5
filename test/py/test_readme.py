"""The README runs as written: every ```python block executes (each on its own, as a user pastes it; a block
that starts without an import continues the block before it, in its namespace) and shows its result; the measured tables match the goldens and what the code compiles today, and say where they were
measured (`bench/tables.py` writes them)."""

from __future__ import annotations

import contextlib
import functools
import io
import re

import pytest
import tables
from goldens import GOLDEN, ROOT

README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"^```python\n(.*?)^```", README, re.S | re.M)


def _title(code: str) -> str:
    i = README.index(code)
    return re.findall(r"^#+ (.*)$", README[:i], re.M)[-1]


def test_the_readme_has_its_blocks():
    assert len(BLOCKS) >= 4
    assert {"Python API", "Several symbols: torch.export's `dynamic_shapes`"} <= {_title(b) for b in BLOCKS}


def _continues(i: int) -> bool:
    first = next(line for line in BLOCKS[i].splitlines() if line.strip() and not line.startswith("#"))
    return i > 0 and not first.startswith(("import ", "from "))


@functools.cache
def _run(i: int) -> tuple[dict, str]:
    """(namespace, printed) of block `i`, run after the block it continues."""
    space = dict(_run(i - 1)[0]) if _continues(i) else {"__name__": "__readme__"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(BLOCKS[i], "README.md", "exec"), space)
    return space, out.getvalue()


@pytest.mark.parametrize("i", range(len(BLOCKS)), ids=[f"{i}-{_title(b).split(':')[0]}" for i, b in enumerate(BLOCKS)])
def test_readme_block_runs_and_shows_its_result(i):
    code = BLOCKS[i]
    if "transformers" in code:
        pytest.importorskip("transformers")
    printed = _run(i)[1]
    assert printed.strip(), "the block prints nothing: a README block shows its result"
    if "hf.generate" in code:
        assert "token-identical to hf.generate: True" in printed
    if "max error" in code:
        assert len(re.findall(r"^T=.*max error", printed, re.M)) >= 3


# ------------------------------------------------------------------ the measured tables


def _text(name: str) -> str:
    return README if name not in tables.WHERE else tables.WHERE[name].read_text()


def _rows(name: str) -> list[list[str]]:
    body = tables.section(_text(name), name)
    return [[c.strip() for c in line.strip("|").split("|")] for line in body.splitlines() if line.startswith("| ")]


@pytest.mark.parametrize("name", sorted(tables.TABLES))
def test_every_table_says_where_it_was_measured(name):
    last = tables.section(_text(name), name).strip().splitlines()[-1]
    assert re.fullmatch(
        rf"_measured by `bench/tables.py {name}` at commit [0-9a-f]{{7,}}(\+dirty)?, .* CPUs, load .*_", last
    )


@pytest.mark.quick
def test_golden_table_matches_the_cycle_goldens():
    import json

    rows = _rows("goldens")[1:]
    expected = []
    for name, (_, max_len, lengths) in tables.GOLDEN_PROGRAMS.items():
        gold = json.loads((GOLDEN / f"cycles_{name}.json").read_text())
        for t in lengths:
            g = gold[f"T={t}"]
            cells = (g["cycles"], g["dma_bytes_loaded"], g["dma_bytes_stored"], g["macs"])
            expected.append([name, str(max_len), str(t), *(f"{v:,}" for v in cells)])
    assert rows == expected, "README's golden table is stale: regenerate it with bench/tables.py goldens"


def test_storage_table_shows_todays_jit_bytes():
    import models

    labels = dict(tables.STORAGE_MODELS)
    for model, max_len in (("mlp", 1500), ("mlp", 15000), ("layer", 1500)):  # (the layer at 15000 is slow)
        row = next(r for r in _rows("storage") if r[0] == labels[model] and r[1] == str(max_len))
        _, _, npu = models.compile_model(model, max_len)
        assert row[4] == f"{npu.artifact.nbytes:,} B", f"{labels[model]} at max_len {max_len}: regenerate the table"


def test_cycles_table_shows_todays_cycles_for_the_small_rows():
    import cycles

    lines = tables.section(README, "cycles").splitlines()
    for workload, config, t in (("mlp384", "default", 1), ("mlp384", "default", 2048)):
        line = next(x.split() for x in lines if x.split()[:3] == [workload, config, str(t)])
        assert int(line[4]) == cycles.measure(workload, config, t, 2048)["cycles"], f"{workload} T={t}: regenerate"


def test_buckets_table_shows_todays_programs_and_cycles_for_the_mlp():
    import cycles

    _, npu, _ = cycles.compiled("mlp384", "default", 2048)
    art = npu.artifact
    rows = _rows("buckets")
    mlp = rows[: next(i for i, r in enumerate(rows) if r[0].startswith("whisper"))]
    for row in mlp[1:]:
        t = int(row[1])
        program = art.pick([t])
        assert row[2] == f"#{program} {art.programs[program].ranges[0]}", f"T={t}: regenerate bench/tables.py buckets"
    for t in (1, 2048):
        row = next(r for r in mlp if r[1] == str(t))
        assert row[4] == f"{cycles.measure('mlp384', 'default', t, 2048)['cycles']:,}", f"T={t}: regenerate"
    programs = [r for r in rows if r[1].startswith("#") and r[2].startswith("[")]
    for i in range(len(art.programs)):
        mb, tb = art.program_nbytes(i)
        assert programs[i][2:5] == [str(art.programs[i].ranges[0]), f"{mb:,}", f"{tb:,}"], "regenerate the table"


def test_curve_table_shows_todays_ratios_for_the_mlp():
    import cycles

    rows = _rows("curve")
    column = rows[0].index("mlp384 default")
    for t in (1, 2048):
        cell = next(r for r in rows if r[0] == str(t))[column]
        assert cell == f"{cycles.measure('mlp384', 'default', t, 2048)['ratio']:.2f}", f"T={t}: regenerate the curve"
