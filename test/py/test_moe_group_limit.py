"""The group-limited routing of DeepSeek-style MoE routers (glm4_moe, exaone_moe): the mask of the top
groups is `zeros.scatter_(1, group_idx, 1)`, an `aten.scatter.value` that frontend/own_decompositions.py
rewrites as a compare against an iota. It equals torch's scatter in eager, compiles with the length dynamic
and matches eager, and a stock Glm4Moe with 2 groups of experts matches eager."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda, stock_model_matches

from novella_mlir import compile_torch
from novella_mlir.frontend import own_decompositions as own

LENGTHS = (1, 2, 37, 67)


@pytest.mark.parametrize("shape, dim, k", [((5, 4), 1, 2), ((5, 4), 0, 3), ((2, 3, 6), 2, 4), ((2, 3, 6), 1, 5)])
def test_scatter_value_equals_torch(shape, dim, k):
    g = torch.Generator().manual_seed(k)
    x = torch.randn(*shape, generator=g)
    index = torch.randint(0, shape[dim], [k if d == dim else s for d, s in enumerate(shape)], generator=g)
    assert torch.equal(own.scatter_value_by_compare(x, dim, index, 1.5), x.scatter(dim, index, 1.5))
    ints = torch.arange(x.numel()).view(shape)
    assert torch.equal(own.scatter_value_by_compare(ints, dim, index, 7), ints.scatter(dim, index, 7))


def test_scatter_value_not_covering_the_input_is_left_alone():
    x, index = torch.zeros(5, 4), torch.zeros(3, 1, dtype=torch.long)  # writes rows 0..2 only
    assert own.scatter_value_by_compare(x, 1, index, 1.0) is NotImplemented


def _group_mask(x):
    groups = x.view(-1, 4, 2).amax(-1)
    top = torch.topk(groups, k=2, dim=-1, sorted=False)[1]
    mask = torch.zeros_like(groups)
    mask.scatter_(1, top, 1)
    return mask, x.view(-1, 8).masked_fill(~mask.repeat_interleave(2, -1).bool(), float("-inf")).amax(-1)


def test_a_group_mask_compiles_with_the_length_dynamic():
    model = Lambda(_group_mask)
    x = lambda n: torch.randn(1, n, 8, generator=torch.Generator().manual_seed(n))  # noqa: E731
    npu = compile_torch(model, x(16), dynamic_dim=1, min_len=1, max_len=70, cache=False)
    for n in LENGTHS:
        for got, want in zip(npu(x(n)), model(x(n))):
            assert torch.equal(got, want), f"T={n}"


def test_a_stock_glm4_moe_with_two_expert_groups():
    tf = pytest.importorskip("transformers")
    cfg = tf.Glm4MoeConfig(num_hidden_layers=2, first_k_dense_replace=1, hidden_size=32, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=16, intermediate_size=48, moe_intermediate_size=32,
                           n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1, vocab_size=100,
                           max_position_embeddings=80)  # fmt: skip
    torch.manual_seed(0)
    hf = tf.Glm4MoeModel(cfg).eval()
    stock_model_matches(hf, 100, LENGTHS)
