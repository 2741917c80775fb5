"""The transformer ops (layer_norm, conv1d, transposes/views, slice, broadcasting
elementwise) compiled once with a symbolic length and run on the simulator
against PyTorch, at lengths around the tile size the compiler chose."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from novella_mlir import compile_torch

MAX_LEN = 700


class LayerNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(384)
        with torch.no_grad():
            self.ln.weight.normal_()
            self.ln.bias.normal_()

    def forward(self, x):
        return self.ln(x * 3.0 + 1.0)


class ConvStride1(nn.Module):
    """NCW in, NCW out: both transposes (the input's and the output's) run."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(80, 64, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


class ConvStem(nn.Module):
    """Whisper's stem: gelu(conv s1) -> gelu(conv s2) -> permute; the output length is a floordiv."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv1d(80, 48, 3, padding=1)
        self.conv2 = nn.Conv1d(48, 32, 3, stride=2, padding=1)

    def forward(self, x):
        h = nn.functional.gelu(self.conv1(x))
        return nn.functional.gelu(self.conv2(h)).permute(0, 2, 1)


class SplitHeads(nn.Module):
    def forward(self, x):
        return (x * 0.5).view(1, x.shape[1], 6, 64).transpose(1, 2).contiguous()


class MergeHeads(nn.Module):
    def forward(self, x):
        return x.transpose(1, 2).reshape(1, x.shape[2], -1) + 1.0


class PositionalAdd(nn.Module):
    """x + table[:T] (slice to the dynamic length), then row / scalar broadcasts on both sides."""

    def __init__(self):
        super().__init__()
        self.table = nn.Parameter(torch.randn(1000, 32))
        self.row = nn.Parameter(torch.randn(32))
        self.one = nn.Parameter(torch.randn(1))

    def forward(self, x):
        n = x.shape[1]
        torch._check(n <= 1000)
        h = x + self.table[:n]
        h = (self.row - h) * self.row
        return (self.one - h) / (self.one + 3.0)


class ColumnBroadcast(nn.Module):
    """[1, T, 1] against [1, T, C] on both sides."""

    def forward(self, x, y):
        return (y - x) * y + x / (y * y + 1.0)


def _inputs(name, t):
    g = torch.Generator().manual_seed(t)
    if name in ("conv_stride1", "conv_stem"):
        return (torch.randn(1, 80, t, generator=g),)
    if name == "merge_heads":
        return (torch.randn(1, 6, t, 64, generator=g),)
    if name == "positional_add":
        return (torch.randn(1, t, 32, generator=g),)
    if name == "column_broadcast":
        return torch.randn(1, t, 16, generator=g), torch.randn(1, t, 1, generator=g)
    return (torch.randn(1, t, 384, generator=g),)


CASES = {
    "layer_norm": (LayerNorm, 1, "novella.layer_norm"),
    "conv_stride1": (ConvStride1, 2, "novella.conv1d"),
    "conv_stem": (ConvStem, 2, "novella.conv1d"),
    "split_heads": (SplitHeads, 1, "novella.transpose"),
    "merge_heads": (MergeHeads, 2, "novella.transpose"),
    "positional_add": (PositionalAdd, 1, "novella.slice"),
    "column_broadcast": (ColumnBroadcast, 1, "novella.mul"),
}


@pytest.fixture(scope="module")
def compiled():
    cache = {}

    def get(name):
        if name not in cache:
            cls, dim, _ = CASES[name]
            torch.manual_seed(0)
            model = cls().eval()
            lo = 2 if name == "conv_stem" else 1
            # column_broadcast probes the typed ops' kernels: --novella-fuse-elementwise would merge its chain
            opts = {"novella-fuse-elementwise": {"fuse-elementwise": 0}} if name == "column_broadcast" else None
            cache[name] = model, compile_torch(model, *_inputs(name, 37), dynamic_dim=dim, min_len=lo, max_len=MAX_LEN,
                                               pass_options=opts)  # fmt: skip
        return cache[name]

    return get


def _row_tile(npu, op_name: str) -> int:
    """The row tile the compiler chose for the first `op_name` (tm, or tc for a last-two-dims swap)."""
    for line in npu.ir("novella-tile").splitlines():
        if f'"{op_name}"' in line:
            m = re.search(r"novella.tiles = \{(?:tc = (\d+), )?[^}]*?tm = (\d+)", line) or re.search(
                r"novella.tiles = \{tc = (\d+)", line
            )
            if m:
                return int(m.group(m.lastindex))
    raise AssertionError(f"no tiled {op_name} in the IR")


@pytest.mark.parametrize("name", list(CASES))
def test_op_matches_pytorch(compiled, name):
    model, npu = compiled(name)
    tm = _row_tile(npu, CASES[name][2])
    lo = 2 if name == "conv_stem" else 1
    stride = 2 if name == "conv_stem" else 1
    lengths = sorted({lo, stride * tm - 1, stride * tm, stride * tm + 1, 2 * stride * tm + 3, MAX_LEN})
    lengths = [t for t in lengths if t <= MAX_LEN]
    assert stride * tm + 1 <= MAX_LEN, f"tile {tm} leaves no partial tile below {MAX_LEN}"
    for t in lengths:
        args = _inputs(name, t)
        y = npu(*args)
        with torch.no_grad():
            ref = model(*args)
        assert y.shape == ref.shape, (name, t)
        err = (y - ref).abs().max().item()
        assert torch.allclose(y, ref, rtol=1e-4, atol=1e-4), f"{name} at T={t}: max error {err}"


def test_conv_stem_legalizes_to_one_transpose(compiled):
    _, npu = compiled("conv_stem")
    legal = npu.ir("novella-legalize")
    assert legal.count('"novella.transpose"') == 1
    assert legal.count('layout = "nwc"') == 2 and legal.count('act = "gelu"') == 2
    assert "novella.gelu" not in legal
    assert "(s0 - 1) floordiv 2 + 1" in npu.ir("novella-shape-infer")


def test_odd_length_is_legal(compiled):
    """T = 2 and odd T compile into the same program family (no T = 2 * _T specialization)."""
    model, npu = compiled("conv_stem")
    assert [s[1:] for s in npu.artifact.symbols] == [[2, MAX_LEN]], "one symbol, the input length itself"
    for t in (2, 3, 699):
        (x,) = _inputs("conv_stem", t)
        y = npu(x)
        assert y.shape == (1, (t - 1) // 2 + 1, 32)
        assert list(npu.last_run.symbols.values()) == [t]
        with torch.no_grad():
            torch.testing.assert_close(y, model(x), rtol=1e-4, atol=1e-4)
