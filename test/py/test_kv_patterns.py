"""The KV-cache append is recognized in the graph whichever way a decoder writes it (issue 9).

A hand-written one-layer attention decoder (no transformers class) grows its cache by one position
with `cat(past, k)`, or pads it and writes position P = past length with `index_copy`,
`slice_scatter`, `select_scatter`, `k_cache[:, :, arange(P, P + 1)] = k` (`index_put`) or `k_cache[:, :, P:P + 1] = k`
(a slice, a copy into it and a `slice_scatter` after functionalization). Each must compile to the same program as
`cat` (one in-place append into the paged cache) and, unpaged, equal PyTorch eager at several
past lengths."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.export import Dim

from novella_mlir import compile_torch

PATTERNS = ("cat", "index_copy", "slice_scatter", "index_put", "setitem", "select_scatter")
MAX_PAST = 40


class TinyDecoder(torch.nn.Module):
    """x [1, 1, 32], k_past / v_past [1, 4, P, 8] -> (attention output, k, v of P + 1 positions)."""

    def __init__(self, write: str):
        super().__init__()
        self.write = write
        self.q, self.k, self.v = (torch.nn.Linear(32, 32) for _ in range(3))

    def _grow(self, past, new):
        p = past.shape[2]
        if self.write == "cat":
            return torch.cat([past, new], 2)
        buf = F.pad(past, (0, 0, 0, 1))
        if self.write == "index_copy":
            return buf.index_copy(2, torch.arange(p, p + 1), new)
        if self.write == "slice_scatter":
            return torch.slice_scatter(buf, new, dim=2, start=p, end=p + 1)
        if self.write == "select_scatter":
            return torch.select_scatter(buf, new[:, :, 0], dim=2, index=p)
        if self.write == "setitem":
            buf[:, :, p : p + 1] = new
            return buf
        buf[:, :, torch.arange(p, p + 1)] = new
        return buf

    def forward(self, x, k_past, v_past):
        heads = [f(x).view(1, 1, 4, 8).transpose(1, 2) for f in (self.q, self.k, self.v)]
        k, v = self._grow(k_past, heads[1]), self._grow(v_past, heads[2])
        a = torch.softmax(heads[0] @ k.transpose(2, 3) / 8**0.5, -1) @ v
        return a.transpose(1, 2).reshape(1, 1, 32), k, v


def _compile(write: str, paged: bool):
    torch.manual_seed(0)
    m = TinyDecoder(write).eval()
    past = Dim("past", min=1, max=MAX_PAST)
    opts = {"novella-kv-cache": {"page-size": 16}} if paged else {}
    args = (torch.randn(1, 1, 32), torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8))
    return m, compile_torch(m, *args, dynamic_shapes=(None, {2: past}, {2: past}), pass_options=opts, cache=False)


def _program(art) -> str:
    return json.dumps([[asdict(m) for m in art.macros], [asdict(t) for t in art.tiles]], sort_keys=True)


@pytest.fixture(scope="module")
def cat_program():
    return _program(_compile("cat", paged=True)[1].artifact)


@pytest.mark.parametrize("write", PATTERNS[1:])
def test_scatter_writes_compile_to_the_paged_append(write, cat_program):
    _, cm = _compile(write, paged=True)
    assert cm.artifact.kv["outputs"] == [1, 2] and cm.artifact.kv["inputs"] == [[1, 0], [2, 1]]
    assert _program(cm.artifact) == cat_program  # the same in-place append, the padded buffer dropped
    assert not any(name.startswith("pad") for name in cm.artifact.weights)


@pytest.mark.parametrize("write", PATTERNS)
def test_unpaged_matches_eager(write):
    m, cm = _compile(write, paged=False)
    g = torch.Generator().manual_seed(1)
    for p in (1, 7, 16, 17, MAX_PAST):
        args = (
            torch.randn(1, 1, 32, generator=g),
            torch.randn(1, 4, p, 8, generator=g),
            torch.randn(1, 4, p, 8, generator=g),
        )
        with torch.no_grad():
            want = m(*args)
        got = cm(*args)
        for w, o in zip(want, got):
            np.testing.assert_allclose(np.asarray(o), w.numpy(), atol=1e-4, rtol=1e-4, err_msg=f"{write} past={p}")


class _WrongPosition(TinyDecoder):
    def _grow(self, past, new):
        return torch.slice_scatter(F.pad(past, (0, 0, 0, 1)), new, dim=2, start=0, end=1)


def test_a_scatter_at_a_fixed_position_is_an_insert_not_an_append():
    """`slice_scatter(pad(past), new, start=0, end=1)` writes position 0, not the cache's next position:
    not a KV-cache append (refused as one before), a static insert of the generic path, checked against eager."""
    past = Dim("past", min=1, max=MAX_PAST)
    model = _WrongPosition("x").eval()
    args = (torch.randn(1, 1, 32), torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8))
    npu = compile_torch(model, *args, dynamic_shapes=(None, {2: past}, {2: past}), cache=False)
    for p in (1, 2, 17, MAX_PAST):
        a = (torch.randn(1, 1, 32), torch.randn(1, 4, p, 8), torch.randn(1, 4, p, 8))
        with torch.no_grad():
            want = model(*a)
        for got, w in zip(npu(*a), want):
            torch.testing.assert_close(torch.as_tensor(got), w, rtol=1e-5, atol=1e-5)


class _ReadsAtP(torch.nn.Module):
    def forward(self, x, k_past, v_past):
        p = k_past.shape[2]
        return x * 2, k_past[:, :, p - 1 : p] * 2, v_past


def test_a_slice_read_at_a_symbolic_start_is_a_copy():
    """`k_past[:, :, p - 1 : p]` read (not written): a slice whose start the JIT evaluates from `past`."""
    past = Dim("past", min=2, max=MAX_PAST)
    model = _ReadsAtP()
    args = (torch.randn(1, 1, 32), torch.randn(1, 4, 3, 8), torch.randn(1, 4, 3, 8))
    npu = compile_torch(model, *args, dynamic_shapes=(None, {2: past}, {2: past}), cache=False)
    for p in (2, 3, 17, MAX_PAST):
        a = (torch.randn(1, 1, 32), torch.randn(1, 4, p, 8), torch.randn(1, 4, p, 8))
        for got, want in zip(npu(*a), model(*a)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m, p=p: f"past={p}: {m}")


_TILED = """module attributes {novella.symbols = {s0 = ["past", 1, 1023]}} {
  func.func @decode(%q: tensor<1x4x1x16xf32>, %past: tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, %new: tensor<1x2x1x16xf32>) -> (tensor<1x4x1x?xf32, affine_map<()[s0] -> (1, 4, 1, s0 + 1)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) {
    %k = "novella.kv_append"(%past, %new) {dim = 2 : i64} : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0, 16)>>, tensor<1x2x1x16xf32>) -> tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
    %g = "novella.reshape"(%k) : (tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>) -> tensor<1x1x2x?x16xf32, affine_map<()[s0] -> (1, 1, 2, s0 + 1, 16)>>
    %b = "novella.broadcast"(%g) : (tensor<1x1x2x?x16xf32, affine_map<()[s0] -> (1, 1, 2, s0 + 1, 16)>>) -> tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>
    %r = "novella.reshape"(%b) : (tensor<1x2x2x?x16xf32, affine_map<()[s0] -> (1, 2, 2, s0 + 1, 16)>>) -> tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>
    %s = "novella.matmul"(%q, %r) {transpose_rhs = true} : (tensor<1x4x1x16xf32>, tensor<1x4x?x16xf32, affine_map<()[s0] -> (1, 4, s0 + 1, 16)>>) -> tensor<1x4x1x?xf32, affine_map<()[s0] -> (1, 4, 1, s0 + 1)>>
    return %s, %k : tensor<1x4x1x?xf32, affine_map<()[s0] -> (1, 4, 1, s0 + 1)>>, tensor<1x2x?x16xf32, affine_map<()[s0] -> (1, 2, s0 + 1, 16)>>
  }
}
"""


def test_a_head_repeat_that_tiles_is_refused(tmp_path, capsys):
    """[h0, h1, h0, h1] (repeat the whole head block) is no GQA repeat (head = b floordiv g would read the
    wrong head): the pass refuses it naming what it saw, instead of reading the cache wrongly."""
    from novella_mlir.tools import novella_opt

    path = tmp_path / "tiled.mlir"
    path.write_text(_TILED)
    assert novella_opt.main([str(path), "--novella-kv-cache=page-size=16"]) != 0
    err = capsys.readouterr().err
    assert "reads the KV cache ['1', '2', 's0 + 1', '16'] as ['1', '4', 's0 + 1', '16']" in err, err
    assert "not a repeat of each head in place" in err
