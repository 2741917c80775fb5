"""The notebooks: stored executed (with their outputs, so they read as they run), and executed again top
to bottom by a real Jupyter kernel.

The kernel is this interpreter (a kernelspec written to a temporary
JUPYTER_PATH), so the test works from a fresh venv with ipykernel installed
and never picks up some other `python3` kernel of the machine.

The notebooks check their own results: each check is an `assert` followed
by a printed `check ok: ...` line. A cell that raises fails the run
(nbclient raises CellExecutionError); the test also requires every
expected check line, so a check that is deleted or skipped is noticed, and
the notebooks may not catch exceptions (no `try`), so nothing falls back
silently. The stored outputs must come from a complete, passing run: every code cell executed in order,
no error output, and the same check lines."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
KERNEL = "novella-test"


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(root))
    yield KERNEL
    mp.undo()


def _run(name: str, kernel: str):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    for cell in nb.cells:  # run from scratch: the stored outputs must not satisfy the checks
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    NotebookClient(nb, kernel_name=kernel, timeout=600, resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb


def _text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def _images(nb) -> int:
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


CHECKS = {
    "01_ir_per_pass.ipynb": [f"check ok: T={t} matches eager PyTorch" for t in (1, 37, 64, 65)]
    + [
        "check ok: every stage of the pipeline recorded its IR",
        "check ok: the length is a ? dim",
        "check ok: ? dims carry affine maps of s0",
        "check ok: shape-infer re-derived the same shapes",
        "check ok: gelu fused into its linear",
        "check ok: DRAM offsets and SRAM budgets assigned",
        "check ok: tile grids are ceildivs of s0",
        "check ok: partial last tiles are min maps",
        "check ok: every tile op became an ISA template",
        "check ok: s0 reaches shapes, DRAM, grids and instruction fields",
        "check ok: no stage specialized the length",
    ],
    "02_jit_and_simulator.ipynb": [
        "check ok: T=37 matches eager PyTorch",
        "check ok: the loaded artifact gives the same words",
        "check ok: 8 lengths match eager PyTorch",
        "check ok: the row tiles cover T=65 exactly",
        "check ok: storing every length costs more than the JIT's metadata",
        "check ok: the traced run takes the same cycles as the untraced one",
    ],
    "03_decode.ipynb": [
        "check ok: generation is token-identical to transformers",
        "check ok: pages are allocated on demand, one per 16 positions; a decode program is instantiated once per "
        "key/value tile count",
        "check ok: consecutive steps in a bucket differ only in fields the templates declare as injected",
        "check ok: each layer appends K and V with one STORE into the page pool",
    ],
}


@pytest.mark.parametrize("name", sorted(CHECKS))
def test_stored_executed_and_without_try(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and [c.execution_count for c in code] == list(range(1, len(code) + 1)), (
        f"{name}: store it executed top to bottom (jupyter nbconvert --to notebook --execute --inplace)"
    )
    assert _checks(nb) == CHECKS[name], f"{name}: the stored outputs are not those of a passing run"
    for c in code:
        src = "\n".join(ln for ln in c.source.splitlines() if not ln.startswith("%"))
        tries = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Try)]
        assert not tries, f"{name}: a cell catches exceptions (line {tries[0].lineno}); let it raise"


def _checks(nb) -> list[str]:
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, errors
    return [ln for ln in _text(nb).splitlines() if ln.startswith("check ok: ")]


def test_ir_per_pass_notebook(kernel_name):
    nb = _run("01_ir_per_pass.ipynb", kernel_name)
    text = _text(nb)
    assert "EncoderLayer compiled in" in text
    assert _checks(nb) == CHECKS["01_ir_per_pass.ipynb"]
    assert "novella.inst" in text and "ceildiv" in text and "novella.dram" in text


def test_jit_and_simulator_notebook(kernel_name):
    nb = _run("02_jit_and_simulator.ipynb", kernel_name)
    text = _text(nb)
    assert _checks(nb) == CHECKS["02_jit_and_simulator.ipynb"]
    assert "T= 1500" in text and "cycles" in text and "MAC utilization" in text
    assert "macro " in text and "LOAD" in text
    assert _images(nb) == 4  # cycles, storage, roofline, timeline


def test_decode_notebook(kernel_name):
    nb = _run("03_decode.ipynb", kernel_name)
    text = _text(nb)
    assert _checks(nb) == CHECKS["03_decode.ipynb"]
    assert "changes in" in text and "write address" in text
    assert "(a new page inside a key/value tile: the same bucket" in text
