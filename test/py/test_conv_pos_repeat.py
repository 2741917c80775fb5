"""A vision model's position table repeated by the patch count (sam3's ViT: `pos.repeat(1, n, 1)` with n
a size of the dynamic width): the count is a size expression, the repeat a broadcast to it; a dynamic dim
repeated a dynamic count of times is refused, naming the op and the line."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError


def test_a_repeat_by_a_size_of_the_length():
    pos = torch.randn(1, 1, 8)
    model = Lambda(lambda x: x + pos.repeat(1, x.shape[1], 1))
    npu = compile_torch(model, torch.randn(1, 5, 8), min_len=1, max_len=70, cache=False)
    for t in (1, 2, 37, 67, 70):
        x = torch.randn(1, t, 8)
        torch.testing.assert_close(npu(x, check_hazards=t == 37), model(x), rtol=1e-5, atol=1e-5)


def test_a_dynamic_dim_repeated_a_dynamic_count_is_refused():
    model = Lambda(lambda x: x.repeat(1, x.shape[1], 1))
    with pytest.raises(
        NovellaError, match=r"test_conv_pos_repeat.py:\d+: 'torch.aten.repeat': repeat of \['1', 's0', '8'\]"
    ):
        compile_torch(model, torch.randn(1, 5, 8), min_len=1, max_len=40, cache=False)
