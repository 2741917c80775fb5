"""Edge cases of issue 8's op families that OpInfo found, each against eager at lengths 1, odd, a partial
last tile and the maximum: var/std whose correction reaches the element count (nan / inf, as eager),
select and slices counted from the end of a `?` dim (a start the JIT evaluates), matrix norms with
ord 1, -1, inf, -inf on a `?` dim, and the errors for empty results and for reading before the start."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError

LENGTHS = (1, 2, 7, 65, 130)  # 65: a partial last 64-row tile


class Lambda(torch.nn.Module):  # not lambda_module's: the messages tested here name forward's file and line
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def check(fn, shape, dim, lengths=LENGTHS, lo=1, hi=130, atol=1e-4):
    module = Lambda(fn)
    npu = compile_torch(module, torch.randn(*shape), dynamic_dim=dim, min_len=lo, max_len=hi)
    for n in lengths:
        size = list(shape)
        size[dim] = n
        x = torch.randn(size, generator=torch.Generator().manual_seed(n))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # eager warns when the correction reaches the count
            want = module(x)
        got = npu(x)
        for i, (g, w) in enumerate(zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,))))):
            assert g.shape == w.shape, f"T={n} output {i}: {list(g.shape)} vs eager {list(w.shape)}"
            ok = torch.allclose(g, w, atol=atol, rtol=1e-4, equal_nan=True)
            assert ok and torch.equal(g.isnan(), w.isnan()) and torch.equal(g.isinf(), w.isinf()), (
                f"T={n} output {i}: {g.flatten()[:4].tolist()} vs eager {w.flatten()[:4].tolist()}"
            )


@pytest.mark.parametrize("correction", [0, 1, 1.3, 2])
def test_var_std_over_the_length_with_a_correction(correction):
    # T=1: max(1 - c, 0) = 0 for c >= 1, so 0 / 0 = nan; T=2, c=2: a positive sum / 0 = inf
    check(lambda x: (x.var(1, correction=correction), x.std(1, correction=correction, keepdim=True),
                     x.var((0, 1), correction=correction)), (3, 8, 4), 1)  # fmt: skip


def test_var_over_a_static_dim_no_larger_than_the_correction():
    check(lambda x: (x.var(2, correction=2), x.std(2, correction=3)), (3, 8, 2), 1, (1, 7, 65))


def test_select_from_the_end_of_the_length():
    # dim 1: a column range of each row; dim 0: a row range; the start is T - k at run time
    check(lambda x: (x.select(1, -1), x[:, -1] * 2, x[..., -1]), (3, 8, 5), 1)
    check(lambda x: (x.select(0, -1), x[-1] + 1), (8, 3, 4), 0)
    check(lambda x: x.select(2, -1), (3, 4, 8), 2)


def test_slices_from_the_end_of_the_length():
    check(lambda x: (x[:, -3:], x[:, -3:-1], x.select(1, -3)), (2, 8, 5), 1, (3, 7, 65, 130), lo=3)
    check(lambda x: x[-2:], (8, 64), 0, (2, 7, 65, 130), lo=2)


def test_reading_before_the_start_names_the_op_the_line_and_min_len():
    with pytest.raises(NovellaError) as e:
        compile_torch(Lambda(lambda x: x[:, -3:]), torch.randn(2, 8), dynamic_dim=1, min_len=1, max_len=16)
    msg = str(e.value)
    assert "test_op_edges.py:" in msg and "'torch.aten.slice.Tensor'" in msg
    assert "can be as small as 1" in msg and "raise min_len so that the size is at least 3" in msg
    with pytest.raises(NovellaError, match=r"'torch.aten.select.int': select\(1, -2\) reads position 2 from the end"):
        compile_torch(Lambda(lambda x: x[:, -2]), torch.randn(2, 8), dynamic_dim=1, min_len=1, max_len=16)


@pytest.mark.parametrize(
    "fn",
    [lambda x: x.narrow(1, 1, 0), lambda x: x.repeat(0, 1), lambda x: x[:, 3:3]],
    ids=["narrow-0", "repeat-0", "slice-0"],
)
def test_an_empty_result_says_what_to_do(fn):
    with pytest.raises(NovellaError) as e:
        compile_torch(Lambda(fn), torch.randn(3, 8), dynamic_dim=1, min_len=1, max_len=16)
    msg = str(e.value)
    assert "test_op_edges.py:" in msg and "'torch.aten." in msg and "the result is an empty tensor" in msg
    assert "remove the op from the model, or build the empty tensor outside it" in msg


@pytest.mark.parametrize("ord_", [1, -1, math.inf, -math.inf])
def test_matrix_norms_with_ord_1_and_inf_over_the_length(ord_):
    mn, norm = torch.linalg.matrix_norm, torch.linalg.norm
    fns = lambda x: (mn(x, ord_), mn(x, ord_, (-1, 0), keepdim=True), mn(x, ord_, (0, 2)),  # noqa: E731
                     norm(x[0], ord_), norm(x, ord_, (1, 2), keepdim=True))  # fmt: skip
    check(fns, (2, 8, 3), 1)


def test_linalg_norm_inf_of_a_matrix_whose_rows_are_the_length():
    check(lambda x: (torch.linalg.norm(x, math.inf), torch.linalg.norm(x, -math.inf)), (8, 3), 0)


def test_the_python_kernel_is_registered_only_while_tracing():
    from novella_mlir.frontend.traceable import symbolic_kernels

    op = torch.ops.aten.linalg_matrix_norm.default
    with symbolic_kernels():
        assert torch._C.DispatchKey.CompositeImplicitAutograd in op.py_kernels
    assert torch._C.DispatchKey.CompositeImplicitAutograd not in op.py_kernels


def test_a_kernel_that_fixes_the_length_is_named_with_its_line():
    with pytest.raises(NovellaError) as e:
        compile_torch(Lambda(lambda x: torch.kron(x, x)), torch.randn(5, 3), dynamic_dim=0, min_len=1, max_len=64)
    msg = str(e.value)
    assert msg.startswith("`torch.kron` at ") and "test_op_edges.py:" in msg and "torch.kron(x, x)" in msg
    assert "fixes the size of dim 0 instead of keeping it symbolic in [1, 64]" in msg and "min_len == max_len" in msg
