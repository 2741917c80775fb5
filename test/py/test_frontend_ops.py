"""Frontend behaviour on small modules, each compiled once and checked against eager at several lengths:
the permute-on-dim-0 regression, symbolic alpha, clamped slice ends, tensor literals, integer inputs,
masks (triu/tril, arange + compare + where, masked_fill, ~ & |), causal and masked SDPA, reductions on
other dims, and the export ranges torch narrows (specialized, or refused with the guard in words)."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda

import novella_mlir
from novella_mlir import compile_torch
from novella_mlir.errors import InputError, NovellaError


def _like(x: torch.Tensor, dim: int, length: int, seed: int) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] = length
    g = torch.Generator().manual_seed(seed)
    if x.dtype.is_floating_point:
        return torch.randn(shape, generator=g)
    return torch.randint(0, 50, shape, generator=g, dtype=x.dtype)


def check(module, example, dim=1, lo=1, hi=80, lengths=(1, 2, 33, 80), atol=1e-5):
    npu = compile_torch(module, *example, dynamic_dim=dim, min_len=lo, max_len=hi)
    for n in lengths:
        xs = [_like(x, dim, n, seed=i + n) for i, x in enumerate(example)]
        with torch.no_grad():
            ref = module(*xs)
        got = npu(*xs)
        assert got.dtype == ref.dtype, f"T={n}: dtype {got.dtype}, eager gives {ref.dtype}"
        err = (got.float() - ref.float()).abs().max()
        assert torch.allclose(got.float(), ref.float(), atol=atol, rtol=1e-5), f"T={n}: max error {err}"
    return npu


def test_permute_of_a_dynamic_dim_0_regression():
    # perm (0, 2, 1, 3) on (T, 4, 2, 5): both sides are "packed" but in different block orders
    check(Lambda(lambda x: x.permute(0, 2, 1, 3) + 0.5), [torch.randn(6, 4, 2, 5)], dim=0, lengths=(1, 7, 80))


def test_alpha_equal_to_the_dynamic_size():
    check(
        Lambda(lambda x, y: torch.add(x, y, alpha=x.shape[1])),
        [torch.randn(1, 8, 16), torch.randn(1, 8, 16)],
        atol=1e-4,
    )


def test_slice_ends_clamp():
    check(Lambda(lambda x: x[:, 1:] * 2 + x[:, :][:, 1:]), [torch.randn(1, 8, 16)], lo=2, lengths=(2, 3, 80))


def test_tensor_literal():
    check(Lambda(lambda x: x * torch.tensor([1.0, -2.0, 3.0, 0.5])), [torch.randn(1, 8, 4)])


def test_integer_inputs_held_exactly_and_refused_out_of_range():
    emb = torch.nn.Embedding(50, 16)
    npu = check(Lambda(lambda ids: emb(ids) * (ids.unsqueeze(-1) + 1)), [torch.zeros(1, 8, dtype=torch.long)])
    with pytest.raises(NovellaError, match="outside \\+-2\\*\\*24"):
        npu(torch.full((1, 4), 2**24 + 1))


def test_masks_from_arange_compare_where():
    def masks(x):
        t = x.shape[1]
        pos = torch.arange(t)
        causal = pos[None, :] <= pos[:, None]
        upper = torch.triu(torch.ones(t, t), diagonal=1).bool()
        s = x @ x.transpose(-1, -2)
        a = torch.where(causal, s, torch.zeros_like(s))
        b = s.masked_fill(upper, -1e4)
        c = (~causal | upper) & (s > 0)
        return a + b + c.float() + torch.tril(s)

    check(Lambda(masks), [torch.randn(1, 8, 16)], lengths=(1, 2, 65, 80), atol=1e-3)


@pytest.mark.parametrize("kind", ["causal", "bool", "float"])
def test_masked_and_causal_sdpa(kind):
    def attn(q):
        t = q.shape[2]
        if kind == "causal":
            return torch.nn.functional.scaled_dot_product_attention(q, q * 0.5, q, is_causal=True)
        keep = torch.arange(t)[None, :] <= torch.arange(t)[:, None]
        mask = keep if kind == "bool" else torch.where(keep, 0.0, -1e9)
        return torch.nn.functional.scaled_dot_product_attention(q, q * 0.5, q, attn_mask=mask)

    check(Lambda(attn), [torch.randn(1, 2, 8, 16)], dim=2, lengths=(1, 2, 67, 80), atol=1e-4)


def test_reductions_on_other_dims():
    def red(x):
        return x.sum(dim=-2, keepdim=True) + x.amax(dim=-1, keepdim=True).mean(dim=1, keepdim=True) + x.amin(-1, True)

    check(Lambda(red), [torch.randn(1, 8, 16)], atol=1e-4)


def test_math_on_a_dynamic_last_dim():
    def f(x):
        y = x.transpose(1, 2)  # [1, 16, T]: the length is the last dim
        return torch.sigmoid(y) + torch.tanh(y).abs() + torch.sin(y) * torch.cos(y) + torch.exp(-y.pow(2))

    check(Lambda(f), [torch.randn(1, 8, 16)], lengths=(1, 513, 600), hi=600, atol=1e-5)


class Branchy(torch.nn.Module):
    def __init__(self, below: int):
        super().__init__()
        self.below = below

    def forward(self, x):
        if x.shape[1] > self.below:
            return x * 2.0
        return x * 2.0 + 0.0


def test_narrowed_range_is_one_artifact_with_a_program_per_part(tmp_path):
    npu = check(Branchy(3), [torch.randn(1, 8, 4)], lengths=(1, 3, 4, 80))
    progs = npu.artifact.programs
    assert [p.ranges for p in progs] == [[[1, 3]], [[4, 80]]]
    assert "export guard" in progs[0].reason and "false for T in [1, 3]" in progs[0].reason
    assert progs[1].reason.startswith("generic")
    npu.save(tmp_path / "m.nvla")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.nvla"], "one file, no side files"
    again = novella_mlir.load(tmp_path / "m.nvla")
    for t in (1, 3, 4, 80):
        x = torch.randn(1, t, 4)
        assert torch.equal(again(x), npu(x))
    assert {(1,), (3,), (4,), (80,)} <= set(again.jit.cache), "the JIT cache is keyed by the symbol values"
    with pytest.raises(InputError, match=r"T=81 is outside the compiled bounds \[1, 80\]"):
        npu(torch.randn(1, 81, 4))
    with pytest.raises(InputError, match=r"T=81 is outside every compiled program: T in \[1, 3\] \(export guard"):
        npu.jit.instantiate([81])


class OneBranch(torch.nn.Module):
    """`T > 1` picks the branch: torch.export traces sizes as >= 2 and keeps [1, N] without a guard."""

    def forward(self, x):
        if x.shape[1] > 1:
            return x.softmax(dim=1)
        return x * 3.0


def test_trace_that_assumes_t_at_least_2_gets_a_program_for_t_1():
    npu = check(OneBranch(), [torch.randn(1, 8, 4)], lengths=(1, 2, 37, 80))
    progs = npu.artifact.programs
    assert [p.ranges for p in progs] == [[[1, 1]], [[2, 80]]]
    assert "at least 2" in progs[0].reason and "static, T = 1" in progs[0].reason


def test_same_trace_at_t_1_keeps_one_program():
    npu = check(Lambda(lambda x: x.softmax(dim=1) * 2.0), [torch.randn(1, 8, 4)], lengths=(1, 2, 80))
    assert [p.ranges for p in npu.artifact.programs] == [[[1, 80]]]


class BranchySort(torch.nn.Module):
    def forward(self, x):
        if x.shape[1] > 10:
            return x * 2.0
        return torch.sort(x, dim=-1).values


def test_narrowed_range_refused_with_the_guard_in_words():
    with pytest.raises(NovellaError, match="branches on `\\(11 <= T\\).*false for T in \\[1, 10\\]") as e:
        compile_torch(BranchySort(), torch.randn(1, 16, 4), min_len=1, max_len=80)
    assert "T in [1, 10] do not compile on their own" in str(e.value) and "sort" in str(e.value)


def test_long_excluded_range_is_one_symbolic_program():
    npu = check(Branchy(10), [torch.randn(1, 16, 4)], lengths=(1, 10, 11, 80))
    assert [p.ranges for p in npu.artifact.programs] == [[[1, 10]], [[11, 80]]]


def test_square_frees_its_operand_once():
    # mul(x, x) once released x twice in --novella-allocate: a later tensor shared its DRAM (a WAR hazard)
    check(Lambda(lambda x: torch.std(x, dim=0)), [torch.randn(3, 4, 5)], dim=0, lo=2, hi=130, lengths=(2, 65, 130))


class OneBranchTwoInputs(torch.nn.Module):
    """Two inputs of length T: torch.export gives each its own symbol (y's only as its shape)."""

    def forward(self, x, y):
        if x.shape[1] > 1:
            return x * 2.0
        return x + 1.0


def test_t_1_program_of_a_model_with_two_length_symbols():
    m = OneBranchTwoInputs().eval()
    npu = compile_torch(m, torch.randn(1, 8, 4), torch.randn(1, 8, 4), max_len=64, cache=False)
    art = npu.artifact
    assert len(art.symbols) == 2 and all(s[1:] == [1, 64] for s in art.symbols)
    assert [p.ranges for p in art.programs] == [[[1, 1], [1, 1]], [[2, 64], [2, 64]]]
    for t in (1, 2, 9, 64):
        x, y = torch.randn(1, t, 4), torch.randn(1, t, 4)
        torch.testing.assert_close(npu(x, y), m(x, y))


def test_combine_refuses_ranges_not_one_per_symbol():
    from novella_mlir import artifact as art_mod
    from novella_mlir.errors import ArtifactError

    m = OneBranchTwoInputs().eval()
    art = compile_torch(m, torch.randn(1, 8, 4), torch.randn(1, 8, 4), max_len=64, cache=False).artifact
    art.programs[0].ranges = [[1, 1]]
    with pytest.raises(ArtifactError, match=r"has ranges \[\[1, 1\]\], not one \[lo, hi\] per symbol"):
        art_mod.combine([art])
