"""Validation of the analytic cost model (novella_mlir/machine/costmodel.py and each kernel's `cost`).

    .venv/bin/python bench/costmodel.py [--length 300] [--max-sim 16] [--configs edge,default,large] [--in-process]

For each op shape x config, at the run length T: the op (one kernel: linear, row elementwise,
layer norm, softmax, batched matmul, conv1d, fused attention) is compiled with the kernels planning for T
(`NOMINAL_LENGTH` set to T), recording every tiling the kernel considers that fits the SRAM and
its predicted cycles. Then every candidate (or, past `--max-sim`, the model's best half of them
plus random others) is compiled with that tiling forced and simulated. Printed side by side: the
pick's simulated cycles over the best simulated candidate (goal <= 1.05) and the pick's predicted
over its simulated cycles (goal within 10%). The compiles and simulations run on `novella sweep`'s
engine (Ray when installed, else in-process).
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from novella_mlir import compile_torch, kernels  # noqa: E402
from novella_mlir.kernels import attention, conv, elementwise, flash_attention, linear, normalization, support  # noqa: E402
from novella_mlir.tools import sweep  # noqa: E402
from simulator import load_config  # noqa: E402


class Chan(torch.nn.Module):
    """A channels-last conv: [1, T, Cin] -> [1, T', Cout] (the transposes around the NCW conv cancel)."""

    def __init__(self, cin, cout, k, stride):
        super().__init__()
        self.conv = torch.nn.Conv1d(cin, cout, k, stride=stride, padding=k // 2)

    def forward(self, x):
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


class Fn(torch.nn.Module):
    def __init__(self, fn, param=None):
        super().__init__()
        self.fn = fn
        self.p = None if param is None else torch.nn.Parameter(param)

    def forward(self, *xs):
        return self.fn(*xs, self.p) if self.p is not None else self.fn(*xs)


class Residual(torch.nn.Module):
    """`x + linear(h)`, optionally post-normed: one `novella.fused_linear` (epilogue fusion)."""

    def __init__(self, k, n, norm=False):
        super().__init__()
        self.fc, self.norm = torch.nn.Linear(k, n), torch.nn.LayerNorm(n) if norm else None

    def forward(self, h, x):
        y = x + self.fc(h)
        return self.norm(y) if self.norm is not None else y


@dataclass(frozen=True)
class Case:
    name: str
    kernel: type
    build: object  # () -> nn.Module
    inputs: tuple  # per input: its shape with "T" for the length


CASES = [
    Case("linear 384->1536 gelu", linear.Linear, lambda: torch.nn.Sequential(torch.nn.Linear(384, 1536), torch.nn.GELU()), ((1, "T", 384),)),
    Case("linear 1536->384", linear.Linear, lambda: torch.nn.Linear(1536, 384), ((1, "T", 1536),)),
    Case("linear 80->384 relu", linear.Linear, lambda: torch.nn.Sequential(torch.nn.Linear(80, 384), torch.nn.ReLU()), ((1, "T", 80),)),
    Case("linear 128->512 relu", linear.Linear, lambda: torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.ReLU()), ((1, "T", 128),)),
    Case("linear 192->768 gelu", linear.Linear, lambda: torch.nn.Sequential(torch.nn.Linear(192, 768), torch.nn.GELU()), ((1, "T", 192),)),
    Case("x + linear 1536->384", linear.Linear, lambda: Residual(1536, 384), ((1, "T", 1536), (1, "T", 384))),
    Case("LN(x + linear 256->128)", linear.Linear, lambda: Residual(256, 128, norm=True), ((1, "T", 256), (1, "T", 128))),
    Case("linear(LN x) 64->256 relu", linear.Linear, lambda: torch.nn.Sequential(torch.nn.LayerNorm(64), torch.nn.Linear(64, 256), torch.nn.ReLU()), ((1, "T", 64),)),
    Case("gelu [T,1536]", elementwise.Unary, lambda: torch.nn.GELU(), ((1, "T", 1536),)),
    Case("add [T,384]+[T,384]", elementwise.Binary, lambda: Fn(torch.add), ((1, "T", 384), (1, "T", 384))),
    Case("mul [T,384]*row", elementwise.Binary, lambda: Fn(torch.mul, torch.randn(384)), ((1, "T", 384),)),
    Case("layernorm 384", normalization.LayerNorm, lambda: torch.nn.LayerNorm(384), ((1, "T", 384),)),
    Case("softmax [T,64]", attention.Softmax, lambda: torch.nn.Softmax(-1), ((1, "T", 64),)),
    Case("softmax [T,1500]", attention.Softmax, lambda: torch.nn.Softmax(-1), ((1, "T", 1500),)),
    Case("softmax [4,T] T cols", attention.Softmax, lambda: torch.nn.Softmax(-1), ((4, "T"),)),
    Case("q@k^T [6,T,64]", attention.Matmul, lambda: Fn(lambda q, k: q @ k.transpose(-1, -2)), ((6, "T", 64), (6, "T", 64))),
    Case("x@W [4,T,64]x[64,96]", attention.Matmul, lambda: Fn(torch.matmul, torch.randn(4, 64, 96)), ((4, "T", 64),)),
    Case("x@W [2,T,1024]x[1024,64]", attention.Matmul, lambda: Fn(torch.matmul, torch.randn(2, 1024, 64)), ((2, "T", 1024),)),
    Case("conv1d 80->384 k3", conv.Conv1d, lambda: Chan(80, 384, 3, 1), ((1, "T", 80),)),
    Case("conv1d 384->384 k3 s2", conv.Conv1d, lambda: Chan(384, 384, 3, 2), ((1, "T", 384),)),
    Case("flash [6,T,64]", flash_attention.FlashAttention, lambda: Fn(lambda q, kv: F.scaled_dot_product_attention(q, kv, kv)), ((6, "T", 64), (6, "T", 64))),
    Case("flash causal [6,T,64]", flash_attention.FlashAttention, lambda: Fn(lambda x: F.scaled_dot_product_attention(x, x, x, is_causal=True)), ((6, "T", 64),)),
    Case("flash decode [6,1|T,64]", flash_attention.FlashAttention, lambda: Fn(lambda kv: F.scaled_dot_product_attention(kv[:, -1:], kv, kv)), ((6, "T", 64),)),
]  # fmt: skip


def _config(name):
    path = sweep.config_file(name)
    return load_config(path) if path else load_config()


def _shape(s, length):
    return [length if d == "T" else d for d in s]


def _compile(case: Case, config: str, length: int, cost):
    """The op compiled with its kernels planning for `length` and `case.kernel.cost` replaced by `cost`."""
    torch.manual_seed(0)
    model = case.build().eval()
    examples = [torch.randn(*_shape(s, 16)) for s in case.inputs]
    original, nominal = case.kernel.cost, kernels.NOMINAL_LENGTH
    case.kernel.cost = cost
    kernels.NOMINAL_LENGTH = support.NOMINAL_LENGTH = length  # plan_lengths' and upper's
    exhaustive = vars(case.kernel).get("exhaustive")
    case.kernel.exhaustive = True  # a search that prunes by the model's bounds would skip candidates here
    try:
        # no shape buckets: their searches at shorter lengths would overwrite the recorded predictions at T
        npu = compile_torch(
            model, *examples, min_len=1, max_len=4096, config=_config(config), cache=False, buckets=False
        )
    finally:
        case.kernel.cost = original
        kernels.NOMINAL_LENGTH = support.NOMINAL_LENGTH = nominal
        if exhaustive is None:
            del case.kernel.exhaustive
        else:
            case.kernel.exhaustive = exhaustive
    return model, npu


def record(item):
    """(case index, config, T) -> [(predicted cycles, candidate)] the tiler considered, cheapest first."""
    index, config, length = item
    case, seen = CASES[index], {}
    original = case.kernel.cost

    def recording(self, target, dims, cand):
        seen.setdefault(dims, {})[cand] = original(self, target, dims, cand)
        return seen[dims][cand]

    _compile(case, config, length, recording)
    # --novella-legalize (--novella-fuse) also scores a linear without the epilogue (prologue) it may fuse, to
    # decide the fusion: keep the candidates of the fused op, the one compiled
    most = max(map(_fused_epilogue, seen))
    dims = [d for d in seen if _fused_epilogue(d) == most]
    # a kernel that also weighs shorter lengths (the layer norm's robust tile) scores (rows, ...) at several:
    # keep the planned length's
    dims = [d for d in dims if isinstance(d, tuple) and d[0] == length] or dims
    kept = {k: c for d in dims for k, c in seen[d].items()}
    return sorted((c, k) for k, c in kept.items())


def _fused_epilogue(dims) -> int:
    """How many epilogue and prologue stages (residual, norm, pre-norm) a linear's dims fuse (0 for other
    kernels)."""
    epi = dims[-1] if isinstance(dims, tuple) else None  # a linear's (M, K, N, Epilogue); others' own Dims
    return sum(int(getattr(epi, f, False)) for f in ("residual", "norm", "pre_norm"))


def simulate(item):
    """(case index, config, T, candidate) -> simulated cycles of the op with that tiling forced."""
    index, config, length, forced = item
    case = CASES[index]
    model, npu = _compile(case, config, length, lambda self, target, dims, cand: 0.0 if cand == forced else 1e30)
    g = torch.Generator().manual_seed(length)
    xs = [torch.randn(*_shape(s, length), generator=g) for s in case.inputs]
    y = npu(*xs, check_hazards=False)
    with torch.no_grad():
        ref = model(*xs)
    if not torch.allclose(y, ref, rtol=1e-4, atol=1e-4):
        raise AssertionError(f"{case.name} on {config} with {forced}: max error {(y - ref).abs().max():.3g}")
    return npu.last_run.stats.cycles


def chosen(cands, max_sim: int, rng) -> list:
    if len(cands) <= max_sim:
        return [c for _, c in cands]
    top = [c for _, c in cands[: max_sim // 2]]
    return top + rng.sample([c for _, c in cands[max_sim // 2 :]], max_sim - len(top))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--length", type=int, default=300)
    p.add_argument("--max-sim", type=int, default=16, help="simulate every candidate up to this many, else sample")
    p.add_argument("--configs", default="edge,default,large")
    p.add_argument("--cases", help="comma-separated case indices (default: all)")
    p.add_argument("--in-process", action="store_true")
    p.add_argument("--address", help="a Ray cluster")
    p.add_argument("--verbose", action="store_true", help="also print every simulated candidate")
    args = p.parse_args(argv)
    engine = dict(in_process=args.in_process, address=args.address)
    rng = random.Random(0)
    indices = [int(i) for i in args.cases.split(",")] if args.cases else range(len(CASES))
    keys = [(i, c, args.length) for c in args.configs.split(",") for i in indices]
    cands = dict(zip(keys, sweep.run_tasks(record, keys, **engine)))
    picks = {k: chosen(v, args.max_sim, rng) for k, v in cands.items()}
    items = [(*k, c) for k in keys for c in picks[k]]
    sims = dict(zip(items, sweep.run_tasks(simulate, items, **engine)))
    head = (f"{'config':>8} {'op':<24} {'cands':>5} {'sim':>4} {'pick':>18} {'pick pred':>10} {'pick sim':>10} "
            f"{'best sim':>10} {'pick/best':>9} {'pred/sim':>8}")  # fmt: skip
    print(f"cost model validation at T={args.length}")
    print(head)
    print("-" * len(head))
    ok_pick = ok_pred = 0
    for k in keys:
        i, config, _ = k
        pred, pick = cands[k][0]
        simulated = {c: sims[(*k, c)] for c in picks[k]}
        best = min(simulated.values())
        ratio, acc = simulated[pick] / best, pred / simulated[pick]
        if args.verbose:
            pred_of = dict((c, v) for v, c in cands[k])
            for c, v in sorted(simulated.items(), key=lambda x: x[1]):
                print(f"{'':>8} {'':<24} {str(c):>18} pred {pred_of[c]:>10.0f} sim {v:>10} {pred_of[c] / v:>6.3f}")
        ok_pick += ratio <= 1.05
        ok_pred += abs(acc - 1) <= 0.10
        print(f"{config:>8} {CASES[i].name:<24} {len(cands[k]):>5} {len(simulated):>4} {str(pick):>18} {pred:>10.0f} "
              f"{simulated[pick]:>10} {best:>10} {ratio:>9.3f} {acc:>8.3f}", flush=True)  # fmt: skip
    n = len(keys)
    print(f"pick within 5% of the best simulated: {ok_pick}/{n}; predicted within 10% of simulated: {ok_pred}/{n}")


if __name__ == "__main__":
    main()
