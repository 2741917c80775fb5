"""The batched decode step (`novella_mlir/decoding/batched.py`, `runtime/batch.py`) under the engine, against
transformers' greedy `generate` per sequence: one program advances every running sequence (dense
layers at M = B), each over its own pages and past length, hazard checking on."""

from __future__ import annotations

import pytest
import torch

tf = pytest.importorskip("transformers")

from lm_models import build, check, prompt, reference, shared_lm  # noqa: E402

from novella_mlir.causal_lm import compile_causal_lm  # noqa: E402
from novella_mlir.decoding.batched import compile_batched  # noqa: E402
from novella_mlir.decoding.engine import BatchBoundError, Engine  # noqa: E402
from novella_mlir.errors import InputError  # noqa: E402
from novella_mlir.runtime.batch import BatchStep, Lane  # noqa: E402

MAX_LEN = 224
PS = 16
B = 4


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request):
    hf, lm = shared_lm(request.param, MAX_LEN, PS)  # as test_engine's
    return request.param, hf, compile_batched(hf, lm, (B,), cache=False)


@pytest.fixture(scope="module")
def mqa():
    """Multi-query attention (one cache head per sequence), batched at B."""
    hf = build("mqa", MAX_LEN)
    return hf, compile_batched(hf, compile_causal_lm(hf, max_len=MAX_LEN, page_size=PS, cache=False), (B,), cache=False)


def _run(eng, plan: dict) -> list:
    reqs = []
    while len(reqs) < len(plan) or not eng.done:
        for t, n in plan.get(eng.steps, []):
            reqs.append(eng.add(prompt(t, seed=t), n))
        eng.step()
    return reqs


def test_batched_step_requests_join_at_different_steps(model):
    """Lengths 1, 7, 33, 200 join at steps 0, 2, 5, 9: every decode is a batched step (up to four
    lanes), each sequence token-identical to hf.generate; the 200-token one moves the clock forward."""
    name, hf, lm = model
    eng = Engine(lm)
    reqs = _run(eng, {0: [(1, 12)], 2: [(7, 9)], 5: [(33, 11)], 9: [(200, 6)]})
    kinds = {s.kind for s in eng.run.steps}
    assert kinds == {"prefill", "batch"}
    lanes = [-s.sequence for s in eng.run.steps if s.kind == "batch"]
    assert max(lanes) == 4 and min(lanes) >= 1
    for r in reqs:
        assert r.finish_reason == "length"
        check(hf, r, name)
    eng.close()
    assert eng.pool.in_use == 0


def test_one_batched_step_costs_less_than_its_sequences_apart(model):
    """Four sequences in one batched step against one single-sequence decode step at the same past."""
    _, hf, lm = model
    eng = Engine(lm, check_hazards=False)
    for t in (16, 16, 16, 16):
        eng.add(prompt(t, seed=t + len(eng.waiting)), 3)
    eng.step()  # prefills; all four join at clock 16
    eng.step()
    batch = eng.run.steps[-1]
    assert batch.kind == "batch" and batch.sequence == -4
    eng.close()
    single = Engine(lm, check_hazards=False, batched=False)
    single.add(prompt(16, seed=1), 2)
    single.step()
    single.step()
    one = single.run.steps[-1]
    assert one.kind == "decode" and one.position == 16
    assert batch.dma_bytes < 2 * one.dma_bytes  # the weights are read once for the four (apart: four times)
    assert batch.cycles < 3 * one.cycles
    single.close()


def test_shared_prefix_in_the_batched_step(model):
    name, hf, lm = model
    base = prompt(40, seed=7)
    eng = Engine(lm)
    reqs = [eng.add(p, 6) for p in (base + prompt(6, seed=8), base + prompt(3, seed=9), base[:37] + [5, 6])]
    eng.run_all()
    assert [s.kind for s in eng.run.steps].count("prefill") == 1 and eng.copies >= 2
    for r in reqs:
        check(hf, r, name)
    eng.close()
    assert eng.pool.in_use == 0 and not any(eng.pool.refs)


def test_small_pool_preempts_in_the_batched_step(model):
    name, hf, lm = model
    small = lm.fresh(n_pages=7)
    small.batched = lm.batched
    eng = Engine(small)
    reqs = [eng.add(prompt(t, seed=30 + t), n) for t, n in ((20, 30), (33, 12), (7, 20))]
    eng.run_all()
    assert sum(r.preemptions for r in reqs) >= 1
    for r in reqs:
        check(hf, r, name)


def test_generate_of_a_list_uses_the_batched_step(model):
    name, hf, lm = model
    prompts = [torch.tensor(prompt(t, seed=40 + t)) for t in (3, 19, 35, 5, 8)]
    outs = lm.generate(prompts, max_new_tokens=4)
    for p, out in zip(prompts, outs):
        assert out.tolist() == reference(hf, p.tolist(), 4)[0], name
    assert "decode" not in {s.kind for s in lm.last_run.steps}
    assert lm.session().pool.in_use == 0


def test_a_batch_beyond_the_compiled_bound_is_refused(model):
    _, _, lm = model
    with pytest.raises(BatchBoundError, match=r"max_batch=5 is outside the compiled bound \[1, 4\]"):
        Engine(lm, max_batch=5)
    sess = lm.session()
    step = BatchStep(sess, f"batch{B}", B, 0)
    with pytest.raises(InputError, match="5 sequences do not fit the batch of 4"):
        step.run([Lane(3, 1, 0, [0])] * 5, 1)
    with pytest.raises(InputError, match="not a batched decode program of batch 4"):
        BatchStep(sess, "decode", B, 0)


def test_batched_attention_is_fused_over_each_sequences_pages(model):
    """The per-sequence mask [B, 1, 1, P + 1] broadcasts over the heads inside one fused attention that
    reads its keys and values from each sequence's pages (`seq_pages` apart, in the IR)."""
    _, hf, lm = model
    m = lm.batched[B]
    kernels = [mm.kernel for p in m.artifact.programs for mm in p.macros]
    assert "novella.flash_attention" in kernels and "novella.softmax" not in kernels
    text = m.ir("novella-kv-cache")
    assert text.count("novella.paged_key = {batch = 4") == hf.config.num_hidden_layers
    assert all(s["batch"] == B and s["seq_pages"] * s["page_elems"] * B <= m.artifact.kv["vspan"]
               for s in m.artifact.kv["slots"])  # fmt: skip


def test_batched_step_holds_every_heads_query(model):
    """The batched step's fused attention loads and scales every head's query rows once (`q_held`), not
    one LOAD per (sequence, kv head) beside that head's K and V pages (the other tests here check its
    tokens against transformers with hazard checking on)."""
    _, hf, lm = model
    tiled = lm.batched[B].ir("novella-tile").splitlines()
    flash = [ln for ln in tiled if '"novella.flash_attention"' in ln]
    assert len(flash) == hf.config.num_hidden_layers
    assert all("q_held = " in ln for ln in flash)


def _step_heads(lm) -> list:
    """The `heads` tile of each fused attention of the batched step (1 where absent), from its IR (the
    op's cache attributes have a `heads` of their own, the cache's)."""
    flash = [ln for ln in lm.batched[B].ir("novella-tile").splitlines() if '"novella.flash_attention"' in ln]
    tiles = [ln.split("novella.tiles = {")[1].split("}")[0] for ln in flash]
    return [int(t.split("heads = ")[1].split(" ")[0]) if "heads = " in t else 1 for t in tiles]


def test_batched_attention_takes_several_heads_per_step(model):
    """The batched step's fused attention takes `heads` > 1 heads per grid step (`flash_decode.SubHead`):
    each head's K and V pages are LOADs of their own, all chained after the query's (one exposed DMA
    latency; LLaMA's query is read where `--novella-resident` keeps it, no LOAD), the sequence's mask is
    loaded once for the step's heads, and the outputs of every head are written where it keeps them, no
    STORE (test_resident_decode.py) (the tokens of this program are checked by the other tests, hazard
    checking on)."""
    name, hf, lm = model
    heads = _step_heads(lm)
    assert len(heads) == hf.config.num_hidden_layers and len(set(heads)) == 1 and heads[0] > 1
    p = lm.batched[B].artifact.programs[0]
    for mm in [mm for mm in p.macros if mm.kernel == "novella.flash_attention"]:
        loads = [(t.tensor, t.const.get("chain", 0)) for t in mm.insts if t.opcode == "LOAD"]
        q = loads[:1] == [(0, 0)]  # the query's LOAD, unless it is kept (LLaMA's: the RoPE generic's result)
        assert all(x != 0 and chain == 1 for x, chain in loads[q:]) and q == (name == "gpt2")
        k, v, masks = ([x for x, _ in loads].count(i) for i in (1, 2, 3))
        assert k == v > masks == 1 and [t.opcode for t in mm.insts].count("STORE") == 0


def test_heads_of_different_sequences_load_their_own_masks(mqa):
    """Multi-query attention (one cache head per sequence): a grid step of several heads spans sequences,
    so each head loads its own sequence's mask row (3d2f92e: heads after the first read mask buffers
    nothing loaded, and tokens of 7 and 12-token prompts differed)."""
    hf, lm = mqa
    assert _step_heads(lm) == [2, 2]
    for mm in [mm for mm in lm.batched[B].artifact.programs[0].macros if mm.kernel == "novella.flash_attention"]:
        assert [t.tensor for t in mm.insts if t.opcode == "LOAD"].count(3) == 2
    prompts = [torch.tensor(prompt(t, seed=40 + t)) for t in (1, 7, 33, 12)]
    for p, out in zip(prompts, lm.generate(prompts, max_new_tokens=6)):
        assert out.tolist() == reference(hf, p.tolist(), 6)[0], len(p)


def test_batched_append_loads_every_sequences_rows_once(model):
    """The batched cache append (`kv_cache.KvAppend`) is one step: one LOAD of the new rows of all B
    sequences (none where `--novella-resident` keeps them on chip, LLaMA's RoPE'd k and its v: the COPY reads
    them there; GPT-2's are a slice of c_attn's result, read from DRAM), one COPY,
    then per sequence a STORE into its page, all but the first chained (one exposed DMA latency); the
    single-sequence decode program keeps one step per sequence (the tokens are checked by the other tests)."""
    name, hf, lm = model
    kept = []
    for m, whole in ((lm.batched[B], 1), (lm.decode, 0)):
        appends = [ln for ln in m.ir("novella-tile").splitlines() if '"novella.kv_append"' in ln]
        assert len(appends) == 2 * hf.config.num_hidden_layers
        assert all(f"whole = {whole}" in ln for ln in appends)
        kept += ["novella.resident = {new = " in ln for ln in appends]
    p, n_loads = lm.batched[B].artifact.programs[0], []
    for mm in [mm for mm in p.macros if mm.kernel == "novella.kv_append"]:
        loads = [t for t in mm.insts if t.opcode == "LOAD"]
        stores = [t for t in mm.insts if t.opcode == "STORE"]
        n_loads.append(len(loads))
        assert len(loads) <= 1 and [t.opcode for t in mm.insts].count("VEC") == 1 and len(stores) == B
        assert [t.const.get("chain", 0) for t in stores] == [0] + [1] * (B - 1)
    assert any(kept) == (0 in n_loads) == (name == "llama")


def test_batched_patch_equals_a_fresh_instantiation(model):
    """The batched step's patched words (`runtime/_patch_numba.patch`) equal a fresh instantiation mapped
    through the same block array (`BatchStep.fill`, which rewrites only the lanes that changed, equal to
    `fill_slow`), bit for bit, over consecutive steps: every lane at its own past, row offset and lane
    field (`BatchStep.starts`: the key tiles it walks), lanes crossing pages, a lane's page replaced between two steps (as copy-on-write does),
    two lanes leaving and joining again (the idle lanes' fields a page long: no bucket per step), the
    steps after a bucket's first patched through the compiled entry on the arrays' addresses; then a
    symbol outside the program and a freed page are refused."""
    import numpy as np

    from novella_mlir.runtime.kv import BlockTable

    _, _, lm = model
    sess = lm.session(check_hazards=False)
    name, null, spare = f"batch{B}", BlockTable(), BlockTable()
    sess.pool.reserve(null, 1)
    sess.pool.reserve(spare, 1)
    pasts = [5, 17, 40, 31]
    clock = max(pasts)
    offs = [(clock - p) % PS for p in pasts]
    tables = [BlockTable() for _ in pasts]
    for t, p, r in zip(tables, pasts, offs):
        sess.pool.reserve(t, p + r + 16)
    step, st = BatchStep(sess, name, B, null.blocks[0]), sess.steppers[name]

    def lanes(k):
        return [Lane(5, p + k, (clock - p - r) // PS, t.blocks[: -(-(p + r + k + 1) // PS)], r)
                for p, r, t in zip(pasts, offs, tables)]  # fmt: skip

    entered = []
    try:
        for k in range(14):
            if k == 6:
                tables[1].blocks[0], spare.blocks[0] = spare.blocks[0], tables[1].blocks[0]
            running = lanes(k)[: 2 if k in (9, 10) else B]
            blocks = step.fill(running, clock + k)
            assert blocks.tolist() == step.fill_slow(running, clock + k).tolist()
            syms = (clock + k, *step.starts(running, clock + k))  # the lanes' fields: their own key tiles
            entered.append(st._go is not None and st._go[0] is blocks)  # the compiled entry is tried
            words, new = st.words(syms, blocks)
            assert not (k == 10 and new)  # two idle lanes, the clock in step 9's page: their fields did not move
            ref = sess.reference(name, syms, BlockTable(blocks.tolist()))
            np.testing.assert_array_equal(words, ref, err_msg=f"step {k}")
        assert any(entered) and not entered[0], entered  # a bucket's later steps: through `_patch_numba.entry`
        with pytest.raises(InputError, match="is outside every compiled program"):
            st.words((MAX_LEN,), blocks)  # the last bucket's own check refuses it too
        blocks[np.flatnonzero(blocks == tables[0].blocks[0])] = -1
        with pytest.raises(RuntimeError, match="freed out of its window"):
            st.words((clock + 13,), blocks)
    finally:
        for t in [*tables, null, spare]:
            sess.pool.release(t)


def _prompts_apart(hf, lm, name: str, seed: int) -> None:
    prompts = [torch.tensor(prompt(t, seed=seed + t)) for t in (1, 7, 33, 200)]
    for p, out in zip(prompts, lm.generate(prompts, max_new_tokens=5)):
        assert out.tolist() == reference(hf, p.tolist(), 5)[0], (name, len(p))


def test_sequences_of_very_different_pasts_in_one_batch(model):
    """Prompts of 1, 7, 33 and 200 tokens decode side by side in every step: each lane's attention walks
    its own key tiles only (`flash_decode.Lanes`; the lane of 1 token one tile of the 13 the clock has,
    its first tile partial), token-identical to hf.generate with hazard checking on."""
    name, hf, lm = model
    _prompts_apart(hf, lm, name, 60)


def test_mqa_sequences_of_very_different_pasts_in_one_batch(mqa):
    """As above with multi-query attention: a grid step's two heads are two sequences' heads, each
    guarded by its own lane's field."""
    hf, lm = mqa
    assert _step_heads(lm) == [2, 2]
    _prompts_apart(hf, lm, "mqa", 70)


def _step_at(lm, pasts: list):
    """(stats, the step's lane fields) of one batched step of lanes at `pasts` (clock max(pasts); cache
    contents arbitrary: cost only)."""
    from novella_mlir.runtime.kv import BlockTable

    sess = lm.session(check_hazards=False)
    null, clock = BlockTable(), max(pasts)
    sess.pool.reserve(null, 1)
    offs = [(clock - p) % PS for p in pasts]
    tables = [BlockTable() for _ in pasts]
    try:
        for t, p, r in zip(tables, pasts, offs):
            sess.pool.reserve(t, p + r + 1)
        lanes = [Lane(5, p, (clock - p - r) // PS, t.blocks, r) for p, r, t in zip(pasts, offs, tables)]
        step = BatchStep(sess, f"batch{B}", B, null.blocks[0])
        return step.run(lanes, clock)[1], step.starts(lanes, clock)
    finally:
        for t in [*tables, null]:
            sess.pool.release(t)


def test_a_lane_loads_only_its_own_key_tiles(model):
    """The batched step's attention guards each key tile by its lane's field (the storage index of the
    sequence's position 0, `BatchStep.starts`), stored in the artifact (`expr.LANE`), its loads still in
    two slots: lanes at pasts 3, 10, 40 and 200 load fewer bytes than four lanes at 200 by at least K and
    V of every whole tile below each lane's start (every cache head, every layer), and cost clearly less
    (before, each lane walked the 200 keys, masked: the same bytes and about the same cycles)."""
    from novella_mlir.runtime import expr
    from novella_mlir.runtime.step import lane_fields

    _, hf, lm = model
    art = lm.batched[B].artifact
    assert lane_fields(art) == B and lane_fields(lm.decode.artifact) == 0
    for mm in [mm for mm in art.programs[0].macros if mm.kernel == "novella.flash_attention"]:
        kv = [t for t in mm.insts if t.opcode == "LOAD" and t.tensor in (1, 2)]
        assert kv and all(expr.has_lane([p for _, p in t.when]) for t in kv)
        assert mm.schedule["load_slots"] == 2  # guarded, still two slots: a step's loads under the last's compute
    from novella_mlir.tools.inspect_artifact import describe

    assert "symbol[" in describe(art)  # `novella inspect` shows a guard's lane field
    mixed, starts = _step_at(lm, [3, 10, 40, 200])
    full, _ = _step_at(lm, [200] * B)
    flash = [ln for ln in lm.batched[B].ir("novella-tile").splitlines() if '"novella.flash_attention"' in ln]
    tk = int(flash[0].split("novella.tiles = {")[1].split("tk = ")[1].split(" ")[0])
    cfg = hf.config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    row = 2 * kv_heads * (cfg.hidden_size // cfg.num_attention_heads) * 4 * cfg.num_hidden_layers
    skipped = sum(s // tk * tk for s in starts) * row
    assert skipped > 0
    assert full.dma_bytes_loaded - mixed.dma_bytes_loaded >= skipped
    assert mixed.cycles < 0.85 * full.cycles, (mixed.cycles, full.cycles)
