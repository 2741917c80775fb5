"""The arguments of `compile_causal_lm` and `CausalLM.generate`, checked before any compile or run work:
each bad one is an InputError naming it, its value and its limit."""

from __future__ import annotations

import numbers

import torch

from ..errors import InputError
from ..machine.target import DRAM_LIMIT


def _int(name: str, v, lo: int, hi: int | None = None, why: str = "") -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise InputError(f"{name} must be an int, got {v!r} ({type(v).__name__})")
    v = int(v)
    if v < lo or (hi is not None and v > hi):
        limit = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise InputError(f"{name} must be {limit}{why}, got {v}")
    return v


def _flag(name: str, v, none_ok: bool = False) -> None:
    if not (isinstance(v, bool) or (none_ok and v is None)):
        raise InputError(f"{name} must be True or False{' or None' if none_ok else ''}, got {v!r}")


def positions(config) -> int | None:
    """The model's position limit (max_position_embeddings, GPT-2's n_positions), if it has one."""
    for name in ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len"):
        v = getattr(config, name, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def compile_args(model, max_len, page_size, n_pages, max_batch, fuse_attention, cache) -> None:
    """compile_causal_lm's arguments, before the model is run or anything compiled."""
    limit = positions(getattr(model, "config", None))
    _int("max_len", max_len, 2, limit, "" if limit is None else " (the model's position embeddings)")
    _int("page_size", page_size, 1)
    if n_pages is not None:
        _int("n_pages", n_pages, 1)
    _int("max_batch", max_batch, 1)
    _flag("fuse_attention", fuse_attention)
    _flag("cache", cache, none_ok=True)


def pool_fits(n_pages: int, page_size: int, example_kv, what: str = "n_pages") -> None:
    """`n_pages` blocks of the cache (one page of every layer's K and V each) within the NPU's DRAM."""
    block = sum(int(t[0].numel()) // int(t.shape[2]) for t in example_kv) * page_size
    most = DRAM_LIMIT // max(block, 1)
    if n_pages > most:
        raise InputError(
            f"{what}={n_pages} pages of {block} elements do not fit the NPU's DRAM ({DRAM_LIMIT} elements): at most "
            f"{most}; lower {what} (or max_batch)"
        )


def generate_args(prompts, max_new_tokens, eos_token_id, vocab: int, check_hazards, keep_words):
    """(single, token lists, eos ids or None) of generate's arguments; prompts: a [1, T] integer tensor,
    or a list of 1-D integer tensors or lists of ints."""
    _int("max_new_tokens", max_new_tokens, 0)
    _flag("check_hazards", check_hazards)
    _flag("keep_words", keep_words)
    eos = _eos(eos_token_id, vocab)
    single = isinstance(prompts, torch.Tensor)
    if single:
        seqs = [_tensor_prompt(prompts, "the prompt", single=True)]
    elif isinstance(prompts, (list, tuple)):
        if not prompts:
            raise InputError("the list of prompts is empty; give at least one")
        seqs = [_prompt(p, f"prompt #{i}") for i, p in enumerate(prompts)]
    else:
        raise InputError(
            f"prompts must be a [1, T] integer tensor or a list of 1-D tensors or lists of ints, got "
            f"{type(prompts).__name__}"
        )
    for where, ids in zip(["the prompt"] if single else [f"prompt #{i}" for i in range(len(seqs))], seqs):
        if not ids:
            raise InputError(f"{where} is empty; give at least one token")
        bad = [t for t in ids if not 0 <= t < vocab]
        if bad:
            raise InputError(f"{where}: token id {bad[0]} is outside the vocabulary [0, {vocab})")
    return single, seqs, eos


def _eos(eos, vocab: int):
    if eos is None:
        return None
    ids = list(eos) if isinstance(eos, (list, tuple, set, frozenset)) else [eos]
    if not ids:
        raise InputError("eos_token_id is an empty list; pass None to decode without stopping")
    if not all(isinstance(t, numbers.Integral) and not isinstance(t, bool) for t in ids):
        raise InputError(f"eos_token_id must be an int or a list of ints, got {eos!r}")
    return frozenset(_int("eos_token_id", t, 0, vocab - 1, " (the vocabulary)") for t in ids)


def _prompt(p, where: str) -> list:
    if isinstance(p, torch.Tensor):
        return _tensor_prompt(p, where, single=False)
    if isinstance(p, (list, tuple)):
        for t in p:
            if isinstance(t, bool) or not isinstance(t, numbers.Integral):
                raise InputError(f"{where} must hold token ids (ints), found {t!r} ({type(t).__name__})")
        return [int(t) for t in p]
    raise InputError(f"{where} is a {type(p).__name__}; a prompt in a list is a 1-D tensor or a list of ints")


def _tensor_prompt(p: torch.Tensor, where: str, single: bool) -> list:
    if p.dtype not in (torch.long, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise InputError(f"{where} has dtype {p.dtype}; token ids are an integer tensor")
    if single and (p.dim() != 2 or p.shape[0] != 1):
        raise InputError(f"a single prompt must be [1, T], got {list(p.shape)}; pass a list of 1-D prompts for a batch")
    if not single and p.dim() != 1:
        raise InputError(
            f"{where} has shape {list(p.shape)}; a prompt in a list is 1-D (one sequence: p[0], or list(p) for a batch)"
        )
    return p.reshape(-1).tolist()
