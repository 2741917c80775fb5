"""transformers' own greedy `generate` as the decoding oracle, and the prompts the decode tests feed both sides."""

from __future__ import annotations

import torch


def greedy_reference(hf, ids: torch.Tensor, n: int):
    """(the sequences, the logits of each step as one numpy array) of `hf.generate` making exactly `n` tokens."""
    out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                      do_sample=False, pad_token_id=0, output_logits=True, return_dict_in_generate=True)  # fmt: skip
    return out.sequences, torch.cat(out.logits).numpy()


def prompt(length: int, seed: int, low: int = 3, high: int = 500) -> torch.Tensor:
    return torch.randint(low, high, (1, length), generator=torch.Generator().manual_seed(seed))
