"""Python kernels for composite aten ops whose C++ kernel fixes a symbolic size while torch.export traces it.

torch.export keeps a CompositeImplicitAutograd op such as `aten.linalg_matrix_norm` in the graph, and
finds its result's shape by running the op's C++ kernel on fake tensors. For ord 1, -1, inf and -inf
that kernel reads a size as a plain integer, which specializes the length (`T = 5`) and fails the
export. `symbolic_kernels()` registers, for the duration of an export or a decomposition run, a
Python kernel for the op with the same result, written with torch ops that keep the size symbolic
(the abs sums over one dim, then their max or min over the other, as torch defines these norms). It
is consulted only while torch's Python dispatcher runs (tracing); eager PyTorch is unchanged, and
the op stays in the graph as it is (`frontend/lowering/reductions.py` lowers it).
"""

from __future__ import annotations

import contextlib
import math
import os
import traceback

import torch

_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


def _matrix_norm(A, ord, dim=(-2, -1), keepdim=False, dtype=None):
    """torch.linalg.matrix_norm for a numeric ord: 1 / -1 (inf / -inf) are the max / min over the second
    (first) dim of the abs sums over the other; 2 / -2 (singular values) run torch's own kernel."""
    op = torch.ops.aten.linalg_matrix_norm.default
    if abs(float(ord)) not in (1.0, math.inf) or len(dim) != 2:
        return op._op_dk(_CIA, A, ord, dim, keepdim, dtype=dtype)
    rank = A.dim()
    first, second = (d % rank for d in dim)
    if first == second:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({dim[0]}, {dim[1]})")
    summed, reduced = (second, first) if math.isinf(ord) else (first, second)
    sums = torch.linalg.vector_norm(A, 1.0, dim=[summed], keepdim=True, dtype=dtype)
    out = sums.amax(reduced, keepdim=True) if ord > 0 else sums.amin(reduced, keepdim=True)
    return out if keepdim else out.squeeze([first, second])


_KERNELS = {"linalg_matrix_norm.default": _matrix_norm}


@contextlib.contextmanager
def symbolic_kernels():
    """The Python kernels above registered for torch's CompositeImplicitAutograd key while the block runs."""
    ops = []
    for name, fn in _KERNELS.items():
        packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet), overload)
        if _CIA in op.py_kernels:  # someone else's kernel (or an enclosing block's): leave it
            continue
        op.py_impl(_CIA)(fn)
        ops.append(op)
    try:
        yield
    finally:
        for op in ops:
            op.py_kernels.pop(_CIA, None)
            op._dispatch_cache.clear()


@contextlib.contextmanager
def uncached_fake_dispatch():
    """torch's fake-tensor dispatch cache off while the block traces. Each entry it makes is checked by
    rebuilding the output from the entry, which re-evaluates every symbolic size and stride of it; a
    model whose sizes are remainders of the length (a pad to a whole chunk, `(64 - T % 64) % 64`) and
    whose ops rarely repeat with the same arguments (a forward substitution over the rows of a chunk,
    each step slicing `[:i]`) pays that cost on nearly every op and almost never hits. Measured on the
    zoo's qwen3_5_text (2,180 nodes): one export 76 s with the cache, 36 s without. The traced program is
    the same: the cache only memoizes fake outputs."""
    import torch._dynamo.config as dynamo_config

    with dynamo_config.patch(fake_tensor_cache_enabled=False):
        yield


_NOT_MODEL = (os.path.dirname(torch.__file__), os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(__file__)))


@contextlib.contextmanager
def every_frame():
    """torch.export's stack traces with every frame of the model's code from its first `forward` on, not
    only its `forward` frames (torch's, the standard library's and ours left out but their `forward`s, as
    torch keeps them: a torch.nn module's line): an op inside a plain
    function (a hub kernel's fallback such as `chunk_kimi_delta_attention`, called through the `kernels`
    package's dispatch module) then names its own line, not the dispatcher's."""
    from torch.fx.proxy import TracerBase

    keep = TracerBase._filter_traceback_frames

    def frames(self, summary):
        start = next((i for i, f in enumerate(summary) if f.name == "forward"), None)
        if not getattr(self, "_record_forward_stack_traces_only", False) or start is None:
            return keep(self, summary)
        kept = [f for f in summary[start:] if f.name == "forward" or not f.filename.startswith(_NOT_MODEL)]
        return traceback.StackSummary.from_list(kept)

    TracerBase._filter_traceback_frames = frames
    try:
        yield
    finally:
        TracerBase._filter_traceback_frames = keep
