"""The hybrid (Mamba / linear-attention) families' front half, against eager at lengths 1, 2, an odd middle,
a partial last tile and the maximum: the depthwise causal conv1d (groups = channels, kernel 4, padding 3,
sliced back to T, the layout [B, C, T]) at channel counts up to one wider than a field holds, and Mamba2's
pad to a whole chunk (`(chunk - T % chunk) % chunk`, a symbolic pad), and a transpose keeping a last dim
of 1 (head_dim 1)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from lambda_module import Lambda, matches_eager

from novella_mlir import compile_torch
from novella_mlir.machine.target import Target
from simulator import load_config

LENGTHS = (1, 2, 37, 67, 70)


def check(model, shape, lengths=LENGTHS, dim=1):
    npu = compile_torch(model, torch.randn(*shape), dynamic_dim=dim, min_len=lengths[0], max_len=lengths[-1],
                        cache=False)  # fmt: skip
    matches_eager(npu, model, shape, dim, lengths, hazards_at=lengths[2])
    return npu


def causal_conv(channels: int):
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(channels, channels, 4, padding=3, groups=channels).eval()
    return Lambda(lambda x: F.silu(conv(x.transpose(1, 2))[..., : x.shape[1]]).transpose(1, 2)).eval()


WIDE = Target.from_config(load_config()).max_cols + 5


@pytest.mark.parametrize("channels", [8, 64, 192, WIDE])
def test_depthwise_causal_conv1d(channels):
    npu = check(causal_conv(channels), (1, 8, channels), LENGTHS if channels != WIDE else (1, 2, 37))
    assert "novella.conv1d" not in npu.ir("novella")  # per-tap multiply-adds, not one conv per channel


def test_depthwise_conv1d_on_channels_first_input():
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(24, 24, 4, padding=3, groups=24, bias=False).eval()
    check(Lambda(lambda x: conv(x)[..., : x.shape[2]]).eval(), (2, 24, 8), dim=2)


def chunked(chunk: int, heads: int, head_dim: int):
    """Mamba2's chunk layout: pad T to a whole chunk, [B, chunks, chunk, H, P], a per-chunk cumsum of the
    decay, `exp` of it, the heads moved before the positions (head_dim may be 1), the padding cut off."""

    def fn(x):
        t = x.shape[1]
        pad = (chunk - t % chunk) % chunk
        xs = F.pad(x, (0, 0, 0, pad)).reshape(x.shape[0], -1, chunk, heads, head_dim)
        decay = torch.exp(-torch.cumsum(xs.abs(), dim=2))
        y = (decay * xs).permute(0, 1, 3, 2, 4)  # [B, c, H, l, P]
        y = y.permute(0, 1, 3, 2, 4).reshape(x.shape[0], -1, heads * head_dim)
        return y[:, :t]

    return Lambda(fn).eval()


@pytest.mark.parametrize("heads,head_dim", [(4, 1), (2, 8)])
def test_pad_to_a_whole_chunk(heads, head_dim):
    check(chunked(128, heads, head_dim), (1, 8, heads * head_dim))


def test_pad_that_may_be_zero():
    """A chunk of 16 below the maximum length: the pad is 0 at 16, 32, 48 (the largest block, then a slice)."""
    check(chunked(16, 2, 8), (1, 8, 16), (1, 2, 16, 37, 48))


def test_transpose_keeping_a_unit_last_dim():
    model = Lambda(lambda x: x.reshape(1, x.shape[1], 96, 1).permute(0, 2, 1, 3) * 2.0).eval()
    npu = check(model, (1, 8, 96))
    assert "x1xf32>) -> tensor<1x96x?x1xf32" not in npu.ir("novella")


def test_row_move_with_more_blocks_than_a_macro_unrolls():
    """Transposes keeping a last dim of 2 with 128 blocks per row, around a dynamic and a static outer dim:
    some outer dims become grid dims (bamba's [16, 8, 16, 2] swap of dims 0 and 2 had 128)."""
    weight = torch.linspace(-1.0, 1.0, 8).reshape(1, 1, 8)

    def fn(x):
        t = x.shape[1]
        moved = x.reshape(t, 8, 16, 2).permute(0, 2, 1, 3).reshape(1, t, 256)
        wide = (x.mean(dim=1).reshape(1, 256, 1) * weight).reshape(8, 8, 8, 2, 2).permute(2, 1, 0, 3, 4)
        return moved * 2.0 + wide.reshape(1, 8, 256)[:, :1]

    check(Lambda(fn).eval(), (1, 8, 256))


def test_mask_sliced_by_the_negated_length():
    """`mask[:, -T:]` of a length-T mask (Mamba2's recurrent mask): `neg.int` of a size, a slice from 0."""

    class Masked(torch.nn.Module):
        def forward(self, x, m):
            return x * m[:, -x.shape[1] :, None]

    model = Masked().eval()
    length = torch.export.Dim("T", min=1, max=70)
    spec = ({1: length}, {1: length})
    npu = compile_torch(model, torch.randn(1, 8, 16), torch.ones(1, 8), dynamic_shapes=spec, cache=False)
    for n in LENGTHS:
        x, m = torch.randn(1, n, 16), (torch.rand(1, n) > 0.5).float()
        torch.testing.assert_close(npu(x, m), model(x, m))


def test_pad_to_one_chunk_the_maximum_fills():
    """chunk = max length (nemotron_h's 128): the pad is 0 at the maximum only, and every length pads to one
    chunk, a static size torch's trace agrees with."""
    check(chunked(70, 2, 8), (1, 8, 16))
