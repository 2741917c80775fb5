"""`--novella-resident` with the prefill / encoder attention (`novella.flash_attention`): the q, k and v
projections' results read by the attention where they are kept (its heads-minor operands are strided views
of the regions), and its output written into a region that o_proj's MATMULs read; against eager at lengths
1, odd, a partial last tile and the maximum, hazard checking on, unmasked, causal and with an additive mask.
Compiled for T in [1, 40]: the shape bucket plans its tiles for T = 64 (q, k, v and the output, 6144
elements each there, fit in half the scratchpad)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from novella_mlir import compile_torch
from simulator.config import load_config

D, HEADS = 96, 3


class Attention(torch.nn.Module):
    def __init__(self, mode: str):
        super().__init__()
        self.mode = mode
        self.q, self.k, self.v, self.o = (torch.nn.Linear(D, D) for _ in range(4))

    def forward(self, x):
        b, t, _ = x.shape
        heads = lambda y: y.view(b, t, HEADS, D // HEADS).transpose(1, 2)  # noqa: E731
        mask = None
        if self.mode == "masked":  # a shifted diagonal: an additive mask operand, not causal
            pos = torch.arange(t)
            mask = pos[None, :] <= pos[:, None] + 2
        a = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), attn_mask=mask,
                                           is_causal=self.mode == "causal")  # fmt: skip
        return self.o(a.transpose(1, 2).reshape(b, t, D))


def _compile(model, resident: bool = True, config=None):
    return compile_torch(model, torch.randn(1, 8, D), dynamic_dim=1, min_len=1, max_len=40, config=config,
                         pass_options={"novella-resident": {"enable": int(resident)}}, cache=False)  # fmt: skip


def _line(npu, op: str) -> str:
    return next(line for line in npu.ir("novella-resident").splitlines() if f'"novella.{op}"' in line)


@pytest.fixture(scope="module", params=["plain", "causal", "masked"])
def compiled(request):
    torch.manual_seed(0)
    model = Attention(request.param).eval()
    return model, _compile(model)


def test_the_attention_reads_and_writes_its_tensors_on_chip(compiled):
    npu = compiled[1]
    assert all(f"{role} = " in _line(npu, "flash_attention") for role in ("x", "k", "v", "out"))
    ir = npu.ir("novella-schedule")
    end = ir.index('kernel = "novella.flash_attention"')
    flash = ir[ir.rindex('"novella.macro"', 0, end) : ir.index("\n", end)]
    loads = [line for line in flash.splitlines() if 'opcode = "LOAD"' in line]
    assert 'opcode = "STORE"' not in flash and all("tensor = 3 " in line for line in loads)  # the mask's only
    assert all(f"{b} = " in flash for b in ("rx", "rk", "rv", "rout"))


@pytest.mark.parametrize("t", [1, 7, 33, 40])
def test_matches_eager_with_hazards_checked(compiled, t):
    model, npu = compiled
    x = torch.randn(1, t, D, generator=torch.Generator().manual_seed(t))
    with torch.no_grad():
        torch.testing.assert_close(npu(x, check_hazards=True), model(x), rtol=1e-4, atol=1e-4)


def test_without_the_pass_the_tensors_round_trip_dram():
    torch.manual_seed(1)
    model = Attention("plain").eval()
    on, off = _compile(model), _compile(model, resident=False)
    x = torch.randn(1, 32, D, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(off(x), on(x), rtol=1e-5, atol=1e-5)
    moved = [r.last_run.stats.dma_bytes_loaded + r.last_run.stats.dma_bytes_stored for r in (off, on)]
    assert moved[0] - moved[1] == 8 * 32 * D * 4  # q, k, v and the output each stored and loaded once
    assert on.last_run.stats.cycles < off.last_run.stats.cycles


def test_only_the_query_kept_where_the_rest_does_not_fit():
    """The edge config (64 KiB): the cost model keeps only q (its attention alternates query blocks between
    two slots, which the scaling MUL from the region fills); eager at T = 1, 33 and 40."""
    torch.manual_seed(2)
    model = Attention("causal").eval()
    npu = _compile(model, config=load_config(Path(__file__).parents[2] / "simulator/configs/edge.toml"))
    line = _line(npu, "flash_attention")
    assert "x = " in line and "k = " not in line and "out = " not in line
    for t in (1, 33, 40):
        x = torch.randn(1, t, D, generator=torch.Generator().manual_seed(t))
        with torch.no_grad():
            torch.testing.assert_close(npu(x, check_hazards=True), model(x), rtol=1e-4, atol=1e-4)


def test_the_query_kept_beyond_the_share_where_every_op_under_it_is_priced():
    """A whisper-tiny layer over [33, 64] (default config): the norm's result (the projections' x) and q, 96 KiB
    each, take 75% of the scratchpad, past the 50% `share`: the linears under q's region are predicted to lose
    nothing and the attention prices reading q in place. Eager at T = 33, 47 and 64, hazard checking on."""
    sys.path.insert(0, str(Path(__file__).parents[2] / "bench"))
    import models

    body = models.WhisperBody().eval()
    body.layers = body.layers[:1]
    npu = compile_torch(body, torch.randn(1, 40, 384), dynamic_dim=1, min_len=33, max_len=64, cache=False)
    ir = npu.ir("novella-resident", at=[64])
    flash = next(line for line in ir.splitlines() if '"novella.flash_attention"' in line)
    q = int(re.search(r"novella.resident = \{[^}]*\bx = (\d+)", flash).group(1))
    assert q < load_config().spad_elems // 2 and "x_size = 24576" in flash  # the regions above q: over half
    for t in (33, 47, 64):
        x = torch.randn(1, t, 384, generator=torch.Generator().manual_seed(t))
        with torch.no_grad():
            torch.testing.assert_close(npu(x, check_hazards=True), body(x), rtol=1e-4, atol=2e-5)
