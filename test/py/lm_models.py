"""Small random-weight causal LMs and transformers' own greedy decoding as the reference, shared by the
decoding tests (test_causal_lm, test_engine, test_batched_decode)."""

from __future__ import annotations

import os
from unittest import mock

import numpy as np
import torch

_COMPILED: dict = {}


def build(name: str, max_len: int):
    """A 2-layer GPT-2 or LLaMA (GQA: 4 heads, 2 KV heads; "mqa": 1 KV head) with seeded random weights. The reference is
    plain greedy decoding: with min_new_tokens transformers would mask the config's eos (which random
    weights may well pick), and generate() stops at an eos only when one is passed."""
    import transformers as tf

    torch.manual_seed(0)
    if name == "gpt2":
        cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=512, n_positions=max_len,
                            bos_token_id=0, eos_token_id=1)  # fmt: skip
        hf = tf.GPT2LMHeadModel(cfg).eval()
    else:
        cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                             num_key_value_heads=1 if name == "mqa" else 2, intermediate_size=128, vocab_size=512, max_position_embeddings=max_len,
                             bos_token_id=0, eos_token_id=1)  # fmt: skip
        hf = tf.LlamaForCausalLM(cfg).eval()
    hf.generation_config.eos_token_id = None
    return hf


def shared_lm(name: str, max_len: int, page_size: int = 16):
    """(hf, lm): `build(name, max_len)` and its `compile_causal_lm`, shared by the test files that compile the
    same model with the same options (test_causal_lm and test_resident_decode; test_engine and
    test_batched_decode): a worker compiles it once (a fresh `CausalLM` over the same programs each call, so
    one file's batched programs or sessions never reach another), and the workers of a run share the
    entries of one compile cache (conftest's NOVELLA_SUITE_CACHE_DIR, removed at the end of the run)."""
    from novella_mlir.causal_lm import compile_causal_lm

    key = (name, max_len, page_size)
    if key not in _COMPILED:
        hf = build(name, max_len)
        with mock.patch.dict(os.environ, {"NOVELLA_CACHE_DIR": os.environ["NOVELLA_SUITE_CACHE_DIR"]}):
            _COMPILED[key] = hf, compile_causal_lm(hf, max_len=max_len, page_size=page_size, cache=True)
    hf, lm = _COMPILED[key]
    return hf, lm.fresh()


def reference(hf, ids: list, n: int):
    """(tokens, logits) of hf.generate's greedy decoding of `ids` for exactly `n` new tokens."""
    x = torch.tensor([ids])
    out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=n, min_new_tokens=n, do_sample=False,
                      pad_token_id=0, output_logits=True, return_dict_in_generate=True)  # fmt: skip
    return out.sequences[0].tolist(), torch.cat(out.logits).numpy()


def prompt(length: int, seed: int) -> list:
    return torch.randint(3, 500, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def check(hf, req, name):
    """An engine request's tokens equal hf's, its logits within 1e-3."""
    ref, logits = reference(hf, req.prompt, req.max_new_tokens)
    assert req.tokens == ref, f"{name} T={len(req.prompt)}: {req.generated} vs {ref[len(req.prompt) :]}"
    np.testing.assert_allclose(np.stack(req.logits), logits, atol=1e-3, rtol=0)
