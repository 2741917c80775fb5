"""The notebooks: stored without outputs, and executed top to bottom by a real Jupyter kernel.

The kernel is this interpreter (a kernelspec written to a temporary
JUPYTER_PATH), so the test works from a fresh venv with ipykernel installed
and never picks up some other `python3` kernel of the machine."""

from __future__ import annotations

import json
import sys
import time
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
    t0 = time.perf_counter()
    NotebookClient(nb, kernel_name=kernel, timeout=300, resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb, time.perf_counter() - t0


def _text(nb) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", "") or out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


def _images(nb) -> int:
    return sum("image/png" in out.get("data", {}) for cell in nb.cells for out in cell.get("outputs", []))


@pytest.mark.parametrize("name", ["01_ir_per_pass.ipynb", "02_jit_and_simulator.ipynb"])
def test_stored_without_outputs(name):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


def test_ir_per_pass_notebook(kernel_name):
    nb, seconds = _run("01_ir_per_pass.ipynb", kernel_name)
    text = _text(nb)
    assert "compiled in" in text
    assert "stages: torch, novella, novella-shape-infer, novella-legalize" in text
    assert "novella.inst" in text and "ceildiv" in text and "novella.dram" in text
    assert seconds < 120


def test_jit_and_simulator_notebook(kernel_name):
    nb, seconds = _run("02_jit_and_simulator.ipynb", kernel_name)
    text = _text(nb)
    assert "T= 1500" in text and "cycles" in text and "MAC utilization" in text
    assert "macro " in text and "LOAD" in text
    assert _images(nb) == 4  # cycles, storage, roofline, timeline
    assert seconds < 120
