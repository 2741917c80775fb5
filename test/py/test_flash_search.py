"""Flash attention's tile search prunes by a lower bound of the cost model: the bound never exceeds the
model's cycles, and the pruned search picks what scoring every fitting candidate picks."""

from __future__ import annotations

import itertools

import pytest

from novella_mlir import kernels
from novella_mlir.kernels import flash_attention as fa
from novella_mlir.kernels import flash_cost as fc
from novella_mlir.machine.target import Target
from simulator import load_config
from simulator.config import DEFAULT_CONFIG_PATH

CONFIGS = DEFAULT_CONFIG_PATH.parent
# (batch, lq, lk, causal, masked): encoder self-attention, causal prefill, a decode row, odd and short lengths
SHAPES = [(6, 1500, 1500, False, False), (6, 300, 300, True, False), (6, 1, 300, False, True),
          (2, 37, 37, False, False), (6, 64, 1, False, False), (4, 100, 100, True, True)]  # fmt: skip
SCHEDULES = [(False, False, 1, False), (True, False, 1, False), (True, False, 2, True), (True, True, 2, True)]


def _target(config: str) -> Target:
    return Target.from_config(load_config(CONFIGS / f"{config}.toml"))


def _cands(target, causal: bool) -> list[tuple]:
    tiles = target.array_tiles(16)
    pairs = [(t, t) for t in tiles] if causal else list(itertools.product(tiles, tiles))
    return [(tq, tk, *s) for tq, tk in pairs for s in SCHEDULES]


@pytest.mark.parametrize("config", ["default", "edge", "large"])
def test_lower_bound_is_at_most_the_cost(config):
    target = _target(config)
    for batch, lq, lk, causal, masked in SHAPES:
        dims = fc.Dims(batch, lq, lk, 64, 64, causal, masked, (True, False, False, True))
        for cand in _cands(target, causal):
            assert fc.lower_bound(target, dims, *cand) <= fc.cost(target, dims, *cand) * (1 + 1e-9), (dims, cand)


@pytest.mark.parametrize("config", ["default", "edge", "large"])
def test_pruned_search_picks_as_the_exhaustive_one(config, monkeypatch):
    target, kernel = _target(config), fa.FlashAttention()
    scored = {False: 0, True: 0}

    def counted(target, dims, cand):
        scored[kernel.exhaustive] += 1
        return fc.cost(target, dims, *cand)

    monkeypatch.setattr(kernel, "cost", counted)
    for batch, lq, lk, causal, masked in SHAPES:
        dims = fc.Dims(batch, lq, lk, 64, 64, causal, masked, (True, False, False, True))
        picks = []
        for exhaustive in (False, True):
            kernels.forget()
            monkeypatch.setattr(kernel, "exhaustive", exhaustive)
            picks.append(fa._cheapest(kernel, target, dims, tuple(_cands(target, causal))))
        assert picks[0] == picks[1], dims
    assert scored[False] < scored[True]  # the bound prunes
