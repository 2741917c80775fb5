"""The JIT's words against an independent oracle that reads only the IR after --novella-schedule.

`novella_mlir.testing.oracle` loops over every grid point of every macro and
evaluates the IR's affine maps and guards with MLIR (no MacroMeta, no
TileMeta, no postfix programs), so this checks the artifact extraction and
the vectorized JIT against what the compiler decided, bit for bit. A
mismatch names the word, the tile, the grid point and each differing field.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from novella_mlir import compile_torch
from novella_mlir.testing import oracle
from simulator import isa

ROOT = Path(__file__).resolve().parents[2]
import models  # noqa: E402

# lower bound, 63/64/65 around the row tile, a partial tile (100), the attention kv tile (512/513), the max
GOLDEN_PROGRAMS = {
    "mlp": (2048, (1, 2, 63, 64, 65, 100, 2047, 2048)),
    "mlp384": (1500, (1, 65, 100, 1500)),
    "layer": (1500, (2, 3, 64, 65, 100, 511, 512, 513, 1500)),
}


@pytest.mark.parametrize("name", sorted(GOLDEN_PROGRAMS))
def test_jit_matches_ir_oracle(name):
    max_len, lengths = GOLDEN_PROGRAMS[name]
    spec, _, npu = models.compile_model(name, max_len)
    for t in lengths:
        sym = spec.symbol(t)
        text = npu.ir("novella-schedule", at=[sym])  # the IR of the program (shape bucket) that runs T
        oracle.compare(npu.jit.instantiate([sym]).words, oracle.instantiate(text, [sym]), what=f"JIT at T={t}")


class ConvStem(nn.Module):
    """Padding (negative row_start), stride 2 (row_step 2) and a floordiv length."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(80, 48, 3, padding=1)
        self.conv2 = nn.Conv1d(48, 32, 3, stride=2, padding=1)

    def forward(self, x):
        return nn.functional.gelu(self.conv2(nn.functional.gelu(self.conv1(x)))).permute(0, 2, 1)


class Softmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1)


class LayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(384)

    def forward(self, x):
        return self.ln(x)


KERNELS = {
    # name: (module, example(T), dynamic dim, (lo, hi), lengths)
    "conv_stem": (ConvStem, lambda t: torch.randn(1, 80, t), 2, (2, 300), (2, 3, 64, 65, 129, 299, 300)),
    "long_softmax": (Softmax, lambda t: torch.randn(3, t), 1, (1, 5000), (1, 7, 4096, 4097, 5000)),
    "layer_norm": (LayerNorm, lambda t: torch.randn(1, t, 384), 1, (1, 300), (1, 33, 300)),
}


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_jit_matches_ir_oracle_other_kernels(name):
    cls, example, dim, (lo, hi), lengths = KERNELS[name]
    torch.manual_seed(0)
    npu = compile_torch(cls().eval(), example(16), dynamic_dim=dim, min_len=lo, max_len=hi)
    text = npu.ir("novella-schedule")
    for t in lengths:
        oracle.compare(npu.jit.instantiate([t]).words, oracle.instantiate(text, [t]), what=f"JIT at T={t}")


def _set_field(word, name, value):
    inst = isa.decode(word)
    return isa.encode(inst.opcode, **dict(inst.fields, **{name: value}))


def test_mismatch_names_field_tile_and_grid_point():
    """At T = 300, in the generic program (its linears; the short buckets run a fused MLP)."""
    spec, _, npu = models.compile_model("mlp", 2048)
    words = npu.jit.instantiate([300]).words.copy()
    truth = oracle.instantiate(npu.ir("novella-schedule", at=[300]), [300])
    last_mm = max(i for i, w in enumerate(words) if isa.decode(w).opcode == isa.Opcode.MATMUL)
    tm = int(re.findall(r"tm = (\d+) : i64", npu.ir("novella-tile"))[-1])
    rows = 300 % tm or tm
    assert isa.decode(words[last_mm])["m"] == rows, f"the last row tile of T=300 has {rows} rows"
    words[last_mm] = _set_field(words[last_mm], "m", rows + 1)
    with pytest.raises(
        oracle.OracleMismatch,
        match=rf"tile linear_\d+ \(novella.linear\) grid point d=\(.*\).*MATMUL: m: JIT gives {rows + 1}, the IR {rows}",
    ):
        oracle.compare(words, truth)
    words = npu.jit.instantiate([300]).words.copy()
    first_mm = next(i for i, w in enumerate(words) if isa.decode(w).opcode == isa.Opcode.MATMUL)
    words[first_mm] = _set_field(words[first_mm], "pop_prev", 0)
    with pytest.raises(oracle.OracleMismatch, match=r"grid point d=\(0, 0, 0\).*pop_prev: JIT gives 0, the IR 1"):
        oracle.compare(words, truth)
    n = len(truth.words)
    with pytest.raises(oracle.OracleMismatch, match=rf"JIT has {n - 1} words, the IR gives {n}"):
        oracle.compare(npu.jit.instantiate([300]).words[:-1], truth)


def test_oracle_reads_only_the_ir():
    """The oracle must not share code with what it checks (the JIT, the artifact, the postfix evaluator)."""
    tree = ast.parse((ROOT / "novella_mlir" / "testing" / "oracle.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and ("runtime" in m or "artifact" in m or "symbolic" in m)}, imported
