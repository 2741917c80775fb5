"""Embedding rows wider than a GATHER's cols field (4095) are gathered a column tile at a time
(kernels/indexing.py GatherRows): they used to be refused at tile time; now they equal eager."""

from __future__ import annotations

import pytest
import torch

from novella_mlir import compile_torch


@pytest.mark.parametrize("width", [4096, 5000])
def test_an_embedding_wider_than_a_gather_equals_eager(width):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, width)).eval()
    ids = lambda n: torch.randint(0, 50, (1, n), generator=torch.Generator().manual_seed(n))  # noqa: E731
    npu = compile_torch(model, ids(16), dynamic_dim=1, min_len=1, max_len=70, cache=False)
    for n in (1, 2, 37, 67, 70):
        with torch.no_grad():
            assert torch.equal(npu(ids(n)), model(ids(n))), f"T={n}"
