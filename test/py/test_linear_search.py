"""The linear tile search's exact shortcuts (bisected fit, lower-bound pruning) pick what scoring every
fitting candidate picks, and its bound never exceeds the cost model's cycles."""

from __future__ import annotations

import itertools

import pytest

from novella_mlir import kernels
from novella_mlir.kernels import linear, linear_cost
from novella_mlir.machine.target import Target
from simulator import load_config
from simulator.config import DEFAULT_CONFIG_PATH

CONFIGS = DEFAULT_CONFIG_PATH.parent

BASE = Target.from_config(load_config())
SHAPES = [(64, 96), (384, 1536), (1536, 384), (80, 384), (1024, 64), (48, 40), (7, 9)]
EPILOGUES = ("none", "gelu", linear.Epilogue("none", residual=True), linear.Epilogue("gelu", residual=True, norm=True))


def _search(lin, target, m, k, n, act, tile_m, exhaustive):
    old = linear.Linear.exhaustive
    linear.Linear.exhaustive = exhaustive
    try:
        epi = act if isinstance(act, linear.Epilogue) else linear.Epilogue(act)
        return lin._search(target, m, k, n, epi, tile_m)
    finally:
        linear.Linear.exhaustive = old


@pytest.mark.parametrize("spad", [0, 4096, 1024])  # 0: the whole scratchpad (`Target.budget`)
def test_pruned_search_picks_as_the_exhaustive_one(spad):
    target = BASE.with_budget({"spad": spad, "acc": BASE.budget_acc}) if spad else BASE
    for (k, n), act, tile_m in itertools.product(SHAPES, EPILOGUES, (0, 32)):
        kernels.forget()  # one kernel's memos, shared as in a compile: the fitting candidates over every M
        lin = linear.Linear()
        for m in (1, 17, 300, 1500):
            fast = _search(lin, target, m, k, n, act, tile_m, exhaustive=False)
            slow = _search(lin, target, m, k, n, act, tile_m, exhaustive=True)
            assert fast[:2] == slow[:2], (m, k, n, act, tile_m)
            assert fast[2].used == slow[2].used and fast[2].buffers == slow[2].buffers


@pytest.mark.parametrize("config", ["default", "edge", "large"])
def test_lower_bound_is_at_most_the_cost(config):
    target = Target.from_config(load_config(CONFIGS / f"{config}.toml"))
    lin = linear.Linear()
    for m, (k, n), act in itertools.product((1, 17, 300), SHAPES, EPILOGUES):
        epi = act if isinstance(act, linear.Epilogue) else linear.Epilogue(act)
        rows = target.array_rows
        tiles = itertools.product((rows, 4 * rows), target.divisors(n), target.divisors(k, rows), (0, 1), (1, 2))
        cands = _with_res_acc(tiles, k, epi)
        for cand, bound in zip(cands, linear_cost.lower_bounds(target, m, k, n, cands, epi)):
            assert bound <= lin.cost(target, (m, k, n, epi), cand) + 1e-6, (cand, epi)


def test_lower_bound_is_at_most_the_cost_with_three_slots():
    """The same of a third slot for the streamed loads (`ring`), which the search prices beside the winner
    where x and W tiles stream (ws = 0): an MLP's second linear (where the search takes it), row tiles of 4
    array rows and one accumulator half, at a DRAM-bound M."""
    lin, m, rows = linear.Linear(), 300, BASE.array_rows
    for (k, n), act in itertools.product(SHAPES[2:3], EPILOGUES):
        epi = act if isinstance(act, linear.Epilogue) else linear.Epilogue(act)
        tiles = itertools.product((4 * rows,), BASE.divisors(n), BASE.divisors(k, rows), (0,), (1,))
        cands = _with_res_acc(tiles, k, epi, rings=(3,))
        for cand, bound in zip(cands, linear_cost.lower_bounds(BASE, m, k, n, cands, epi)):
            assert bound <= lin.cost(BASE, (m, k, n, epi), cand) + 1e-6, (cand, epi)


def test_fitting_test_adds_up_as_the_plan():
    lin, target = linear.Linear(), BASE.with_budget({"spad": 4096, "acc": BASE.budget_acc})
    for (k, n), act in itertools.product(SHAPES, EPILOGUES):
        epi = act if isinstance(act, linear.Epilogue) else linear.Epilogue(act)
        tiles = itertools.product((16, 64), target.divisors(n), target.divisors(k, 16), (0, 1), (1, 2))
        for cand in _with_res_acc(tiles, k, epi, rings=(0, 3)):
            full, usage = lin._plan(target, cand, k, n, epi), lin._plan(target, cand, k, n, epi, linear._Usage)
            assert usage.used == full.used and usage.fits() == full.fits(), (cand, epi)


def _with_res_acc(tiles, k, epi, rings=(0,)) -> list:
    """Each (tm, tn, tk, ws, acc) with the residual in the scratchpad, and in the accumulator where allowed,
    each with the resident bias row and with a bias tile per output block, each with each of `rings` (the
    streamed loads' slots: 0, the target's two; 3)."""
    return [(*c, ra, bt, ring) for c in tiles for ra in (0, 1) for bt in (0, 1) for ring in rings
            if not ra or epi.res_in_acc(k // c[2])]  # fmt: skip
