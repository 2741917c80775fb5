"""The Whisper encoder on the Novella NPU, compiled once for every mel length in [2, 3000].

    novella demo [--layers 4] [--lengths 2,3,100,401,1000,2999,3000]
    .venv/bin/python examples/whisper_encoder.py [...]   (the same, from a checkout)

Builds the real `transformers` WhisperEncoder (whisper-tiny dims, random
weights), wired as `WhisperEncoder.forward` does but without its fixed
3000-frame check: the positional table is sliced to the post-conv length
`(T - 1) // 2 + 1`, so odd lengths are legal too. The model is compiled
once with the mel-frame dim symbolic, then run on the simulator at each
length and compared with eager PyTorch.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

DEFAULT_LENGTHS = (2, 3, 100, 401, 1000, 2999, 3000)
MIN_FRAMES, MAX_FRAMES = 2, 3000


class Encoder(nn.Module):
    """mel [1, 80, T] -> [1, (T - 1) // 2 + 1, 384], for any T in [2, 3000]."""

    def __init__(self, encoder):
        super().__init__()
        self.enc = encoder

    def forward(self, mel):
        e = self.enc
        h = nn.functional.gelu(e.conv1(mel))
        h = nn.functional.gelu(e.conv2(h))
        h = h.permute(0, 2, 1)
        n = h.shape[1]
        torch._check(n <= e.config.max_source_positions)
        h = h + e.embed_positions.weight[:n]
        for layer in e.layers:
            out = layer(h, None)
            h = out[0] if isinstance(out, tuple) else out
        return e.layer_norm(h)


def build(layers: int = 4, seed: int = 0) -> Encoder:
    """The whisper-tiny-sized encoder with `layers` layers and random weights.

    Eager attention: the SDPA path asks `q_len > 1`, which would exclude T = 2."""
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    torch.manual_seed(seed)
    config = WhisperConfig(
        d_model=384,
        encoder_layers=layers,
        encoder_attention_heads=6,
        encoder_ffn_dim=1536,
        num_mel_bins=80,
        max_source_positions=1500,
    )
    config._attn_implementation = "eager"
    return Encoder(WhisperEncoder(config).eval()).eval()


def mel(frames: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(1, 80, frames, generator=torch.Generator().manual_seed(seed))


def compile_encoder(model: Encoder, **kw):
    from novella_mlir import compile_torch

    return compile_torch(model, mel(101), dynamic_dim=2, min_len=MIN_FRAMES, max_len=MAX_FRAMES, **kw)


def run(npu, model, frames: int) -> dict:
    """Runs one length on the simulator; the row of the report."""
    x = mel(frames)
    t0 = time.perf_counter()
    y = npu(x)
    host = time.perf_counter() - t0
    with torch.no_grad():
        ref = model(x)
    stats = npu.last_run.stats
    return {
        "frames": frames,
        "tokens": y.shape[1],
        "max_err": (y - ref).abs().max().item(),
        "ok": torch.allclose(y, ref, rtol=1e-4, atol=1e-4),
        "cycles": stats.cycles,
        "mac_util": stats.mac_utilization,
        "insts": stats.instructions,
        "host_s": host,
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--lengths", default=",".join(map(str, DEFAULT_LENGTHS)), help="comma-separated mel frames")
    p.add_argument("--dump-dir", default=None, help="write the IR after each stage and the artifact here")
    args = p.parse_args(argv)
    lengths = [int(v) for v in args.lengths.split(",")]

    model = build(args.layers)
    t0 = time.perf_counter()
    npu = compile_encoder(model, dump_dir=args.dump_dir)
    print(
        f"compiled {args.layers}-layer encoder for T in [{MIN_FRAMES}, {MAX_FRAMES}] in {time.perf_counter() - t0:.1f} s"
    )
    print(
        f"{'frames':>6} {'tokens':>6} {'max err':>9} {'ok':>3} {'cycles':>11} {'MAC util':>8} {'insts':>7} {'host s':>7}"
    )
    for frames in lengths:
        r = run(npu, model, frames)
        print(
            f"{r['frames']:>6} {r['tokens']:>6} {r['max_err']:>9.2e} {'yes' if r['ok'] else 'NO':>3} "
            f"{r['cycles']:>11,} {r['mac_util']:>8.1%} {r['insts']:>7,} {r['host_s']:>7.1f}"
        )


if __name__ == "__main__":
    main()
