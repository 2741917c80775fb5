"""A top-k over values tied for every input (a zero-initialized router) is refused at compile time
(frontend/ties.py): torch's CPU topk picks among ties by its sort's order (indices 2 and 3 of 4), the NPU's
the lowest ones, so the compiled model used to route to other experts than eager, a silent wrong answer
(afmoe in the zoo: max error 1.7). Ties where both choices agree, and routers that do not tie, compile and
match eager."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError

LENGTHS = (1, 2, 37, 67)


class Router(torch.nn.Module):
    """sigmoid(gate(x)) + bias, its top-k experts and their scores (afmoe's AfmoeTokenChoiceRouter)."""

    def __init__(self, experts: int, k: int, zero: bool):
        super().__init__()
        self.gate, self.k = torch.nn.Linear(8, experts, bias=False), k
        self.register_buffer("bias", torch.zeros(experts))
        if zero:
            torch.nn.init.zeros_(self.gate.weight)

    def forward(self, x):
        scores = torch.sigmoid(self.gate(x).float())
        _, idx = torch.topk(scores + self.bias, k=self.k, dim=-1)
        return idx.float(), scores.gather(-1, idx)


def _x(n: int, seed: int):
    return torch.randn(1, n, 8, generator=torch.Generator().manual_seed(seed))


def _compile(model):
    return compile_torch(model, _x(16, 0), dynamic_dim=1, min_len=1, max_len=70, cache=False)


def test_eager_does_not_take_the_lowest_of_four_ties():
    assert torch.topk(torch.zeros(4), 2).indices.tolist() != [0, 1]  # the premise of the refusal


def test_a_zero_router_over_four_experts_is_refused():
    torch.manual_seed(0)
    with pytest.raises(NovellaError, match=r"torch.topk\(k=2\).*returns indices \[2, 3\].*lowest \[0, 1\]"):
        _compile(Router(4, 2, zero=True))


def test_a_zero_router_cut_into_groups_is_refused():
    torch.manual_seed(0)
    gate = torch.nn.Linear(8, 8, bias=False)
    torch.nn.init.zeros_(gate.weight)
    model = Lambda(lambda x: torch.topk(gate(x).sigmoid().view(-1, 2, 4), k=2, dim=-1, sorted=False)[1].float())
    with pytest.raises(NovellaError, match=r"among 4 tied values"):
        _compile(model)


@pytest.mark.parametrize("experts, zero", [(3, True), (4, False)])
def test_routers_that_agree_with_eager_compile(experts, zero):
    torch.manual_seed(0)
    model = Router(experts, 2, zero).eval()
    npu = _compile(model)
    for n in LENGTHS:
        x = _x(n, n)
        (idx, scores), (want_idx, want_scores) = npu(x), model(x)
        assert torch.equal(idx, want_idx) and torch.allclose(scores, want_scores, atol=1e-6), f"T={n}"


def test_a_stock_afmoe_with_its_zero_router_is_refused_and_with_a_random_one_matches():
    tf = pytest.importorskip("transformers")
    cfg = tf.AfmoeConfig(num_hidden_layers=2, num_dense_layers=1, hidden_size=32, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=16, intermediate_size=48, moe_intermediate_size=32,
                         num_experts=4, num_experts_per_tok=2, num_shared_experts=1, vocab_size=100,
                         max_position_embeddings=80)  # fmt: skip
    torch.manual_seed(0)
    hf = tf.AfmoeModel(cfg).eval()
    gate = hf.layers[1].mlp.router.gate.weight
    assert not gate.any()  # transformers' _init_weights zeroes it
    model = Lambda(lambda ids: hf(input_ids=ids, use_cache=False).last_hidden_state)
    ids = lambda n: torch.randint(0, 100, (1, n), generator=torch.Generator().manual_seed(n))  # noqa: E731
    args = dict(dynamic_dim=1, min_len=1, max_len=70, cache=False)
    with pytest.raises(NovellaError, match="modeling_afmoe.py:.*torch.topk"):
        compile_torch(model, ids(16), **args)
    with torch.no_grad():
        gate.normal_(0.0, 0.02)
    npu = compile_torch(model, ids(16), **args)
    for n in LENGTHS:
        with torch.no_grad():
            want = model(ids(n))
        assert torch.allclose(npu(ids(n)), want, atol=1e-4, rtol=1e-4), f"T={n}"
