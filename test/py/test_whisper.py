"""The real Whisper encoder (1 layer, random weights), compiled once for mel
lengths [2, 3000] and run on the simulator at the shortest, an odd and the
longest length against eager PyTorch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("transformers")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "whisper_encoder.py"


def _example():
    spec = importlib.util.spec_from_file_location("whisper_encoder", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def encoder():
    ex = _example()
    model = ex.build(layers=1)
    return ex, model, ex.compile_encoder(model)


def test_compiled_once_for_the_whole_range(encoder):
    _, _, npu = encoder
    assert [tuple(s) for s in npu.artifact.symbols] == [("T", 2, 3000)]
    assert "(s0 - 1) floordiv 2 + 1" in npu.ir("novella-shape-infer")


@pytest.mark.parametrize("frames", [2, 401, 3000])
def test_encoder_matches_pytorch(encoder, frames):
    ex, model, npu = encoder
    r = ex.run(npu, model, frames)
    assert r["tokens"] == (frames - 1) // 2 + 1
    assert r["ok"], f"T={frames}: max error {r['max_err']}"
    assert r["cycles"] > 0 and r["insts"] > 0
