"""PyTorch's OpInfo samples as a differential oracle for the compiler.

For each claimed op, each float32 sample whose input has rank >= 2, and each dim of
the input in turn (size >= 2): that dim becomes the symbolic length T in [1, MAX_LEN],
the op is compiled once, and run at every length in LENGTHS on inputs made by tiling
the sample's own values along the dim (so a domain like log's x > 0 is kept), against
eager PyTorch. A (sample, dim) pair whose eager op does not accept the other lengths
(e.g. a view to fixed sizes) is skipped, not counted. Tensor arguments with the same
rank and size in that dim become dynamic with it; other tensor arguments make the
pair skipped (compile_torch marks one dim index dynamic in every tensor input).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field

import torch

MAX_LEN = 130
LENGTHS = (1, 2, 7, 63, 64, 65, MAX_LEN)  # 1, 2, odd, tile-1, tile, tile+1 (64-row tiles), max
ATOL = RTOL = 1e-4
MAX_REF_NUMEL = 4096  # reference inputs larger than this (e.g. 1024 x 1024) are left to torch's own tests

# OpInfo names of the ops the frontend claims (lowered, or decomposed by torch into lowered ops).
CLAIMED = (
    "add", "sub", "mul", "div", "rsub", "neg", "abs", "sign", "exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt",
    "reciprocal", "square", "pow", "sigmoid", "tanh", "sin", "cos", "erf", "nn.functional.relu",
    "nn.functional.gelu", "nn.functional.silu", "nn.functional.elu", "nn.functional.leaky_relu",
    "nn.functional.hardtanh", "nn.functional.softplus", "nn.functional.mish", "nn.functional.hardswish",
    "clamp", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "where", "masked_fill", "logical_not",
    "logical_and", "logical_or", "triu", "tril", "sum", "mean", "amax", "amin", "var", "std", "logsumexp",
    "softmax", "log_softmax", "nn.functional.layer_norm", "transpose", "permute", "t", "cat", "stack", "split",
    "chunk", "unbind", "narrow", "select", "expand", "repeat", "flip", "index_select", "squeeze", "unsqueeze",
    "reshape", "view", "flatten", "clone", "contiguous", "matmul", "mm", "bmm", "addmm", "nn.functional.linear",
    "addcmul", "lerp", "nn.functional.glu", "argmax", "argmin", "linalg.vector_norm", "norm", "linalg.matrix_norm",
    "linalg.norm", "fliplr", "flipud", "cumsum", "cumprod",
)  # fmt: skip

# The fast subset CI runs (op, first N eligible samples).
CI_SUBSET = (("add", 6), ("lt", 6), ("exp", 2), ("sigmoid", 2), ("where", 2), ("softmax", 1), ("amax", 1),
             ("var", 1), ("transpose", 1), ("cat", 1), ("tril", 1), ("clamp", 1), ("nn.functional.gelu", 1),
             ("argmax", 1), ("flip", 1), ("cumsum", 1))  # fmt: skip


@dataclass
class Tally:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    reasons: Counter = field(default_factory=Counter)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"passed": self.passed, "failed": self.failed, "skipped": self.skipped,
                "reasons": dict(self.reasons.most_common())}  # fmt: skip


def op_infos() -> dict:
    from torch.testing._internal.common_methods_invocations import op_db

    out: dict = {}
    for o in op_db:
        out.setdefault(o.name, o)
    return out


class _Op(torch.nn.Module):
    """fn(input, *args, **kwargs) with the tensors as forward's parameters; `n_list` > 0: the
    input is a list (cat, stack) of the first n_list tensors."""

    def __init__(self, fn, consts, kwargs, slots, n_list: int = 0):
        super().__init__()
        self.fn, self.consts, self.kwargs, self.slots, self.n_list = fn, consts, kwargs, slots, n_list

    def forward(self, *tensors):
        head, rest = (
            (list(tensors[: self.n_list]), tensors[self.n_list :]) if self.n_list else (tensors[0], tensors[1:])
        )
        args = list(self.consts)
        for slot, t in zip(self.slots, rest):
            args[slot] = t
        return self.fn(head, *args, **self.kwargs)


def _grow(t: torch.Tensor, dim: int, length: int) -> torch.Tensor:
    reps = -(-length // t.shape[dim])
    return torch.cat([t] * reps, dim=dim).narrow(dim, 0, length).contiguous()


def pairs(info, limit: int | None = None):
    """(sample, dim) pairs to try: float32 samples of rank >= 2, dims of size >= 2."""
    n = 0
    for s in _samples(info):
        x = s.input[0] if isinstance(s.input, (list, tuple)) and s.input else s.input
        if not isinstance(x, torch.Tensor) or x.dim() < 2 or x.dtype != torch.float32 or x.numel() == 0:
            continue
        if any(isinstance(v, torch.Tensor) for v in s.kwargs.values()):
            continue
        yield s, [d for d in range(x.dim()) if x.shape[d] >= 2]
        n += 1
        if limit is not None and n >= limit:
            return


def _samples(info):
    """The op's samples; ops whose samples are all rank < 2 (many unary ufuncs) use their reference inputs."""
    samples = list(info.sample_inputs("cpu", torch.float32))
    first = [s.input[0] if isinstance(s.input, (list, tuple)) and s.input else s.input for s in samples]
    if not any(isinstance(x, torch.Tensor) and x.dim() >= 2 and x.numel() > 0 for x in first):
        refs = info.reference_inputs("cpu", torch.float32)
        samples = [
            r
            for r in refs
            if isinstance(r.input, torch.Tensor) and r.input.dim() >= 2 and r.input.numel() <= MAX_REF_NUMEL
        ]
    return samples


def _as_list(y):
    return list(y) if isinstance(y, (tuple, list)) else [y]


def run_pair(info, sample, dim: int) -> tuple[str, str]:
    """("pass" | "fail" | "skip", reason) for one sample with dim `dim` symbolic."""
    from novella_mlir import compile_torch

    listed = list(sample.input) if isinstance(sample.input, (list, tuple)) else [sample.input]
    x = listed[0]
    slots = [i for i, a in enumerate(sample.args) if isinstance(a, torch.Tensor)]
    targs = [sample.args[i] for i in slots]
    tensors = listed + targs
    if not all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in listed):
        return "skip", "non-f32 list input"
    if any(a.dim() != x.dim() or a.shape[dim] != x.shape[dim] for a in tensors[1:]):
        return "skip", "tensor argument not dynamic with the input"
    n_list = len(listed) if isinstance(sample.input, (list, tuple)) else 0
    module = _Op(info.op, list(sample.args), dict(sample.kwargs), slots, n_list).eval()
    inputs = {n: [_grow(t, dim, n) for t in tensors] for n in LENGTHS}
    try:
        with torch.no_grad():
            refs = {n: _as_list(module(*ts)) for n, ts in inputs.items()}
    except Exception:
        return "skip", "eager rejects other lengths"
    if not all(isinstance(r, torch.Tensor) for rs in refs.values() for r in rs):
        return "skip", "non-tensor output"
    if len({tuple(r.dim() for r in rs) for rs in refs.values()}) > 1:
        return "skip", "output rank depends on the length (e.g. squeeze at 1)"
    try:
        # cache=False: the compile cache keys a module by its class and state, not by `fn` (the op)
        npu = compile_torch(module, *tensors, dynamic_dim=dim, min_len=1, max_len=MAX_LEN, cache=False)
    except Exception as e:
        return "fail", _reason(e)
    for n, ts in inputs.items():
        try:
            got = _as_list(npu(*ts))
        except Exception as e:
            return "fail", f"run: {_reason(e)}"
        for g, r in zip(got, refs[n]):
            if g.dtype != r.dtype:
                return "fail", f"dtype {g.dtype} where eager gives {r.dtype}"
            if g.shape != r.shape or not torch.allclose(g.float(), r.float(), atol=ATOL, rtol=RTOL, equal_nan=True):
                return "fail", f"mismatch at T={n}"
    return "pass", ""


def _reason(e: Exception) -> str:
    lines = str(e).strip().splitlines() or [type(e).__name__]
    text = lines[0]
    if text.endswith("failed:") and len(lines) > 1:
        text = text.split("'")[1] + ": " + lines[1].split("error: ", 1)[-1]
    if "unsupported op" in text:
        return "unsupported " + text.split("unsupported op '")[1].split("'")[0]
    if "cannot keep dim" in text or "torch.export" in text or "fixes the size of dim" in text:
        return "export: torch narrows or specializes the length"
    text = re.sub(r"^\S+\.py:\d+: ", "", text)  # the source line is the harness's own
    return f"{type(e).__name__}: {text[:110]}"


def run_op(info, limit: int | None = None) -> Tally:
    t, t0 = Tally(), time.perf_counter()
    for sample, dims in pairs(info, limit):
        for d in dims:
            status, why = run_pair(info, sample, d)
            if status == "pass":
                t.passed += 1
            elif status == "fail":
                t.failed += 1
                t.reasons[why] += 1
            else:
                t.skipped += 1
    t.seconds = time.perf_counter() - t0
    return t
