"""Flash attention's query block alternating between consecutive query blocks (`novella.tiles` q_blocks,
issue 22): block (b, i) of a head's `blocks` query blocks is loaded into half (b * blocks + i) mod 2 of the
query buffer, so its LOAD waits for the step before last (`Buffer.alternate`) and runs under the previous
block's last steps instead of after them. It is a candidate of the cost model (pipelined schedules, where
the plan has several query blocks and two halves fit); the output matches eager PyTorch at lengths 1, odd,
a partial last query block and the maximum, with the hazard checker on, and the alternation pays at the
lengths the model picks it for."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

from novella_mlir import compile_torch
from novella_mlir.kernels import flash_cost as fc
from novella_mlir.machine.target import Target

MAX = 300
LENGTHS = (1, 33, 65, MAX)  # 1, odd, a partial last block of 32 / 64, max


class Attention(torch.nn.Module):
    def forward(self, q, kv):
        return F.scaled_dot_product_attention(q, kv, kv)


def _compile(tq: int):
    q, kv = torch.randn(1, 6, 16, 64), torch.randn(1, 6, 16, 64)
    opts = {"novella-tile": {"tile-m": tq}}
    return compile_torch(Attention(), q, kv, dynamic_dim=2, min_len=1, max_len=MAX, cache=False, pass_options=opts)


@pytest.mark.parametrize("tq", [32, 64])
def test_alternating_query_blocks_match_eager(tq):
    npu = _compile(tq)
    (tiles,) = re.findall(r"novella.tiles = \{[^}]*\}", npu.ir("novella-tile"))
    assert "q_blocks = 1" in tiles and f"tq = {tq} " in tiles, tiles
    torch.manual_seed(0)
    for t in LENGTHS:
        q, kv = torch.randn(1, 6, t, 64), torch.randn(1, 6, t, 64)
        y = npu(q, kv, check_hazards=True)
        assert torch.allclose(y, F.scaled_dot_product_attention(q, kv, kv), rtol=1e-4, atol=1e-4), t


def test_alternation_is_credited_by_the_model():
    """The first step of a query block no longer waits for the previous block's last compute: the model's
    cycles of the alternating candidate are below the one-slot query's, by at least its query loads."""
    from simulator import load_config

    target = Target.from_config(load_config())
    dims = fc.Dims(6, 256, 256, 64, 64, False, False, (True,) * 4)
    one, two = (fc.cost(target, dims, 64, 64, True, False, 2, True, blocks) for blocks in (False, True))
    assert two < one - 6 * 4 * fc.cm.dma(target, 64, 64, True)[1]


def test_alternation_pays_where_picked():
    """At T = 256 the alternating block (tq = 64) beats the same tiles with a one-slot query."""
    npu = _compile(64)
    q, kv = torch.randn(1, 6, 256, 64), torch.randn(1, 6, 256, 64)
    npu(q, kv, check_hazards=False)
    alternating = npu.last_run.stats.cycles
    from novella_mlir.kernels import flash_attention

    original = flash_attention.FlashAttention.choose

    def one_slot(self, g, syms, target, options, plan, rows=0, held=0):
        return original(self, g, syms, target, options, plan, 0, held)

    flash_attention.FlashAttention.choose = one_slot
    try:
        plain = _compile(64)
    finally:
        flash_attention.FlashAttention.choose = original
    assert "q_blocks" not in plain.ir("novella-tile")
    plain(q, kv, check_hazards=False)
    assert alternating < plain.last_run.stats.cycles
