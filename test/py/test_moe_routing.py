"""An MoE's routing through our own decompositions (frontend/own_decompositions.py): each decomposition
equals its op in eager (ties, NaN, duplicates, empty groups), each compiles with the length dynamic and
matches eager at lengths 1, 2, odd and a partial last tile, and a stock transformers MoE decoder with its
default (`grouped_mm`) experts matches eager; plus the VEC FLOOR that integer floor division uses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lambda_module import Lambda, stock_model_matches

from novella_mlir import compile_torch
from novella_mlir.frontend import own_decompositions as own
from simulator import Opcode, Simulator, VecFn, encode, load_config

LENGTHS = (1, 2, 37, 67)


def _ids(n, seed, high=4):
    return torch.randint(0, high, (1, n), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("n", [1, 2, 7, 33])
def test_decompositions_equal_their_ops_in_eager(n):
    g = torch.Generator().manual_seed(n)
    ids = torch.randint(0, 4, (n,), generator=g)
    assert all(torch.equal(a, b) for a, b in zip(own.sort_by_rank(ids), torch.sort(ids, stable=True)))
    f = torch.randn(n, generator=g)
    f[0], f[-1] = torch.nan, -0.0
    for desc in (False, True):
        got, want = own.sort_by_rank(f, descending=desc), torch.sort(f, stable=True, descending=desc)
        assert torch.equal(got[1], want[1]) and torch.equal(got[0].view(torch.int32), want[0].view(torch.int32))
    x = torch.randn(n, generator=g) * 3
    assert torch.equal(own.histc_by_compare(x, 7, -2.5, 2.0), torch.histc(x, 7, -2.5, 2.0))
    perm = torch.randperm(n, generator=g)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(n)
    assert torch.equal(own.index_put_by_compare(torch.zeros_like(perm), [perm], torch.arange(n)), inv)
    rows = torch.randn(5, 3, generator=g)
    idx = torch.tensor([4, 0, 0])  # a duplicate: the last write wins
    assert torch.equal(
        own.index_put_by_compare(rows, [idx], torch.ones(3, 3) * torch.arange(3.0)[:, None])[0], torch.full((3,), 2.0)
    )


def test_grouped_mm_equals_transformers_fallback():
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(4, 5, 3, generator=g), torch.randn(9, 5, generator=g)
    offs = torch.tensor([2, 2, 7, 8], dtype=torch.int32)  # group 1 empty, row 8 past the last group
    want, start = torch.zeros(9, 3), 0
    for e, end in enumerate(offs.tolist()):
        want[start:end] = x[start:end] @ w[e]
        start = end
    assert torch.equal(own.grouped_mm_by_experts(x, w, offs), want)


def _routing(ids):
    flat = ids.reshape(-1)
    values, perm = torch.sort(flat, stable=True)  # eager's default sort orders ties as it likes
    counts = torch.histc(values.float(), bins=4, min=0, max=3)
    offsets = torch.cumsum(counts, 0, dtype=torch.int32)
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.shape[0])
    return values.float(), perm // 2, offsets.float(), inv.float()


def test_routing_compiles_with_the_length_dynamic():
    module = Lambda(_routing)
    npu = compile_torch(module, _ids(16, 0), dynamic_dim=1, min_len=1, max_len=70, cache=False)
    for n in LENGTHS:
        x = _ids(n, n)
        for got, want in zip(npu(x), module(x)):
            assert torch.equal(got, want), f"T={n}"


def test_a_stock_moe_decoder_with_grouped_mm_experts():
    tf = pytest.importorskip("transformers")
    cfg = tf.MixtralConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                           intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, vocab_size=100,
                           max_position_embeddings=80)  # fmt: skip
    torch.manual_seed(0)
    hf = tf.MixtralModel(cfg).eval()
    assert hf.config._experts_implementation == "grouped_mm"
    stock_model_matches(hf, 100, LENGTHS)


@pytest.mark.parametrize("fast", [False, True])
def test_vec_floor_is_exact(fast):
    a = np.array([-2.5, -0.0, 0.0, 1.999999, -1e-30, 3e9, np.inf, -np.inf, np.nan, 7.0], np.float32)
    sim = Simulator(load_config(), 10, fast=fast)
    sim.spad.data[: a.size] = a
    sim.run(np.stack([encode(Opcode.VEC, fn=VecFn.FLOOR, dst_addr=100, rows=1, cols=a.size)]))
    np.testing.assert_array_equal(sim.spad.data[100 : 100 + a.size].view(np.uint32), np.floor(a).view(np.uint32))


def test_floor_and_integer_division_by_length():
    module = Lambda(lambda x, i: (torch.floor(x * 3), i // 3, torch.div(i - 5, 3, rounding_mode="trunc").float()))
    args = (torch.randn(1, 16), _ids(16, 0, 50))
    npu = compile_torch(module, *args, dynamic_dim=1, min_len=1, max_len=70, cache=False)
    for n in LENGTHS:
        x, i = torch.randn(1, n, generator=torch.Generator().manual_seed(n)), _ids(n, n, 50)
        for got, want in zip(npu(x, i), module(x, i)):
            assert torch.equal(got, want), f"T={n}"
