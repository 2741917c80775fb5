"""Convolutions and group norm (issue 19's vision and audio blocks) against the compulsory roofline.

    .venv/bin/python bench/conv_norm.py [--config default] [--lengths 16,67,128]

Each workload is compiled once over its length range and run at each length; per run: simulated cycles,
the compulsory roofline max(model MACs / MACs per cycle, (weights + input + output) bytes / DRAM bytes per
cycle), cycles over it, the bytes the DMAs moved beside the compulsory ones, and the max error against
eager. Group norm is compiled twice in the same run: with the table's lowering (reductions + elementwise
ops) and with it set aside (torch-mlir's linalg through the generic path), side by side.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from generic import generic_for  # noqa: E402

from novella_mlir import compile_torch  # noqa: E402
from novella_mlir.errors import NovellaError  # noqa: E402

GN_NAMES = ("torch.aten.group_norm", "torch.aten.native_group_norm")


class Fn(torch.nn.Module):
    def __init__(self, fn, *mods):
        super().__init__()
        self.fn, self.mods = fn, torch.nn.ModuleList(mods)

    def forward(self, x):
        return self.fn(x)


def workloads():
    torch.manual_seed(0)
    patch = torch.nn.Conv2d(3, 64, 16, stride=16)  # ViT's patch embedding (image height 32, patch 16)
    conv3 = torch.nn.Conv2d(16, 32, 3, padding=1)
    pos = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(64, 64, 16, padding=8, groups=16), dim=2)
    gn4, gn32 = torch.nn.GroupNorm(4, 32), torch.nn.GroupNorm(32, 32)
    return {  # name: (module, example shape, dynamic dim, lo, hi, MACs at length n)
        "patch embed 3->64 /16": (Fn(lambda x: patch(x).flatten(2).transpose(1, 2), patch), (1, 3, 32, 64), 3, 16,
                                  256, lambda n: 2 * (n // 16) * 64 * 3 * 16 * 16),
        "conv2d 16->32 3x3 pad 1": (Fn(conv3, conv3), (1, 16, 8, 32), 3, 4, 128, lambda n: 8 * n * 32 * 16 * 9),
        "pos conv1d 64 k16 g16": (Fn(lambda x: pos(x.transpose(1, 2))[:, :, :-1].transpose(1, 2), pos),
                                  (1, 32, 64), 1, 2, 128, lambda n: n * 64 * 4 * 16),
        "group_norm G=4 C=32": (Fn(gn4, gn4), (1, 32, 32), 2, 2, 256, lambda n: 0),
        "group_norm G=32 C=32": (Fn(gn32, gn32), (1, 32, 32), 2, 2, 256, lambda n: 0),
    }  # fmt: skip


def measure(name, spec, lengths, generic: bool) -> list[str]:
    model, shape, dim, lo, hi, macs = spec
    model.eval()
    how = "generic" if generic else "table"
    try:
        with generic_for(GN_NAMES if generic else ()):
            t0 = time.perf_counter()
            npu = compile_torch(model, torch.randn(*shape), dynamic_dim=dim, min_len=lo, max_len=hi, cache=False)
            secs = time.perf_counter() - t0
    except NovellaError as e:
        return [f"{name:<24} {how:<8} refused: {' '.join(str(e).split())[:160]}"]
    rows = []
    for n in lengths:
        if not lo <= n <= hi:
            continue
        size = list(shape)
        size[dim] = n
        x = torch.randn(size)
        with torch.no_grad():
            want = model(x)
        y = npu(x, check_hazards=False)
        s, cfg = npu.last_run.stats, npu.config
        compulsory = npu.artifact.weight_nbytes + x.numel() * 4 + y.numel() * 4
        compute = macs(n) / cfg.macs_per_cycle
        roof = max(compute, compulsory / cfg.dram_bytes_per_cycle)
        moved = s.dma_bytes_loaded + s.dma_bytes_stored
        err = float((y - want).abs().max())
        rows.append(f"{name:<24} {how:<8} {n:>5} {s.cycles:>10,} {roof:>10,.0f} {s.cycles / roof:>8.2f} "
                    f"{'compute' if compute * cfg.dram_bytes_per_cycle >= compulsory else 'memory':>7} "
                    f"{compulsory:>10,} {moved:>11,} {err:>8.1e} {secs:>6.1f}")  # fmt: skip
    return rows


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", default="16,67,128")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    lengths = [int(v) for v in args.lengths.split(",")]
    print(f"{'workload':<24} {'path':<8} {'T':>5} {'cycles':>10} {'roof':>10} {'cyc/roof':>8} {'bound':>7} "
          f"{'compul B':>10} {'moved B':>11} {'max err':>8} {'comp s':>6}")  # fmt: skip
    for name, spec in workloads().items():
        for generic in (False, True) if name.startswith("group_norm") else (False,):
            for line in measure(name, spec, lengths, generic):
                print(line, flush=True)


if __name__ == "__main__":
    main()
