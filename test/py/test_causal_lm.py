"""Autoregressive decoding with a paged KV cache resident in NPU DRAM (issue 9), against transformers.

Greedy generation must be token-identical to `hf.generate` and each step's logits within 1e-3,
for GPT-2 and a LLaMA-style (GQA, rotary) config, single prompts and a batch of different
lengths, with the simulator's hazard checking on."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers")

from hf_reference import greedy_reference as _reference  # noqa: E402
from hf_reference import prompt as _prompt  # noqa: E402
from lm_models import shared_lm  # noqa: E402

from novella_mlir.causal_lm import compile_causal_lm, load_causal_lm  # noqa: E402
from novella_mlir.errors import InputError  # noqa: E402
from novella_mlir.runtime.kv import KvCacheFullError  # noqa: E402

MAX_LEN = 96
NEW = 32


@pytest.fixture(scope="module", params=["gpt2", "llama"])
def model(request):
    return request.param, *shared_lm(request.param, MAX_LEN)  # the llama as test_resident_decode's


@pytest.mark.parametrize("length", [1, 7, 33])
def test_single_prompt_token_identical(model, length):
    name, hf, lm = model
    ids = _prompt(length, seed=length)
    out = lm.generate(ids, max_new_tokens=NEW)
    ref, ref_logits = _reference(hf, ids, NEW)
    assert out.shape == (1, length + NEW)
    assert torch.equal(out, ref), f"{name} T={length}: {out.tolist()} vs {ref.tolist()}"
    np.testing.assert_allclose(lm.last_run.logits[0], ref_logits, atol=1e-3, rtol=0)
    steps = lm.last_run.steps
    assert [s.kind for s in steps] == ["prefill"] + ["decode"] * (NEW - 1)
    assert [s.position for s in steps[1:]] == list(range(length, length + NEW - 1))
    last = steps[-1]
    assert last.cycles > 0 and last.dma_bytes > 0 and last.jit_seconds > 0
    assert last.pages_in_use == -(-(length + NEW - 1) // 16)


def test_batch_of_different_lengths(model):
    name, hf, lm = model
    prompts = [_prompt(t, seed=10 + t)[0] for t in (1, 7, 33)]
    outs = lm.generate(prompts, max_new_tokens=NEW)
    for p, out in zip(prompts, outs):
        ref, _ = _reference(hf, p[None, :], NEW)
        assert torch.equal(out, ref[0]), f"{name} batch T={len(p)}"
    run = lm.last_run
    assert run.kv_bytes_peak < run.kv_bytes_max_len  # pages on demand vs max_len per sequence
    assert lm.session().pool.in_use == 0  # freed at the end of each sequence


def test_page_order_is_free(model):
    """Blocks handed out in a shuffled order give the same tokens: the block table maps every page."""
    name, hf, lm = model
    pool = lm.session().pool
    random.Random(0).shuffle(pool.free)
    ids = _prompt(20, seed=3)
    out = lm.generate(ids, max_new_tokens=20)
    ref, _ = _reference(hf, ids, 20)
    assert torch.equal(out, ref)


def test_eos_stops_only_when_given(model):
    _, hf, lm = model
    ids = _prompt(5, seed=4)
    full = lm.generate(ids, max_new_tokens=8)
    eos = int(full[0, 7])
    stopped = lm.generate(ids, max_new_tokens=8, eos_token_id=eos)
    first = next(i for i in range(5, 13) if full[0, i] == eos)
    assert torch.equal(stopped, full[:, : first + 1])


SAMPLING = (
    {"do_sample": True},  # the global defaults: top_k 50
    {"do_sample": True, "temperature": 0.7, "top_k": 20, "top_p": 0.9, "repetition_penalty": 1.3},
)


@pytest.mark.parametrize(
    ("opts", "length"),
    [(SAMPLING[0], 7), (SAMPLING[1], 1), (SAMPLING[1], 33)],
    ids=["defaults-7", "warped-1", "warped-33"],
)
def test_sampling_matches_hf_with_a_seed(model, length, opts):
    """transformers' own processors on the NPU's logits, one multinomial draw per token: the same seed
    gives hf.generate(do_sample=True)'s tokens (and not greedy's: hf's, which the NPU's equal, above).
    Each length once: the logits at lengths 1, 7 and 33 are checked against hf's by
    test_single_prompt_token_identical."""
    name, hf, lm = model
    ids = _prompt(length, seed=20 + length)
    torch.manual_seed(1234)
    out = lm.generate(ids, max_new_tokens=NEW, **opts)
    torch.manual_seed(1234)
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                      pad_token_id=0, **opts)  # fmt: skip
    assert torch.equal(out, ref), f"{name} T={length} {opts}: {out.tolist()} vs {ref.tolist()}"
    assert not torch.equal(out, _reference(hf, ids, NEW)[0])


def test_greedy_repetition_penalty_matches_hf(model):
    name, hf, lm = model
    ids = _prompt(7, seed=30)
    out = lm.generate(ids, max_new_tokens=NEW, repetition_penalty=5.0)
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                      do_sample=False, pad_token_id=0, repetition_penalty=5.0)  # fmt: skip
    assert torch.equal(out, ref)
    assert len(set(out[0, 7:].tolist())) == NEW  # a penalty of 5 on random weights: no token twice


def test_eos_as_a_list_stops_at_the_first_of_them(model):
    _, _, lm = model
    ids = _prompt(5, seed=4)
    full = lm.generate(ids, max_new_tokens=10)
    eos = [int(full[0, 9]), int(full[0, 7])]
    stopped = lm.generate(ids, max_new_tokens=10, eos_token_id=eos)
    first = next(i for i in range(5, 15) if int(full[0, i]) in eos)
    assert torch.equal(stopped, full[:, : first + 1])


def test_bad_generation_options_are_named(model):
    _, _, lm = model
    ids = _prompt(3, seed=1)
    with pytest.raises(InputError, match="num_beams=2.*not supported"):
        lm.generate(ids, max_new_tokens=2, num_beams=2)
    with pytest.raises(InputError, match="unknown generation options.*'toppp'"):
        lm.generate(ids, max_new_tokens=2, toppp=0.5)
    with pytest.raises(InputError, match="eos_token_id must be an int or a list of ints"):
        lm.generate(ids, max_new_tokens=2, eos_token_id="x")


def test_bad_input_names_the_limit(model):
    _, _, lm = model
    with pytest.raises(InputError, match=f"more than max_len={MAX_LEN}"):
        lm.generate(_prompt(MAX_LEN + 1, 0), max_new_tokens=1)
    with pytest.raises(InputError, match=f"would pass max_len={MAX_LEN}"):
        lm.generate(_prompt(MAX_LEN - 4, 0), max_new_tokens=5)
    with pytest.raises(InputError, match="empty"):
        lm.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=1)
    with pytest.raises(InputError, match=r"token id 512 is outside the vocabulary \[0, 512\)"):
        lm.generate(torch.tensor([[3, 512]]), max_new_tokens=1)
    small = lm.fresh(n_pages=2)
    with pytest.raises(KvCacheFullError, match="out of pages: 3 more needed, 2 free of 2"):
        small.generate(_prompt(40, 1), max_new_tokens=4)
    with pytest.raises(KvCacheFullError, match="needs 3 pages .* more than the whole pool of 2"):
        small.generate([_prompt(40, 1)[0], _prompt(5, 2)[0]], max_new_tokens=4)  # a batch queues; this never fits
    assert small.session().pool.in_use == 0


def test_model_without_causal_lm_convention():
    with pytest.raises(InputError, match="does not follow the causal-LM call convention"):
        compile_causal_lm(torch.nn.Linear(4, 4), max_len=16)


def test_one_artifact_holds_both_programs(model, tmp_path):
    name, hf, lm = model
    lm.save(tmp_path / "lm.nvcl")
    again = load_causal_lm(tmp_path / "lm.nvcl")
    ids = _prompt(3, seed=5)
    assert torch.equal(again.generate(ids, max_new_tokens=4), lm.generate(ids, max_new_tokens=4))


def test_attention_is_fused_and_decode_reads_its_pages(model):
    """Both programs run attention as one fused kernel (no score matrix, no softmax kernel); decode's
    reads its keys and values from the pages of the cache (`novella.paged_key` / `paged_value`)."""
    _, hf, lm = model
    for m in (lm.prefill, lm.decode):
        kernels = [mm.kernel for p in m.artifact.programs for mm in p.macros]
        assert "novella.flash_attention" in kernels and "novella.softmax" not in kernels
    text = lm.decode.ir("novella-kv-cache")
    layers = hf.config.num_hidden_layers
    assert text.count("novella.paged_key = ") == text.count("novella.paged_value = ") == layers
    assert "novella.paged_key" not in lm.prefill.ir("novella-kv-cache")


def test_decode_artifact_does_not_grow_with_max_len():
    """The decode program for max_len 1024 and 8192: the same templates and tiles; the bytes differ
    only by the digits of offsets past the position tables that the model itself sizes by max_len."""
    from torch.export import Dim

    from novella_mlir import compile_torch
    from novella_mlir.causal_lm import _Decode, check_convention, pass_options

    arts = []
    for n in (1024, 8192):
        torch.manual_seed(0)
        cfg = tf.LlamaConfig(num_hidden_layers=1, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                             intermediate_size=128, vocab_size=512, max_position_embeddings=n,
                             bos_token_id=0, eos_token_id=1)  # fmt: skip
        hf = tf.LlamaForCausalLM(cfg).eval()
        kv = tuple(torch.zeros_like(t) for t in check_convention(hf)[1])
        spec = (None, None, tuple({2: Dim("past", min=1, max=n - 1)} for _ in kv))
        ids, pos = torch.zeros(1, 1, dtype=torch.long), torch.full((1, 1), 2, dtype=torch.long)
        m = compile_torch(_Decode(hf), ids, pos, *kv, dynamic_shapes=spec, pass_options=pass_options(16))
        arts.append(m.artifact)
    a, b = arts
    assert [len(m.insts) for m in a.macros] == [len(m.insts) for m in b.macros]
    assert [t.macro for t in a.tiles] == [t.macro for t in b.tiles]
    assert abs(a.nbytes - b.nbytes) <= 0.01 * a.nbytes, (a.nbytes, b.nbytes)


def test_paged_program_refuses_a_plain_call(model):
    _, _, lm = model
    with pytest.raises(InputError, match="keeps its KV cache in pages"):
        lm.prefill(torch.zeros(1, 3, dtype=torch.long))


def test_the_package_exports_the_decoder_entry_points():
    """The issue's snippet calls `novella_mlir.compile_causal_lm` (and users load with `load_causal_lm`)."""
    import novella_mlir

    assert novella_mlir.compile_causal_lm is compile_causal_lm
    assert novella_mlir.load_causal_lm is load_causal_lm
    assert {"compile_causal_lm", "load_causal_lm"} <= set(novella_mlir.__all__)


def test_the_issue_snippet_as_written():
    """The issue's snippet, verbatim but seeded: the hf reference keeps its config's eos (which
    min_new_tokens masks), and `generate` without an eos decodes plain greedy for max_new_tokens."""
    import novella_mlir

    torch.manual_seed(0)
    hf = tf.LlamaForCausalLM(tf.LlamaConfig(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                                             intermediate_size=256, vocab_size=512, max_position_embeddings=1024)).eval()  # fmt: skip
    lm = novella_mlir.compile_causal_lm(hf, max_len=1024, page_size=16)
    ids = torch.randint(3, 500, (1, 7))
    out = lm.generate(ids, max_new_tokens=32)
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)  # fmt: skip
    assert torch.equal(out, ref)
    outs = lm.generate([torch.randint(3, 500, (T,)) for T in (1, 7, 33)], max_new_tokens=32)
    assert [len(o) for o in outs] == [33, 39, 65]
    last = lm.last_run.steps[-1]
    assert last.kind == "decode" and last.cycles > 0 and 0 < last.jit_seconds and last.pages_in_use > 0


# --------------------------------------------------------------------- attention variants (issue 21)


def _variant(name: str):
    """Families whose cache the pass must find in the graph: multi-query LLaMA (the value's head
    transpose is a reshape), Mistral with a window smaller than the sequence, BLOOM (ALiBi through
    `baddbmm` on `[batch*heads, T, d]`, a forward without position_ids)."""
    common = dict(vocab_size=512, bos_token_id=0, eos_token_id=1)
    if name == "mqa":
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                                  num_key_value_heads=1, intermediate_size=128,
                                                  max_position_embeddings=MAX_LEN, **common))  # fmt: skip
    if name == "sliding":
        return tf.MistralForCausalLM(tf.MistralConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                                      num_key_value_heads=2, intermediate_size=128, sliding_window=16,
                                                      max_position_embeddings=MAX_LEN, **common))  # fmt: skip
    return tf.BloomForCausalLM(tf.BloomConfig(n_layer=2, hidden_size=64, n_head=4, **common))


@pytest.fixture(scope="module", params=["mqa", "sliding", "alibi"])
def variant(request):
    torch.manual_seed(0)
    hf = _variant(request.param).eval()
    hf.generation_config.eos_token_id = None
    return request.param, hf, compile_causal_lm(hf, max_len=MAX_LEN, page_size=16, cache=False)


@pytest.mark.parametrize("length", [1, 7, 33])
def test_variant_token_identical(variant, length):
    name, hf, lm = variant
    ids = _prompt(length, seed=40 + length)
    out = lm.generate(ids, max_new_tokens=NEW)
    ref, ref_logits = _reference(hf, ids, NEW)
    assert torch.equal(out, ref), f"{name} T={length}: {out.tolist()} vs {ref.tolist()}"
    np.testing.assert_allclose(lm.last_run.logits[0], ref_logits, atol=1e-3, rtol=0)
    if length == 33:
        _check_window_steps(name, lm.last_run.steps[1:], length)


def test_variant_batch_and_sampling(variant):
    name, hf, lm = variant
    prompts = [_prompt(t, seed=50 + t)[0] for t in (1, 7, 33)]
    for p, out in zip(prompts, lm.generate(prompts, max_new_tokens=NEW)):
        assert torch.equal(out, _reference(hf, p[None, :], NEW)[0][0]), f"{name} batch T={len(p)}"
    opts = {"do_sample": True, "temperature": 0.8, "top_k": 40, "top_p": 0.95}
    torch.manual_seed(7)
    out = lm.generate(prompts[1][None, :], max_new_tokens=NEW, **opts)
    torch.manual_seed(7)
    ids = prompts[1][None, :]
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                      pad_token_id=0, **opts)  # fmt: skip
    assert torch.equal(out, ref)


def test_the_window_is_honoured():
    """The sliding-window reference differs from full attention past the window (else the variant test
    could not tell them apart)."""
    torch.manual_seed(0)
    hf = _variant("sliding").eval()
    ids = _prompt(33, seed=73)
    windowed = _reference(hf, ids, 4)[1]
    hf.config.sliding_window = None
    full = _reference(hf, ids, 4)[1]
    assert np.abs(windowed - full).max() > 1e-2


def test_only_the_window_is_read_and_kept(variant):
    """Mistral's mask keeps the last 16 positions: decode's attention reads only their pages
    (`novella.kv_window`); the other variants read every position. What a run keeps and costs is checked
    on test_variant_token_identical's 33-token prompt (`_check_window_steps`)."""
    name, hf, lm = variant
    layers = hf.config.num_hidden_layers
    text = lm.decode.ir("novella-kv-cache")
    if name != "sliding":
        assert "window" not in lm.decode.artifact.kv and "novella.kv_window" not in text
        return
    assert lm.decode.artifact.kv["window"] == 16 and text.count("novella.kv_window = 16") == layers


def _check_window_steps(name: str, steps: list, length: int) -> None:
    """The decode steps of a `length`-token prompt: Mistral's pages before the window are freed and a step
    costs the same at any past length past the window; the other variants keep every page."""
    if name != "sliding":
        assert steps[-1].pages_in_use == -(-(length + NEW - 1) // 16)
        return
    assert max(s.pages_in_use for s in steps) == 2  # the window's 16 positions span at most two pages
    same_phase = [s.cycles for s in steps if s.position % 16 == 5]
    assert len(same_phase) >= 2 and max(same_phase) - min(same_phase) <= 0.01 * min(same_phase)


def test_guard_key_equals_the_readable_path(variant):
    """A windowed (or page-spanning) decode step has guards that refer to the past length: its bucket key
    holds their outcome at every grid point, computed in one compiled call; it equals `jit.when_mask`'s."""
    _, _, lm = variant
    plan = lm.session().steppers["decode"].plan
    for past in (1, 15, 16, 17, 40, MAX_LEN - 1):
        key = plan.key((past,))
        slow = b"".join(b"\x02" + m.astype(np.uint8).tobytes() for m in plan.key_slow((past,)))
        assert (key[-1] if plan.guard_keys else b"") == slow, past
