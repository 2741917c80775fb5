"""The decomposition step keeps what torch.export traced symbolic: a length padded to whole chunks of 64 and
viewed as [chunks, 64] keeps its 64 rows static and its chunk count symbolic over the range, where a retrace
that evaluates size checks at the example's sizes made the rows `(T + pad) // ((T + pad) // 64)` (qwen3_5's
chunked gated delta rule: ~1,200 guards) or the chunk count the example's 1. A retrace that still specializes
is refused, not compiled for the example's length; one that ties a mask's length to the input's is not, and
the export's guards it runs have each min / max of sizes decided over the range (`frontend/guard_code.py`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.fx.experimental import _config as fx_config

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError
from novella_mlir.frontend import exporting, guards, importer

CHUNK = 64


class Chunked(torch.nn.Module):
    """x [1, T, 4, 16] padded to whole chunks, a masked product inside each chunk (`tril` and `silu` need
    decompositions, so the graph is retraced), the pad cut off."""

    def forward(self, x):
        x = x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
        length = x.shape[2]
        x = F.pad(x, (0, 0, 0, (CHUNK - length % CHUNK) % CHUNK))
        c = x.reshape(x.shape[0], x.shape[1], -1, CHUNK, x.shape[-1])
        y = (c @ c.transpose(-1, -2)).tril() @ c
        return F.silu(y.reshape(1, 4, -1, 16)[:, :, :length])


def _exported(lo=2, hi=128, at=16):
    return importer.export(Chunked(), (torch.randn(1, at, 4, 16),), 1, lo, hi)


def _shapes(prog):
    return [tuple(n.meta["val"].shape) for n in prog.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)]


def _guard_count(prog) -> int:
    env = guards.shape_env(prog)
    return len(env.guards) if env is not None else 0


def _failing_since(prog, start: int) -> list[tuple]:
    """(guard, the lengths where it is false) of each guard in one size symbol recorded after the first
    `start` of the program's ShapeEnv (those a retrace added) that is false somewhere in that symbol's range."""
    env = guards.shape_env(prog)
    out = []
    for g in env.guards[start:] if env is not None else ():
        free = list(g.expr.free_symbols)
        r = prog.range_constraints.get(free[0]) if len(free) == 1 else None
        try:
            bad = guards.failing_lengths(g.expr, int(r.lower), int(r.upper)) if r is not None else []
        except Exception:
            continue
        if bad:
            out.append((g.expr, bad))
    return out


def test_the_chunk_stays_static_and_the_count_symbolic():
    prog = _exported()
    before = _guard_count(prog)
    out, table = importer._decompose(prog, None)
    assert table, "tril and silu are decomposed: the graph is retraced"
    chunked = [s for s in _shapes(out) if len(s) == 5]
    assert chunked and all(type(s[3]) is type(s[4]) is int and CHUNK in s[3:] for s in chunked), chunked
    assert all(isinstance(s[2], torch.SymInt) for s in chunked), chunked
    assert _guard_count(out) - before <= 12, "the retrace proves few new facts about the sizes"
    for n in (2, 37, 65, 128):
        x = torch.randn(1, n, 4, 16)
        torch.testing.assert_close(out.module()(x), Chunked()(x), rtol=1e-5, atol=1e-5)


def test_a_retrace_at_the_example_sizes_assumes_one_chunk():
    """Why the retrace is size-oblivious: traced at the example's sizes it assumes the chunk count of the
    example (1), which is false for T in [65, 128]."""
    prog = _exported()
    before = _guard_count(prog)
    prog.graph_module.recompile()
    with fx_config.patch(backed_size_oblivious=False):
        out = prog.run_decompositions(importer.decomposition_table({n.target for n in prog.graph.nodes}, True))
    bad = _failing_since(out, before)
    assert bad and any(set(range(65, 129)) <= set(lengths) for _, lengths in bad)


@pytest.mark.parametrize("lengths", [(1, 2, 37, 64)])
def test_chunked_model_matches_eager(lengths):
    """One chunk over [1, 64]: min, 2, odd, a partial tile (37 of 64 rows) and the max."""
    model = Chunked()
    npu = compile_torch(model, torch.randn(1, 16, 4, 16), min_len=1, max_len=64, cache=False)
    for n in lengths:
        x = torch.randn(1, n, 4, 16, generator=torch.Generator().manual_seed(n))
        torch.testing.assert_close(npu(x, check_hazards=n == 37), model(x), rtol=1e-4, atol=1e-4)


def test_chunked_model_over_two_chunks_matches_eager():
    """Over [1, 128] the chunk count is symbolic: min, odd, a partial second chunk (67) and the max."""
    model = Chunked()
    npu = compile_torch(model, torch.randn(1, 16, 4, 16), min_len=1, max_len=128, cache=False)
    for n in (1, 37, 67, 128):
        x = torch.randn(1, n, 4, 16, generator=torch.Generator().manual_seed(n))
        torch.testing.assert_close(npu(x, check_hazards=n == 67), model(x), rtol=1e-4, atol=1e-4)


class ChunkLoop(torch.nn.Module):
    """A scan over the chunks in Python (`for i in range(chunks)`, as qwen3_5's gated delta rule has it):
    torch.export unrolls it at the example's chunk count and guards that count, not the length; and a
    branch on `T > 1`."""

    def forward(self, x):
        x = x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format)
        length = x.shape[2]
        pad = (CHUNK - length % CHUNK) % CHUNK
        c = F.pad(x, (0, 0, 0, pad)).reshape(1, 4, -1, CHUNK, 16)
        state = torch.zeros(1, 4, 16, 16)
        out = torch.zeros_like(c)
        for i in range((length + pad) // CHUNK):
            block = c[:, :, i]
            out[:, :, i] = (block @ block.transpose(-1, -2)).tril() @ block @ state + block
            state = state * 0.5 + block.transpose(-1, -2) @ block
        out = out.reshape(1, 4, -1, 16)[:, :, :length]
        if length > 1:  # as transformers' SDPA `is_causal = q_len > 1`: Dim.DYNAMIC narrows to [2, max]
            out = out - out.mean(2, keepdim=True)
        return F.silu(out)


class MaskedChunkLoop(ChunkLoop):
    """ChunkLoop with a [1, T] mask cut to the input's length (as transformers' mask helpers do): Dim.DYNAMIC
    gives the mask a symbol of its own, with its own range."""

    def forward(self, x, mask):
        return super().forward(x * mask[:, : x.shape[1], None, None])


@pytest.mark.parametrize("masked", [False, True])
def test_a_chunk_count_guard_narrows_without_the_named_dim_traces(monkeypatch, masked):
    """The Dim.DYNAMIC trace's guard on the chunk count already excludes T > 64: the named-Dim traces (which
    take the same branch at the same example) are not run, with or without a mask."""

    def no_named(*a, **kw):
        raise AssertionError("the named-Dim export ran")

    monkeypatch.setattr(exporting, "export_spec", no_named)
    x = torch.randn(1, 16, 4, 16)
    args = (x, torch.ones(1, 16)) if masked else (x,)
    with pytest.raises(exporting.NarrowedError) as e:
        importer.export(MaskedChunkLoop() if masked else ChunkLoop(), args, 1, 1, 128)
    assert e.value.kept == (2, 64), e.value.kept


@pytest.mark.parametrize("masked", [False, True])
def test_chunk_loop_matches_eager(masked):
    """[1, 128] as a program per chunk count (T = 1 on its own): min, odd, a partial second chunk, the max;
    the mask's last quarter zero."""
    model = MaskedChunkLoop() if masked else ChunkLoop()

    def inputs(n, seed):
        x = torch.randn(1, n, 4, 16, generator=torch.Generator().manual_seed(seed))
        mask = torch.ones(1, n)
        mask[:, n - n // 4 :] = 0
        return (x, mask) if masked else (x,)

    npu = compile_torch(model, *inputs(16, 0), min_len=1, max_len=128, cache=False)
    for n in (1, 2, 37, 64, 67, 128):
        a = inputs(n, n)
        torch.testing.assert_close(npu(*a, check_hazards=n == 67), model(*a), rtol=1e-4, atol=1e-4)


def test_a_retrace_that_fixes_the_length_is_refused(monkeypatch):
    """torch's retrace may specialize the length to the example's value without a guard (seen on
    qwen3_5_text at one hash seed in four): the program would hold at the example only. Refused."""
    prog = _exported(at=64)
    static = torch.export.export(Chunked(), (torch.randn(1, 64, 4, 16),), strict=False)
    monkeypatch.setattr(type(prog), "run_decompositions", lambda self, table: static)
    with pytest.raises(NovellaError, match=r"fixed the length \(its size symbol s\d+, dim 1 of input 'x'\) at"):
        importer._retraced(prog, {})


class TrimmedMask(torch.nn.Module):
    """A [1, T] mask cut to the input's last T positions and multiplied in (qwen3_5's recurrent mask):
    Dim.DYNAMIC gives the mask a symbol of its own, which the retrace for `silu` proves equal to the
    input's and replaces by it."""

    def forward(self, x, mask):
        return F.silu(x * mask[:, -x.shape[1] :, None, None])


def _masked(n, seed):
    mask = torch.ones(1, n)
    mask[:, n - n // 4 :] = 0
    return torch.randn(1, n, 4, 16, generator=torch.Generator().manual_seed(seed)), mask


def test_a_retrace_that_ties_the_masks_length_to_the_inputs_is_kept():
    prog = importer.export(TrimmedMask(), _masked(16, 0), 1, 2, 64)
    assert len(importer._input_symbols(prog)) == 2, "the export keeps a symbol per input"
    out, _ = importer._decompose(prog, None)
    (sym,) = importer._input_symbols(out)
    lengths = [n.meta["val"].shape[1] for n in out.graph.nodes if n.op == "placeholder"]
    assert [getattr(getattr(n, "node", None), "expr", n) for n in lengths] == [sym, sym], lengths


def test_trimmed_mask_matches_eager():
    """min, 2, odd, a partial tile, the max."""
    model = TrimmedMask()
    npu = compile_torch(model, *_masked(16, 0), min_len=1, max_len=100, cache=False)
    for n in (1, 2, 37, 67, 100):
        a = _masked(n, n)
        torch.testing.assert_close(npu(*a, check_hazards=n == 67), model(*a), rtol=1e-4, atol=1e-4)


class FirstRows(torch.nn.Module):
    """The first 64 rows viewed per row: torch records `64*Min(64, T) % T == 0` among the export's guards."""

    def forward(self, x):
        return F.silu(x[:, :64].reshape(1, x.shape[1], -1))


def test_a_min_in_the_exports_guards_does_not_fix_the_length():
    """torch's retrace would run that guard as Python, whose `min(64, T)` compares at the example (64) and
    fixes T = 64; at 16 it would narrow the range to [2, 63]. The retrace keeps T over [2, 64]."""
    for at in (64, 16):
        prog = importer.export(FirstRows(), (torch.randn(1, at, 4, 16),), 1, 2, 64)
        assert any("min(64" in g for g in prog._guards_code), prog._guards_code
        out, _ = importer._decompose(prog, None)
        (sym,) = importer._input_symbols(out)
        assert (out.range_constraints[sym].lower, out.range_constraints[sym].upper) == (2, 64)


def test_first_rows_matches_eager():
    """Compiled from an example at the top (64), where `x[:, :64]` is all of x: min, 2, odd, a partial
    tile, the max."""
    model = FirstRows()
    npu = compile_torch(model, torch.randn(1, 64, 4, 16), min_len=1, max_len=64, cache=False)
    for n in (1, 2, 37, 63, 64):
        x = torch.randn(1, n, 4, 16, generator=torch.Generator().manual_seed(n))
        torch.testing.assert_close(npu(x, check_hazards=n == 37), model(x), rtol=1e-4, atol=1e-4)
