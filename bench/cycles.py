"""Simulated cycles against the config's roofline, for several lengths.

    .venv/bin/python bench/cycles.py [--model mlp|encoder] [--lengths 1,64,...]

For each length: simulated cycles; the roofline bound max(MACs / MACs-per-cycle,
DMA bytes / DRAM bytes-per-cycle) over the bytes the program actually moved,
and over the compulsory bytes only (weights, input and output once); the
cycles/roofline ratio; MAC utilization; and the host time of JIT + simulation
measured in the same run.
"""

from __future__ import annotations

import argparse
import time

import torch

from novella_mlir import compile_torch


def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(384, 1536), torch.nn.GELU(), torch.nn.Linear(1536, 384), torch.nn.ReLU()
    ).eval()
    return model, torch.randn(1, 16, 384), 1, 1, 2048


def encoder():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[1] / "examples" / "whisper_encoder.py"
    spec = importlib.util.spec_from_file_location("whisper_encoder", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = mod.build(layers=4)
    return model, torch.randn(1, 80, 100), 2, 2, 3000


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("mlp", "encoder"), default="mlp")
    p.add_argument("--lengths", default="1,64,65,500,2048")
    args = p.parse_args(argv)
    model, example, dyn, lo, hi = {"mlp": mlp, "encoder": encoder}[args.model]()
    t0 = time.perf_counter()
    npu = compile_torch(model, example, dynamic_dim=dyn, min_len=lo, max_len=hi)
    print(f"model={args.model}  compile {time.perf_counter() - t0:.1f} s  artifact {npu.artifact.nbytes} B")
    head = (
        f"{'T':>6} {'words':>8} {'cycles':>12} {'roof(moved)':>12} {'roof(compul)':>12} "
        f"{'cyc/roof':>9} {'MAC util':>9} {'host s':>8}"
    )
    print(head)
    print("-" * len(head))
    for t in (int(v) for v in args.lengths.split(",")):
        shape = list(example.shape)
        shape[dyn] = min(max(t, lo), hi)
        t1 = time.perf_counter()
        x = torch.randn(*shape)
        y = npu(x)
        host = time.perf_counter() - t1
        s, cfg = npu.last_run.stats, npu.config
        compulsory = npu.artifact.weight_nbytes + x.numel() * 4 + y.numel() * 4
        ideal = max(s.macs / cfg.macs_per_cycle, compulsory / cfg.dram_bytes_per_cycle)
        print(
            f"{shape[dyn]:>6} {s.instructions:>8} {s.cycles:>12} {int(s.roofline_cycles):>12} {int(ideal):>12} "
            f"{s.cycles / s.roofline_cycles:>9.2f} {s.mac_utilization:>9.1%} {host:>8.2f}"
        )


if __name__ == "__main__":
    main()
