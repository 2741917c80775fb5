"""Batched matmul, softmax and attention on dynamic dims, against PyTorch eager.

Op-level cases are written as novella IR (so `transpose_rhs` and the
symbolic contraction dim are exercised directly) and run through the whole
backend, the JIT and the simulator; model-level cases go through
`compile_torch`. Lengths hit 1, the tile size and its neighbours, an odd
length and the maximum."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch_mlir import ir

from novella_mlir import NovellaError, compile_torch
from novella_mlir.artifact.extract import extract
from novella_mlir.dialects.context import make_context
from novella_mlir.runtime.executor import Executor
from novella_mlir.transforms.registry import BACKEND_PIPELINE, run_passes
from simulator import load_config

TOL = dict(rtol=1e-4, atol=1e-4)
MAX_LEN = 300


def _ty(shape) -> str:
    """tensor type text; "T" is the symbol s0, "T*T" its square."""
    dims = "x".join("?" if isinstance(d, str) else str(d) for d in shape)
    if all(isinstance(d, int) for d in shape):
        return f"tensor<{dims}xf32>"
    exprs = ", ".join({"T": "s0", "T*T": "s0 * s0"}.get(d, str(d)) for d in shape)
    return f"tensor<{dims}xf32, affine_map<()[s0] -> ({exprs})>>"


def _module(args, body: str, result, max_len=MAX_LEN) -> str:
    params = ", ".join(f"%{name}: {_ty(shape)}" for name, shape in args)
    return (
        f'module attributes {{novella.symbols = {{s0 = ["T", 1, {max_len}]}}}} {{\n'
        f"  func.func @f({params}) -> {_ty(result)} {{\n{body}\n    return %y : {_ty(result)}\n  }}\n}}"
    )


class IrModel:
    """A novella IR function compiled by the backend pipeline, runnable on the simulator."""

    def __init__(self, text: str, config=None):
        self.config = config or load_config()
        with make_context(), ir.Location.unknown():
            module = ir.Module.parse(text)
            run_passes(module, list(BACKEND_PIPELINE), self.config)
            self.ir = str(module)
            self.executor = Executor(extract(module, {}, self.config), self.config)

    def __call__(self, *arrays):
        return torch.from_numpy(self.executor.run([np.asarray(a, np.float32) for a in arrays])[0])


def tiles(ir_text: str, kernel: str) -> dict:
    """The `tiles` chosen for the first macro of `kernel`."""
    line = next(ln for ln in ir_text.splitlines() if f'kernel = "{kernel}"' in ln)
    body = re.search(r"\btiles = \{([^}]*)\}", line).group(1)
    return {k: int(v) for k, v in re.findall(r"(\w+) = (\d+)", body)}


EDGES = ("1", "tile-1", "tile", "tile+1", "odd", "max")


def lengths(tile: int, max_len: int = MAX_LEN, odd: int = 201) -> list[int]:
    return sorted({1, tile - 1, tile, tile + 1, odd, max_len})


def edge_length(edge: str, tile: int, max_len: int, odd: int) -> int:
    return {"1": 1, "tile-1": tile - 1, "tile": tile, "tile+1": tile + 1, "odd": odd, "max": max_len}[edge]


def _mm(lhs, rhs, out, transpose: bool) -> str:
    tr = "true" if transpose else "false"
    return f'    %y = "novella.matmul"(%a, %b) {{transpose_rhs = {tr}}} : ({_ty(lhs)}, {_ty(rhs)}) -> {_ty(out)}'


# ------------------------------------------------------------------ matmul (IR level)


@pytest.fixture(scope="module")
def qk():
    q, s = [2, "T", 64], [2, "T", "T"]
    return IrModel(_module([("a", q), ("b", q)], _mm(q, q, s, True), s))


@pytest.fixture(scope="module")
def pv():
    p, v = [2, "T", "T"], [2, "T", 64]
    return IrModel(_module([("a", p), ("b", v)], _mm(p, v, v, False), v, max_len=PV_MAX))


def test_qk_tiles_both_dynamic_dims(qk):
    t = tiles(qk.ir, "novella.matmul")
    assert 64 % t["tk"] == 0 and t["tm"] < MAX_LEN and t["tn"] < MAX_LEN
    assert "transpose_b = 1" in qk.ir.replace("transpose_b = 1 : i64", "transpose_b = 1")


@pytest.mark.parametrize("length", lengths(256))
def test_matmul_q_kt_scores(qk, length):
    assert tiles(qk.ir, "novella.matmul")["tm"] == 256  # the lengths straddle a row tile (the cost model's)
    q, k = torch.randn(2, length, 64), torch.randn(2, length, 64)
    y = qk(q, k)
    assert y.shape == (2, length, length)
    torch.testing.assert_close(y, q @ k.transpose(1, 2), **TOL)


PV_MAX = 700


@pytest.mark.parametrize("length", lengths(64, PV_MAX, 601))
def test_matmul_p_v_dynamic_contraction(pv, length):
    assert tiles(pv.ir, "novella.matmul")["tk"] == 64  # the lengths straddle a k tile (the cost model's)
    p, v = torch.randn(2, length, length), torch.randn(2, length, 64)
    torch.testing.assert_close(pv(p, v), p @ v, **TOL)


def test_matmul_broadcast_batch_and_partial_n():
    a, b, out = [3, "T", 40], [1, 40, 24], [3, "T", 24]
    model = IrModel(_module([("a", a), ("b", b)], _mm(a, b, out, False), out, max_len=100))
    for length in (1, 37, 100):
        x, w = torch.randn(3, length, 40), torch.randn(1, 40, 24)
        torch.testing.assert_close(model(x, w), x @ w, **TOL)


def test_transpose_folds_into_matmul():
    q, kt, s = [2, "T", 64], [2, 64, "T"], [2, "T", "T"]
    body = (
        f'    %t = "novella.transpose"(%b) {{perm = array<i64: 0, 2, 1>}} : ({_ty(q)}) -> {_ty(kt)}\n'
        f'    %y = "novella.matmul"(%a, %t) {{transpose_rhs = false}} : ({_ty(q)}, {_ty(kt)}) -> {_ty(s)}'
    )
    model = IrModel(_module([("a", q), ("b", q)], body, s, max_len=64))
    assert "novella.transpose" not in model.ir and "transpose_b = 1 : i64" in model.ir  # the MATMUL reads k^T
    a, b = torch.randn(2, 33, 64), torch.randn(2, 33, 64)
    torch.testing.assert_close(model(a, b), a @ b.transpose(1, 2), **TOL)


# ------------------------------------------------------------------ softmax (IR level)


def assert_probs_close(got, want, rtol=1e-4):
    """Softmax outputs compared as probabilities: rows sum to 1, every probability above 1e-30
    matches to `rtol` relatively, the rest are below 1e-29. (An absolute 1e-4 accepts almost any
    answer on a long row, whose probabilities are mostly far below 1e-4.)"""
    got, want = torch.as_tensor(got).double(), torch.as_tensor(want).double()
    torch.testing.assert_close(got.sum(-1), torch.ones_like(want.sum(-1)), rtol=0, atol=1e-5)
    big = want > 1e-30
    torch.testing.assert_close(got[big], want[big], rtol=rtol, atol=0)
    assert (got[~big] <= 1e-29).all(), "probabilities that should underflow do not"


def _softmax_model(shape, max_len, scale=None):
    attr = f"novella.scale = {scale} : f32, " if scale else ""
    body = f'    %y = "novella.softmax"(%a) {{{attr}safe = false}} : ({_ty(shape)}) -> {_ty(shape)}'
    return IrModel(_module([("a", shape)], body, shape, max_len=max_len))


def test_softmax_whole_rows_with_fused_scale():
    """A static row length that fits is done in one pass; a dynamic one is always chunked
    (the tiling must not depend on max_len)."""
    model = _softmax_model([2, "T", 96], MAX_LEN, scale=0.125)
    assert tiles(model.ir, "novella.softmax")["chunked"] == 0
    assert tiles(_softmax_model([2, "T", "T"], MAX_LEN).ir, "novella.softmax")["chunked"] == 1
    for length in (1, 129, MAX_LEN):
        x = torch.randn(2, length, 96) * 8
        assert_probs_close(model(x), torch.softmax(x * 0.125, -1))


@pytest.fixture(scope="module")
def long_rows_softmax():
    return _softmax_model([40, "T"], 5000, scale=0.5)


@pytest.mark.parametrize("edge", EDGES)
def test_softmax_chunked_online_with_fused_scale(long_rows_softmax, edge):
    t = tiles(long_rows_softmax.ir, "novella.softmax")
    assert t["chunked"] == 1 and t["tc"] < 4096
    length = edge_length(edge, t["tc"], 5000, 4097)
    x = torch.randn(40, length) * 10
    assert_probs_close(long_rows_softmax(x), torch.softmax(x * 0.5, -1))


# ------------------------------------------------------------------ frontend (compile_torch)


class Unary(torch.nn.Module):
    def __init__(self, fn, *params):
        super().__init__()
        self.fn = fn
        self.params = torch.nn.ParameterList(params)

    def forward(self, x):
        return self.fn(x, *self.params)


class Ternary(Unary):
    def forward(self, q, k, v):
        return self.fn(q, k, v)


def _compile(fn, *examples, params=(), dynamic_dim=1, max_len=MAX_LEN, **kw):
    model = (Unary if len(examples) == 1 else Ternary)(fn, *params).eval()
    return model, compile_torch(model, *examples, dynamic_dim=dynamic_dim, min_len=1, max_len=max_len, **kw)


def test_bmm_with_weight_frontend():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(2, 64, 48))
    model, npu = _compile(torch.bmm, torch.randn(2, 16, 64), params=[w])
    assert "novella.matmul" in npu.ir("novella")
    for length in (1, 65, MAX_LEN):
        x = torch.randn(2, length, 64)
        torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


def test_matmul_rank4_broadcast_frontend():
    """aten.matmul kept whole (empty decomposition table): rank 4, weight broadcast over the batch."""
    w = torch.nn.Parameter(torch.randn(1, 1, 32, 16))
    model, npu = _compile(torch.matmul, torch.randn(2, 3, 16, 32), params=[w], dynamic_dim=2, decomposition_table={})
    assert "torch.aten.matmul" in npu.ir("torch")
    for length in (1, 77):
        x = torch.randn(2, 3, length, 32)
        torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


def test_matmul_rank_mismatch_by_a_weight_is_a_linear():
    """rank 3 @ rank 2 by a weight: the rows flattened, one novella.linear (the hand kernel)."""
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(32, 16))
    model, npu = _compile(torch.matmul, torch.randn(2, 16, 32), params=[w], decomposition_table={})
    assert "novella.linear" in npu.ir("novella")
    for length in (1, 65, MAX_LEN):
        x = torch.randn(2, length, 32)
        torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


@pytest.mark.parametrize("fn", [lambda x: torch.softmax(x, -1), lambda x: torch.ops.aten._softmax(x, 2, False)])
def test_softmax_rows_frontend(fn):
    model, npu = _compile(fn, torch.randn(2, 16, 64))
    for length in (1, 33, MAX_LEN):
        x = torch.randn(2, length, 64) * 4
        assert_probs_close(npu(x), model(x))


@pytest.fixture(scope="module")
def long_softmax():
    return _compile(lambda x: torch.softmax(x, -1), torch.randn(3, 16), max_len=5000)


@pytest.mark.parametrize("edge", EDGES)
def test_softmax_long_rows_frontend(long_softmax, edge):
    model, npu = long_softmax
    t = tiles(npu.ir("novella-macro-gen"), "novella.softmax")
    assert t["chunked"] == 1
    length = edge_length(edge, t["tc"], 5000, 4097)
    x = torch.randn(3, length) * 10
    want = model(x)
    assert_probs_close(npu(x), want)
    zeroed = want.clone()
    zeroed[:, -1] = 0
    with pytest.raises(AssertionError):  # the comparison is not blind to a lost column
        assert_probs_close(zeroed, want)


def test_softmax_over_the_dynamic_dim():
    # the dim moves last (a last-two swap), softmax over the `?` row, and back
    model, npu = _compile(lambda x: torch.softmax(x, 1), torch.randn(2, 16, 64))
    for length in (1, 65, MAX_LEN):
        x = torch.randn(2, length, 64)
        torch.testing.assert_close(npu(x), model(x), **TOL)


# ------------------------------------------------------------------ attention


class Attention(torch.nn.Module):
    """q, k, v projections of one input (so they share its length), then SDPA."""

    def __init__(self, dim=64, **sdpa_kwargs):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(dim, dim) for _ in range(3))
        self.sdpa_kwargs = sdpa_kwargs

    def forward(self, x):
        return F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x), **self.sdpa_kwargs)


@pytest.fixture(scope="module")
def sdpa():
    torch.manual_seed(0)
    model = Attention().eval()
    npu = compile_torch(model, torch.randn(1, 2, 16, 64), dynamic_dim=2, min_len=1, max_len=MAX_LEN)
    return model, npu


def test_sdpa_lowers_to_attention_then_fuses(sdpa):
    """attention decomposes into matmul, softmax, matmul, which fuse into one flash_attention
    (test_flash_attention.py; fuse-attention=0 keeps the three)."""
    _, npu = sdpa
    assert "novella.attention" in npu.ir("novella")
    legal = npu.ir("novella-legalize")
    assert "novella.attention" not in legal and legal.count('"novella.matmul"') == 0
    assert '"novella.flash_attention"' in legal and "scale = 1.250000e-01" in legal


@pytest.mark.parametrize("length", lengths(128))
def test_sdpa_matches_pytorch(sdpa, length):
    model, npu = sdpa
    x = torch.randn(1, 2, length, 64)
    torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


def test_sdpa_explicit_scale_rank3_heads_as_batch():
    torch.manual_seed(1)
    model = Attention(dim=32, scale=1.0).eval()
    npu = compile_torch(model, torch.randn(3, 16, 32), dynamic_dim=1, min_len=1, max_len=160)
    for length in (1, 131):
        x = torch.randn(3, length, 32)
        torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


def test_sdpa_unrelated_lengths_are_rejected():
    examples = [torch.randn(1, 2, 16, 64) for _ in range(3)]
    spec = tuple({2: torch.export.Dim(n, min=1, max=MAX_LEN)} for n in ("T", "K", "V"))
    with pytest.raises(NovellaError, match=r"scaled_dot_product_attention.*key length .* value length"):
        _compile(F.scaled_dot_product_attention, *examples, dynamic_shapes=spec)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(dropout_p=0.1), "dropout_p=0.1"),
    ],
)
def test_sdpa_unsupported_options_name_op_and_line(kwargs, message):
    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    examples = [torch.randn(1, 2, 16, 64) for _ in range(3)]
    with pytest.raises(NovellaError) as info:
        _compile(fn, *examples, dynamic_dim=2)
    text = str(info.value)
    assert message in text and "scaled_dot_product_attention" in text
    assert re.search(r"test_attention_ops\.py:\d+", text), text


def test_transpose_behind_batch_reshape_folds():
    """The eager attention shape: bmm(q, view(expand(permute(k, [0, 1, 3, 2])))) once shape ops are lowered."""
    k4, kt4, kt, q, s = [1, 2, "T", 64], [1, 2, 64, "T"], [2, 64, "T"], [2, "T", 64], [2, "T", "T"]
    body = (
        f'    %t = "novella.transpose"(%b) {{perm = array<i64: 0, 1, 3, 2>}} : ({_ty(k4)}) -> {_ty(kt4)}\n'
        f'    %r = "novella.reshape"(%t) : ({_ty(kt4)}) -> {_ty(kt)}\n'
        f'    %y = "novella.matmul"(%a, %r) {{transpose_rhs = false}} : ({_ty(q)}, {_ty(kt)}) -> {_ty(s)}'
    )
    model = IrModel(_module([("a", q), ("b", k4)], body, s, max_len=64))
    assert "novella.transpose" not in model.ir and "transpose_b = 1 : i64" in model.ir  # the MATMUL reads k^T
    a, b = torch.randn(2, 40, 64), torch.randn(1, 2, 40, 64)
    torch.testing.assert_close(model(a, b), a @ b[0].transpose(1, 2), **TOL)


class MultiHeadAttention(torch.nn.Module):
    """Whisper's layout without its q scaling: view + transpose to heads, SDPA, back, out projection."""

    def __init__(self, dim=128, heads=2):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (torch.nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        b, t, d = x.shape

        def split(y):
            return y.view(b, t, self.heads, d // self.heads).transpose(1, 2)

        y = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)), scale=0.125)
        return self.o(y.transpose(1, 2).reshape(b, t, d))


def test_multi_head_attention_with_shape_ops():
    torch.manual_seed(0)
    model = MultiHeadAttention().eval()
    npu = compile_torch(model, torch.randn(1, 20, 128), dynamic_dim=1, min_len=2, max_len=MAX_LEN)
    for length in (2, 129, MAX_LEN):
        x = torch.randn(1, length, 128)
        torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_whisper_attention(impl):
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperAttention

    config = WhisperConfig(d_model=128, encoder_attention_heads=2)
    config._attn_implementation = impl
    torch.manual_seed(0)
    attn = WhisperAttention(128, 2, config=config).eval()
    model = Unary(lambda x: attn(x)[0]).eval()
    model.attn = attn
    npu = compile_torch(model, torch.randn(1, 20, 128), dynamic_dim=1, min_len=2, max_len=MAX_LEN)
    for length in (2, 129, MAX_LEN):
        x = torch.randn(1, length, 128)
        torch.testing.assert_close(npu(x), model(x).detach(), **TOL)
