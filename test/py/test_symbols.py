"""Several symbols end to end, and the symbolic layer's proofs (equality, provably >=)."""

import pytest
import sympy
import torch
from torch.export import Dim

from novella_mlir import compile_torch
from novella_mlir import symbolic as sy
from novella_mlir.dialects.context import make_context
from novella_mlir.errors import InputError


@pytest.fixture
def ctx():
    with make_context():
        yield


def test_equal_is_about_values_not_text(ctx):
    s0, s1 = sy.sym(0), sy.sym(1)
    assert sy.equal(s0 + 1, sy.const(1) + s0)
    assert sy.equal(sy.floordiv(s0 + 1, 2), sy.ceildiv(s0, 2))
    assert sy.equal(s0 * s1 * 4, s1 * 2 * s0 * 2)
    assert not sy.equal(s0, s1)
    assert not sy.equal(sy.floordiv(s0, 2), sy.ceildiv(s0, 2))


def test_provably_ge_over_every_combination(ctx):
    s0, s1 = sy.sym(0), sy.sym(1)
    box = sy.symbol_box([sy.Symbol(0, "P", 1, 1023), sy.Symbol(1, "T", 1, 1024)], lower_only=True)
    assert sy.provably_ge(sy.ceildiv(s0, 16) * 16, s0, box)
    assert sy.provably_ge(s0 * s1 * 64, s0 * 64, box)
    assert sy.provably_ge((s0 + s1) * 64, s1 * 64 + 64, box)
    assert sy.provably_ge(sy.floordiv(s0 - 1, 2) + 1, sy.const(1), box)
    assert not sy.provably_ge(s0 * 64, s1 * 64, box)
    assert not sy.provably_ge(sy.floordiv(s0, 2), sy.const(1), box)  # false at s0 = 1
    bounded = sy.symbol_box([sy.Symbol(0, "P", 1, 10), sy.Symbol(1, "T", 1, 1024)])
    assert sy.provably_ge(sy.const(10), s0, bounded) and not sy.provably_ge(sy.const(10), s0, box)


def test_dim_coefficients_are_read_from_the_structure(ctx):
    """A guard is linear in the grid dims only by its form: d0 floordiv 3 agrees with a line through
    d0 = 0, 1, 2 and is still not one."""
    d0, d1 = sy.dim(0), sy.dim(1)
    assert sy.dim_coefficients(d0 * 2 + d1 - 3, 3) == (-3, (2, 1, 0))
    assert sy.dim_coefficients((d0 + 1) * 3 - d1 * 5, 3) == (3, (3, -5, 0))
    assert sy.dim_coefficients(sy.floordiv(d0, 3), 3) is None
    assert sy.dim_coefficients(sy.mod(d1, 2) + d0, 3) is None
    assert sy.dim_coefficients(sy.sym(0) + d0, 3) is None
    assert sy.dim_coefficients(sy.dim(3), 3) is None


def test_torch_conditions():
    p, t = sympy.symbols("s0 s1", integer=True, positive=True)
    box = {p: (1, 1023), t: (1, 1024)}
    assert sy.provably_holds(sympy.Eq(sympy.Min(32 * p + 32, 64 * p + 64), 32 * p + 32), box)
    assert sy.provably_holds(sympy.Ne(p + t, 0), box)
    assert not sy.provably_holds(sympy.Ge(p, t), box)


class _Cross(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k = torch.nn.Linear(32, 32), torch.nn.Linear(32, 32)

    def forward(self, x, mem):
        return torch.nn.functional.scaled_dot_product_attention(self.q(x), self.k(mem), mem) + self.q(x)


def test_two_symbols_end_to_end():
    m = _Cross().eval()
    spec = ({1: Dim("T", min=1, max=64)}, {1: Dim("P", min=1, max=300)})
    npu = compile_torch(m, torch.randn(1, 5, 32), torch.randn(1, 9, 32), dynamic_shapes=spec)
    assert npu.artifact.symbols == [["T", 1, 64], ["P", 1, 300]]
    for t, p in [(1, 1), (1, 17), (7, 33), (33, 7), (64, 300)]:
        x, mem = torch.randn(1, t, 32), torch.randn(1, p, 32)
        torch.testing.assert_close(npu(x, mem), m(x, mem), rtol=1e-4, atol=1e-4)
        assert npu.last_run.symbols == {"T": t, "P": p}
    assert {(1, 1), (64, 300)} <= set(npu.jit.cache)
    with pytest.raises(InputError, match=r"T=65 is outside the compiled bounds \[1, 64\]; P=301 is outside"):
        npu(torch.randn(1, 65, 32), torch.randn(1, 301, 32))


def test_shared_dim_means_equal_sizes():
    class Add(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    d = Dim("S", min=1, max=100)
    npu = compile_torch(Add(), torch.randn(1, 4, 16), torch.randn(1, 4, 16), dynamic_shapes=({1: d}, {1: d}))
    assert [s[0] for s in npu.artifact.symbols] == ["S"]
    a, b = torch.randn(1, 9, 16), torch.randn(1, 9, 16)
    torch.testing.assert_close(npu(a, b), a + b)
    with pytest.raises(InputError, match="expected"):
        npu(a, torch.randn(1, 8, 16))


class _BranchOnT(torch.nn.Module):
    """torch.export traces T as >= 2 with no guard: at T = 1 the symbolic program would take the wrong branch."""

    def forward(self, x, y):
        if x.shape[1] > 1:
            return x * 2.0 + y.sum(1, keepdim=True)
        return x + 1.0 - y.mean(1, keepdim=True)


class _BranchOnBoth(torch.nn.Module):
    def forward(self, x, y):
        if x.shape[1] > 1 and y.shape[1] > 1:
            return x * 2.0 + y.sum(1, keepdim=True)
        return x - y.sum(1, keepdim=True)


def _agrees(m, npu, pairs):
    for t, s in pairs:
        x, y = torch.randn(1, t, 4), torch.randn(1, s, 4)
        torch.testing.assert_close(npu(x, y), m(x, y), rtol=1e-4, atol=1e-4)
        assert npu.last_run.symbols == {"T": t, "S": s}


PAIRS = [(1, 1), (1, 2), (1, 33), (1, 64), (2, 1), (2, 2), (7, 1), (7, 9), (33, 64), (64, 1), (64, 64)]


@pytest.mark.parametrize("spec_form", ["tuple", "dict"])
def test_dim_from_1_that_traces_differently_gets_its_own_program(spec_form):
    T, S = Dim("T", min=1, max=64), Dim("S", min=1, max=64)
    spec = ({1: T}, {1: S}) if spec_form == "tuple" else {"y": {1: S}, "x": {1: T}}
    m = _BranchOnT().eval()
    npu = compile_torch(m, torch.randn(1, 8, 4), torch.randn(1, 5, 4), dynamic_shapes=spec, cache=False)
    art = npu.artifact
    assert art.symbols == [["T", 1, 64], ["S", 1, 64]]
    assert [p.ranges for p in art.programs] == [[[1, 1], [1, 64]], [[2, 64], [1, 64]]]
    assert "at least 2" in art.programs[0].reason and "(T = 1)" in art.programs[0].reason
    _agrees(m, npu, PAIRS)


def test_two_dims_from_1_split_into_a_program_per_differing_box():
    T, S = Dim("T", min=1, max=64), Dim("S", min=1, max=64)
    m = _BranchOnBoth().eval()
    npu = compile_torch(m, torch.randn(1, 8, 4), torch.randn(1, 5, 4), dynamic_shapes=({1: T}, {1: S}), cache=False)
    boxes = sorted(p.ranges for p in npu.artifact.programs)
    assert boxes == [[[1, 1], [1, 64]], [[2, 64], [1, 1]], [[2, 64], [2, 64]]]
    _agrees(m, npu, PAIRS)


def test_nested_spec_aligned_like_torch():
    class Pair(torch.nn.Module):
        def forward(self, x, pair):
            a, b = pair
            return x * 2.0 + a.sum(1, keepdim=True) - b.mean(1, keepdim=True)

    T, S = Dim("T", min=1, max=32), Dim("S", min=1, max=32)
    m = Pair().eval()
    args = (torch.randn(1, 6, 4), (torch.randn(1, 5, 4), torch.randn(1, 3, 4)))
    npu = compile_torch(m, *args, dynamic_shapes={"x": {1: T}, "pair": ({1: S}, None)}, cache=False)
    assert [s[0] for s in npu.artifact.symbols] == ["T", "S"]
    for t, s in [(1, 1), (9, 2), (32, 32)]:
        x, a, b = torch.randn(1, t, 4), torch.randn(1, s, 4), torch.randn(1, 3, 4)
        torch.testing.assert_close(npu(x, a, b), m(x, (a, b)), rtol=1e-4, atol=1e-4)  # flat, as exported


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"x": {1: Dim("T", max=8)}, "z": None}, r"names \['z'\], which are not parameters of forward \['x', 'y'\]"),
        (({1: Dim("T", max=8)},), "has 1 entries but forward takes 2 arguments"),
        ({"x": {1: Dim("T", max=8)}, "y": ({1: Dim("S", max=8)},)}, r"at `dynamic_shapes\['y'\]` to have the same"),
        ({1: Dim("T", max=8)}, r"names \[1\], which are not parameters"),
        (Dim("T", max=8), "must be a tuple, list or dict"),
    ],
)
def test_spec_torch_would_reject_is_a_clear_error(spec, message):
    from novella_mlir.errors import NovellaError

    with pytest.raises(NovellaError, match=message):
        compile_torch(_BranchOnT(), torch.randn(1, 4, 4), torch.randn(1, 4, 4), dynamic_shapes=spec, cache=False)


def test_dim_from_0_that_traces_differently_at_1_says_what_to_do():
    from novella_mlir.errors import NovellaError

    spec = ({1: Dim("T", max=16)}, {1: Dim("S", min=1, max=16)})
    with pytest.raises(
        NovellaError, match=r"T = 1 traces differently .*; T = 0 fails: .* empty tensor.*\nGive the Dim min=1"
    ):
        compile_torch(_BranchOnT(), torch.randn(1, 8, 4), torch.randn(1, 5, 4), dynamic_shapes=spec, cache=False)
