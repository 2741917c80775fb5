"""Issue 8 op families on `?` dims, each compiled once and checked against eager at lengths 1, odd,
a partial last tile and the maximum: flip, argmax/argmin, vector and matrix norms, softplus/mish,
expm1/log1p near 0 (relative error), a transpose that keeps the length last, a linear whose input
features are the length, a reduction over dim 0 of a rank-4 tensor, and the non-f32 error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError, UnsupportedDtypeError


def _sized(x: torch.Tensor, dim: int, n: int, seed: int, ties: bool) -> torch.Tensor:
    shape = list(x.shape)
    shape[dim] = n
    g = torch.Generator().manual_seed(seed)
    if ties:  # few distinct values: argmax/argmin must pick the first of equal ones
        return torch.randint(-3, 4, shape, generator=g).float()
    return torch.randn(shape, generator=g)


def check(fn, example, dim, hi, lengths, atol=1e-5, rtol=1e-5, ties=False):
    module = Lambda(fn)
    npu = compile_torch(module, *example, dynamic_dim=dim, min_len=1, max_len=hi)
    for n in lengths:
        xs = [_sized(x, dim, n, seed=i + 7 * n, ties=ties) for i, x in enumerate(example)]
        with torch.no_grad():
            want = module(*xs)
        got = npu(*xs)
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, (
                f"T={n} output {i}: {g.dtype}{list(g.shape)} vs eager {w.dtype}{list(w.shape)}"
            )
            ok = torch.allclose(g.float(), w.float(), atol=atol, rtol=rtol)
            assert ok, f"T={n} output {i}: max error {(g.float() - w.float()).abs().max()}"


def test_flip_any_dim_and_several_dims():
    # dim 1 dynamic: rows form (64-row tiles: 65 is partial), columns form for dims 0 and 2
    check(lambda x: (x.flip(1), x.flip(0), x.flip(-1), x.flip(0, 1, 2)), [torch.randn(2, 8, 5)], 1, 130,
          (1, 2, 33, 65, 130))  # fmt: skip


def test_flip_with_the_length_last():
    check(lambda x: (x.flip(0), x.flip(1)), [torch.randn(3, 8)], 1, 130, (1, 7, 65, 130))


def test_flip_of_a_vector_is_exact():
    # one element per row (a decode mask's reversed positions): 64-element tiles reversed as [8, 8]
    # (two transposes, 18 VECs); lengths around the tile edges and several tiles, bit-exact
    check(lambda x: (x.flip(0), x.flip(0) + 1), [torch.randn(8)], 0, 1100, (1, 16, 63, 64, 65, 1001, 1100),
          atol=0, rtol=0)  # fmt: skip


def test_argmax_argmin_first_index_any_dim():
    fns = lambda x: (  # noqa: E731
        x.argmax(1),
        x.argmin(1, keepdim=True),
        x.argmax(-1),
        x.argmin(0, keepdim=True),
        x.argmax(),
        x.argmin(),
    )
    check(fns, [torch.randn(3, 8, 4)], 1, 130, (1, 2, 33, 65, 130), atol=0, rtol=0, ties=True)


def test_argmax_counts_nan_as_the_maximum():
    npu = compile_torch(Lambda(lambda x: x.argmax(1)), torch.randn(2, 8), dynamic_dim=1, min_len=1, max_len=32)
    x = torch.tensor([[1.0, 5.0, float("nan"), 7.0, float("nan")], [0.0, 2.0, 2.0, -1.0, 1.0]])
    assert torch.equal(npu(x), x.argmax(1))


def test_vector_norms():
    def norms(x):
        v = torch.linalg.vector_norm
        return (v(x, 1, dim=1), v(x, 2, dim=1, keepdim=True), v(x, float("inf"), dim=1), v(x, float("-inf"), dim=-1),
                v(x, 0, dim=1), v(x, 3.5, dim=1), torch.norm(x, 3, dim=1), torch.norm(x))  # fmt: skip

    check(norms, [torch.randn(3, 8, 4)], 1, 130, (1, 7, 65, 130), atol=1e-4, rtol=1e-4)


def test_matrix_norm_fro_and_nuc_refused():
    check(lambda x: torch.linalg.matrix_norm(x), [torch.randn(2, 8, 3)], 1, 100, (1, 7, 65, 100), atol=1e-4)
    for ord_, shown in (("nuc", "'nuc'"), (2, "2")):
        with pytest.raises(NovellaError, match=f"matrix_norm with ord={shown} needs a singular value decomposition"):
            compile_torch(Lambda(lambda x, o=ord_: torch.linalg.matrix_norm(x, o)), torch.randn(2, 8, 3), min_len=1,
                          max_len=16)  # fmt: skip


def test_linalg_norm_vector_and_matrix_and_fliplr_flipud():
    def norms(x):
        n = torch.linalg.norm
        m = x[0]  # [T, 4]: a matrix norm over the length
        return (n(x), n(x, 3, dim=1), n(x, dim=(1, 2), keepdim=True), n(m, 1), n(m, -1), n(m, "fro"),
                torch.fliplr(x), torch.flipud(x))  # fmt: skip

    check(norms, [torch.randn(3, 8, 4)], 1, 100, (1, 7, 65, 100), atol=1e-4, rtol=1e-5)


def test_softplus_with_beta_threshold_and_mish():
    check(lambda x: (F.softplus(x), F.softplus(x, beta=2.0, threshold=1.5), F.mish(x)), [torch.randn(2, 8)], 1,
          130, (1, 33, 65, 130), atol=1e-5)  # fmt: skip


def test_expm1_log1p_relative_error_near_0():
    npu = compile_torch(Lambda(lambda x: (torch.expm1(x), torch.log1p(x))), torch.randn(2, 8), dynamic_dim=1,
                        min_len=1, max_len=64)  # fmt: skip
    x = torch.tensor([[1e-30, -3e-12, 1e-8, -1e-7, 2e-5, -4e-4, 0.3, 2.0, -0.6]]).repeat(2, 1)
    for got, want in zip(npu(x), (torch.expm1(x.double()), torch.log1p(x.double()))):
        rel = ((got.double() - want).abs() / want.abs()).max()
        assert rel < 2**-22, f"relative error {rel}"


def test_transpose_keeping_the_length_last():
    # rows of T elements move in 256-column chunks: 257 and 600 have a partial last chunk
    check(lambda x: (x.permute(1, 0, 2) * 2, x.transpose(0, 1).amax(0), x.sum(0)), [torch.randn(3, 4, 8)], 2, 600,
          (1, 7, 257, 600))  # fmt: skip


def test_linear_with_the_length_as_input_features():
    # the weight is an input sized by the length too: matmul(transpose_rhs) over a symbolic k loop
    check(lambda x, w: F.linear(x, w) + 1, [torch.randn(5, 8), torch.randn(3, 8)], 1, 300, (1, 7, 65, 300), atol=1e-4)
    check(lambda x, w: x @ w.t(), [torch.randn(5, 8), torch.randn(3, 8)], 1, 300, (1, 65, 300), atol=1e-4)


def test_reduction_over_dim_0_of_a_rank_4_tensor():
    # the swap to the last dim reorders the other dims; the result must be swapped back, not reshaped
    check(lambda x: (x.sum(0), x.amax(1, keepdim=True), x.mean(0)), [torch.randn(2, 3, 8, 5)], 2, 70, (1, 7, 70),
          atol=1e-5)  # fmt: skip


class _Halves(torch.nn.Module):
    def forward(self, x):
        y = x.half()  # the producing line
        return y * 2


def test_non_f32_value_names_the_op_and_line_that_produce_it():
    with pytest.raises(UnsupportedDtypeError) as e:
        compile_torch(_Halves(), torch.randn(2, 8), min_len=1, max_len=16)
    msg = str(e.value)
    assert "test_op_families.py:" in msg and "`y = x.half()  # the producing line`" in msg
    assert "'torch.aten.to.dtype'" in msg and "float16" in msg and "float32" in msg


def test_non_f32_value_in_a_library_quotes_the_library_line(tmp_path, monkeypatch):
    """A model library's op (installed under site-packages) is quoted at its own line, not at the user's
    line that calls the library."""
    lib = tmp_path / "site-packages"
    lib.mkdir()
    (lib / "f16_lib.py").write_text(
        "import torch\n\n\ndef angles(x):\n    return x.to(torch.bfloat16) * 3  # the lib\n"
    )
    monkeypatch.syspath_prepend(str(lib))
    import f16_lib

    with pytest.raises(UnsupportedDtypeError) as e:
        compile_torch(Lambda(lambda x: f16_lib.angles(x).float()), torch.randn(2, 8), min_len=1, max_len=16)
    msg = str(e.value)
    assert "(in " in msg and "f16_lib.py:5)" in msg and "`return x.to(torch.bfloat16) * 3  # the lib`" in msg


class _F64Rope(torch.nn.Module):
    """ergo's RoPE: the angles in float64 for their phase at long positions, then cast back."""

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor([1.0, 0.5, 0.25, 0.125], dtype=torch.float64))

    def forward(self, x):
        pos = torch.arange(x.shape[1])[None, :, None]
        emb = torch.repeat_interleave(pos.double() * self.scale, 2, dim=-1)  # the float64 line
        return x * emb.cos().to(x.dtype) + x.flip(-1) * emb.sin().float()


def test_float64_is_demoted_to_float32_and_said_so():
    """float64 parameters, buffers and ops compute in float32 (as IREE's default f64 demotion does): a
    warning names the first op and line, and the function's `novella.demoted_f64` lists every op."""
    m = _F64Rope()
    with pytest.warns(UserWarning, match=r"float64 in the model and in float32.*test_op_families.py:\d+"):
        cm = compile_torch(m, torch.randn(1, 9, 8), dynamic_dim=1, min_len=1, max_len=70)
    demoted = cm.ir("novella").split("novella.demoted_f64 = [")[1].split("]")[0]
    assert demoted.count("test_op_families.py:") >= 3, demoted
    for n in (1, 9, 33, 70):
        x = torch.randn(1, n, 8)
        torch.testing.assert_close(cm(x), m(x), atol=1e-5, rtol=1e-5)


def test_an_empty_result_is_refused_naming_the_op():
    with pytest.raises(
        NovellaError, match=r"'torch.aten.repeat': repeat\(0, 2\) has a 0 count, so the result is an empty"
    ):
        compile_torch(Lambda(lambda x: x.repeat(0, 2)), torch.randn(3, 2), dynamic_dim=0, min_len=1, max_len=16)


class _Bf16Normalizer(torch.nn.Module):
    """recurrent_gemma's `normalizer`: a bfloat16 buffer cast up before use (its values are exact in f32)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("normalizer", torch.tensor(384**0.5, dtype=torch.bfloat16), persistent=False)
        self.register_buffer("table", torch.randn(8).to(torch.bfloat16))

    def forward(self, x):
        return x * self.normalizer.type(x.dtype) + self.table.float()


def test_a_low_precision_buffer_cast_up_is_held_exactly():
    m = _Bf16Normalizer()
    cm = compile_torch(m, torch.randn(1, 9, 8), dynamic_dim=1, min_len=1, max_len=70)
    for n in (1, 9, 33, 70):
        x = torch.randn(1, n, 8)
        torch.testing.assert_close(cm(x), m(x), atol=1e-5, rtol=1e-5)
