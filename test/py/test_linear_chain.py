"""A linear's LOADs are one DMA chain (docs/isa.md, LOAD `chain`; `linear._chain_loads`): every LOAD of
the macro continues the load queue's chain, results match eager at M = 1, odd, a partial row tile and
the maximum (hazard checker on), and a decode-size linear (M = 1: its weights' DRAM time) costs its
weights plus one latency and a short tail, not a latency per LOAD."""

from __future__ import annotations

import pytest
import torch

from novella_mlir import compile_torch
from simulator import isa


class Rows(torch.nn.Module):
    """`fc(x)` on a static [M, K] input, beside a length-symbolic side output (a batched decode step's
    linears: M = B static, the symbol elsewhere)."""

    def __init__(self, k: int, n: int, bias: bool):
        super().__init__()
        self.fc = torch.nn.Linear(k, n, bias=bias)

    def forward(self, x, y):
        return self.fc(x), y + 1.0


def _run(k: int, n: int, m: int, bias: bool = True):
    torch.manual_seed(0)
    model = Rows(k, n, bias).eval()
    x, y = torch.randn(m, k), torch.randn(1, 8)
    npu = compile_torch(model, x, y, dynamic_shapes=({}, {1: torch.export.Dim("T", min=1, max=64)}), cache=False)
    (out, _), run = npu.run(x, y)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x, y)[0], rtol=1e-5, atol=1e-5)
    return run


def _linear_loads(run):
    start, end = next((s, e) for name, s, e in run.program.spans if "linear" in name)
    words = run.program.words[start:end]
    loads = words[isa.opcodes(words) == isa.Opcode.LOAD]
    return isa.field(isa.Opcode.LOAD, "chain").get(loads)


@pytest.mark.parametrize("m", [1, 7, 17, 64])
def test_every_load_of_a_linear_is_chained(m):
    chain = _linear_loads(_run(128, 96, m))
    assert len(chain) >= 3 and chain.tolist() == [1] * len(chain)


def test_a_decode_linear_costs_its_weights_and_one_latency():
    """128 -> 512 at M = 1: 256 KiB of weights, 16,384 cycles of DRAM data. Each LOAD exposing its latency
    (x tile, bias, weight tiles), the program took 18,952 cycles (1.16x); chained, 17,368 (1.06x, the side op
    included)."""
    run = _run(128, 512, 1, bias=False)
    weights = 512 * 128 * 4 / 16
    assert run.stats.cycles < 1.07 * weights, run.stats.cycles
