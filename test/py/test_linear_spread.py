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

from novella_mlir import compile_torch, kernels
from novella_mlir.kernels import linear, linear_cost, linear_emit
from novella_mlir.machine.target import Target

MAX = 512
LENGTHS = (1, 127, 130, MAX)  # 1, odd, a partial last row tile of 128, max


class Residual(torch.nn.Module):
    def __init__(self, k, n, act):
        super().__init__()
        self.fc, self.act = torch.nn.Linear(k, n), act

    def forward(self, h, x):
        return x + self.act(self.fc(h))


# (model, input widths, the loop order forced to spread, or None: the cost model's pick at T = 200, the
# [65, 512] bucket's). The residual forms are forced (the model does not pick them for these shapes: the STORE
# on the last k step would stall the compute two steps on), in both orders that defer an epilogue.
CASES = {
    "gelu": (lambda: torch.nn.Sequential(torch.nn.Linear(384, 1536), torch.nn.GELU()), (384,), None),
    "relu+residual ws=2": (lambda: Residual(768, 768, torch.nn.ReLU()), (768, 768), 2),
    "gelu+residual ws=1": (lambda: Residual(768, 384, torch.nn.GELU()), (768, 384), 1),
}


def _compile(name, monkeypatch):
    build, widths, ws = CASES[name]
    if ws is not None:  # every candidate that spreads in loop order ws costs 0, the others 1
        monkeypatch.setattr(linear.Linear, "exhaustive", True)
        monkeypatch.setattr(
            linear.Linear, "cost", lambda self, target, dims, c: float(not (c[4] == linear_cost.SPREAD and c[3] == ws))
        )
    torch.manual_seed(0)
    model = build().eval()
    examples = [torch.randn(1, 16, w) for w in widths]
    return model, compile_torch(model, *examples, min_len=1, max_len=MAX, cache=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_spread_epilogue_matches_eager(name, monkeypatch):
    model, npu = _compile(name, monkeypatch)
    tiles = re.findall(r"novella.tiles = \{[^}]*\}", npu.ir("novella-tile", at=[200]))
    assert any("spread = 1" in t and f"ws = {CASES[name][2] or 2}" in t for t in tiles), tiles
    widths = CASES[name][1]
    for t in LENGTHS:
        xs = [torch.randn(1, t, w) for w in widths]
        y = npu(*xs, check_hazards=True)
        with torch.no_grad():
            ref = model(*xs)
        assert torch.allclose(y, ref, rtol=1e-4, atol=1e-4), (name, t, (y - ref).abs().max())


def test_spread_steps_put_the_last_vec_on_the_last_step():
    assert linear_emit.spread_steps(6, 3) == [0, 0, 1, 1, 2, 2]
    assert linear_emit.spread_steps(2, 3) == [0, 2]  # the residual add beside the residual's LOAD
    assert linear_emit.spread_steps(3, 6) == [0, 2, 5]


def test_spread_is_priced_and_chosen():
    """fc1 of whisper-tiny's MLP at T = 256 on the default config: the spread epilogue (acc_slots = SPREAD) keeps
    every k step's VECs under its MATMUL, so the model predicts fewer cycles than with the epilogue on one step,
    and picks it; where a spread STORE two steps on would stall the compute (fc2 of a 64-256-64 MLP, one column
    block of 16 rows per k step), the unspread halves stay the pick."""
    from simulator import load_config

    kernels.forget()  # no memo of a compile whose cost was forced
    target = Target.from_config(load_config())
    epi = linear_cost.Epilogue("gelu")
    assert epi.spreads(3, False) and not epi.spreads(1, False)
    assert not linear_cost.Epilogue("none").spreads(3, False)  # one VEC: nothing to spread
    assert not linear_cost.Epilogue("none", residual=True).spreads(3, True)  # its residual in the accumulator
    lin = linear.Linear()
    cand = (128, 16, 128, 2, linear_cost.SPREAD, 0, 0, 0)
    spread = lin.cost(target, (256, 384, 1536, epi), cand)
    one_step = lin.cost(target, (256, 384, 1536, epi), (*cand[:4], 2, 0, 0, 0))
    assert spread < 0.95 * one_step
    assert lin.choose(target, 256, 384, 1536, epi, {})[1][4] == linear_cost.SPREAD
    assert lin.choose(target, 128, 256, 64, linear_cost.Epilogue("relu"), {})[1][4] != linear_cost.SPREAD
