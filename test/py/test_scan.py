"""cumsum / cumprod (`novella.scan`) against eager at lengths 1, odd, a partial last tile and the maximum:
along the dynamic dim and along a static one, in both kernel forms (columns: the last dim; rows), with
the carry crossing tile steps; integer and bool inputs exact with eager's dtype, refused where fp32 could
round; float -> int conversion (`.long()`, truncation)."""

from __future__ import annotations

import pytest
import torch
from lambda_module import Lambda

from novella_mlir import compile_torch
from novella_mlir.errors import NovellaError


def _sized(shape, dim: int, n: int, seed: int, make) -> torch.Tensor:
    shape = list(shape)
    shape[dim] = n
    return make(shape, torch.Generator().manual_seed(seed))


def _normal(shape, g):
    return torch.randn(shape, generator=g)


def check(fn, shape, dim, hi, lengths, make=_normal, atol=1e-4, rtol=1e-5, exact=False):
    module = Lambda(fn)
    npu = compile_torch(module, make(list(shape), torch.Generator().manual_seed(0)), dynamic_dim=dim, min_len=1,
                        max_len=hi, cache=False)  # fmt: skip
    for n in lengths:
        x = _sized(shape, dim, n, 7 * n, make)
        with torch.no_grad():
            want = module(x)
        got = npu(x)
        want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.shape == w.shape and g.dtype == w.dtype, f"T={n} #{i}: {g.dtype}{list(g.shape)} vs {w.dtype}"
            err = (g.double() - w.double()).abs().max().item()
            ok = torch.equal(g, w) if exact else torch.allclose(g, w, atol=atol, rtol=rtol)
            assert ok, f"T={n} output {i}: max error {err}"


def test_cumsum_along_the_length_and_static_dims():
    # [2, T, 5]: dim 1 is the rows form (64-row tiles: 65 and 130 carry across steps), dim 2 the columns
    # form with the length outside it, dim 0 the rows form with the length inside the columns
    check(lambda x: (x.cumsum(1), x.cumsum(-1), x.cumsum(0)), (2, 8, 5), 1, 130, (1, 2, 7, 64, 65, 130))


def test_cumsum_of_the_dynamic_last_dim_crosses_column_tiles():
    # columns form, the carry column chained across column tiles (the cost model's are 512 wide at the
    # default config: 1025 to 2100 take 3 to 5 steps, the last one partial but at 2048)
    check(lambda x: x.cumsum(-1), (3, 16), 1, 2100, (1, 33, 1025, 2048, 2049, 2100))


def test_static_dims_wider_than_an_instruction():
    # 5000 columns exceed the ISA's cols field: the scanned dim (columns form) and the dim after the
    # scanned one (rows form) are split into column tiles, the last one partial
    check(lambda x: (x.cumsum(-1), x.cumsum(0)), (4, 5000), 0, 64, (1, 3, 64), atol=1e-3)
    check(lambda x: x.cumsum(1), (4, 2, 5000), 0, 64, (1, 3, 64))


def test_cumsum_rank_1_and_dim_0_of_the_length():
    check(lambda x: torch.cumsum(x, 0), (16,), 0, 300, (1, 65, 300))


def test_cumprod():
    def near_one(shape, g):
        return 1 + 0.02 * torch.randn(shape, generator=g)

    check(lambda x: (x.cumprod(1), x.cumprod(-1)), (2, 8, 3), 1, 130, (1, 7, 65, 130), make=near_one)


def test_bool_and_mask_inputs_give_exact_integers():
    # (x > 0) is a 0/1 mask: the running count is exact up to the length; eager's dtype is int64
    check(lambda x: ((x > 0).cumsum(1), (x > 0).long().cumsum(0), (x > 0).to(torch.int32).cumprod(1)),
          (3, 8), 1, 300, (1, 7, 65, 300), exact=True)  # fmt: skip


def test_cumsum_of_an_int_constant_is_exact_and_the_mask_pattern_of_positions():
    table = torch.arange(-50, 50).reshape(10, 10)

    def fn(x):
        pos = (x != 0).long().cumsum(-1) - 1  # position ids from a mask (transformers' generate)
        return pos, table.cumsum(1), (x != 0).cumsum(-1) * table[0, 0]

    check(fn, (2, 8), 1, 257, (1, 9, 65, 257), exact=True)


def test_integer_input_gets_a_limit_checked_on_every_call():
    class IdsCumsum(torch.nn.Module):
        def forward(self, ids, mask):
            return ids.cumsum(1), mask.long().cumsum(-1) - 1, mask.cumprod(0)

    ids, mask = torch.randint(-9, 10, (2, 16)), torch.ones(2, 16, dtype=torch.int32)
    npu = compile_torch(IdsCumsum(), ids, mask, dynamic_dim=1, min_len=1, max_len=64, cache=False)
    # 2**24 // 64 for a cumsum over up to 64 positions; the mask's cumprod over dim 0 (2 values) allows 2**12
    assert [m.limit[0] for m in npu.artifact.programs[0].inputs] == [2**24 // 64, 2**12]
    for n in (1, 7, 64):
        ids, mask = torch.randint(-9, 10, (2, n)), (torch.rand(2, n) > 0.3).to(torch.int32)
        for g, w in zip(npu(ids, mask), IdsCumsum()(ids, mask)):
            assert g.dtype == w.dtype and torch.equal(g, w)
    big = torch.full((2, 5), 2**24 // 64 + 1)
    with pytest.raises(
        NovellaError,
        match=r"input #0 holds the integer 262145, above 262144: .*test_scan.py:\d+.*"
        r"'torch.aten.cumsum': cumsum of this integer input sums up to 64 of its values along dim 1",
    ):
        npu(big, mask[:, :5])


def test_the_limit_is_the_program_of_the_length():
    class Branchy(torch.nn.Module):  # T = 1 is a program of its own (the model branches on it)
        def forward(self, ids):
            y = ids.cumsum(1)
            return y * 2 if ids.shape[1] == 1 else y

    npu = compile_torch(Branchy(), torch.randint(0, 9, (1, 16)), dynamic_dim=1, min_len=1, max_len=64, cache=False)
    limits = [p.inputs[0].limit[:1] for p in npu.artifact.programs]
    assert limits[0] == [] and limits[1:] and all(lim == [2**24 // 64] for lim in limits[1:]), limits
    big = torch.full((1, 1), 300000)
    assert torch.equal(npu(big), Branchy()(big))  # one value: exact at any size
    with pytest.raises(NovellaError, match="input #0 holds the integer 300000, above 262144"):
        npu(torch.full((1, 5), 300000))


def test_large_int_constant_times_length_is_refused():
    big = torch.full((4, 16), 2**21, dtype=torch.int64)

    class Big(torch.nn.Module):
        def forward(self, x):
            return big.cumsum(1), x + 1

    # |x| <= 2**21 (the constant's largest) over 16 positions may reach 2**25: refused
    with pytest.raises(
        NovellaError, match=r"cumsum of an integer tensor along dim 1, whose length can reach 16.*2097152"
    ):
        compile_torch(Big(), torch.randn(3, 8), dynamic_dim=1, min_len=1, max_len=16, cache=False)


def test_cumsum_of_a_float_input_into_an_integer_dtype_limits_the_input():
    class Cast(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x, 1, dtype=torch.int64)

    # |x.long()| <= |x|: the float input is bounded like an integer one, checked on every call
    npu = compile_torch(Cast(), torch.randn(2, 8), dynamic_dim=1, min_len=1, max_len=64, cache=False)
    assert [m.limit[0] for m in npu.artifact.programs[0].inputs] == [2**24 // 64]
    for n in (1, 9, 64):
        x = 1000 * torch.randn(2, n, generator=torch.Generator().manual_seed(n))
        assert torch.equal(npu(x), Cast()(x)), f"T={n}"
    with pytest.raises(NovellaError, match=r"input #0 holds the value 300000\.5, above 262144: .*cumsum"):
        npu(torch.full((2, 5), 300000.5))
    check(lambda x: (torch.cumsum(x.long(), 1, dtype=torch.float32), torch.cumsum(x > 0, 0, dtype=torch.float32)),
          (2, 8), 1, 64, (1, 9, 64))  # fmt: skip


def test_cumsum_into_an_integer_dtype_of_values_computed_on_the_npu_is_refused_unbounded():
    class Cast(torch.nn.Module):
        def forward(self, x):
            return torch.cumsum(x.exp(), 1, dtype=torch.int64)

    with pytest.raises(NovellaError, match="cumsum of an integer tensor along dim 1.*bounded only by 2"):
        compile_torch(Cast(), torch.randn(2, 8), dynamic_dim=1, min_len=1, max_len=64, cache=False)


def test_float_to_int_truncates_toward_zero():
    def values(shape, g):
        x = 300 * torch.randn(shape, generator=g)
        special = torch.tensor([0.5, -0.5, 2.5, -2.5, 1 - 2**-24, -(2**23) - 3.0, 2**23 + 1.0, -0.0])
        k = min(len(special), x.numel())
        x.view(-1)[:k] = special[:k]
        return x

    check(lambda x: (x.long(), x.to(torch.int32), (torch.ones_like(x).cumsum(1) * (x > 0) - 1).long()), (2, 8), 1, 130, (1, 5, 65, 130),
          make=values, exact=True)  # fmt: skip


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool], ids=["int64", "bool"])
def test_opinfo_integer_samples_of_cumsum(dtype):
    """OpInfo's own int64 and bool samples of cumsum (the harness runs float32 only) that eager runs, the
    first and the last dim in turn dynamic, exact with eager's dtype."""
    pytest.importorskip("expecttest")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import opinfo_harness as h

    info = h.op_infos()["cumsum"]
    ran = 0
    for s in info.sample_inputs("cpu", dtype):
        module = h._Op(info.op, list(s.args), dict(s.kwargs), []).eval()
        try:
            module(s.input)
        except (RuntimeError, NotImplementedError):  # e.g. no bool cumsum into a bool result in eager
            continue
        for d in sorted({0, s.input.dim() - 1}) if s.input.dim() >= 2 else []:
            npu = compile_torch(module, s.input, dynamic_dim=d, min_len=1, max_len=65, cache=False)
            for n in (1, 7, 65):
                x = h._grow(s.input, d, n)
                got, want = npu(x), module(x)
                assert got.dtype == want.dtype and torch.equal(got, want), f"{s.args} {s.kwargs} dim {d} T={n}"
            ran += 1
    assert ran >= 4
