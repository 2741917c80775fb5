"""Differential fuzzing in CI: random graphs of the supported ops (bench/fuzz.py) against eager.

Each hypothesis example is one graph compiled once and compared with eager at
its lower bound, an odd length, a partial last tile and its upper bound. A
failure hypothesis finds is shrunk to a minimal graph and becomes a
regression test below."""

from __future__ import annotations

import fuzz
import pytest
import torch
from hypothesis import HealthCheck, given, seed, settings

from novella_mlir import compile_torch


@seed(0)
@settings(suppress_health_check=list(HealthCheck))  # examples: the hypothesis profile (conftest.py)
@given(fuzz.graphs(max_layers=3))
def test_random_graphs_match_eager(g):
    outcome, detail = fuzz.check(g)
    assert outcome in ("ok", "refused"), f"{outcome}: {g}: {detail}"
    assert outcome == "ok" or g.dyn == len(g.shape) - 1, f"refused a supported graph {g}: {detail}"


@pytest.mark.parametrize(
    "g",
    [
        fuzz.Graph((3, 16), 0, 3, 3, (("linear", (1, "none")),)),
        fuzz.Graph((2, 9, 8), 1, 1, 70, (("layernorm", None), ("softmax", None), ("residual", None))),
        fuzz.Graph((9, 3, 33), 0, 5, 130, (("bmul", None), ("scalar", ("div", -2.0)), ("linear", (3, "gelu")))),
    ],
)
def test_fuzz_regressions(g):
    assert fuzz.check(g) == ("ok", "")


@pytest.mark.parametrize("lo, hi", [(1, 1), (1, 2), (2, 2), (3, 3)])
def test_tiny_ranges(lo, hi):
    """Found by the fuzzer: ranges ending at 1 or 2 compiled a static model for length 2."""
    model = torch.nn.Linear(8, 1).eval()
    npu = compile_torch(model, torch.randn(2, 8), dynamic_dim=0, min_len=lo, max_len=hi)
    assert npu.artifact.symbols == [["T", lo, hi]]
    for length in range(lo, hi + 1):
        x = torch.randn(length, 8)
        assert torch.allclose(npu(x), model(x), rtol=1e-4, atol=1e-4)
