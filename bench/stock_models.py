"""The stock models of issue 8 (small configs, random weights), shared by test_models.py and
bench/models_e2e.py. Each entry: builder -> (module, example input, dynamic dim, min, max, input maker)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MAX_POSITIONS = 128


class Hidden(torch.nn.Module):
    """A transformers base model called as users do: `input_ids` in, `last_hidden_state` out."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, ids):
        return self.m(input_ids=ids).last_hidden_state


def _ids(vocab: int):
    def make(length: int, seed: int = 0) -> torch.Tensor:
        return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(seed))

    return make


def _floats(shape_of):
    def make(length: int, seed: int = 0) -> torch.Tensor:
        return torch.randn(*shape_of(length), generator=torch.Generator().manual_seed(seed))

    return make


def gpt2():
    import transformers as tf

    cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=MAX_POSITIONS,
                        bos_token_id=0, eos_token_id=1)  # fmt: skip
    return Hidden(tf.GPT2Model(cfg)), _ids(1000), 1, 1, MAX_POSITIONS


def bert():
    import transformers as tf

    cfg = tf.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                        vocab_size=1000, max_position_embeddings=MAX_POSITIONS)  # fmt: skip
    return Hidden(tf.BertModel(cfg)), _ids(1000), 1, 1, MAX_POSITIONS


def llama():
    import transformers as tf

    cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=1000, max_position_embeddings=MAX_POSITIONS,
                         bos_token_id=0, eos_token_id=1)  # fmt: skip
    return Hidden(tf.LlamaModel(cfg)), _ids(1000), 1, 1, MAX_POSITIONS


def opt():
    """OPT: learned positions from `cumsum` of the attention mask (a `novella.scan`), then `.long()`."""
    import transformers as tf

    cfg = tf.OPTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, ffn_dim=128, vocab_size=1000,
                       max_position_embeddings=MAX_POSITIONS, word_embed_proj_dim=64)  # fmt: skip
    return Hidden(tf.OPTModel(cfg)), _ids(1000), 1, 1, MAX_POSITIONS


def transformer_encoder(norm_first: bool):
    def build():
        layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, norm_first=norm_first)
        enc = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        return enc, _floats(lambda n: (1, n, 64)), 1, 1, MAX_POSITIONS

    return build


def whisper_encoder():
    """The Whisper encoder (examples/whisper_encoder.py wiring) with SDPA attention, mel frames in [2, 2 * max]."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    spec = importlib.util.spec_from_file_location("whisper_encoder", ROOT / "examples" / "whisper_encoder.py")
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    cfg = WhisperConfig(d_model=64, encoder_layers=2, encoder_attention_heads=4, encoder_ffn_dim=128,
                        num_mel_bins=80, max_source_positions=MAX_POSITIONS)  # fmt: skip
    cfg._attn_implementation = "sdpa"
    return ex.Encoder(WhisperEncoder(cfg)), _floats(lambda n: (1, 80, n)), 2, 2, 2 * MAX_POSITIONS


MODELS = {
    "gpt2": gpt2,
    "bert": bert,
    "llama": llama,
    "opt": opt,
    "encoder-post-norm": transformer_encoder(False),
    "encoder-pre-norm": transformer_encoder(True),
    "whisper-sdpa": whisper_encoder,
}


def build(name: str, seed: int = 0):
    torch.manual_seed(seed)
    module, make, dim, lo, hi = MODELS[name]()
    return module.eval(), make, dim, lo, hi


def lengths(lo: int, hi: int) -> dict[str, int]:
    """The lengths of the issue: shortest, 2, odd, a partial last tile (of 64 rows), maximum."""
    return {"min": lo, "two": max(lo, 2) if lo < 2 else lo + 1, "odd": 37, "partial": 67, "max": hi}
