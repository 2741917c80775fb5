"""The batched decode step: one program advances B sequences by one token each.

`_BatchDecode` is the model's own forward at batch B over a cache `[B, kv_heads, P, head_dim]`, so
every dense layer runs at M = B and reads its weights once per step for all B sequences. P is the
batch's *storage clock*: every sequence writes its new position at storage index P, and sequence b
holds its own positions 0..P_b right-aligned below it (storage index = position + P - P_b), a whole
number of pages apart, so its storage pages are its own block table behind P - P_b null pages
(`runtime/batch.py`). The attention mask is computed in the graph from the per-sequence positions
(`position_ids`, which also place RoPE or the position embedding): storage index j is attended iff
P - j <= P_b. `--novella-kv-cache` pages the batched cache with a virtual page range per sequence
(`seq_pages` apart, `kernels/kv_cache.page_offset`); the JIT patches the per-step fields (the clock
P) and maps every sequence's pages through its own block table. B is one of a few buckets, each
its own program; prefill stays the single-sequence program.
"""

from __future__ import annotations

import torch
from torch.export import Dim

from ..causal_lm import _cache_param, _cache_tensors, _out_cache, check_convention, pass_options
from ..errors import InputError
from ..pipeline import compile_torch

NEG = torch.finfo(torch.float32).min


class _BatchDecode(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, position_ids, *kv):
        from transformers import DynamicCache

        clock = kv[0].shape[2]
        back = torch.arange(clock + 1).flip(0)  # P - j for storage index j
        mask = torch.where(back[None, :] <= position_ids, 0.0, NEG)[:, None, None, :]
        cache = DynamicCache(config=self.lm.config)
        for layer in range(len(kv) // 2):
            cache.update(kv[2 * layer], kv[2 * layer + 1], layer)
        kw = {_cache_param(self.lm): cache}
        out = self.lm(input_ids=input_ids, attention_mask=mask, position_ids=position_ids, use_cache=True, **kw)
        return (out.logits, *_cache_tensors(_out_cache(out)))


def compile_batched(model, lm, buckets=(4,), *, config=None, cache=None, fuse_attention: bool = True):
    """Compiles the batched decode step of `model` for each batch size in `buckets` and attaches them
    to `lm` (a `CausalLM` of the same model): `lm.batched[B]`. The engine then decodes its running
    requests in the smallest bucket that holds them. Returns `lm`."""
    buckets = sorted({int(b) for b in buckets})
    if not buckets or buckets[0] < 1:
        raise InputError(f"batch buckets must be positive sizes, got {buckets}")
    _, example = check_convention(model.eval())
    past = Dim("past", min=1, max=lm.max_len - 1)
    options = pass_options(lm.page_size, fuse_attention)
    lm.batched = dict(lm.batched)
    for b in buckets:
        kv = tuple(torch.zeros(b, *t.shape[1:]) for t in example)
        ids, pos = torch.zeros(b, 1, dtype=torch.long), torch.full((b, 1), 2, dtype=torch.long)
        lm.batched[b] = compile_torch(
            _BatchDecode(model), ids, pos, *kv, dynamic_shapes=(None, None, tuple({2: past} for _ in kv)),
            config=config, pass_options=options, cache=cache,
        )  # fmt: skip
    lm.max_batch = max(getattr(lm, "max_batch", 0) or 0, buckets[-1])
    lm._forget_sessions()  # the next session holds the batched programs too
    return lm
