"""How torch dtypes are held on the NPU, which computes only in fp32.

Every tensor lives in DRAM as fp32. A bool is 0.0 or 1.0; an integer
(int8 .. int64, uint8) is its value as an fp32, which is exact for
|v| <= 2**24 = 16,777,216 (every integer in that range is an fp32). Token
ids, positions, index buffers and masks fit; a weight, constant or model
input outside that range is refused rather than rounded. Integer results
of fp32 arithmetic (e.g. `arange + 1`, products of ids) stay exact while
they stay within the range. An integer or bool model output (argmax indices, a mask) is
returned with the dtype eager PyTorch gives it.
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import NovellaError

EXACT_INT = 2**24
FLOAT = ("f32", "f64", "f16", "bf16")
INTEGER = ("si64", "si32", "si16", "si8", "ui8", "i64", "i32")
BOOL = ("i1",)


def to_npu(t, what: str) -> np.ndarray:
    """`t` (a torch tensor) as the fp32 array the NPU holds, refusing integers that fp32 cannot hold exactly."""
    import torch  # here, not at the top: the passes import this module and novella-opt starts without torch

    if t.dtype.is_floating_point:
        return t.to(torch.float32).contiguous().numpy()
    a = t.to(torch.int64).contiguous().numpy() if t.dtype != torch.bool else t.numpy().astype(np.int64)
    check_exact(a, what)
    return a.astype(np.float32)


def from_npu(a: np.ndarray, dtype: str) -> np.ndarray:
    """An fp32 output as the torch dtype the model gives it (integers and bools are exact: see above)."""
    if dtype == "bool":
        return a != 0
    return a.astype(np.dtype(dtype)) if dtype != "float32" else a.copy()


def check_exact(a: np.ndarray, what: str) -> None:
    if a.size and int(np.abs(a).max()) > EXACT_INT:
        raise NovellaError(
            f"{what} holds the integer {int(np.abs(a).max())}, outside +-2**24: the NPU holds integers "
            "as fp32, exact only up to 16,777,216. Keep ids, positions and indices below that."
        )


def element_type(torch_type) -> str:
    """The element type of a `!torch.vtensor<[...],T>` type, e.g. "f32", "si64", "i1"."""
    m = re.match(r"!torch\.vtensor<\[[^\]]*\],([^>]+)>", str(torch_type))
    return m.group(1) if m else ""


def kind(torch_type) -> str:
    """ "float", "int" or "bool" for a torch tensor type; "" for anything else."""
    e = element_type(torch_type)
    if e in FLOAT:
        return "float"
    if e in INTEGER:
        return "int"
    if e in BOOL:
        return "bool"
    return ""
