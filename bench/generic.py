"""The generic path against the VEC roofline and against the hand kernels of the op table.

    .venv/bin/python bench/generic.py [--lengths 1,512] [--width 256]

Part 1: a degree-8 Horner polynomial `((x*a0 + a1)*x + a2)...` on [1, T, width], its 16 mul/add ops
taken by the generic path (their table lowerings set aside for the run) and fused by --novella-legalize
into one `novella.generic`: cycles against the VEC roofline elements x body ops / lanes, and the DMA
roofline (bytes / DRAM bytes per cycle) beside it.

Part 3 (`--opinfo`): torch's OpInfo samples (test/py/opinfo_harness.py: each sample's dims made the length
in turn, checked against eager at T = 1, 2, 7, 63, 64, 65, 130) of ops the table does not claim, which only
the generic path can take: passed / failed per op and the first reasons.

Part 2: one or more torch ops per entry of the op table (every entry but the kept linear, flash attention,
conv1d and embedding), each compiled twice in one run, with the table's lowering (hand kernel) and with it
set aside (the generic path: torch-mlir's decompositions and linalg, then novella.generic/reduce/...):
simulated cycles side by side, the hand kernel's win (generic / hand), max errors against eager, compile
seconds and the verdict (the generic path replaces an op that matches eager in at most 1.02x the cycles
at every length). An op whose lowering is already gone from the table runs once, on the generic path;
a case whose program calls none of its ops says so. Last, one line per entry of the op table: replaced,
kept (the hand kernel's largest win, or the cases only the hand lowering takes, such as an operand
computed from the length, which the generic path refuses), or why it has no case; and the counts.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import re
import sys
import time
import warnings
from pathlib import Path

import torch

from novella_mlir import compile_torch, optable
from novella_mlir.machine.target import Target
from simulator.config import load_config

F = torch.nn.functional
HORNER_OPS = ("torch.aten.mul.Tensor", "torch.aten.mul.Scalar", "torch.aten.add.Tensor", "torch.aten.add.Scalar")
COEFFS = (0.5, -0.25, 0.125, 0.75, -0.5, 0.3, 0.2, -0.1, 1.0)


@contextlib.contextmanager
def generic_for(names):
    """The table's lowerings of `names` set aside: those torch ops take the generic path."""
    saved = []
    for d in optable.OPS.values():
        for n in names:
            if n in d.lowers:
                saved.append((d.lowers, n, d.lowers.pop(n)))
    try:
        yield
    finally:
        for lowers, n, fn in saved:
            lowers[n] = fn


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def horner(x):
    y = x * COEFFS[0] + COEFFS[1]
    for c in COEFFS[2:]:
        y = y * x + c
    return y


def run(model, width, lengths, generic_names=()):
    with generic_for(generic_names):
        t0 = time.perf_counter()
        npu = compile_torch(model, torch.randn(1, 8, width), min_len=1, max_len=max(lengths), cache=False)
        secs = time.perf_counter() - t0
    out = {}
    for t in lengths:
        x = torch.randn(1, t, width)
        err = float((npu(x, check_hazards=False) - model(x)).abs().max())
        out[t] = (npu.last_run.stats.cycles, err)
    return npu, secs, out


def part1(width, lengths, target):
    npu, secs, res = run(Fn(horner), width, lengths, HORNER_OPS)
    text = npu.ir("novella-legalize")
    n_generic = text.count('"novella.generic"')
    lines = text.splitlines()
    body = sum(1 for ln in lines if (" = arith." in ln or " = math." in ln) and " = arith.constant" not in ln)
    lanes, bw = target.vector_lanes, target.dram_bytes_per_cycle
    print(f"Horner degree 8 on [1, T, {width}]: {n_generic} novella.generic after legalize, {body} body ops, "
          f"compile {secs:.1f} s")  # fmt: skip
    print(f"{'T':>6} {'cycles':>10} {'VEC roof':>10} {'cyc/VEC':>8} {'DMA roof':>10} {'max err':>9}")
    for t, (cyc, err) in res.items():
        n = t * width
        vec = n * body / lanes
        dma = n * 2 * 4 / bw
        print(f"{t:>6} {cyc:>10,} {vec:>10,.0f} {cyc / vec:>8.2f} {dma:>10,.0f} {err:>9.1e}")


_LIN = torch.nn.Linear(256, 256)
_W = torch.randn(256, 64) * 0.1
_ROW = torch.rand(256) + 0.5  # a weight row (an RMSNorm's, a scale's)
_MM = ["torch.aten.matmul", "torch.aten.bmm", "torch.aten.mm"]
_INT = lambda x: (x * 8).to(torch.int64)  # noqa: E731
_HEADS = lambda x: x.reshape(1, x.shape[1], 4, 64).transpose(1, 2)  # noqa: E731
_CMP = ["torch.aten._to_copy", "torch.aten.to.dtype", "torch.prims.convert_element_type"]
_VIEW = ["torch.aten.view", "torch.aten.reshape", "torch.aten._unsafe_view", "torch.aten.unflatten.int"]
# Every entry of the op table but those issue 19 keeps (linear, flash attention, conv1d, embedding: their
# kernels are the matrix unit's or a gather's), each by the torch ops it lowers: (entry, case, fn, ops set
# aside for the generic run). Softmax and layer norm are kept too, measured here beside the others.
PART2 = [
    ("MatmulOp", "matmul x @ x^T", lambda x: x @ x.transpose(-1, -2), ["torch.aten.matmul", "torch.aten.bmm"]),
    ("MatmulOp", "matmul x @ W", lambda x: x @ _W, _MM),
    ("MatmulOp", "heads: q @ k^T, p @ v", lambda x: (lambda q: (q @ q.transpose(-1, -2)).softmax(-1) @ q)(_HEADS(x)), _MM),
    ("AddOp", "add.Tensor", lambda x: x + x.sin(), ["torch.aten.add.Tensor"]),
    ("AddOp", "linear + residual", lambda x: _LIN(x) + x, ["torch.aten.add.Tensor"]),
    ("AddOp", "x + the length", lambda x: x + x.shape[1], ["torch.aten.add.Scalar", "torch.aten.add.Tensor"]),
    ("SubOp", "sub.Tensor", lambda x: x - x.sin(), ["torch.aten.sub.Tensor"]),
    ("SubOp", "x - row mean", lambda x: x - x.mean(-1, keepdim=True), ["torch.aten.sub.Tensor"]),
    ("SubOp", "x - the length", lambda x: x - x.shape[1], ["torch.aten.sub.Scalar", "torch.aten.sub.Tensor"]),
    ("MulOp", "mul.Tensor", lambda x: x * x.sin(), ["torch.aten.mul.Tensor"]),
    ("MulOp", "x * weight row", lambda x: x * _ROW, ["torch.aten.mul.Tensor"]),
    ("DivOp", "div.Tensor", lambda x: x / x.exp(), ["torch.aten.div.Tensor"]),
    ("DivOp", "x / weight row", lambda x: x / _ROW, ["torch.aten.div.Tensor"]),
    ("DivOp", "x / the length", lambda x: x / x.shape[1], ["torch.aten.div.Scalar", "torch.aten.div.Tensor"]),
    ("ScalarOp", "mul.Scalar", lambda x: x * 0.5, ["torch.aten.mul.Scalar"]),
    ("ScalarOp", "add.Scalar", lambda x: x + 0.5, ["torch.aten.add.Scalar"]),
    ("ScalarOp", "attention scale", lambda x: ((x @ x.transpose(-1, -2)) * 0.0625).softmax(-1) @ x,
     ["torch.aten.mul.Scalar"]),
    ("ScalarOp", "x * the length", lambda x: x * x.shape[1], ["torch.aten.mul.Scalar", "torch.aten.mul.Tensor"]),
    ("ReluOp", "relu", torch.relu, ["torch.aten.relu"]),
    ("GeluOp", "gelu", F.gelu, ["torch.aten.gelu"]),
    ("SoftmaxOp", "softmax.int", lambda x: x.softmax(-1), ["torch.aten.softmax.int", "torch.aten._softmax"]),
    ("LayerNormOp", "layer_norm", lambda x: F.layer_norm(x, x.shape[-1:]),
     ["torch.aten.layer_norm", "torch.aten.native_layer_norm"]),
    ("TransposeOp", "transpose.int", lambda x: x.transpose(1, 2), ["torch.aten.transpose.int"]),
    ("TransposeOp", "x @ x^T (folded)", lambda x: x @ x.transpose(-1, -2), ["torch.aten.transpose.int"]),
    ("TransposeOp", "permute a batch of 1", lambda x: x.permute(1, 0, 2) * 1.0, ["torch.aten.permute"]),
    ("ReshapeOp", "view [1,T,16,16] + 1", lambda x: x.reshape(1, x.shape[1], 16, -1) + 1, _VIEW),
    ("SliceOp", "slice.Tensor", lambda x: x[..., 8:], ["torch.aten.slice.Tensor"]),
    ("SliceOp", "x[:, :T // 2 + 1]", lambda x: x[:, : x.shape[1] // 2 + 1], ["torch.aten.slice.Tensor"]),
    ("MathOp", "exp", torch.exp, ["torch.aten.exp"]),
    ("MathOp", "sigmoid", torch.sigmoid, ["torch.aten.sigmoid"]),
    ("MathOp", "tanh", torch.tanh, ["torch.aten.tanh"]),
    ("MathOp", "sin", torch.sin, ["torch.aten.sin"]),
    ("MathOp", "abs", torch.abs, ["torch.aten.abs"]),
    ("MathOp", "neg", torch.neg, ["torch.aten.neg"]),
    ("MathOp", "abs int64", lambda x: _INT(x).abs().to(x.dtype), ["torch.aten.abs"]),
    ("MathOp", "neg int64", lambda x: (-_INT(x)).to(x.dtype), ["torch.aten.neg"]),
    ("MathOp", "pow.Tensor_Scalar", lambda x: x**2, ["torch.aten.pow.Tensor_Scalar"]),
    ("CompareOp", "gt.Scalar + to.dtype", lambda x: (x > 0).to(x.dtype), ["torch.aten.gt.Scalar", *_CMP]),
    ("CompareOp", "eq.Tensor + to.dtype", lambda x: (x == x.round()).to(x.dtype), ["torch.aten.eq.Tensor", *_CMP]),
    ("MaximumOp", "maximum", lambda x: torch.maximum(x, -x), ["torch.aten.maximum"]),
    ("MaximumOp", "clamp", lambda x: x.clamp(-0.5, 0.5), ["torch.aten.clamp"]),
    ("MaximumOp", "clamp.Tensor", lambda x: x.clamp(-x.abs(), x.abs() * 0.5), ["torch.aten.clamp.Tensor"]),
    ("MinimumOp", "minimum", lambda x: torch.minimum(x, -x), ["torch.aten.minimum"]),
    ("WhereOp", "where.self", lambda x: torch.where(x > 0, x, x * 0.1), ["torch.aten.where.self", "torch.aten.gt.Scalar"]),
    ("WhereOp", "where.ScalarOther", lambda x: torch.where(x > 0, x, 0.0), ["torch.aten.where.ScalarOther"]),
    ("WhereOp", "where.ScalarSelf", lambda x: torch.where(x > 0, 1.0, x), ["torch.aten.where.ScalarSelf"]),
    ("WhereOp", "where.Scalar", lambda x: torch.where(x > 0, 1.0, -1.0), ["torch.aten.where.Scalar"]),
    ("BroadcastOp", "expand", lambda x: x[..., :1].expand(-1, -1, x.shape[-1]) * 1.0, ["torch.aten.expand"]),
    ("BroadcastOp", "expand to the length", lambda x: x[:, :1].expand(-1, x.shape[1], -1) * 1.0, ["torch.aten.expand"]),
    ("BroadcastOp", "repeat", lambda x: x[..., :8].repeat(1, 1, 4), ["torch.aten.repeat"]),
    ("ReduceOp", "sum.dim_IntList", lambda x: x.sum(-1, keepdim=True), ["torch.aten.sum.dim_IntList"]),
    ("ReduceOp", "mean.dim", lambda x: x.mean(-1, keepdim=True), ["torch.aten.mean.dim"]),
    ("ReduceOp", "amax", lambda x: x.amax(-1, keepdim=True), ["torch.aten.amax"]),
    ("ReduceOp", "amin", lambda x: x.amin(-1, keepdim=True), ["torch.aten.amin"]),
    ("ReduceOp", "sum over T", lambda x: x.sum(1, keepdim=True), ["torch.aten.sum.dim_IntList"]),
    ("ReduceOp", "var", lambda x: x.var(-1, keepdim=True), ["torch.aten.var.correction", "torch.aten.var.dim"]),
    ("ReduceOp", "argmax", lambda x: x.argmax(-1, keepdim=True).to(x.dtype), ["torch.aten.argmax"]),
    ("KvAppendOp", "append at the length", lambda x: torch.slice_scatter(F.pad(x, (0, 0, 0, 1)), x[:, :1] * 2, dim=1,
     start=x.shape[1], end=x.shape[1] + 1), ["torch.aten.slice_scatter"]),
    ("ConcatOp", "cat", lambda x: torch.cat([x, x.sin()], -1), ["torch.aten.cat"]),
    ("ConcatOp", "constant_pad_nd", lambda x: F.pad(x, (0, 8)), ["torch.aten.constant_pad_nd", "torch.aten.pad"]),
    ("ConcatOp", "pad over T", lambda x: F.pad(x, (0, 0, 1, 0)), ["torch.aten.constant_pad_nd", "torch.aten.pad"]),
    ("FlipOp", "flip", lambda x: x.flip(-1), ["torch.aten.flip"]),
    ("ScanOp", "cumsum over T", lambda x: x.cumsum(1), ["torch.aten.cumsum"]),
    ("ScanOp", "cumsum over width", lambda x: x.cumsum(-1), ["torch.aten.cumsum"]),
    # formed by --novella-fuse-elementwise from the mean and the pointwise tail (x**2 stays: fpowi, no VEC op)
    ("RmsNormOp", "RMSNorm (LLaMA's)", lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * _ROW,
     ["torch.aten.mean.dim", "torch.aten.rsqrt", "torch.aten.mul.Tensor", "torch.aten.add.Scalar"]),
]  # fmt: skip
NO_TORCH_OP = {
    "FusedLinearOp": "kept (linear): formed by --novella-legalize",
    "KvWriteOp": "no torch op: formed by --novella-kv-cache (a paged cache write)",
    "AttentionOp": "kept (attention): --novella-legalize decomposes it into matmul, softmax, matmul",
    "FlashAttentionOp": "kept (flash attention)",
    "LinearOp": "kept (linear)",
    "Conv1dOp": "kept (conv1d)",
    "GatherRowsOp": "kept (embedding)",
    "GenericOp": "the generic path itself",
}
TOL = 1e-4


def _refusal(e: Exception) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:110]}"


def _win(gen: int, hand: int) -> float:
    """generic / hand cycles (a hand op that is a DRAM alias runs in 0: any generic cycle is an infinite win)."""
    return gen / hand if hand else (1.0 if not gen else float("inf"))


def _times(win: float) -> str:
    return f"{win:.2f}x" if win != float("inf") else "(a DRAM alias: 0 cycles)"


def _hits(npu, names) -> bool:
    """Whether the exported program calls one of the torch ops `names` (else the case measures nothing)."""
    text = npu.ir("torch")
    return any(re.search(re.escape(n) + r"[\s(]", text) for n in names)


def _case(entry, name, fn, names, width, lengths, table) -> tuple[str, str, float]:
    """(the case's line, its verdict kind, the hand kernel's win) for one PART2 case."""
    lead = f"{entry:<12} {name:<22}"
    if names[0] not in table:
        _, gs, gen = run(Fn(fn), width, lengths)
        cells = " ".join(f"{'-':>12} {gen[t][0]:>10,} {'-':>5}" for t in lengths)
        err = max(e for _, e in gen.values())
        return f"{lead} {cells}  -, {err:.1e}{'':<9} {'-':>5} {gs:>5.1f}  replaced (no hand lowering)", "replaced", 1.0
    try:
        npu, hs, hand = run(Fn(fn), width, lengths)
    except Exception as e:  # a refusal is a result of the bench
        return f"{lead} hand refuses: {_refusal(e)}", "hand refuses", 1.0
    if not _hits(npu, names):
        return f"{lead} measures nothing: the program calls none of {names}", "no hit", 1.0
    try:
        _, gs, gen = run(Fn(fn), width, lengths, names)
    except Exception as e:  # noqa: BLE001
        cells = " ".join(f"{hand[t][0]:>12,} {'-':>10} {'-':>5}" for t in lengths)
        return f"{lead} {cells}  generic refuses: {_refusal(e)}", "generic refuses", float("inf")
    wins = {t: _win(gen[t][0], hand[t][0]) for t in lengths}
    cells = " ".join(f"{hand[t][0]:>12,} {gen[t][0]:>10,} {wins[t]:>5.2f}" for t in lengths)
    eh, eg = max(e for _, e in hand.values()), max(e for _, e in gen.values())
    matches = eg <= max(TOL, 1.5 * eh)  # a matmul over 256 terms errs as much by hand
    win = max(wins.values())
    kind = "generic wrong" if not matches else ("hand wins" if win > 1.02 else "generic replaces it")
    verdict = f"hand wins {_times(win)}" if kind == "hand wins" else kind
    return f"{lead} {cells}  {eh:.1e}, {eg:.1e}  {hs:>5.1f} {gs:>5.1f}  {verdict}", kind, win


def part2(width, lengths, only=()):
    """One line per case: hand and generic cycles at each length, their ratio (the hand kernel's win), the
    max errors, and the verdict: the generic path replaces the entry's op when it matches eager (TOL) and
    is not slower than the hand kernel (within 2%) at every length. Then one line per entry of the op
    table: replaced (no torch op of its own left), kept (the hand kernel's largest win, or a case only
    the hand lowering takes), or why it has no case."""
    print(f"\nhand kernel vs the generic path, [1, T, {width}] (cycles; win = generic / hand)")
    head = " ".join(f"{'hand T=' + str(t):>12} {'generic':>10} {'win':>5}" for t in lengths)
    print(f"{'entry':<12} {'case':<22} {head}  {'max err (hand, gen)':<18}  compile s  verdict")
    table = optable.torch_lowerings()
    kept: dict[str, list] = {}
    for entry, name, fn, names in PART2:
        if only and not any(o in name or o == entry for o in only):
            continue
        line, kind, win = _case(entry, name, fn, names, width, lengths, table)
        print(line, flush=True)
        kept.setdefault(entry, []).append((kind, win, name))
    if not only:
        summary(kept)


def summary(cases: dict):
    """One line per entry of the op table and the counts (issue 19: the hand kernels are the exception)."""
    print("\nper entry of the op table")
    counts: dict[str, int] = {}
    for cls in sorted(optable.OPS, key=lambda c: c.__name__):
        entry, own = cls.__name__, optable.OPS[cls].lowers
        refused = [n for k, _, n in cases.get(entry, []) if k == "generic refuses"]
        wins = [(w, n) for k, w, n in cases.get(entry, []) if k == "hand wins"]
        if entry in NO_TORCH_OP:
            what = NO_TORCH_OP[entry]
        elif wins or refused:
            w, n = max(wins) if wins else (0, "")
            what = "kept: " + "; ".join(
                ([f"hand wins {_times(w)} ({n})"] if wins else [])
                + ([f"generic refuses {', '.join(refused)}"] if refused else [])
            )
        elif not own:
            what = "replaced: no torch op of its own left (other lowerings emit it)"
        else:
            what = "generic matches every case: its lowerings can go" if entry in cases else "not measured"
        key = what.split(":")[0].split(" (")[0]
        counts[key] = counts.get(key, 0) + 1
        print(f"{entry:<16} {what}")
    print(f"{len(optable.OPS)} entries: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))


OPINFO = (
    "fmax", "fmin", "logaddexp", "logaddexp2", "xlogy", "hypot", "nn.functional.softshrink",
    "nn.functional.hardshrink", "nn.functional.tanhshrink", "nn.functional.softsign", "nn.functional.celu",
    "nn.functional.selu", "nn.functional.logsigmoid", "nn.functional.prelu", "nn.functional.relu6",
    "nn.functional.threshold", "diff", "repeat_interleave", "nn.functional.group_norm", "nan_to_num",
    "heaviside", "addcdiv", "nansum", "nn.functional.normalize", "log2", "log10", "exp2", "deg2rad", "rad2deg",
    "true_divide", "float_power", "nn.functional.mse_loss", "nn.functional.l1_loss", "nn.functional.huber_loss",
    "var_mean", "std_mean", "nanmean", "special.xlog1py", "special.entr", "sinc", "logit", "positive",
)  # fmt: skip


def part3(limit: int):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "test" / "py"))
    import opinfo_harness as h

    infos = h.op_infos()
    total = [0, 0]
    print(f"\nOpInfo samples (first {limit} eligible per op, every dim of size >= 2) of ops the table does not claim")
    for name in OPINFO:
        if name not in infos:
            continue
        t = h.run_op(infos[name], limit)
        total[0] += t.passed
        total[1] += t.failed
        why = "; ".join(f"{r} ({n})" for r, n in t.reasons.most_common(2))
        print(f"{name:<28} pass {t.passed:>3} fail {t.failed:>3} skip {t.skipped:>3}  {why[:150]}")
    print(f"total: {total[0]} passed, {total[1]} failed")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", default="1,512")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--part", type=int, default=0, help="1, 2 or 3 (0: 1 and 2)")
    ap.add_argument("--opinfo-limit", type=int, default=1)
    ap.add_argument("--only", default="", help="part 2: cases whose name contains one of these (or entries)")
    a = ap.parse_args()
    lengths = [int(t) for t in a.lengths.split(",")]
    target = Target.from_config(load_config())
    if a.part in (0, 1):
        part1(a.width, lengths, target)
    if a.part in (0, 2):
        part2(a.width, lengths, [o for o in a.only.split(",") if o])
    if a.part == 3:
        logging.disable(logging.WARNING)
        warnings.filterwarnings("ignore")
        part3(a.opinfo_limit)


if __name__ == "__main__":
    main()
