"""`--novella-resident` end to end: linears that read a linear's result (as their input and as their
residual) from the scratchpad, against eager at lengths 1, odd, a partial last row tile and the maximum,
hazard checking on; and the same model without the pass, those tensors through DRAM. Compiled for T in
[1, 72]: the shape bucket [1, 64] plans its tiles for T = 64 and keeps the tensors (sized there); the
program of [65, 72], planned for the nominal length, does not."""

from __future__ import annotations

import re

import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.dialects.fields import RESIDENT

MAX_LEN = 72
BUCKET = "novella-resident @ T in [1, 64]"
OPTIONS = {"novella-fuse": {"fuse-mlp": 0}}  # the pair stays two linears (fused_mlp keeps its hidden on chip itself)


class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(64, 96), torch.nn.Linear(96, 96), torch.nn.Linear(96, 64)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.c(self.b(h) + h)  # h: b's input and its residual; b's result: c's input


def _compile(model, resident: bool):
    options = {**OPTIONS, "novella-resident": {"enable": int(resident)}}
    return compile_torch(model, torch.randn(1, 8, 64), dynamic_dim=1, min_len=1, max_len=MAX_LEN,
                         pass_options=options, cache=False)  # fmt: skip


@pytest.fixture(scope="module")
def chain():
    torch.manual_seed(0)
    model = Chain().eval()
    return model, _compile(model, True)


def test_the_pass_keeps_both_hidden_tensors_on_chip(chain):
    ir = chain[1].ir(BUCKET)
    a, b, c = [line for line in ir.splitlines() if '"novella.linear"' in line or '"novella.fused_linear"' in line]
    assert "novella.resident = {out = " in a and "res = " not in a and "x = " not in a
    assert all(f"{role} = " in b for role in ("out", "res", "x"))
    assert "novella.resident = {x = " in c and "out = " not in c
    macros = chain[1].ir(BUCKET.replace("resident", "schedule"))
    # b's residual tiles are COPYs from its region (its deferred epilogue's and its last block's); a and b
    # write their results' regions with their epilogues' last VECs, no COPY
    assert macros.count('fn = "COPY"') == 2 and "rout = " in macros and "rres = " in macros


@pytest.mark.parametrize("t", [1, 7, 17, 64, 72])
def test_matches_eager_with_hazards_checked(chain, t):
    model, npu = chain
    x = torch.randn(1, t, 64, generator=torch.Generator().manual_seed(t))
    out = npu(x, check_hazards=True)
    torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-4)


def test_without_the_pass_the_tensors_round_trip_dram(chain):
    model, npu = chain
    off = _compile(model, False)
    assert "novella.resident" not in off.ir(BUCKET)
    x = torch.randn(1, 32, 64, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(off(x), npu(x), rtol=1e-5, atol=1e-5)
    moved = [r.last_run.stats.dma_bytes_loaded + r.last_run.stats.dma_bytes_stored for r in (off, npu)]
    assert moved[0] - moved[1] == 5 * 32 * 96 * 4  # h stored and loaded twice, b's result stored and loaded


class Norms(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.norm, self.b = torch.nn.Linear(64, 80), torch.nn.LayerNorm(80), torch.nn.Linear(80, 64)

    def forward(self, x):
        return self.b(self.norm(self.a(x)))


def test_a_layer_norm_reads_and_writes_on_chip():
    """linear -> layer_norm -> linear, the norm fused into neither: both tensors stay on chip, eager at T = 1,
    23, 32 and 40 with hazards checked (its bucket: [1, 32])."""
    torch.manual_seed(1)
    model = Norms().eval()
    options = {"novella-fuse": {"fuse-prenorm": 0}, "novella-legalize": {"fuse-norm": 0}}
    npu = compile_torch(model, torch.randn(1, 8, 64), dynamic_dim=1, min_len=1, max_len=40, pass_options=options,
                        cache=False)  # fmt: skip
    norm = next(
        line for line in npu.ir("novella-resident @ T in [1, 32]").splitlines() if '"novella.layer_norm"' in line
    )
    assert "out = " in norm and "x = " in norm
    for t in (1, 23, 32, 40):
        x = torch.randn(1, t, 64, generator=torch.Generator().manual_seed(t))
        torch.testing.assert_close(npu(x, check_hazards=True), model(x), rtol=1e-4, atol=1e-4)


class Ffn(torch.nn.Module):
    """A BERT layer's feed-forward half: the norms' results and the up projection's are kept."""

    def __init__(self):
        super().__init__()
        self.n0, self.n1, self.n2 = (torch.nn.LayerNorm(64) for _ in range(3))
        self.p, self.up, self.down = torch.nn.Linear(64, 64), torch.nn.Linear(64, 128), torch.nn.Linear(128, 64)

    def forward(self, x):
        n = self.n0(x)
        a = self.n1(self.p(n) + n)
        return self.n2(self.down(torch.nn.functional.gelu(self.up(a))) + a)


def test_no_op_tiles_over_a_region_at_the_scratchpad_bottom():
    """Planned for T = 256, a (16384 elements, below n's region) leaves the up projection's result (32768)
    the offset 0 only: a budget of 0 elements, in which nothing fits (it was read as the whole scratchpad, and
    the up projection's buffers overwrote its own region: stock BERT's WAW hazard at T = 67). Every op's own
    buffers lie below its budget; eager at T = 65 and 128 with hazards checked."""
    torch.manual_seed(2)
    model = Ffn().eval()
    npu = compile_torch(model, torch.randn(1, 80, 64), dynamic_dim=1, min_len=65, max_len=128, cache=False)
    checked = 0
    for line in npu.ir("novella-tile").splitlines():
        budget = re.search(r"novella.sram_budget = \{[^}]*spad = (\d+)", line)
        for name, off, size, slots in re.findall(r'(\w+) = \["spad", (\d+), (\d+)(?:, (\d+))?\]', line):
            if budget and name not in RESIDENT.values():
                assert int(off) + int(size) * int(slots or 1) <= int(budget.group(1)), line
                checked += 1
    assert checked > 20
    for t in (65, 128):
        x = torch.randn(1, t, 64, generator=torch.Generator().manual_seed(t))
        torch.testing.assert_close(npu(x, check_hazards=True), model(x), rtol=1e-4, atol=1e-4)
