"""Raw-waveform models (the wav2vec2 family, its conformer) compiled once over their whole length range.

Each construct that kept them out, reproduced by a small module and checked against eager at the
minimum, min + 1, an odd length, the lengths around a program boundary and the maximum:
  * a strided conv stack whose frame count is 1 over the short lengths: torch.export specializes the
    frames there, the short sub-range is a program of its own, where the shape mutator must take the
    conv's length expression as the constant 1 it is over that sub-range (`symbolic.box.fixed_value`);
  * a slice with a symbolic start (relative positions `pe[:, M - T + 1 : M + T]`) read by a linear:
    a copy whose DRAM offset the JIT evaluates at each length;
  * a concat whose widest input changes with the length (a pad of 15 beside 2..65 frames);
  * stock transformers Wav2Vec2Model and Wav2Vec2ConformerModel (relative positions) at a small size."""

from __future__ import annotations

import re

import pytest
import torch
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir import symbolic as sy
from novella_mlir.dialects.context import make_context
from novella_mlir.errors import NovellaError
from novella_mlir.symbolic import box as sb


def matches(model, make, lo: int, hi: int, lengths, example: int | None = None, dim: int = 1):
    """`model` compiled once over [lo, hi] (one compile_torch call) matches eager at every length."""
    model = model.eval()
    npu = compile_torch(model, make(example or hi), dynamic_dim=dim, min_len=lo, max_len=hi, cache=False)
    for n in lengths:
        x = make(n, n)
        with torch.no_grad():
            want = model(x)
        got = npu(x, check_hazards=n == lengths[2])
        assert got.shape == want.shape, f"T={n}: {got.shape} vs {want.shape}"
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, msg=lambda m, n=n: f"T={n}: {m}")
    return npu


def wave(n: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(1, n, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------ a size fixed over the range


def test_fixed_value_over_the_box():
    with make_context():
        s = sy.sym(0)
        frames = sy.floordiv(sy.floordiv(s, 5) - sy.const(4), 2) + sy.const(1)  # conv k 10 s 5, then k 3 s 2
        at = [sy.Symbol(0, "T", 20, 29)]
        assert {sy.evaluate(frames, [t]) for t in range(20, 30)} == {1}
        assert sb.fixed_value(frames, at) == 1
        assert sy.as_int(sb.fixed(frames, at)) == 1
        assert sb.fixed_value(frames, [sy.Symbol(0, "T", 20, 30)]) is None  # 2 at T = 30
        assert sb.fixed_value(sy.mod(s, 7), [sy.Symbol(0, "T", 7, 14)]) is None  # equal ends, not constant
        assert sb.fixed_value(s, []) is None and sb.fixed_value(sy.const(4), []) == 4
        two = sy.floordiv(s, 100) + sy.floordiv(sy.sym(1), 100)
        assert sb.fixed_value(two, [sy.Symbol(0, "T", 1, 99), sy.Symbol(1, "P", 100, 199)]) == 1
        assert sb.fixed(s, at) == s
        assert sb.fixed_value(frames, [sy.Symbol(0, "T", 25, 25)]) is None  # a static compile folds nothing


class Frames(torch.nn.Module):
    """A wav2vec2-style front end: strided convs, then frame-wise layer norm, a projection, and a
    positional conv with an even kernel whose last frame is dropped (SamePad), added back."""

    def __init__(self, c: int = 16):
        super().__init__()
        self.c1 = torch.nn.Conv1d(1, c, 10, stride=5)
        self.c2 = torch.nn.Conv1d(c, c, 3, stride=2)
        self.norm = torch.nn.LayerNorm(c)
        self.proj = torch.nn.Linear(c, 32)
        self.pos = torch.nn.Conv1d(32, 32, 4, padding=2, groups=4)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.c2(torch.nn.functional.gelu(self.c1(x[:, None]))))
        h = self.proj(self.norm(h.transpose(1, 2)))
        p = self.pos(h.transpose(1, 2))[:, :, :-1]
        return h + torch.nn.functional.gelu(p).transpose(1, 2)


def test_strided_conv_stack_with_one_frame_at_short_lengths():
    """T in [20, 29] is one frame: one compile_torch call over [20, 200] serves every length."""
    torch.manual_seed(0)
    matches(Frames(), wave, 20, 200, [20, 21, 29, 30, 97, 200], example=110)


# ------------------------------------------------------------------ a slice with a symbolic start


class RelativePositions(torch.nn.Module):
    """Transformer-XL style relative positions: the 2T - 1 rows around the middle of a fixed table."""

    def __init__(self, m: int = 40, d: int = 16):
        super().__init__()
        self.pe = torch.nn.Buffer(torch.randn(1, 2 * m - 1, d), persistent=False)
        self.lin = torch.nn.Linear(d, d, bias=False)

    def forward(self, x):
        mid = self.pe.size(1) // 2
        return self.lin(self.pe[:, mid - x.size(1) + 1 : mid + x.size(1)]) + x.mean()


def test_slice_with_a_symbolic_start_read_by_a_linear():
    torch.manual_seed(0)
    npu = matches(RelativePositions(), lambda n, s=0: torch.randn(1, n, 16), 1, 40, [1, 2, 17, 33, 40], example=17)
    assert re.search(r"novella.slice.*start = #map", npu.ir("novella"))  # the start is an expression of T


def test_slice_with_a_symbolic_start_returned():
    torch.manual_seed(0)
    table = torch.randn(1, 50, 8)
    model = Lambda(lambda x: table[:, 40 - x.size(1) : 40])
    matches(model, lambda n, s=0: torch.randn(1, n, 8), 2, 40, [2, 3, 17, 39, 40], example=17)


def test_slice_with_a_symbolic_start_outside_the_dim_is_refused():
    """x[:, T - 2 : T + 5] of a 40-row table reads past its end for T > 35: refused, not clamped."""
    torch.manual_seed(0)
    table = torch.randn(1, 40, 8)
    model = Lambda(lambda x: (table[:, x.size(1) - 2 : x.size(1) + 5] * 2).sum(1) + x.sum())
    with pytest.raises(NovellaError, match=r"slice \[s0 - 2, s0 - 2 \+ 7\) of dim 1 \(size 40\).*not provably inside"):
        compile_torch(model, torch.randn(1, 17, 8), dynamic_dim=1, min_len=3, max_len=40, cache=False)


# ------------------------------------------------------------------ a concat whose widest input varies


def test_pad_wider_and_narrower_than_the_length():
    """pad(x, (15, 15)) along a length in [2, 65]: the 15-wide blocks are wider below T = 15, the input above."""
    model = Lambda(lambda x: torch.nn.functional.pad(x, (15, 15)) * 2)
    matches(model, lambda n, s=0: torch.randn(1, 8, n), 2, 65, [2, 3, 15, 16, 33, 65], example=9, dim=2)


def test_depthwise_conv_after_strided_convs():
    """The conformer's depthwise conv (kernel 31, padding 15) over frames 1..12 of a strided front end."""
    torch.manual_seed(0)
    c1, c2 = torch.nn.Conv1d(1, 8, 10, stride=5), torch.nn.Conv1d(8, 8, 3, stride=2)
    dw = torch.nn.Conv1d(8, 8, 31, padding=15, groups=8, bias=False)
    model = Lambda(lambda x: dw(c2(c1(x[:, None]))))
    matches(model, wave, 30, 130, [30, 31, 59, 77, 129, 130], example=60)


# ------------------------------------------------------------------ stock transformers audio models


def _audio_config(cls, convs: int = 2, **kw):
    return cls(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
               conv_dim=(16, 16)[:convs], conv_kernel=(10, 3)[:convs], conv_stride=(5, 2)[:convs],
               num_conv_pos_embeddings=8, num_conv_pos_embedding_groups=4, **kw)  # fmt: skip


def _stock(hf):
    hf.eval()
    return Lambda(lambda x: hf(input_values=x).last_hidden_state)


def test_stock_wav2vec2():
    """transformers' Wav2Vec2Model (a 2-conv feature extractor, the positional conv with SamePad), random
    weights, over waveforms of [20, 300] samples (1..29 frames; one frame up to T = 29), then a shape bucket
    [30, 128] below the generic program."""
    import transformers as tf

    torch.manual_seed(0)
    model = _stock(tf.Wav2Vec2Model(_audio_config(tf.Wav2Vec2Config)))
    npu = matches(model, wave, 20, 300, [20, 21, 29, 30, 128, 129, 300], example=160)
    assert [p.ranges for p in npu.artifact.programs] == [[[20, 29]], [[30, 128]], [[129, 300]]]


def test_stock_wav2vec2_conformer_relative_positions():
    """transformers' Wav2Vec2ConformerModel with relative positions (the table sliced from the length), a
    depthwise conv of kernel 5, one conv in the feature extractor: waveforms of [15, 160] samples."""
    import transformers as tf

    torch.manual_seed(0)
    cfg = _audio_config(tf.Wav2Vec2ConformerConfig, convs=1, position_embeddings_type="relative",
                        conv_depthwise_kernel_size=5, max_source_positions=64)  # fmt: skip
    matches(_stock(tf.Wav2Vec2ConformerModel(cfg)), wave, 15, 160, [15, 16, 49, 87, 160], example=80)


# ------------------------------------------------------------------ an average pool of whole windows


@pytest.mark.parametrize("k", [2, 3])
def test_avg_pool1d_of_whole_windows(k):
    """SEW's squeeze, `AvgPool1d(k, k)` over the frames: a trailing partial window is dropped, as torch does."""
    pool = torch.nn.AvgPool1d(k, k)
    matches(Lambda(pool), lambda n, s=0: torch.randn(1, 8, n), k, 50, [k, k + 1, k + 2, 37, 50], example=20, dim=2)


def test_avg_pool2d_of_whole_windows_on_a_map():
    pool = torch.nn.AvgPool2d(2)
    matches(Lambda(pool), lambda n, s=0: torch.randn(1, 4, 6, n), 2, 40, [2, 3, 5, 37, 40], example=20, dim=3)


def test_avg_pool1d_with_overlapping_windows_is_refused():
    pool = torch.nn.AvgPool1d(3, 2)
    with pytest.raises(NovellaError, match="avg_pool2d"):
        compile_torch(Lambda(pool), torch.randn(1, 8, 20), dynamic_dim=2, min_len=3, max_len=50, cache=False)
