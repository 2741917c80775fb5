"""Validation of the analytic cost model (novella_mlir/costmodel.py) on linear layers.

    .venv/bin/python bench/costmodel.py [--length 256] [--sample 8]

For each op shape x config: every tiling / loop order the linear kernel considers that fits
the SRAM is scored by the cost model at the run length; the model's pick and the next best
candidates by the model, plus random others (`--sample` in all), are each compiled (the pick
forced) and simulated. Printed side by side: the pick's simulated cycles over the best simulated
candidate (goal <= 1.05), and the pick's predicted over simulated cycles (goal within 10%).
"best" is over the simulated sample, not over every candidate (that would be hundreds of compiles).
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import torch

from novella_mlir import compile_torch
from novella_mlir.kernels.linear import Linear
from novella_mlir.target import Target
from simulator import load_config

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [  # (K, N, activation)
    (64, 256, "gelu"), (256, 64, "relu"), (384, 1536, "gelu"), (1536, 384, "none"), (384, 384, "none"),
    (384, 1152, "none"), (128, 512, "relu"), (512, 128, "none"), (80, 384, "gelu"), (192, 768, "gelu"),
]  # fmt: skip
ACTS = {"gelu": torch.nn.GELU, "relu": torch.nn.ReLU, "none": torch.nn.Identity}


def _config(name):
    return load_config(None if name == "default" else ROOT / "simulator" / "configs" / f"{name}.toml")


def candidates(target, m, k, n, act):
    lin = Linear()
    out = []
    for ws in (1, 0):
        for tm in target.array_tiles(16):
            for tn in target.divisors(n, target.array_cols):
                for tk in target.divisors(k, target.array_rows):
                    if lin._plan(target, tm, tn, tk, k, act, ws).fits():
                        out.append((lin.cost(target, m, k, n, tm, tn, tk, act, ws), (tm, tn, tk, ws)))
    return sorted(out)


def simulate(cfg, k, n, act, length, forced):
    """Cycles of the linear compiled with its tiling forced to `forced` (the cost model patched)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(k, n), ACTS[act]()).eval()
    original = Linear.cost
    Linear.cost = lambda self, target, m, k_, n_, tm, tn, tk, a, ws: 0.0 if (tm, tn, tk, ws) == forced else 1e30
    try:
        npu = compile_torch(model, torch.randn(1, 16, k), min_len=1, max_len=4096, config=cfg, cache=False)
    finally:
        Linear.cost = original
    x = torch.randn(1, length, k)
    y = npu(x, check_hazards=False)
    assert torch.allclose(y, model(x), rtol=1e-4, atol=1e-4)
    return npu.last_run.stats.cycles


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=int, default=256)
    p.add_argument("--sample", type=int, default=8)
    p.add_argument("--configs", default="edge,default,large")
    args = p.parse_args(argv)
    rng = random.Random(0)
    head = (f"{'config':>8} {'K':>5} {'N':>5} {'act':>5} {'cands':>5} {'pick (tm,tn,tk,ws)':>20} "
            f"{'pick sim':>10} {'best sim':>10} {'pick/best':>9} {'pred/sim':>8}")  # fmt: skip
    print(head)
    print("-" * len(head))
    rows = []
    for name in args.configs.split(","):
        cfg = _config(name)
        target = Target.from_config(cfg)
        for k, n, act in SHAPES:
            cands = candidates(target, args.length, k, n, act)
            top = cands[: max(1, args.sample // 2)]
            rest = cands[len(top) :]
            chosen = top + rng.sample(rest, min(len(rest), args.sample - len(top)))
            sims = {c: simulate(cfg, k, n, act, args.length, c) for _, c in chosen}
            pick_cost, pick = cands[0]
            best = min(sims.values())
            r = (name, k, n, act, len(cands), pick, sims[pick], best, sims[pick] / best, pick_cost / sims[pick])
            rows.append(r)
            print(f"{name:>8} {k:>5} {n:>5} {act:>5} {len(cands):>5} {str(pick):>20} {sims[pick]:>10} {best:>10} "
                  f"{r[8]:>9.3f} {r[9]:>8.3f}", flush=True)  # fmt: skip
    ok_pick = sum(r[8] <= 1.05 for r in rows)
    ok_pred = sum(abs(r[9] - 1) <= 0.10 for r in rows)
    print(f"pick within 5% of the best simulated: {ok_pick}/{len(rows)}; prediction within 10%: {ok_pred}/{len(rows)}")


if __name__ == "__main__":
    main()
