"""Stock models users bring (transformers GPT-2, BERT, LLaMA, OPT; nn.TransformerEncoder both norm
orders; the Whisper encoder with SDPA), each compiled once over its whole length range and
compared with eager PyTorch at the shortest length, a partial last tile and the maximum.
All five lengths of the issue: bench/models_e2e.py."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import stock_models

from novella_mlir import compile_torch

CI_LENGTHS = ("min", "partial", "max")


@pytest.fixture(scope="module", params=list(stock_models.MODELS))
def compiled(request):
    model, make, dim, lo, hi = stock_models.build(request.param)
    npu = compile_torch(model, make(16 if dim == 1 else 101), dynamic_dim=dim, min_len=lo, max_len=hi)
    return request.param, model, make, npu, (lo, hi)


def test_compiled_once_matches_eager(compiled):
    name, model, make, npu, (lo, hi) = compiled
    at = stock_models.lengths(lo, hi)
    for which in CI_LENGTHS:
        x = make(at[which], seed=3)
        with torch.no_grad():
            ref = model(x)
        y = npu(x)
        err = (y - ref).abs().max().item()
        assert torch.allclose(y, ref, atol=1e-4, rtol=1e-4), f"{name} at T={at[which]} ({which}): max error {err}"
        assert npu.last_run.stats.cycles > 0


def test_one_compile_covers_the_range(compiled):
    name, _, _, npu, (lo, hi) = compiled
    if name == "whisper-sdpa":
        # transformers' SDPA branches on q_len > 1: T = 2 (one position) is its own static program, in
        # the same artifact as the rest (which may hold a shape bucket for short lengths)
        progs = npu.artifact.programs
        assert progs[0].ranges == [[2, 2]] and "false for T = 2" in progs[0].reason
        assert progs[1].ranges[0][0] == 3 and progs[-1].ranges[0][1] == hi
    else:
        assert [tuple(s)[1:] for s in npu.artifact.symbols] == [(lo, hi)]
