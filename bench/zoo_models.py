"""The zoo's families: every model type of transformers' auto mappings, built from a small config
(random weights, 2 layers, hidden 64) and wrapped to take one length-dynamic tensor (and, for text
models, an attention mask) and return one tensor. Used by bench/zoo.py."""

from __future__ import annotations

import inspect

import torch

HIDDEN, HEADS, FFN, VOCAB = 64, 4, 128, 1000
_LAYERS = ("num_hidden_layers", "num_layers", "n_layer", "n_layers", "encoder_layers", "decoder_layers",
           "num_encoder_layers", "num_decoder_layers")  # fmt: skip
_WIDTH = ("hidden_size", "d_model", "n_embd", "dim", "embed_dim", "encoder_embed_dim")
_HEADS = ("num_attention_heads", "encoder_attention_heads", "decoder_attention_heads", "n_head", "n_heads",
          "num_heads", "encoder_num_attention_heads")  # fmt: skip
_FFN = ("intermediate_size", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "ffn_dim", "n_inner", "hidden_dim",
        "encoder_ffn_embed_dim")  # fmt: skip
_SMALL = {"num_key_value_heads": 2, "head_dim": HIDDEN // HEADS, "d_kv": HIDDEN // HEADS, "vocab_size": VOCAB,
          "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
          "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "moe_shared_expert_intermediate_size": 64,
          "embedding_size": HIDDEN, "word_embed_proj_dim": HIDDEN, "projection_dim": HIDDEN, "conv_dim": (32,) * 7,
          "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4, "output_hidden_size": HIDDEN,
          "classifier_proj_size": HIDDEN, "tdnn_dim": (32,) * 5, "xvector_output_dim": 32,
          "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "decoder_start_token_id": 0,
          "rotary_dim": 8, "kv_lora_rank": 16, "q_lora_rank": 32, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
          "v_head_dim": 16, "first_k_dense_replace": 1, "num_mel_bins": 80, "image_size": 32,
          "mamba_n_heads": 8, "mamba_d_state": 16, "mamba_d_ssm": 128, "mamba_num_heads": 8, "mamba_head_dim": 16,
          "ssm_state_size": 16, "n_groups": 2}  # fmt: skip
INPUTS = ("input_ids", "input_values", "input_features", "pixel_values")


def families() -> list[str]:
    """Every model type with a base model class, from transformers' MODEL_MAPPING_NAMES."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


def small_config(model_type: str, max_positions: int):
    """The family's default config with every size field it has made small; raises if it is composite."""
    from transformers import CONFIG_MAPPING

    cls = CONFIG_MAPPING[model_type]
    default = cls()
    if getattr(cls, "sub_configs", None):
        raise LookupError(f"composite config (sub-configs {sorted(cls.sub_configs)})")
    known = set(default.to_dict()) | set(getattr(cls, "attribute_map", {}))
    want = {k: 2 for k in _LAYERS} | {k: HIDDEN for k in _WIDTH} | {k: HEADS for k in _HEADS}
    want |= {k: FFN for k in _FFN} | _SMALL
    for k in ("max_position_embeddings", "n_positions", "max_source_positions", "max_target_positions"):
        want[k] = max_positions
    kw = {k: v for k, v in want.items() if k in known}
    if "kv_lora_rank" in kw and "num_key_value_heads" in kw:  # latent attention expands K and V to every head
        kw["num_key_value_heads"] = kw.get("num_attention_heads", HEADS)
    if "conv_dim" in kw:
        kw["conv_dim"] = (32,) * len(default.conv_dim)
    if "tdnn_dim" in kw:
        kw["tdnn_dim"] = (32,) * len(default.tdnn_dim)
    return cls(**kw)


def build(model_type: str, max_positions: int):
    """(wrapped module, input name, input maker, min length, max length, takes a mask)."""
    from transformers import AutoModel

    cfg = small_config(model_type, max_positions)
    try:
        model = AutoModel.from_config(cfg, attn_implementation="sdpa")
    except (ValueError, ImportError):
        model = AutoModel.from_config(cfg)
    model = untie_routers(model.eval(), getattr(cfg, "initializer_range", 0.02))
    if getattr(cfg, "is_encoder_decoder", False) and hasattr(model, "get_encoder"):
        model = model.get_encoder()
    params = inspect.signature(model.forward).parameters
    name = next((n for n in INPUTS if n in params), None)
    if name is None:
        raise LookupError(f"no input among {INPUTS} (forward takes {list(params)[:4]})")
    return Wrapped(model, name, params), name, cfg


def untie_routers(model, std: float):
    """Random weights for a router's linear that the family's init leaves all zero (afmoe's
    `AfmoeTokenChoiceRouter.gate`): every token's experts would then tie, and torch's topk picks among
    ties by its sort's order, which the compiler refuses to guess (frontend/ties.py)."""
    for name, mod in model.named_modules():
        routed = any("router" in part for part in name.lower().split(".")[-2:])
        if routed and isinstance(mod, torch.nn.Linear) and not mod.weight.any():
            with torch.no_grad():
                mod.weight.normal_(0.0, std)
    return model


class Wrapped(torch.nn.Module):
    """`model(name=x[, attention_mask=m], use_cache=False)` and its first tensor output."""

    def __init__(self, model, name: str, params):
        super().__init__()
        self.m, self.name = model, name
        self.extra = {"use_cache": False} if "use_cache" in params else {}
        self.extra |= {"return_dict": True} if "return_dict" in params else {}
        self.extra |= {"interpolate_pos_encoding": True} if "interpolate_pos_encoding" in params else {}
        patch = getattr(getattr(model, "config", None), "patch_size", None)
        self.noise_patch = patch if name == "pixel_values" and "noise" in params and isinstance(patch, int) else 0

    def forward(self, x, mask=None):
        kw = {self.name: x, **self.extra}
        if mask is not None:
            kw["attention_mask"] = mask
        if self.noise_patch:
            kw["noise"] = patch_noise(x, self.noise_patch)
        return first_tensor(self.m(**kw))


def patch_noise(pixels: torch.Tensor, patch: int) -> torch.Tensor:
    """A fixed stand-in for the random masking noise of a vision model whose forward takes `noise=`
    (ViTMAE draws `torch.rand(batch, patches)` otherwise, which no compiled program can equal): one
    value per patch of the image, all distinct, a function of the patch index only, so eager and the
    compiled model shuffle the patches alike at every width."""
    count = (pixels.shape[-2] // patch) * (pixels.shape[-1] // patch)
    index = torch.arange(count, dtype=torch.float32, device=pixels.device)
    return torch.sin(index * 12.9898 + 0.5).unsqueeze(0).expand(pixels.shape[0], -1)


def first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if getattr(out, "last_hidden_state", None) is not None:
        return out.last_hidden_state
    items = out.values() if hasattr(out, "values") else out
    for v in items:
        if isinstance(v, torch.Tensor):
            return v
    raise TypeError(f"no tensor output in {type(out).__name__}")


def make_input(name: str, cfg, length: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if name == "input_ids":
        return torch.randint(3, min(getattr(cfg, "vocab_size", VOCAB), VOCAB), (1, length), generator=g)
    if name == "input_values":
        return torch.randn(1, length, generator=g)
    if name == "input_features":
        return torch.randn(1, getattr(cfg, "num_mel_bins", 80), length, generator=g)
    return torch.randn(1, getattr(cfg, "num_channels", 3), getattr(cfg, "image_size", 224), length, generator=g)


def make_mask(length: int) -> torch.Tensor:
    """Right padding: the last quarter of the positions masked (never the first)."""
    m = torch.ones(1, length, dtype=torch.long)
    m[:, length - length // 4 :] = 0
    return m
