"""A linear's deferred epilogue spread over the next output block's k steps (`novella.tiles` spread, issue 22):
with two accumulator halves and a k loop of several steps, block b's bias and activation run in place in its
accumulator half beside block b + 1's MATMULs, and its last VEC, residual LOAD and STORE on b + 1's last k
step. Each form (GELU; ReLU, GELU with a residual; input- and weight-stationary) matches eager PyTorch at T = 1,
odd, a partial last row tile and the maximum, with the hazard checker on; and the cost model prices the
spread steps."""

from __future__ import annotations

import re

import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.kernels import linear, linear_cost
from novella_mlir.machine.target import Target

MAX = 512
LENGTHS = (1, 127, 130, MAX)  # 1, odd, a partial last row tile of 128, max
WS1 = {"novella-tile": {"tile-m": 16}, "novella-buckets": {"enable": 0}}  # row tiles of 16: weight-stationary


class Residual(torch.nn.Module):
    def __init__(self, k, n, act):
        super().__init__()
        self.fc, self.act = torch.nn.Linear(k, n), act

    def forward(self, h, x):
        return x + self.act(self.fc(h))


# (model, input widths, pass options); spread at T = 200: input-stationary in the [65, 512] bucket, or
# weight-stationary
CASES = {
    "gelu": (lambda: torch.nn.Sequential(torch.nn.Linear(384, 1536), torch.nn.GELU()), (384,), None),
    "relu+residual": (lambda: Residual(768, 768, torch.nn.ReLU()), (768, 768), None),
    "gelu+residual ws=1": (lambda: Residual(768, 384, torch.nn.GELU()), (768, 384), WS1),
}


def _compile(name):
    build, widths, options = CASES[name]
    torch.manual_seed(0)
    model = build().eval()
    examples = [torch.randn(1, 16, w) for w in widths]
    return model, compile_torch(model, *examples, min_len=1, max_len=MAX, cache=False, pass_options=options)


@pytest.mark.parametrize("name", sorted(CASES))
def test_spread_epilogue_matches_eager(name):
    model, npu = _compile(name)
    tiles = re.findall(r"novella.tiles = \{[^}]*\}", npu.ir("novella-tile", at=[200]))
    assert any("spread = 1" in t and f"ws = {2 if CASES[name][2] is None else 1}" in t for t in tiles), tiles
    widths = CASES[name][1]
    for t in LENGTHS:
        xs = [torch.randn(1, t, w) for w in widths]
        y = npu(*xs, check_hazards=True)
        with torch.no_grad():
            ref = model(*xs)
        assert torch.allclose(y, ref, rtol=1e-4, atol=1e-4), (name, t, (y - ref).abs().max())


def test_spread_steps_put_the_last_vec_on_the_last_step():
    assert linear_cost.spread_steps(6, 3) == [0, 0, 1, 1, 2, 2]
    assert linear_cost.spread_steps(2, 3) == [0, 2]  # the residual add beside the residual's LOAD
    assert linear_cost.spread_steps(3, 6) == [0, 2, 5]


def test_spread_is_priced_and_chosen():
    """fc1 of whisper-tiny's MLP at T = 256 on the default config: the spread epilogue keeps every k step's
    VECs under its MATMUL, so the model predicts fewer cycles than with the epilogue on one step."""
    from simulator import load_config

    target = Target.from_config(load_config())
    epi = linear_cost.Epilogue("gelu")
    assert epi.spreads(3, 2, False) and not epi.spreads(1, 2, False) and not epi.spreads(3, 1, False)
    assert not linear_cost.Epilogue("none").spreads(3, 2, False)  # one VEC: nothing to spread
    assert not linear_cost.Epilogue("none", residual=True).spreads(3, 2, True)  # its residual in the accumulator
    cand = (128, 16, 128, 2, 2, 0)
    spread = linear.Linear().cost(target, (256, 384, 1536, epi), cand)
    one_step = linear.Linear().cost(target, (256, 384, 1536, epi), (*cand[:4], 1, 0))
    assert spread < 0.95 * one_step
