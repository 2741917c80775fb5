"""A length that is a multiple of a constant (`16 * Dim("k")` in torch.export's dynamic_shapes: a vision
model's patch grid, radio's `(W // 16)` patches of 16): `bind` reads k from the input's dim as width / 16,
matches eager at k = 2 (its minimum), odd, even and the maximum, and refuses a width that is not a multiple of 16, naming the
input, its dim and what to do."""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

from novella_mlir import compile_torch
from novella_mlir.errors import InputError

PATCH, MAX_K = 16, 9


class Patches(torch.nn.Module):
    """[1, 3, 16 * k] -> k patches of 3 x 16, each embedded by one linear: [1, k, 8]."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3 * PATCH, 8)

    def forward(self, x):
        b, c, w = x.shape
        p = x.reshape(b, c, w // PATCH, PATCH).permute(0, 2, 1, 3).reshape(b, w // PATCH, c * PATCH)
        return self.fc(p)


@pytest.fixture(scope="module")
def compiled():
    torch.manual_seed(0)
    model = Patches().eval()
    spec = {"x": {2: PATCH * Dim("k", min=2, max=MAX_K)}}
    return model, compile_torch(model, torch.randn(1, 3, 4 * PATCH), dynamic_shapes=spec, cache=False)


@pytest.mark.parametrize("k", [2, 3, 4, MAX_K])
def test_matches_eager(compiled, k):
    model, npu = compiled
    x = torch.randn(1, 3, k * PATCH)
    torch.testing.assert_close(torch.as_tensor(npu(x)), model(x), atol=1e-5, rtol=1e-5)


def test_width_not_a_multiple_is_refused(compiled):
    _, npu = compiled
    with pytest.raises(InputError, match=r"input #0 dim 2 is 40, not a multiple of 16.*pad or crop"):
        npu(torch.randn(1, 3, 40))
