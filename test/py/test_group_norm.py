"""group_norm over a dynamic length (hubert / wav2vec2's feature extractor: `num_groups == channels`
after a strided conv1d; moonshine; a 2-D map with a dynamic width), lowered by the table as a sum over
each group's elements divided by the length's size computed on the NPU, checked against eager at the
minimum length, min + 1, an odd middle, a partial last tile and the maximum."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda, matches_eager

from novella_mlir import compile_torch


def check(fn, shape, dim: int, lengths, hi: int):
    model = Lambda(fn).eval()
    npu = compile_torch(model, torch.randn(*shape), dynamic_dim=dim, min_len=lengths[0], max_len=hi, cache=False)
    text = npu.ir("novella")
    assert "novella.reduce" in text and "novella.generic" not in text  # the table's lowering, not the generic path
    matches_eager(npu, model, shape, dim, lengths, hazards_at=lengths[2])


def norm(groups: int, channels: int, affine: bool = True):
    torch.manual_seed(0)
    gn = torch.nn.GroupNorm(groups, channels, affine=affine).eval()
    if affine:
        with torch.no_grad():
            gn.weight.normal_()
            gn.bias.normal_()
    return gn


def test_wav2vec2_feature_extractor_layer():
    """conv1d(1 -> 32, kernel 10, stride 5), GroupNorm(32, 32) over the frames, gelu: T = 15 is 2 frames."""
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(1, 32, 10, stride=5, bias=False).eval()
    gn = norm(32, 32)
    check(lambda x: torch.nn.functional.gelu(gn(conv(x[:, None]))), (1, 400), 1, (15, 16, 203, 333, 400), 400)


@pytest.mark.parametrize("groups", [1, 4, 32])
def test_group_norm_over_the_length(groups):
    gn = norm(groups, 32)
    check(lambda x: gn(x), (1, 32, 20), 2, (2, 3, 37, 67, 80), 80)


def test_group_norm_without_affine_on_a_map_with_a_dynamic_width():
    gn = norm(2, 8, affine=False)
    check(lambda x: gn(x), (1, 8, 3, 20), 3, (1, 2, 37, 67, 70), 70)


def test_group_norm_of_a_static_slice():
    """The group's sizes all static (the first 4 frames): the mean is a scale by 1 / count."""
    gn = norm(4, 16)
    check(lambda x: x + gn(x[:, :4].transpose(1, 2)).mean(-1)[:, None, :], (1, 8, 16), 1, (4, 5, 37, 67, 70), 70)
