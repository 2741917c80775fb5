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
import sys
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
    """Runs one length on the simulator; the row of the report (cycles against the compulsory roofline)."""
    from .sweep import roofline

    x = mel(frames)
    t0 = time.perf_counter()
    y = npu(x)
    host = time.perf_counter() - t0
    with torch.no_grad():
        ref = model(x)
    stats = npu.last_run.stats
    compulsory = npu.artifact.weight_nbytes + 4 * (x.numel() + y.numel())
    return {
        "frames": frames,
        "tokens": y.shape[1],
        "max_err": (y - ref).abs().max().item(),
        "ok": torch.allclose(y, ref, rtol=1e-4, atol=1e-4),
        "cycles": stats.cycles,
        "roof": roofline(stats, npu.config, compulsory)["cyc/roof"],
        "mac_util": stats.mac_utilization,
        "insts": stats.instructions,
        "host_s": host,
    }


HEADER = (
    f"{'frames':>6} {'tokens':>6} {'max err':>9} {'ok':>3} {'cycles':>11} {'cyc/roof':>8} {'MAC util':>8} "
    f"{'insts':>7} {'host s':>7}"
)


def row(r: dict) -> str:
    return (
        f"{r['frames']:>6} {r['tokens']:>6} {r['max_err']:>9.2e} {'yes' if r['ok'] else 'NO':>3} "
        f"{r['cycles']:>11,} {r['roof']:>7.2f}x {r['mac_util']:>8.1%} {r['insts']:>7,} {r['host_s']:>7.1f}"
    )


def verdict(rows: list[dict]) -> tuple[str, bool]:
    """The closing line and whether every length matched eager."""
    bad = [r["frames"] for r in rows if not r["ok"]]
    worst = max(rows, key=lambda r: r["roof"])
    best = min(rows, key=lambda r: r["roof"])
    roof = (
        f"cycles {best['roof']:.2f}x (T={best['frames']}) to {worst['roof']:.2f}x (T={worst['frames']}) "
        "the compulsory roofline"
    )
    if bad:
        return (
            f"verdict: FAIL: {len(bad)} of {len(rows)} lengths differ from eager (T={', '.join(map(str, bad))}); {roof}",
            False,
        )
    err = max(r["max_err"] for r in rows)
    return f"verdict: all {len(rows)} lengths match eager (max err {err:.2e}); {roof}", True


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4, help="encoder layers (default 4, as whisper-tiny)")
    p.add_argument(
        "--lengths",
        default=",".join(map(str, DEFAULT_LENGTHS)),
        help=f"comma-separated mel frames in [{MIN_FRAMES}, {MAX_FRAMES}] (default {','.join(map(str, DEFAULT_LENGTHS))})",
    )
    p.add_argument("--dump-dir", default=None, help="write the IR after each stage and the artifact here")
    return p


def _lengths(p: argparse.ArgumentParser, text: str) -> list[int]:
    try:
        lengths = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        p.error(f"--lengths: expected comma-separated ints like 2,3,100, got '{text}'")
    bad = [t for t in lengths if not MIN_FRAMES <= t <= MAX_FRAMES]
    if not lengths or bad:
        p.error(f"--lengths: every length must be in [{MIN_FRAMES}, {MAX_FRAMES}], got '{text}'")
    return lengths


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv=None, prog: str | None = None) -> int:
    """Compiles once, runs every length, prints the table and the verdict; 1 if a length differs from eager."""
    p = parser(prog)
    args = p.parse_args(argv)
    lengths = _lengths(p, args.lengths)

    _say(f"building the whisper-tiny-sized encoder ({args.layers} layers, random weights)")
    model = build(args.layers)
    _say(
        f"compiling it once for T in [{MIN_FRAMES}, {MAX_FRAMES}]: torch.export, torch-mlir import, the novella passes"
    )
    t0 = time.perf_counter()
    npu = compile_encoder(model, dump_dir=args.dump_dir)
    print(
        f"compiled {args.layers}-layer encoder for T in [{MIN_FRAMES}, {MAX_FRAMES}] in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    print(HEADER, flush=True)
    rows = []
    for frames in lengths:
        rows.append(run(npu, model, frames))
        print(row(rows[-1]), flush=True)
    line, ok = verdict(rows)
    print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
