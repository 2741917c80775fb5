"""The generic path: ops the op table lacks, through torch's decompositions and torch-mlir's linalg lowering,
checked against eager at lengths 1, odd, a partial last tile and the maximum."""

from __future__ import annotations

import re

import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.errors import UnsupportedOpError

F = torch.nn.functional
LENGTHS = (1, 7, 17, 40)


class Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


CASES = {
    "min_other": lambda x: torch.min(x, x * 0.5 + 0.25),  # aten.min.other: torch-mlir's FX decomposition
    "softshrink": lambda x: F.softshrink(x, 0.2),  # FX decomposition (torch-mlir's C++ one gets x < -l wrong)
    "logaddexp2": lambda x: torch.logaddexp2(x, x.flip(-1)),  # convert-torch-to-linalg: math.log2, math.exp2
    "selu": F.selu,
    "nansum": lambda x: torch.nansum(x, dim=-1),  # a reduction: novella.reduce
    "repeat_interleave": lambda x: x.repeat_interleave(2, dim=2),  # expand_shape / broadcast / collapse_shape
    "normalize": lambda x: F.normalize(x, dim=-1),
}


@pytest.mark.parametrize("name", list(CASES))
def test_generic_matches_eager(name):
    torch.manual_seed(0)
    model = Fn(CASES[name]).eval()
    npu = compile_torch(model, torch.randn(1, 8, 32), dynamic_dim=1, min_len=1, max_len=40, cache=False)
    for t in LENGTHS:
        x = torch.randn(1, t, 32)
        want = model(x)
        got = npu(x, check_hazards=t in (1, 17))
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_diff_along_the_length():
    """aten.diff (transformers' packed-sequence check): torch-mlir's FX decomposition, two slices and a sub."""
    model = Fn(lambda x: torch.diff(x, dim=1)).eval()
    npu = compile_torch(model, torch.randn(1, 8, 32), min_len=2, max_len=40, cache=False)
    for t in (2, 7, 17, 40):
        x = torch.randn(1, t, 32)
        torch.testing.assert_close(npu(x), model(x), rtol=1e-6, atol=1e-6)


def test_hand_kernels_do_not_take_the_generic_path():
    npu = compile_torch(Fn(lambda x: torch.relu(x) + x), torch.randn(1, 8, 32), min_len=1, max_len=40, cache=False)
    assert "novella.generic" not in npu.ir("novella")


def test_generic_dims_stay_symbolic():
    npu = compile_torch(
        Fn(lambda x: torch.logaddexp2(x, -x)), torch.randn(1, 8, 32), min_len=1, max_len=40, cache=False
    )
    text = npu.ir("novella")
    assert '"novella.generic"' in text and "tensor<1x?x32xf32" in text


def test_loop_index_body_is_refused_naming_the_op():
    edges = torch.tensor([-1.0, 0.0, 1.0])  # min.dim, the example before, is now amin + argmin
    with pytest.raises(UnsupportedOpError, match=r"aten\.bucketize\.Tensor.*linalg\.index.*optable\.py"):
        compile_torch(Fn(lambda x: torch.bucketize(x, edges).float()), torch.randn(1, 8, 32), min_len=1, max_len=40)


def test_hand_lowering_refusal_falls_back_to_the_generic_path():
    """A rank-3 @ rank-2 matmul (`x @ W.T` by hand), step slices (`x[..., ::2]`) and a pad of the length,
    which the table's lowerings refuse: torch-mlir's batch_matmul, a strided extract_slice and tensor.pad
    as DMA data movement (views, slices, concats with constant blocks)."""
    torch.manual_seed(0)
    w = torch.randn(16, 32)
    model = Fn(lambda x: F.pad((x @ w.T) * x[..., ::2] + x[..., 1::2], (1, 2, 2, 0), value=0.5)).eval()
    npu = compile_torch(model, torch.randn(1, 8, 32), min_len=1, max_len=40, cache=False)
    for t in LENGTHS:
        x = torch.randn(1, t, 32)
        torch.testing.assert_close(npu(x), model(x), rtol=1e-4, atol=1e-4)


def test_group_norm_over_the_length():
    """group_norm's mean divides by a size of the length: that size is computed on the NPU (`size_value`)."""
    torch.manual_seed(0)
    gn = torch.nn.GroupNorm(4, 32).eval()
    model = Fn(lambda x: gn(x.transpose(1, 2)).transpose(1, 2)).eval()
    npu = compile_torch(model, torch.randn(1, 8, 32), min_len=1, max_len=40, cache=False)
    for t in LENGTHS:
        x = torch.randn(1, t, 32)
        torch.testing.assert_close(npu(x), model(x), rtol=1e-4, atol=1e-4)


def test_stock_decoder_without_cache_or_mask():
    """transformers' packed-sequence check (`aten.diff` of the positions) when a stock decoder runs with
    use_cache=False and no attention mask: torch-mlir's decomposition of diff, checked against eager."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, num_key_value_heads=1,
                                   intermediate_size=64, vocab_size=128, max_position_embeddings=64)  # fmt: skip

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = transformers.LlamaModel(cfg)

        def forward(self, ids):
            return self.m(input_ids=ids, use_cache=False).last_hidden_state

    model = Hidden().eval()
    npu = compile_torch(model, torch.randint(0, 128, (1, 8)), min_len=1, max_len=32, cache=False)
    for t in (1, 7, 17, 32):
        ids = torch.randint(0, 128, (1, t))
        with torch.no_grad():
            want = model(ids)
        torch.testing.assert_close(npu(ids, check_hazards=t == 7), want, rtol=1e-4, atol=1e-4)


def test_conv2d_patch_embedding_with_a_dynamic_width():
    """A vision patch embedding (Conv2d, stride = kernel) on a dynamic width: torch-mlir's
    linalg.conv_2d_nchw_fchw as a patch view, a transpose and one novella.linear (the matrix unit)."""
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 4, stride=4).eval()
    model = Fn(lambda x: conv(x).flatten(2).transpose(1, 2)).eval()
    npu = compile_torch(model, torch.randn(1, 3, 8, 16), dynamic_dim=3, min_len=4, max_len=40, cache=False)
    assert "novella.linear" in npu.ir("novella")
    for w in (4, 7, 17, 40):  # a partial patch column is dropped, as torch does
        x = torch.randn(1, 3, 8, w)
        with torch.no_grad():
            want = model(x)
        torch.testing.assert_close(npu(x), want, rtol=1e-5, atol=1e-5)


def test_mask_select_of_a_compare_runs_no_ne_and_loads_its_scalars_once():
    """where((x <= flip(x)).float() != 0, 0, min): each `!= 0` of a compare's 0/1 result is that result (no
    NE VEC), and the two scalars (broadcast in every dim) are loaded at the first step only, into a
    [tm, 1] column buffer, over several row tiles."""
    big = torch.finfo(torch.float32).min

    def fn(x):
        keep = (x <= x.flip(1)).float()
        return torch.where(keep != 0, torch.tensor(0.0), torch.tensor(big))

    model = Fn(fn).eval()
    npu = compile_torch(model, torch.randn(1, 8, 32), dynamic_dim=1, min_len=1, max_len=300, cache=False)
    insts, macros = npu.ir("novella-inst-gen"), npu.ir("novella-macro-gen")
    assert 'fn = "NE"' not in insts
    scalar_loads = [ln for ln in macros.splitlines() if "dma_load" in ln and "tensor<1x1x1xf32>" in ln]
    assert len(scalar_loads) == 2 and all("when = " in ln for ln in scalar_loads)
    sizes = dict(
        re.findall(r'(p\d) = \["spad", \d+, (\d+)', next(ln for ln in macros.splitlines() if "novella.gen" in ln))
    )
    assert int(sizes["p0"]) * 32 == int(sizes["p2"])  # a scalar's buffer is a [tm, 1] column, not a tile
    for t in (1, 7, 65, 300):
        x = torch.randn(1, t, 32)
        torch.testing.assert_close(npu(x, check_hazards=t in (1, 65)), model(x))


def test_cat_of_one_value_loads_it_once():
    """cat((y, y), -1) (RoPE's frequencies): each of y's tiles is LOADed once and COPYed into both column ranges."""
    model = Fn(_twice).eval()
    npu = compile_torch(model, torch.randn(1, 8, 16), dynamic_dim=1, min_len=1, max_len=40, cache=False)
    for t in LENGTHS:
        x = torch.randn(1, t, 16)
        torch.testing.assert_close(npu(x, check_hazards=t in (1, 17)), model(x), rtol=1e-6, atol=1e-6)
    macro = re.search(r'novella\.macro"\(\) \(\{(.*?)kernel = "novella\.concat"', npu.ir("novella-macro-gen"), re.S)
    body = macro.group(1).rsplit('novella.macro"() ({', 1)[-1]
    assert body.count("dma_load") == 1 and body.count("dma_store") == 2


def _twice(x):
    y = x * 2.0
    return torch.cat((y, y), dim=-1).sin()
