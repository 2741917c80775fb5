"""conv1d on the audio families' shapes, against eager at the minimum length, min + 1, an odd middle, a
partial last tile and the maximum: moonshine's stem (kernel 127, stride 64 over up to 20880 samples: a
row tile's input rows must fit the LOAD field) and data2vec-audio's grouped positional conv (groups 4,
padding kernel // 2, the last frame dropped)."""

from __future__ import annotations

import torch
from lambda_module import Lambda

from novella_mlir import compile_torch


def check(model, shape, lengths):
    npu = compile_torch(model, torch.randn(*shape), min_len=lengths[0], max_len=lengths[-1], cache=False)
    for n in lengths:
        size = list(shape)
        size[1] = n
        x = torch.randn(size, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = model(x)
        torch.testing.assert_close(npu(x, check_hazards=n == lengths[2]), want, rtol=1e-4, atol=1e-4)


def test_moonshine_stem_with_a_long_stride():
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(1, 16, 127, stride=64, bias=False).eval()
    check(Lambda(lambda x: torch.tanh(conv(x[:, None]))).eval(), (1, 4000), (127, 128, 9999, 13975, 20880))


def test_data2vec_audio_positional_conv():
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(32, 32, 8, padding=4, groups=4).eval()
    model = Lambda(lambda x: torch.nn.functional.gelu(conv(x.transpose(1, 2))[:, :, :-1]).transpose(1, 2)).eval()
    check(model, (1, 20, 32), (1, 2, 37, 67, 70))
