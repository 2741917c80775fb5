"""Constructs of the zoo's text families that were refused (issue 19), each as a small module compiled
once and checked against eager at lengths 1, 2, odd, a partial last tile and the max:

* a chunked linear-attention scan (kimi_linear, lara_mini, olmo_hybrid, nemotron_h): padded to whole
  chunks, a Python loop over the chunk count writing each chunk of a zeros tensor, `eye(chunk)`. torch.export
  traces the loop at the example's chunk count and guards it without narrowing the length, so the range is
  split where the guard changes (`frontend/guards.py`), each part traced at its own chunk count;
* an empty slice padded at length 1 (MobileBERT's trigram embedding): the pad is all pad value;
* a `torch.no_grad()` region (M2M100's position embedding), exported as a higher-order op, inlined;
* complex rotary tables sliced and unsqueezed (Llama 4), as real pairs;
* a router's `scatter_` of its top-k scores into a -inf row (Llama 4);
* an op inside a plain function called from `forward` names that function's line when refused;
* the gated delta rule's forward substitution over the rows of a chunk (qwen3_5, qwen3_next, kimi_linear):
  each step slices `[:i]` of a chunked, padded length, traced with torch's fake-tensor cache off
  (`traceable.uncached_fake_dispatch`: with it on, every such op pays a cache entry it never hits).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError

LENGTHS = (1, 2, 37, 67, 70)


def check(module, shape=(1, 6, 8), lengths=LENGTHS, hi=70, ex=6):
    module = module.eval()
    size = list(shape)
    size[1] = ex
    npu = compile_torch(module, torch.randn(size), dynamic_dim=1, min_len=1, max_len=hi, cache=False)
    for n in lengths:
        size[1] = n
        x = torch.randn(size, generator=torch.Generator().manual_seed(n))
        with torch.no_grad():
            want = module(x)
        got = npu(x)
        assert got.shape == want.shape, f"T={n}: {list(got.shape)} vs eager {list(want.shape)}"
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), f"T={n}: max err {(got - want).abs().max():.2e}"
    return npu


class ChunkedScan(torch.nn.Module):
    """A gated-delta-style scan: chunks of C positions, cumsum within a chunk, a state carried across chunks
    by a Python loop over the chunk count (as transformers' torch fallbacks of the fla kernels write it)."""

    def __init__(self, chunk: int = 16, width: int = 8):
        super().__init__()
        self.chunk = chunk
        self.proj = torch.nn.Linear(width, width)

    def forward(self, x):
        c = self.chunk
        t = x.shape[1]
        pad = (c - t % c) % c
        h = F.pad(self.proj(x).unsqueeze(1), (0, 0, 0, pad))  # [1, 1, T + pad, W]
        h = h.reshape(h.shape[0], h.shape[1], -1, c, h.shape[-1])
        g = h.cumsum(dim=-2) * 0.1
        mix = torch.tril(torch.ones(c, c)) * 0.01 + torch.eye(c)
        out = torch.zeros_like(g)
        state = torch.zeros(1, 1, 1, h.shape[-1])
        for i in range((t + pad) // c):
            out[:, :, i] = mix[None, None] @ g[:, :, i] + state
            state = state + g[:, :, i, -1:]
        out = out.reshape(out.shape[0], out.shape[1], -1, out.shape[-1])[:, :, :t]
        return out.squeeze(1)


def test_a_loop_over_the_chunk_count_splits_the_range_where_the_count_changes():
    npu = check(ChunkedScan(), lengths=(1, 2, 15, 16, 17, 37, 48, 49, 67, 70))
    ranges = sorted(tuple(p.ranges[0]) for p in npu.artifact.programs)
    assert ranges[-1][1] == 70 and len(ranges) >= 5, ranges  # 1..16, 17..32, 33..48, 49..64, 65..70 chunks


def test_a_loop_split_names_the_guard_torch_assumed():
    from novella_mlir.frontend import importer
    from novella_mlir.frontend.exporting import NarrowedError

    with pytest.raises(NarrowedError, match=r"assumes .*//16.* == 2.*Recorded at .*test_text_constructs.py:\d+") as e:
        importer.export(ChunkedScan().eval(), (torch.randn(1, 20, 8),), 1, 2, 70)
    assert e.value.kept == (17, 32)


class ForwardSubstitution(torch.nn.Module):
    """transformers' exportable inverse of the unit lower-triangular UT system of a gated delta rule: the
    length padded to whole chunks, each row of a chunk's strict lower triangle updated from the rows above."""

    def forward(self, x):
        c = 8
        t = x.shape[1]
        y = F.pad(x.transpose(1, 2), (0, (c - t % c) % c)).transpose(1, 2).reshape(1, -1, c, x.shape[-1])
        a = -(y @ y.transpose(-1, -2)).tril(-1) * 0.1
        for i in range(1, c):
            row = a[..., i, :i].clone()
            sub = a[..., :i, :i].clone()
            a[..., i, :i] = row + (row.unsqueeze(-1) * sub).sum(-2)
        a = a + torch.eye(c)
        return (a @ y).reshape(1, -1, x.shape[-1])[:, :t]


def test_a_forward_substitution_over_a_chunk_is_traced_without_the_fake_cache(monkeypatch):
    import torch._dynamo.config as dynamo_config

    seen, export = [], torch.export.export

    def recording(*args, **kw):
        seen.append(dynamo_config.fake_tensor_cache_enabled)
        return export(*args, **kw)

    monkeypatch.setattr(torch.export, "export", recording)
    check(ForwardSubstitution(), shape=(1, 6, 4))
    assert seen and not any(seen), f"exports with the fake-tensor cache on: {seen.count(True)} of {len(seen)}"
    assert dynamo_config.fake_tensor_cache_enabled


def test_a_static_select_scatter_is_an_insert_slice():
    def fn(x):
        y = torch.zeros(x.shape[0], x.shape[1], 6)
        y[:, :, 3] = x[:, :, 0] * 2
        y[:, :, 0:2] = x[:, :, 4:6]
        return y + 1

    check(Lambda(fn))


def trigram(x):
    return torch.cat([F.pad(x[:, 1:], [0, 0, 0, 1, 0, 0], value=0.5), x, F.pad(x[:, :-1], [0, 0, 1, 0, 0, 0])], 2)


def test_an_empty_slice_padded_at_length_one_is_the_pad_value():
    check(Lambda(trigram))


class NoGradPositions(torch.nn.Module):
    @torch.no_grad()
    def table(self, n: int):
        pos = torch.arange(n, dtype=torch.float32).unsqueeze(-1)
        return torch.sin(pos * torch.linspace(0.1, 1.0, 8))

    def forward(self, x):
        return x + self.table(x.shape[1])


def test_a_no_grad_region_is_inlined():
    check(NoGradPositions())


class ComplexRotary(torch.nn.Module):
    def forward(self, x):  # x: [1, T, 8] = 4 complex pairs
        freqs = torch.arange(x.shape[1], dtype=torch.float32)[:, None] * torch.linspace(0.1, 1.0, 4)
        cis = torch.polar(torch.ones_like(freqs), freqs)[None, :, None, :]  # [1, T, 1, 4]
        xc = torch.view_as_complex(x.reshape(1, x.shape[1], 1, 4, 2))
        return torch.view_as_real(xc * cis[:, :, :, :]).flatten(2)


def test_complex_slices_and_views_are_real_pairs():
    check(ComplexRotary())


class TopkRouter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Linear(8, 4, bias=False)

    def forward(self, x):
        logits = self.gate(x.reshape(-1, 8))
        top, idx = torch.topk(logits, 2, dim=1)
        scores = torch.full_like(logits, float("-inf")).scatter_(1, idx, top)
        return torch.sigmoid(scores) + logits


def test_a_router_scatter_of_its_top_k():
    check(TopkRouter(), lengths=(1, 2, 37, 70))


def helper_that_draws(x):
    return x + torch.rand_like(x)


def test_an_op_in_a_plain_function_names_its_own_line():
    line = helper_that_draws.__code__.co_firstlineno + 1
    with pytest.raises(NovellaError, match=rf"test_text_constructs.py:{line}\b"):
        compile_torch(
            Lambda(helper_that_draws), torch.randn(1, 6, 8), dynamic_dim=1, min_len=1, max_len=70, cache=False
        )


def per_position(x):
    outs = []
    for i in range(x.shape[1]):
        outs.append(x[:, i] * 2)
    return torch.stack(outs, 1)


def test_a_loop_over_the_length_is_refused_naming_its_line():
    line = per_position.__code__.co_firstlineno + 2
    with pytest.raises(NovellaError, match=rf"fixes the size of dim 1 at .*test_text_constructs.py:{line} "):
        compile_torch(Lambda(per_position), torch.randn(1, 6, 8), dynamic_dim=1, min_len=1, max_len=70, cache=False)
