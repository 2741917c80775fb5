"""Decode steps of the attention variants the KV-cache pass recognizes (issue 21), side by side in one run.

Per model (GPT-2; LLaMA-style GQA; LLaMA with one KV head (MQA); Mistral with a sliding window of
`--window`; BLOOM: ALiBi through `baddbmm`, no position_ids) and past length: cycles of one decode step
against the decode roofline max(MACs / MACs per cycle, (weights + K/V read + K/V written) / DRAM
bandwidth), where K/V read is the positions the model attends (past + 1, or the window), the DMA
bytes moved beside it, the pages the step addresses, and the host time of a patched step.

Usage: python bench/decode_variants.py [--max-len 1024] [--pasts 16,256,1000] [--window 64]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import transformers as tf
from decode import weight_bytes

from novella_mlir.causal_lm import compile_causal_lm
from novella_mlir.runtime.kv import BlockTable


def build(kind: str, max_len: int, window: int):
    torch.manual_seed(0)
    common = dict(vocab_size=512, bos_token_id=0, eos_token_id=1)
    llama = dict(num_hidden_layers=2, hidden_size=128, num_attention_heads=4, intermediate_size=256,
                 max_position_embeddings=max_len, **common)  # fmt: skip
    if kind == "gpt2":
        return tf.GPT2LMHeadModel(tf.GPT2Config(n_layer=2, n_embd=128, n_head=4, n_positions=max_len, **common))
    if kind == "gqa":
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=2, **llama))
    if kind == "mqa":
        return tf.LlamaForCausalLM(tf.LlamaConfig(num_key_value_heads=1, **llama))
    if kind == "sliding":
        return tf.MistralForCausalLM(tf.MistralConfig(num_key_value_heads=2, sliding_window=window, **llama))
    return tf.BloomForCausalLM(tf.BloomConfig(n_layer=2, hidden_size=128, n_head=4, **common))


def step(lm, sess, past: int):
    """(stats, median host seconds of a patched step, blocks the step reads) of a decode step at `past`."""
    table = BlockTable()
    sess.pool.reserve(table, past + 1)
    w = lm.decode.artifact.kv.get("window")
    if w is not None:
        sess.pool.drop_before(table, (past + 1 - w) // lm.page_size)
    inputs = {0: np.array([[5.0]], np.float32)}
    if 1 not in {a for a, _ in lm.decode.artifact.kv["inputs"]}:
        inputs[1] = np.array([[float(past)]], np.float32)
    sess.steppers["decode"].clear()
    _, stats, *_ = sess.run("decode", inputs, (past,), table)
    blocks = np.asarray(table.blocks, np.int64)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        sess.steppers["decode"].words((past,), blocks)
        times.append(time.perf_counter() - t0)
    live = int((blocks >= 0).sum())
    sess.pool.release(table)
    return stats, float(np.median(times)), live


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--pasts", default="16,256,1000")
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--models", default="gpt2,gqa,mqa,sliding,alibi")
    args = ap.parse_args()
    pasts = [int(p) for p in args.pasts.split(",")]
    print(f"{'model':8} {'past':>5} {'cycles':>9} {'roof':>8} {'cyc/roof':>8} {'DMA B':>10} {'K/V read B':>10} "
          f"{'pages':>5} {'JIT us':>7} {'NPU us':>7}")  # fmt: skip
    for kind in args.models.split(","):
        hf = build(kind, args.max_len, args.window).eval()
        t0 = time.perf_counter()
        lm = compile_causal_lm(hf, max_len=args.max_len, page_size=16, n_pages=2 * -(-args.max_len // 16),
                               cache=False)  # fmt: skip
        sess = lm.session(check_hazards=False)
        per_pos = 4 * sum(s["page_elems"] for s in lm.decode.artifact.kv["slots"]) // lm.page_size
        w = lm.decode.artifact.kv.get("window")
        print(f"# {kind}: compiled in {time.perf_counter() - t0:.0f} s; K/V {per_pos} B per position; window {w}")
        for past in pasts:
            stats, patch_s, live = step(lm, sess, past)
            attended = past + 1 if w is None else min(past + 1, w)
            moved = weight_bytes(hf) + attended * per_pos + per_pos
            cfg = lm.prefill.config
            roof = max(stats.macs / cfg.macs_per_cycle, moved / cfg.dram_bytes_per_cycle)
            print(f"{kind:8} {past:5d} {stats.cycles:9,d} {roof:8,.0f} {stats.cycles / roof:8.2f} "
                  f"{stats.dma_bytes_loaded + stats.dma_bytes_stored:10,d} {attended * per_pos:10,d} {live:5d} "
                  f"{patch_s * 1e6:7.0f} {stats.cycles / 1e3:7.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
