"""Flash attention's lookahead (`kernels/flash_ahead.py`, `s_slots = 3`): a query block's last step runs the
score MATMUL of the next block's first key tile (the next head's after a head's last block) and the next
block's first step the previous block's output, so the units do not idle at the blocks' edges. Forced, it
matches eager PyTorch (hazard checker on) at the least length (two key tiles), odd lengths, a partial last
key tile and query block, and the maximum; it is offered only with two key tiles or more at every length, or
one at every length where the query is kept in the scratchpad (`Ahead.single`); on `large` it is picked and
beats the same tiles without it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from novella_mlir import compile_torch
from novella_mlir.kernels import flash_cost
from novella_mlir.kernels.flash_attention import FlashAttention
from novella_mlir.kernels.flash_emit import FUSED
from novella_mlir.machine.target import Target
from simulator import load_config

LARGE = Path(__file__).resolve().parents[2] / "simulator" / "configs" / "large.toml"


class Attention(torch.nn.Module):
    def forward(self, q, kv):
        return F.scaled_dot_product_attention(q, kv, kv)


class Projected(torch.nn.Module):
    """q, k, v projections, a [1, 3, T, 32] self-attention and o_proj (`o_proj`; else the attention is the
    result): `--novella-resident` keeps the attention's operands and (with o_proj) output in the scratchpad."""

    def __init__(self, o_proj: bool = True):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(96, 96) for _ in range(4))
        self.o_proj = o_proj

    def forward(self, x):
        heads = lambda y: y.view(1, x.shape[1], 3, 32).transpose(1, 2)  # noqa: E731
        a = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)))
        a = a.transpose(1, 2).reshape(1, x.shape[1], 96)
        return self.o(a) if self.o_proj else a


def _compile(lo: int, hi: int, config=None):
    q, kv = torch.randn(1, 6, lo + 1, 64), torch.randn(1, 6, lo + 1, 64)
    return compile_torch(Attention(), q, kv, dynamic_dim=2, min_len=lo, max_len=hi, cache=False, config=config)


def _tiles(npu) -> str:
    (tiles,) = re.findall(r"novella.tiles = \{[^}]*\}", npu.ir("novella-tile"))
    return tiles


def _force(monkeypatch, s_slots: int, tk: int = 64, ones: int = 2) -> None:
    """The cost model replaced: the candidates with `s_slots` score slots, the row sums of `ones` (2: P @ u)
    and key tiles of `tk` cost 0, the rest 1."""
    want = (s_slots, ones, tk)
    monkeypatch.setattr(FlashAttention, "cost", lambda self, t, dims, c: float((c[4], c[3], c[1]) != want))
    monkeypatch.setattr(FlashAttention, "exhaustive", True)


@pytest.mark.parametrize("ones", [2, FUSED])
def test_the_lookahead_matches_eager(monkeypatch, ones):
    """With `FUSED` too: a block's opening EXPSUB writes its row sums beside l (`ls`), as the previous block's
    output, normalized at this block's first step, still reads l."""
    _force(monkeypatch, 3, ones=ones)
    npu = _compile(65, 300)
    tiles = _tiles(npu)
    assert "s_slots = 3" in tiles and "q_blocks = 1" in tiles and f"ones = {ones} " in tiles, tiles
    assert "tk = 64 " in tiles, tiles
    torch.manual_seed(0)
    for t in (65, 66, 128, 129, 201, 300):  # two key tiles (one of a row), odd, full, partial, the maximum
        q, kv = torch.randn(1, 6, t, 64), torch.randn(1, 6, t, 64)
        y = npu(q, kv, check_hazards=True)
        torch.testing.assert_close(y, F.scaled_dot_product_attention(q, kv, kv), rtol=1e-4, atol=1e-4)


def test_no_lookahead_where_a_length_has_one_key_tile(monkeypatch):
    _force(monkeypatch, 3)
    assert "s_slots = 3" not in _tiles(_compile(1, 300))


@pytest.mark.parametrize("o_proj", [True, False])
def test_one_key_tile_with_the_query_kept_matches_eager(monkeypatch, o_proj):
    """Compiled over [1, 40]: the shape bucket [1, 16] (one key tile of 32 at every length) with q, k, v and
    (o_proj) the output kept runs the lookahead, its blocks' scores alternating between two slots, K read from
    its region; [17, 40] has two key tiles at 17 or more. Without o_proj the output is stored: the op's last
    step normalizes two blocks (the one before and its own), and its STOREs run after all of its compute, so
    the last block's output goes through `p` (in `out`, it overwrote the rows of the block before: heads 1 of 3
    wrong at every length)."""
    monkeypatch.setattr(FlashAttention, "cost", lambda self, t, dims, c: float((c[4], c[1]) != (3, 32)))
    monkeypatch.setattr(FlashAttention, "exhaustive", True)
    torch.manual_seed(0)
    model = Projected(o_proj).eval()
    npu = compile_torch(model, torch.randn(1, 8, 96), dynamic_dim=1, min_len=1, max_len=40, cache=False,
                        pass_options={"novella-resident": {"enable": 1}})  # fmt: skip
    tiles = re.findall(r"novella.tiles = \{[^}]*\}", npu.ir("novella-tile", at=[8]))
    (tiles,) = [x for x in tiles if "tq = " in x]
    assert "s_slots = 3" in tiles and "tk = 32 " in tiles, tiles
    line = next(x for x in npu.ir("novella-resident", at=[8]).splitlines() if '"novella.flash_attention"' in x)
    assert all(f"{role} = " in line for role in ("x", "k", "v")) and ("out = " in line) == o_proj, line
    for t in (1, 2, 7, 16, 17, 40):
        x = torch.randn(1, t, 96)
        with torch.no_grad():
            ref = model(x)
        torch.testing.assert_close(npu(x, check_hazards=True), ref, rtol=1e-4, atol=1e-4)


def test_one_query_block_a_head_with_the_output_kept_matches_eager_on_large():
    """Two whisper-tiny layers on `large` over [65, 128]: the second's attention (its output kept for o_proj)
    runs the lookahead over the heads, one query block each (tq = 256), two key tiles of 64. Its previous
    block's output address, at the grid's and the lengths' zero point, must stay near its region: written with
    qi - 1 + nq it was tq rows below, and `--novella-schedule` moved it with the macro's buffers (max error 4.9;
    test_configs' encoder on large at T = 65 alike). Regions within half the scratchpad (`priced=0`): past it
    more of q, k and v is kept, and the attention's tiles are others."""
    import models

    body = models.WhisperBody().eval()
    body.layers = body.layers[:2]
    npu = compile_torch(body, torch.randn(1, 65, 384), dynamic_dim=1, min_len=65, max_len=128, cache=False,
                        config=load_config(LARGE), pass_options={"novella-resident": {"priced": 0}})  # fmt: skip
    lines = [x for x in npu.ir("novella-tile", at=[65]).splitlines() if '"novella.flash_attention"' in x]
    tiles = re.search(r"novella.tiles = \{[^}]*\}", lines[1]).group(0)
    assert (
        "s_slots = 3" in tiles
        and "tq = 256 " in tiles
        and "tk = 64 " in tiles
        and "novella.resident = {out = " in lines[1]
    ), tiles
    for t in (65, 97, 128):
        x = torch.randn(1, t, 384)
        with torch.no_grad():
            ref = body(x)
        torch.testing.assert_close(npu(x, check_hazards=True), ref, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("t", [256, 500])
def test_the_lookahead_is_picked_and_pays_on_large(monkeypatch, t):
    config = load_config(LARGE)
    picked = _compile(129, 1500, config)
    assert "s_slots = 3" in _tiles(picked)
    q, kv = torch.randn(1, 6, t, 64), torch.randn(1, 6, t, 64)
    picked(q, kv)
    with_it = picked.last_run.stats.cycles
    _force(monkeypatch, 2, tk=int(re.search(r"tk = (\d+)", _tiles(picked)).group(1)))
    without = _compile(129, 1500, config)
    assert "s_slots = 2" in _tiles(without)
    without(q, kv)
    assert with_it < 0.9 * without.last_run.stats.cycles


@pytest.mark.parametrize("t, tk", [(256, 128), (500, 64)])
def test_the_lookahead_is_priced_as_its_steps_run(monkeypatch, t, tk):
    """`flash_cost.ahead_cycles` (the emitted steps timed in grid order) within 3% of the simulated cycles of a
    [6, T, 64] self-attention on `large` (tq = 128, FUSED): two key tiles a block and eight."""
    config = load_config(LARGE)
    cand = (128, tk, True, FUSED, 3, True, True)
    monkeypatch.setattr(FlashAttention, "cost", lambda self, target, dims, c: float(c != cand))
    monkeypatch.setattr(FlashAttention, "exhaustive", True)
    npu = _compile(t, t, config)
    assert "s_slots = 3" in _tiles(npu) and f"tk = {tk} " in _tiles(npu)
    q, kv = torch.randn(1, 6, t, 64), torch.randn(1, 6, t, 64)
    npu(q, kv, check_hazards=False)
    dims = flash_cost.Dims(6, t, t, 64, 64, False, False, (True,) * 4)
    predicted = flash_cost.cost(Target.from_config(config), dims, *cand)
    assert abs(predicted / npu.last_run.stats.cycles - 1) < 0.03, (predicted, npu.last_run.stats.cycles)
