"""Decode attention with key/value tiles that span pages (`kernels/kv_cache.load_page_chain`): a tile is one
LOAD per page, the later ones chained (docs/isa.md, LOAD `chain`), each page's address mapped through the
block table per step.

Greedy generation must be token-identical to `hf.generate` (logits within 1e-3), hazard checker on, for
GPT-2 and a LLaMA-style GQA model (the packed query block), with the pool's blocks handed out in a
shuffled order (a tile's pages out of order in DRAM), at prompt lengths 1, 2, odd, across a key/value
tile boundary (a partial last tile whose later pages are past the sequence) and the maximum, single and
batched."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers")

from hf_reference import greedy_reference as _reference  # noqa: E402
from hf_reference import prompt as _prompt  # noqa: E402
from lm_models import build  # noqa: E402

from novella_mlir.causal_lm import compile_causal_lm  # noqa: E402
from simulator import isa  # noqa: E402

MAX_LEN = 320
PS = 16
NEW = 12
_CHAIN = isa.field(isa.Opcode.LOAD, "chain")


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request):
    hf = build(request.param, MAX_LEN)
    return request.param, hf, compile_causal_lm(hf, max_len=MAX_LEN, page_size=PS, max_batch=3, cache=False)


def _kv_tile(lm) -> int:
    flash = next(m for m in lm.decode.artifact.macros if m.kernel == "novella.flash_attention")
    k_pages = [t for t in flash.insts if t.opcode == "LOAD" and t.tensor == 1]  # the key tile's page LOADs
    return PS * len(k_pages)


def _shuffle(lm, seed: int) -> None:
    random.Random(seed).shuffle(lm.session().pool.free)


def test_decode_tiles_span_pages_and_chain_their_loads(model):
    _, _, lm = model
    tk = _kv_tile(lm)
    assert tk > PS and tk % PS == 0
    lm.generate(_prompt(5, seed=1), max_new_tokens=2, keep_words=True)
    words = lm.last_run.steps[-1].words
    load = isa.opcodes(words) == int(isa.Opcode.LOAD)
    assert int(_CHAIN.get(words[load]).sum()) > 0


@pytest.mark.parametrize("length", [1, 2, 37, 250, MAX_LEN - NEW])
def test_generate_token_identical_with_pages_out_of_order(model, length):
    name, hf, lm = model
    tk = _kv_tile(lm)
    _shuffle(lm, seed=length)
    ids = _prompt(length, seed=length)
    out = lm.generate(ids, max_new_tokens=NEW)
    ref, ref_logits = _reference(hf, ids, NEW)
    assert torch.equal(out, ref), f"{name} T={length}"
    np.testing.assert_allclose(lm.last_run.logits[0], ref_logits, atol=1e-3, rtol=0)
    dec = [s for s in lm.last_run.steps if s.kind == "decode"]
    tiles = {-(-(s.position + 1) // tk) for s in dec}
    assert sum(s.new_bucket for s in dec) <= len(tiles)  # a bucket per key/value tile count, not per page
    if length == 250:  # the decode crosses position 256, a tile boundary of every tk: a last tile of one row
        assert tiles == {256 // tk, 256 // tk + 1}


def test_batch_across_a_tile_boundary(model):
    name, hf, lm = model
    _shuffle(lm, seed=7)
    prompts = [_prompt(t, seed=20 + t)[0] for t in (250, 1, 40)]
    outs = lm.generate(prompts, max_new_tokens=NEW)
    for p, out in zip(prompts, outs):
        ref, _ = _reference(hf, p[None, :], NEW)
        assert torch.equal(out, ref[0]), f"{name} batch T={len(p)}"
    assert lm.session().pool.in_use == 0


def test_cost_model_prices_one_latency_per_tile():
    """`flash_cost`: a tile of n pages costs one DMA latency, n issues and its pages' data, so at a long past
    tiles of several pages are cheaper than one page (the kernel picks tk by this, from the Target); a
    short last page pays its rows."""
    from novella_mlir.kernels import flash_cost as fc
    from novella_mlir.machine.target import Target
    from simulator import load_config

    t = Target.from_config(load_config())
    page_data = PS * 32 * 4 / t.dram_bytes_per_cycle
    q, d = fc._page_chain(t, 3 * PS + 5, 32, PS)
    assert d == 3 * page_data + 5 * 32 * 4 / t.dram_bytes_per_cycle
    assert q == 4 * t.issue_cycles + t.dma_latency + d
    dims = fc.Dims(2, 2, 1000, 32, 32, False, False, (True,) * 4, page=PS)
    cost = {tk: fc.cost(t, dims, 16, tk, False) for tk in (PS, 4 * PS, 8 * PS)}
    assert max(cost[8 * PS], cost[4 * PS]) < 0.8 * cost[PS]  # beyond, a wider tile's longer last compute (the
    # drain of two heads, `chained_ring`) weighs about as much as its fewer steps


def test_cost_model_prices_a_short_last_tile_in_the_slot_ring():
    """`flash_cost.chained_ring`: a head's last tile of one row holds little data, so the next head's first
    tile (in the slot that tile's predecessor used) waits for that predecessor's whole compute: at 257
    keys a tile of 256 pays it per head and smaller tiles pay less; at 256 keys (no short tile) it does not.
    The search's lower bound stays at most the cost, and the decode's lengths are sampled
    (`flash_decode.plan_samples`): the plan's alone is one row past a tile boundary for every tk."""
    from novella_mlir.kernels import flash_cost as fc
    from novella_mlir.kernels.flash_decode import SAMPLES, plan_samples
    from novella_mlir.machine.target import Target
    from simulator import load_config

    t = Target.from_config(load_config())

    def dims(lk):
        return fc.Dims(64, 2, lk, 32, 32, False, True, (True,) * 4, True, PS, True)

    cost = {(lk, tk): fc.cost(t, dims(lk), 2, tk, False) for lk in (256, 257) for tk in (64, 256)}
    assert cost[257, 256] > 1.1 * cost[257, 64]
    assert cost[256, 256] < 1.01 * cost[256, 64]  # the drain of a longer last compute only
    for lk in (17, 257, 1001):
        for tk in (16, 32, 64, 128, 256):
            assert fc.lower_bound(t, dims(lk), 2, tk, False) <= fc.cost(t, dims(lk), 2, tk, False)

    class Paged:
        paged, causal = {1: {"page_size": PS}}, False

    samples = [s for (s,) in plan_samples(Paged, [4096])]
    assert len(samples) == SAMPLES and 2048 <= min(samples) and max(samples) < 4096
    assert len({s % 256 for s in samples}) == SAMPLES
