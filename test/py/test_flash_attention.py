"""novella.flash_attention against PyTorch eager: no mask, an additive mask, causal, a one-row
query; lengths 1, a tile's neighbours, odd and the maximum. The score matrix never reaches DRAM:
the only bytes stored are the output's."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_attention_ops import TOL, Attention, IrModel, _module, _ty, tiles

from novella_mlir import compile_torch

MAX_LEN = 300


def _fused(args, out, mask=None, causal=False, scale=0.125) -> IrModel:
    q, k, v = args[:3]
    s = [q[1][0], q[1][1], k[1][1]]
    m = f", %m) {{{'novella.causal' if causal else ''}}} : ({_ty(s)}, {_ty(mask)}) -> {_ty(s)}" if mask else None
    body = f'    %s = "novella.matmul"(%q, %k) {{transpose_rhs = true}} : ({_ty(q[1])}, {_ty(k[1])}) -> {_ty(s)}\n'
    x = "%s"
    if mask:
        body += f'    %a = "novella.add"(%s{m}\n'
        x = "%a"
    attrs = f"{{novella.scale = {scale} : f32, safe = false}}"
    body += f'    %p = "novella.softmax"({x}) {attrs} : ({_ty(s)}) -> {_ty(s)}\n'
    body += f'    %y = "novella.matmul"(%p, %v) {{transpose_rhs = false}} : ({_ty(s)}, {_ty(v[1])}) -> {_ty(out)}'
    model = IrModel(_module(args, body, out))
    assert "novella.flash_attention" in model.ir and "novella.softmax" not in model.ir
    return model


def _stored_only_output(model, out: torch.Tensor) -> None:
    assert model.executor.last_run.stats.dma_bytes_stored == out.numel() * 4


@pytest.fixture(scope="module")
def plain():
    qkv = [(n, [2, "T", 64]) for n in "qkv"]
    return _fused(qkv, [2, "T", 64])


@pytest.mark.parametrize("length", sorted({1, 63, 64, 65, 127, 128, 129, 201, MAX_LEN}))
def test_unmasked_matches_eager(plain, length):
    q, k, v = (torch.randn(2, length, 64) * 2 for _ in range(3))
    y = plain(q, k, v)
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v, scale=0.125), **TOL)
    _stored_only_output(plain, y)


@pytest.fixture(scope="module")
def causal():
    qkv = [(n, [2, "T", 64]) for n in "qkv"] + [("m", [1, "T", "T"])]
    return _fused(qkv, [2, "T", 64], mask=[1, "T", "T"], causal=True, scale=0.5)


@pytest.mark.parametrize("length", sorted({1, 63, 64, 65, 129, 201, MAX_LEN}))
def test_causal_skips_the_mask_and_matches_eager(causal, length):
    t = tiles(causal.ir, "novella.flash_attention")
    assert t["tq"] == t["tk"]
    q, k, v = (torch.randn(2, length, 64) for _ in range(3))
    unused = torch.full((1, length, length), float("nan"))  # the causal mask operand is never read
    y = causal(q, k, v, unused)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.5)
    torch.testing.assert_close(y, want, **TOL)
    _stored_only_output(causal, y)


@pytest.fixture(scope="module")
def masked():
    qkv = [(n, [2, "T", 64]) for n in "qkv"] + [("m", [1, "T", "T"])]
    return _fused(qkv, [2, "T", 64], mask=[1, "T", "T"], scale=1.0)


@pytest.mark.parametrize("length", sorted({1, 127, 129, 201, MAX_LEN}))
def test_banded_mask_with_fully_masked_tile_rows(masked, length):
    """A sliding window: rows past the first key tile see nothing in it (exp(-inf) must give 0, not NaN)."""
    i = torch.arange(length)
    keep = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 40)
    mask = torch.zeros(1, length, length).masked_fill(~keep, float("-inf"))
    q, k, v = (torch.randn(2, length, 64) for _ in range(3))
    y = masked(q, k, v, mask)
    torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v, attn_mask=mask[0], scale=1.0), **TOL)


def test_one_row_query_over_a_symbolic_key_length():
    args = [("q", [4, 1, 64]), ("k", [4, "T", 64]), ("v", [4, "T", 32])]
    model = _fused(args, [4, 1, 32])
    for length in (1, 65, 129, MAX_LEN):
        q, k, v = torch.randn(4, 1, 64), torch.randn(4, length, 64), torch.randn(4, length, 32)
        y = model(q, k, v)
        torch.testing.assert_close(y, F.scaled_dot_product_attention(q, k, v, scale=0.125), **TOL)


def test_sdpa_is_causal_frontend():
    torch.manual_seed(0)
    model = Attention(is_causal=True).eval()
    npu = compile_torch(model, torch.randn(1, 2, 16, 64), dynamic_dim=2, min_len=1, max_len=MAX_LEN)
    legal = npu.ir("novella-legalize")
    assert "causal = 1" in legal and "novella.compare" not in legal and "novella.softmax" not in legal
    for length in (1, 65, 201, MAX_LEN):
        x = torch.randn(1, 2, length, 64)
        torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


def test_fuse_attention_off_keeps_three_kernels():
    torch.manual_seed(0)
    model = Attention().eval()
    opts = {"novella-legalize": {"fuse-attention": 0}}
    npu = compile_torch(model, torch.randn(1, 2, 16, 64), dynamic_dim=2, min_len=1, max_len=64, pass_options=opts)
    legal = npu.ir("novella-legalize")
    assert "novella.flash_attention" not in legal and "novella.softmax" in legal
    x = torch.randn(1, 2, 33, 64)
    torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


def test_head_transposes_and_query_scale_are_absorbed():
    """Whisper's layout: q scaled, q/k/v split into heads by view + transpose, merged back after."""
    from test_attention_ops import MultiHeadAttention

    torch.manual_seed(0)
    model = MultiHeadAttention().eval()
    npu = compile_torch(model, torch.randn(1, 20, 128), dynamic_dim=1, min_len=1, max_len=MAX_LEN)
    legal = npu.ir("novella-legalize")
    assert "heads_minor = array<i64: 1, 1, 1, 1>" in legal and "novella.transpose" not in legal
    for length in (1, 63, 129, MAX_LEN):
        x = torch.randn(1, length, 128)
        torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


class ArangeMask(Attention):
    """A bool mask built from positions, as transformers does; `shift` moves the diagonal."""

    def __init__(self, swapped=False, shift=0):
        super().__init__()
        self.swapped, self.shift = swapped, shift

    def forward(self, x):
        i = torch.arange(x.shape[2])
        rows, cols = i[None, :], i[:, None] + self.shift
        keep = cols >= rows if self.swapped else rows <= cols
        return F.scaled_dot_product_attention(self.q(x), self.k(x), self.v(x), attn_mask=keep)


@pytest.mark.parametrize("swapped,shift,causal", [(False, 0, True), (True, 0, True), (False, 1, False)])
def test_position_mask_recognized_as_causal(swapped, shift, causal):
    """key <= query over position tables is the causal mask (tiles skipped, mask dropped); a shifted
    diagonal is not, and stays an additive mask operand."""
    torch.manual_seed(0)
    model = ArangeMask(swapped, shift).eval()
    npu = compile_torch(model, torch.randn(1, 2, 16, 64), dynamic_dim=2, min_len=1, max_len=MAX_LEN)
    legal = npu.ir("novella-legalize")
    assert ("causal = 1" in legal) == causal and ("novella.compare" in legal) != causal
    assert "novella.flash_attention" in legal
    for length in (1, 65, 201, MAX_LEN):
        x = torch.randn(1, 2, length, 64)
        torch.testing.assert_close(npu(x), model(x).detach(), **TOL)


_KINDS = {
    "plain": dict(args=[(n, [2, "T", 64]) for n in "qkv"], out=[2, "T", 64]),
    "masked": dict(args=[(n, [2, "T", 64]) for n in "qkv"] + [("m", [1, "T", "T"])], out=[2, "T", 64], mask=[1, "T", "T"],
                   scale=1.0),
    "causal": dict(args=[(n, [2, "T", 64]) for n in "qkv"] + [("m", [1, "T", "T"])], out=[2, "T", 64], mask=[1, "T", "T"],
                   causal=True),
    "decode": dict(args=[("q", [4, 1, 64]), ("k", [4, "T", 64]), ("v", [4, "T", 32])], out=[4, 1, 32]),
}  # fmt: skip


def _inputs(kind: str, length: int):
    g = torch.Generator().manual_seed(length)
    if kind == "decode":
        return [
            torch.randn(4, 1, 64, generator=g),
            torch.randn(4, length, 64, generator=g),
            torch.randn(4, length, 32, generator=g),
        ]
    qkv = [torch.randn(2, length, 64, generator=g) for _ in range(3)]
    if kind == "plain":
        return qkv
    if kind == "causal":
        return qkv + [torch.full((1, length, length), float("nan"))]
    i = torch.arange(length)
    keep = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - 40)
    return qkv + [torch.zeros(1, length, length).masked_fill(~keep, float("-inf"))]


def _reference(kind: str, xs):
    if kind == "causal":
        return F.scaled_dot_product_attention(*xs[:3], is_causal=True, scale=0.125)
    mask = xs[3][0] if kind == "masked" else None
    return F.scaled_dot_product_attention(*xs[:3], attn_mask=mask, scale=1.0 if kind == "masked" else 0.125)


_SCHEDULES = [
    (False, 0, 1),
    (False, 1, 1),
    (True, 0, 1),
    (True, 1, 1),
    (True, 0, 2),
    (True, 1, 2),
    (False, 2, 1),
    (True, 2, 2),
]


@pytest.mark.parametrize("pipelined,ones,s_slots", _SCHEDULES)
@pytest.mark.parametrize("kind", sorted(_KINDS))
def test_every_schedule_matches_eager(monkeypatch, kind, pipelined, ones, s_slots):
    """Each schedule forced (plain or pipelined with one or two score slots, row sums by ROWSUM or by
    V's ones column or P @ u; EXPSUB except where a single score buffer is read), hazard checker on: 1, a
    tile's neighbours, odd and the maximum length."""
    from novella_mlir.kernels.flash_attention import FlashAttention

    want = (pipelined, ones, s_slots)
    monkeypatch.setattr(FlashAttention, "cost", lambda self, t, dims, cand: float(cand[2:5] != want))
    monkeypatch.setattr(FlashAttention, "exhaustive", True)  # this cost is not above the search's bound
    spec = _KINDS[kind]
    model = _fused(spec["args"], spec["out"], spec.get("mask"), spec.get("causal", False), spec.get("scale", 0.125))
    t = tiles(model.ir, "novella.flash_attention")
    assert (t["pipelined"], t["ones"], t["s_slots"], t["expsub"]) == (*want, int(not pipelined or s_slots == 2))
    for length in sorted({1, t["tk"] - 1, t["tk"] + 1, 201, MAX_LEN} - {0}):
        xs = _inputs(kind, length)
        torch.testing.assert_close(model(*xs), _reference(kind, xs), **TOL)


class _Heads(torch.nn.Module):
    """A projection (whose cost model makes the shape buckets) and self-attention over its 6 heads."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = torch.nn.Linear(384, 384)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.proj(x).reshape(b, t, 6, 64).transpose(1, 2)
        return F.scaled_dot_product_attention(h, h, h)


@pytest.fixture(scope="module")
def bucketed():
    return compile_torch(_Heads().eval(), torch.randn(1, 16, 384), max_len=MAX_LEN, cache=False)


def test_a_bucket_whose_query_block_holds_every_row_alternates_it_between_heads(bucketed):
    """In a shape bucket where one query block holds all of lq, the query buffer has two slots the kernel
    picks by head parity (`[spad, offset, size, 2, 1]`), its LOAD counts as slotted (`slot = {sram_addr =
    0}`), so a head's loads run under the previous head's compute; q, k and v are each read once. Eager's
    result at 1, odd, each program's edges and a partial key tile, hazard checker on. q, k and v share one
    head transpose (which the fusion absorbs once: erasing it thrice crashed)."""
    progs = bucketed.artifact.programs
    alternating = [p for p in progs for t in p.macros[-1].insts if t.opcode == "LOAD" and t.slot == {"sram_addr": 0}]
    assert alternating and len(progs) > 1, [pr.ranges for pr in progs]
    model = _Heads().eval()
    lengths = {1, 63, 65, 201, MAX_LEN} | {e for p in progs for e in p.ranges[0]}
    for length in sorted(lengths):
        x = torch.randn(1, length, 384, generator=torch.Generator().manual_seed(length))
        outs, run = bucketed.executor.run_with_result([x.numpy()], check_hazards=True)
        with torch.no_grad():
            torch.testing.assert_close(torch.from_numpy(outs[0]), model(x), **TOL)
        one_block = "q_blocks" not in bucketed.ir("novella-tile", at=[length])  # else alternating between blocks
        if progs[bucketed.artifact.pick([length])] in alternating and one_block:  # K/V read once: one query block
            weights = bucketed.artifact.weight_nbytes
            assert run.stats.dma_bytes_loaded == weights + x.numel() * 4 * 4, length


@pytest.mark.parametrize("pipelined,s_slots", [(False, 1), (True, 2)])
@pytest.mark.parametrize("kind", ["plain", "decode"])
def test_fused_row_max_and_sums_match_eager(monkeypatch, kind, pipelined, s_slots):
    """`FUSED` forced (the score MATMUL's `rowmax` gives the row maxima, EXPSUB's `rowsum` the row sums: no
    ROWMAX or ROWSUM VEC is emitted), hazard checker on: 1, a tile's neighbours, odd and the maximum length.
    (With the lookahead: test_flash_ahead.py.)"""
    from novella_mlir.kernels.flash_attention import FlashAttention
    from novella_mlir.kernels.flash_emit import FUSED

    want = (pipelined, FUSED, s_slots)
    monkeypatch.setattr(FlashAttention, "cost", lambda self, t, dims, cand: float(cand[2:5] != want))
    monkeypatch.setattr(FlashAttention, "exhaustive", True)
    spec = _KINDS[kind]
    model = _fused(spec["args"], spec["out"])
    t = tiles(model.ir, "novella.flash_attention")
    assert (t["pipelined"], t["ones"], t["s_slots"], t["expsub"]) == (*want, 1)
    assert "ROWMAX" not in model.ir and "ROWSUM" not in model.ir and "rowmax = 1" in model.ir
    for length in sorted({1, t["tk"] - 1, t["tk"] + 1, 201, MAX_LEN} - {0}):
        xs = _inputs(kind, length)
        torch.testing.assert_close(model(*xs), _reference(kind, xs), **TOL)
