"""Complex values computed inside a model as (real, imaginary) pairs (frontend/complex_pairs.py) and a
`slice_scatter` of a static range as a concat (frontend/own_decompositions.py): DeepSeek-V2's rotary
embedding (`torch.polar`, `view_as_complex(q) * freqs_cis`, `view_as_real`) and its keys written into
`new_empty(...)[..., :d].copy_(...)`. Each matches eager; a complex op without a rewrite is refused by name."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda, stock_model_matches

from novella_mlir import compile_torch
from novella_mlir.errors import UnsupportedDtypeError
from novella_mlir.frontend import own_decompositions as own

LENGTHS = (1, 2, 37, 67, 70)
_INV = 1.0 / (10000 ** (torch.arange(0, 8, 2).float() / 8))


def _x(n: int):
    return torch.randn(1, n, 8, generator=torch.Generator().manual_seed(n))


def _rope(x):
    freqs = torch.arange(x.shape[1]).float()[:, None] * _INV
    cis = torch.polar(torch.ones_like(freqs), freqs) * 0.5
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    rotated = torch.view_as_real(xc * cis.unsqueeze(0) + xc).flatten(2)
    return rotated, torch.view_as_real(xc * 2.0).flatten(2)


def test_a_complex_rotary_embedding_matches_eager():
    model = Lambda(_rope)
    npu = compile_torch(model, _x(16), dynamic_dim=1, min_len=1, max_len=70, cache=False)
    for n in LENGTHS:
        for got, want in zip(npu(_x(n)), model(_x(n))):
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), f"T={n}"


def test_a_complex_op_without_a_rewrite_is_refused():
    model = Lambda(lambda x: torch.view_as_complex(x.reshape(1, -1, 4, 2)).abs())
    with pytest.raises(UnsupportedDtypeError, match=r"\.py:\d+: 'aten.abs.default' on complex values has no rewrite"):
        compile_torch(model, _x(16), dynamic_dim=1, min_len=1, max_len=70, cache=False)


@pytest.mark.parametrize("start, end", [(0, 4), (4, 10), (2, 5), (-3, None), (None, 3), (0, 10)])
def test_slice_scatter_by_cat_equals_torch(start, end):
    x = torch.randn(2, 3, 10)
    src = torch.randn(2, 3, len(range(10)[slice(start, end)]))
    assert torch.equal(own.slice_scatter_by_cat(x, src, 2, start, end), torch.slice_scatter(x, src, 2, start, end))


def test_a_stock_deepseek_v2_matches_eager():
    tf = pytest.importorskip("transformers")
    cfg = tf.DeepseekV2Config(num_hidden_layers=2, first_k_dense_replace=1, hidden_size=32, num_attention_heads=2,
                              num_key_value_heads=2, intermediate_size=48, moe_intermediate_size=32,
                              n_routed_experts=4, num_experts_per_tok=2, vocab_size=100, max_position_embeddings=80,
                              kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=8,
                              v_head_dim=16)  # fmt: skip
    torch.manual_seed(0)
    hf = tf.DeepseekV2Model(cfg).eval()
    stock_model_matches(hf, 100, LENGTHS)


def test_a_real_tensor_cast_to_complex_is_refused():
    model = Lambda(lambda x: torch.view_as_real(x.to(torch.complex64) * 2.0).flatten(2))
    with pytest.raises(UnsupportedDtypeError, match=r"'aten.*' on complex values has no rewrite"):
        compile_torch(model, _x(16), dynamic_dim=1, min_len=1, max_len=70, cache=False)
