"""The host's token choice for `CausalLM.generate`: transformers' own `GenerationConfig` and logits
processors applied to the NPU's logits, then argmax (greedy) or `torch.multinomial` (sampling).

The generation config is built as `hf.generate` builds it (`GenerationMixin._prepare_generation_config`:
the call's options over the model's `generation_config` over the global defaults), and the processors
are the ones `GenerationMixin._get_logits_processor` makes from it, in its order, called with the
sequence so far and the step's float32 logits. A token is drawn like `GenerationMixin._sample`:
`softmax` then `multinomial(probs, 1)` on the global torch generator, one draw per generated token,
so the same `torch.manual_seed` gives `hf.generate(do_sample=True)`'s tokens."""

from __future__ import annotations

import copy

import numpy as np
import torch

from ..errors import InputError

# the options that need the model itself (a second forward, an encoder, beams, a draft model)
_NEEDS_MODEL = {
    "num_beams": 1, "num_return_sequences": 1, "guidance_scale": None, "penalty_alpha": None,
    "assistant_model": None, "prompt_lookup_num_tokens": None, "encoder_repetition_penalty": 1.0,
    "encoder_no_repeat_ngram_size": 0, "watermarking_config": None,
}  # fmt: skip


def _mixin():
    from transformers.generation.utils import GenerationMixin

    return GenerationMixin


class _Host:
    """transformers' host-side generation helpers bound to a model's configs, without the model."""

    device = torch.device("cpu")

    def __init__(self, config, generation_config):
        mixin = _mixin()
        self.config, self.generation_config = config, generation_config
        for name in ("_prepare_generation_config", "_prepare_special_tokens", "_get_logits_processor",
                     "_merge_criteria_processor_list"):  # fmt: skip
            setattr(self, name, getattr(mixin, name).__get__(self))


def model_generation_configs(model):
    """(config, generation_config) of a transformers model, copied (None, None for another module)."""
    gen = getattr(model, "generation_config", None)
    cfg = getattr(model, "config", None)
    if gen is None or cfg is None or not hasattr(cfg, "_get_generation_parameters"):
        return None, None
    return copy.deepcopy(cfg), copy.deepcopy(gen)


class TokenChooser:
    """Chooses each next token of one `generate` call (all its sequences share the options)."""

    def __init__(self, config, generation_config, eos_token_id, options: dict):
        from transformers import GenerationConfig, PretrainedConfig

        self.sample = bool(options.get("do_sample", False))
        for k, neutral in _NEEDS_MODEL.items():
            if k in options and options[k] != neutral:
                raise InputError(f"generate(..., {k}={options[k]!r}) needs the model on the host; it is not supported")
        host = _Host(config or PretrainedConfig(), generation_config or GenerationConfig())
        try:
            gen, unused = host._prepare_generation_config(None, **options, eos_token_id=eos_token_id)
            gen.validate()
        except (ValueError, TypeError) as e:
            raise InputError(f"generate: invalid generation options {sorted(options)}: {e}") from None
        if unused:
            raise InputError(
                f"generate: unknown generation options {sorted(unused)}; see transformers.GenerationConfig"
            )
        host._prepare_special_tokens(gen, kwargs_has_attention_mask=True, device="cpu")
        self.config = gen
        self.host = host
        self._processors = {}

    def processors(self, prompt_len: int):
        if prompt_len not in self._processors:
            self._processors[prompt_len] = self.host._get_logits_processor(
                self.config, input_ids_seq_length=prompt_len, device="cpu", model_kwargs={}
            )
        return self._processors[prompt_len]

    def __call__(self, seq: list, prompt_len: int, logits: np.ndarray) -> int:
        ids = torch.tensor([seq], dtype=torch.long)
        scores = self.processors(prompt_len)(ids, torch.from_numpy(np.array(logits, np.float32))[None, :])
        if self.sample:
            return int(torch.multinomial(torch.nn.functional.softmax(scores, dim=-1), num_samples=1)[0, 0])
        return int(torch.argmax(scores, dim=-1)[0])


def eos_set(eos_token_id) -> frozenset:
    """The stop tokens: None, an int or a list of ints."""
    if eos_token_id is None:
        return frozenset()
    ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
        raise InputError(f"eos_token_id must be an int or a list of ints, got {eos_token_id!r}")
    return frozenset(ids)
