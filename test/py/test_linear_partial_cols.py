"""Linears whose output width has no divisor that is a multiple of the array width (7688 = 8 x 31^2,
1000): the column tiles are multiples of the array width and the last one is partial (its weight rows,
MATMUL columns, epilogue and STORE end at N). Each loop order, with and without the residual in the
accumulator, matches eager at T = 1, odd, a partial last row tile and the maximum, hazard checker on."""

from __future__ import annotations

import pytest
import torch

from novella_mlir import compile_torch

MAX = 70
LENGTHS = (1, 7, 17, MAX)


class Residual(torch.nn.Module):
    """`x[..., :n] + fc(x)`: K = 256 has k tiles of the array height, so the residual may start the sum."""

    def __init__(self, k: int, n: int):
        super().__init__()
        self.n, self.fc = n, torch.nn.Linear(k, n)

    def forward(self, x):
        return x[..., : self.n] + self.fc(x)


def _check(model, d, lengths=LENGTHS):
    torch.manual_seed(0)
    npu = compile_torch(model.eval(), torch.randn(1, 16, d), min_len=1, max_len=MAX, cache=False)
    for length in lengths:
        x = torch.randn(1, length, d, generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            ref = model(x)
        torch.testing.assert_close(npu(x), ref, rtol=1e-4, atol=1e-4)
    return npu


def _tile_line(npu):
    return next(line for line in npu.ir("novella-tile").splitlines() if 'linear"' in line)


def test_wide_linear_with_no_aligned_divisor_compiles_and_matches_eager():
    """Linear(64, 7688) was refused ("the smallest tile does not fit": its only column tile was 7688)."""
    torch.manual_seed(0)
    npu = _check(torch.nn.Linear(64, 7688), 64)
    line = _tile_line(npu)
    tn = int(line.split("tn = ")[1].split(" ")[0])
    assert 7688 % tn and tn % 16 == 0


@pytest.mark.parametrize("ws,acc,ra", [(0, 1, 0), (0, 2, 1), (1, 1, 0), (1, 2, 1), (2, 1, 0), (2, 2, 0)])
def test_partial_last_column_tile_in_each_order(monkeypatch, ws, acc, ra):
    """x[..., :200] + Linear(256, 200)(x) (200 = 8 x 25) with the order, accumulator halves and residual-in-accumulator
    forced: the partial block's residual, bias columns and STORE end at column 200."""
    from novella_mlir.kernels.linear import Linear

    want = (ws, acc, ra)
    monkeypatch.setattr(
        Linear, "cost", lambda self, t, dims, cand: float(cand[3:6] != want or cand[6]) + 0.5 * (dims[2] % cand[1] == 0)
    )
    monkeypatch.setattr(Linear, "exhaustive", True)
    torch.manual_seed(0)
    npu = _check(Residual(256, 200), 256)
    line = _tile_line(npu)
    assert f"ws = {ws}" in line and ("res_acc = 1" in line) == bool(ra)
    assert 200 % int(line.split("tn = ")[1].split(" ")[0])
