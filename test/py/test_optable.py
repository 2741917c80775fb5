"""One op, one place: every novella tensor op has a complete entry in the op table."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from novella_mlir import optable
from novella_mlir.dialects import novella as nv
from novella_mlir.dialects import shapes
from novella_mlir.errors import UnsupportedOpError

ROOT = Path(__file__).resolve().parents[2]
# Ops that are not tensor ops: constants and the tile/instruction levels below macro-gen.
STRUCTURAL = {
    nv.WeightOp,
    nv.YieldOp,
    nv.MacroOp,
    nv.DmaLoadOp,
    nv.DmaGatherOp,
    nv.DmaStoreOp,
    nv.MmaOp,
    nv.VopOp,
    nv.InstOp,
}


def dialect_ops() -> list[type]:
    return [
        c
        for _, c in inspect.getmembers(nv, inspect.isclass)
        if issubclass(c, nv.Novella.Operation) and getattr(c, "OPERATION_NAME", None) and c.__module__ == nv.__name__
    ]


def tensor_ops() -> list[type]:
    return [c for c in dialect_ops() if c not in STRUCTURAL]


def test_every_tensor_op_has_an_entry():
    missing = [c.__name__ for c in tensor_ops() if c not in optable.OPS]
    assert not missing, f"ops without an entry in novella_mlir/optable.py: {missing}"


@pytest.mark.parametrize("cls", tensor_ops(), ids=lambda c: c.OPERATION_NAME)
def test_entry_is_complete(cls):
    d = optable.OPS[cls]
    assert callable(d.shape), f"{cls.__name__} has no shape rule"
    assert d.kernel is not None or d.no_kernel, f"{cls.__name__} has no kernel and no reason for it"
    if d.kernel is not None:
        assert callable(getattr(d.kernel, "tile", None)) and callable(getattr(d.kernel, "macro", None))
    lit = ROOT / d.lit
    assert lit.is_file(), f"{cls.__name__}: lit test {d.lit} does not exist"
    text = lit.read_text()
    assert re.search(rf'"{re.escape(cls.OPERATION_NAME)}"', text), f"{d.lit} has no case of {cls.OPERATION_NAME}"
    assert "?x" in text and "RUN:" in text, f"{d.lit} has no `?` case or no RUN line"


def test_lowerings_are_unique_and_callable():
    table = optable.torch_lowerings()
    assert all(name.startswith("torch.") and callable(fn) for name, fn in table.items())


def test_missing_shape_rule_is_a_clear_error():
    with pytest.raises(shapes.ShapeError, match="novella.nope.*has no shape rule.*optable.py"):
        shapes.infer("novella.nope", [], {}, None)


def test_unsupported_torch_op_names_the_table():
    import torch

    from novella_mlir import compile_torch

    class Digamma(torch.nn.Module):
        def forward(self, x):
            return torch.digamma(x)

    with pytest.raises(UnsupportedOpError, match="aten.digamma.*optable.py"):
        compile_torch(Digamma(), torch.randn(1, 4, 8), min_len=1, max_len=16)
