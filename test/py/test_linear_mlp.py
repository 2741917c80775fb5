"""The fused MLP (--novella-fuse `fuse-mlp`): linear -> act -> linear as one `novella.fused_mlp` whose hidden
rows stay in the scratchpad. Checked against eager at T = 1, odd, a partial last row tile and the maximum,
hazard checker on; the cost model's decision per program (short buckets fuse, the long program does not)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.kernels import linear_mlp, linear_mlp_split

MAX = 300
LENGTHS = (1, 7, 37, 64, 67, MAX)


class Mlp(torch.nn.Module):
    """`act(fc2(act1(fc1(x))))`, plus x with `residual`."""

    def __init__(self, d=64, h=256, act1="gelu", act=True, residual=False):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, h), torch.nn.Linear(h, d)
        self.act1 = torch.nn.GELU() if act1 == "gelu" else torch.nn.ReLU()
        self.act, self.residual = act, residual

    def forward(self, x):
        y = self.fc2(self.act1(self.fc1(x)))
        y = torch.relu(y) if self.act else y
        return x + y if self.residual else y


def _compile(model, fuse=1):
    opts = {"novella-fuse": {"fuse-mlp": fuse}}
    return compile_torch(model.eval(), torch.randn(1, 16, 64), min_len=1, max_len=MAX, pass_options=opts, cache=False)


def _check(model, npu, lengths=LENGTHS):
    for length in lengths:
        x = torch.randn(1, length, 64, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            ref = model(x)
        torch.testing.assert_close(npu(x), ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act1,act,residual", [("gelu", True, False), ("relu", False, True)])
def test_mlp_fuses_where_it_pays_and_matches_eager(act1, act, residual):
    torch.manual_seed(0)
    model = Mlp(act1=act1, act=act, residual=residual)
    npu = _compile(model)
    short = npu.ir("novella-fuse", at=[1])
    assert '"novella.fused_mlp"' in short and '"novella.linear"' not in short
    assert f'act1 = "{act1}"' in short
    assert '"novella.fused_mlp"' not in npu.ir("novella-fuse", at=[MAX])  # weights once per row block: no
    _check(model, npu)


def test_fuse_mlp_off_keeps_the_linears():
    npu = _compile(Mlp(), fuse=0)
    assert '"novella.fused_mlp"' not in npu.ir("novella-fuse", at=[1])


def test_several_row_blocks(monkeypatch):
    """Row blocks of 16 (forced: the candidates and the gain): T = 37 has a partial third block, 64 four."""
    kernel = linear_mlp.FusedMlp
    every = kernel.candidates
    monkeypatch.setattr(kernel, "candidates", lambda self, *a: [c for c in every(self, *a) if c[0] == 16])
    monkeypatch.setattr(linear_mlp_split, "candidates", lambda *a: [])
    monkeypatch.setattr(linear_mlp, "_gain", lambda target, first, second: (1.0, 16))
    torch.manual_seed(1)
    model = Mlp(residual=True)
    npu = _compile(model)
    tiled = npu.ir("novella-tile", at=[37])
    assert "tm = 16" in tiled and '"novella.fused_mlp"' in tiled and "pn = " not in tiled
    _check(model, npu, (1, 16, 17, 37, 64))


@pytest.mark.parametrize("residual", [False, True])
def test_split_form_several_row_blocks(monkeypatch, residual):
    """The split form (output summed in the scratchpad, pieces of 32 columns; forced: the candidates and the
    gain) with row blocks of 16: T = 37 has a partial third block, 64 four."""
    every = linear_mlp_split.candidates
    monkeypatch.setattr(linear_mlp.FusedMlp, "candidates", lambda self, *a: [])
    monkeypatch.setattr(linear_mlp_split, "candidates", lambda *a: [c for c in every(*a) if c[0] == 16 and c[2] == 32])
    monkeypatch.setattr(linear_mlp, "_gain", lambda target, first, second: (1.0, 16))
    torch.manual_seed(3)
    model = Mlp(act=not residual, residual=residual)
    npu = _compile(model)
    tiled = npu.ir("novella-tile", at=[37])
    assert '"novella.fused_mlp"' in tiled and "pn = 32" in tiled and "tm = 16" in tiled
    _check(model, npu, (1, 16, 17, 37, 64))


@pytest.mark.parametrize("act,residual", [(True, False), (False, True)])
def test_whisper_sized_mlp_on_the_default_config(act, residual):
    """384 -> 1536 -> 384 on the default config: at T = 64 the output block [64, 384] is more than the
    accumulator, so the cost model takes the split form (summed in the scratchpad) for the [1, 64] bucket;
    the bucket above keeps the two linears."""
    torch.manual_seed(4)
    model = Mlp(d=384, h=1536, act=act, residual=residual)
    npu = compile_torch(model.eval(), torch.randn(1, 16, 384), min_len=1, max_len=128, cache=False)
    tiled = npu.ir("novella-tile", at=[64])
    assert '"novella.fused_mlp"' in tiled and "pn = " in tiled and "tm = 64" in tiled
    assert '"novella.fused_mlp"' not in npu.ir("novella-tile", at=[128])
    for length in (1, 33, 64):
        x = torch.randn(1, length, 384, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            torch.testing.assert_close(npu(x), model(x), rtol=1e-4, atol=1e-4)


def test_whisper_sized_mlp_on_the_large_config():
    """384 -> 1536 -> 384 on the large config fuses for T <= 64 (hidden chunks of 32, one row block)."""
    from simulator import load_config

    torch.manual_seed(2)
    model = Mlp(d=384, h=1536)
    config = load_config(Path(__file__).resolve().parents[2] / "simulator" / "configs" / "large.toml")
    npu = compile_torch(model.eval(), torch.randn(1, 16, 384), min_len=1, max_len=128, config=config, cache=False)
    assert '"novella.fused_mlp"' in npu.ir("novella-fuse", at=[64])
    for length in (1, 33, 64):
        x = torch.randn(1, length, 384, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            torch.testing.assert_close(npu(x), model(x), rtol=1e-4, atol=1e-4)


class PreNormMlp(Mlp):
    """`Mlp` on `layer_norm(x)`, the residual x: the norm's result is kept in the scratchpad
    (`--novella-resident`) and the fused MLP's MATMULs read it there."""

    def __init__(self, act, residual):
        super().__init__(act=act, residual=residual)
        self.norm = torch.nn.LayerNorm(64)

    def forward(self, x):
        y = self.fc2(self.act1(self.fc1(self.norm(x))))
        y = torch.relu(y) if self.act else y
        return x + y if self.residual else y


@pytest.mark.parametrize(
    "form,act,residual,tm",
    [("split", False, True, 16), ("split", False, True, 64), ("split", True, True, 16), ("split", True, False, 16),
     ("acc", False, True, 16)],
)  # fmt: skip
def test_mlp_reads_a_resident_norm_in_place(monkeypatch, form, act, residual, tm):
    """Row blocks of tm (forced) over x kept on chip: no LOAD of x's rows, the MATMULs read the region `rx`;
    the split form without an act after the sum, where x's rows are one block (tm at least the rows its
    program is planned for), starts its sums from the residual and has no buffer `a`. Eager at T = 1, a partial
    block, several blocks, hazards checked."""
    if form == "split":
        every = linear_mlp_split.candidates
        monkeypatch.setattr(linear_mlp.FusedMlp, "candidates", lambda self, *a: [])
        monkeypatch.setattr(linear_mlp_split, "candidates", lambda *a: [c for c in every(*a) if c[:3:2] == (tm, 32)])
    else:
        every = linear_mlp.FusedMlp.candidates
        monkeypatch.setattr(
            linear_mlp.FusedMlp, "candidates", lambda self, *a: [c for c in every(self, *a) if c[0] == tm]
        )
        monkeypatch.setattr(linear_mlp_split, "candidates", lambda *a: [])
    # fused as for one row block (x, which the fused op reads from DRAM unless kept, is no longer live there
    # once the first linear has run), then tiled in blocks of tm
    monkeypatch.setattr(linear_mlp, "_gain", lambda target, first, second: (1.0, 64))
    torch.manual_seed(5)
    model = PreNormMlp(act=act, residual=residual).eval()
    npu = compile_torch(model, torch.randn(1, 16, 64), min_len=1, max_len=40, cache=False)
    forms = set()
    for at in (7, 37):
        mlp = next(line for line in npu.ir("novella-tile", at=[at]).splitlines() if '"novella.fused_mlp"' in line)
        assert "novella.resident = {x = " in mlp and f"tm = {tm}" in mlp and ("pn = 32" in mlp) == (form == "split")
        macros = npu.ir("novella-schedule", at=[at]).split('"novella.macro"')[1:]  # each its region, then its fields
        macro = next(m for m in macros if 'kernel = "novella.fused_mlp"' in m)
        assert "rx = " in macro and "tensor = 0" not in macro  # no LOAD of x's rows
        region_rows = int(re.search(r"x_size = (\d+)", mlp).group(1)) // 64  # its program's planned rows
        sums = residual and not act and tm >= region_rows
        forms.add(sums)
        assert (re.search(r"[{ ]a = \[", macro) is not None) == (form == "split" and residual and not sums)
    assert (True in forms) == (residual and not act and tm >= 64), "the residual-first sums form ran where due"
    for length in (1, 7, 16, 32, 37, 40):
        x = torch.randn(1, length, 64, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            torch.testing.assert_close(npu(x, check_hazards=True), model(x), rtol=1e-4, atol=1e-4)
