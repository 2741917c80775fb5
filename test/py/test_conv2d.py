"""2-D convolutions on a dynamic width through the generic path (frontend/linalg/conv.py): torch-mlir's
linalg.conv_2d_nchw_fchw / conv_2d_ngchw_gfchw as im2col by data movement and one novella.linear (the
matrix unit), checked against eager at the minimum width, min + 1, an odd middle, a partial last tile of
output rows and the maximum; what the path cannot take is refused naming the op and the source line."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir.errors import UnsupportedOpError

HI = 70


def check(fn, channels: int, lo: int, height: int = 8, matrix_unit: bool = True):
    torch.manual_seed(0)
    model = Lambda(fn).eval()
    example = torch.randn(1, channels, height, (lo + HI) // 2)
    npu = compile_torch(model, example, dynamic_dim=3, min_len=lo, max_len=HI, cache=False)
    assert ("novella.linear" in npu.ir("novella")) == matrix_unit
    for w in (lo, lo + 1, 37, 67, HI):
        x = torch.randn(1, channels, height, w, generator=torch.Generator().manual_seed(w))
        with torch.no_grad():
            want = model(x)
        got = npu(x, check_hazards=w == 37)
        assert got.shape == want.shape, f"W={w}: {list(got.shape)} vs eager {list(want.shape)}"
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m, w=w: f"W={w}: {m}")


def conv(**kw):
    torch.manual_seed(1)
    return torch.nn.Conv2d(**kw).eval()


def test_a_vision_patch_embedding():
    """ViT's patch embedding: stride = kernel, the patch count (Ho * Wo) symbolic, flattened as tokens."""
    c = conv(in_channels=3, out_channels=16, kernel_size=4, stride=4)
    check(lambda x: c(x).flatten(2).transpose(1, 2), channels=3, lo=4)


CASES = {
    "3x3, padding 1": dict(in_channels=4, out_channels=8, kernel_size=3, padding=1),
    "3x3, stride 2, padding 1": dict(in_channels=4, out_channels=8, kernel_size=3, stride=2, padding=1),
    "3x2, dilation 2": dict(in_channels=4, out_channels=6, kernel_size=(3, 2), dilation=2, padding=(2, 1)),
    "stride (1, 3) != kernel 2, no bias": dict(in_channels=2, out_channels=8, kernel_size=2, stride=(1, 3), bias=False),
    "padding 'valid' (torch gives [0])": dict(in_channels=3, out_channels=8, kernel_size=4, stride=4, padding="valid"),
    "groups 2": dict(in_channels=4, out_channels=8, kernel_size=3, padding=1, groups=2),
    "depthwise": dict(in_channels=4, out_channels=4, kernel_size=3, padding=1, groups=4),
}


@pytest.mark.parametrize("name", CASES)
def test_a_general_conv2d(name):
    kw = CASES[name]
    c = conv(**kw)
    depthwise = kw.get("groups") == kw["in_channels"] == kw["out_channels"]  # taps times weights on the VEC
    check(lambda x: torch.relu(c(x)), channels=kw["in_channels"], lo=5, matrix_unit=not depthwise)


def test_a_conv_the_generic_path_cannot_take_is_refused_naming_it():
    """A transposed conv: torch-mlir's linalg form reads loop indices; the refusal names the op and the line."""
    c = torch.nn.ConvTranspose2d(2, 4, 3).eval()
    with pytest.raises(
        UnsupportedOpError, match=r"test_conv2d.py:\d+ \(in .*conv.py:\d+\): .*'torch.aten.convolution'"
    ):
        compile_torch(Lambda(lambda x: c(x)), torch.randn(1, 2, 6, 10), dynamic_dim=3, min_len=4, max_len=20,
                      cache=False)  # fmt: skip
