"""The models of the storage/JIT benchmarks and of the bit-identity and golden tests.

Each builder seeds torch, so weights (and hence golden snapshots) are
deterministic. `SPECS[name]` gives (builder, dynamic dim, example(T), length
of the symbol for T, bounds (lo, hi) for a given max length).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def mlp(d_in: int = 64, hidden: int = 256, d_out: int = 64) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(d_in, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, d_out), torch.nn.ReLU()
    ).eval()


def whisper_config(**overrides):
    from transformers import WhisperConfig

    kw = dict(d_model=384, encoder_layers=4, encoder_attention_heads=6, encoder_ffn_dim=1536)
    kw.update(num_mel_bins=80, max_source_positions=1500)
    kw.update(overrides)
    cfg = WhisperConfig(**kw)
    cfg._attn_implementation = "sdpa"
    return cfg


class WhisperLayer(torch.nn.Module):
    """One `WhisperEncoderLayer` (random weights), [1, T, 384] -> [1, T, 384]."""

    def __init__(self):
        super().__init__()
        from transformers.models.whisper.modeling_whisper import WhisperEncoderLayer

        torch.manual_seed(0)
        self.layer = WhisperEncoderLayer(whisper_config()).eval()

    def forward(self, x):
        out = self.layer(x, None)
        return out[0] if isinstance(out, tuple) else out


class WhisperEncoder(torch.nn.Module):
    """The whisper-tiny encoder (4 layers) without the padding to 3000 frames:
    mel [1, 80, 2T] -> [1, T, 384], positions sliced to the actual length."""

    def __init__(self, max_positions: int = 1500):
        super().__init__()
        from transformers.models.whisper.modeling_whisper import WhisperEncoder as HFEncoder

        torch.manual_seed(0)
        self.enc = HFEncoder(whisper_config(max_source_positions=max_positions)).eval()

    def forward(self, mel):
        e = self.enc
        x = torch.nn.functional.gelu(e.conv1(mel))
        x = torch.nn.functional.gelu(e.conv2(x)).permute(0, 2, 1)
        x = x + e.embed_positions.weight[: x.shape[1]]
        for layer in e.layers:
            out = layer(x, None)
            x = out[0] if isinstance(out, tuple) else out
        return e.layer_norm(x)


class WhisperBody(torch.nn.Module):
    """The whisper-tiny encoder body: its 4 layers and final layer norm on [1, T, 384] positions
    (the conv stem's output), random weights."""

    def __init__(self):
        super().__init__()
        from transformers.models.whisper.modeling_whisper import WhisperEncoder as HFEncoder

        torch.manual_seed(0)
        enc = HFEncoder(whisper_config()).eval()
        self.layers, self.layer_norm = enc.layers, enc.layer_norm

    def forward(self, x):
        for layer in self.layers:
            out = layer(x, None)
            x = out[0] if isinstance(out, tuple) else out
        return self.layer_norm(x)


@dataclass
class Spec:
    """How to build, feed and bound one benchmark model."""

    build: Callable[[int], torch.nn.Module]  # max length -> module
    dynamic_dim: int
    example: Callable[[int], torch.Tensor]  # T -> input
    bounds: Callable[[int], tuple[int, int]]  # max length -> (min_len, max_len) of the symbol

    def symbol(self, length: int) -> int:
        """The value of the symbol for a sequence of `length` (the encoder's symbol is mel frames)."""
        return self.example(length).shape[self.dynamic_dim]


def _randn(*shape):
    g = torch.Generator().manual_seed(1)
    return torch.randn(*shape, generator=g)


SPECS = {
    "mlp": Spec(lambda _: mlp(), 1, lambda t: _randn(1, t, 64), lambda hi: (1, hi)),
    "mlp384": Spec(lambda _: mlp(384, 1536, 384), 1, lambda t: _randn(1, t, 384), lambda hi: (1, hi)),
    "layer": Spec(lambda _: WhisperLayer(), 1, lambda t: _randn(1, t, 384), lambda hi: (2, hi)),
    "body": Spec(lambda _: WhisperBody(), 1, lambda t: _randn(1, t, 384), lambda hi: (1, hi)),
    "encoder": Spec(
        lambda hi: WhisperEncoder(max_positions=hi), 2, lambda t: _randn(1, 80, 2 * t), lambda hi: (3, 2 * hi)
    ),
}


@functools.lru_cache(maxsize=8)
def compile_model(name: str, max_len: int, buckets: bool = True):
    """Compiles model `name` for sequence lengths up to `max_len` (cached: tests share it); `buckets=False`
    gives one program (no shape buckets).

    Returns (spec, module, CompiledModel)."""
    from novella_mlir import compile_torch

    spec = SPECS[name]
    module = spec.build(max_len)
    lo, hi = spec.bounds(max_len)
    npu = compile_torch(module, spec.example(16), dynamic_dim=spec.dynamic_dim, min_len=lo, max_len=hi, buckets=buckets)
    return spec, module, npu
