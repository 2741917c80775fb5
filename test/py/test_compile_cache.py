"""The persistent compile cache: hits, what the key covers, entries bound to their key, the signing key,
failed writes, the size cap, off switches. (Key fuzz: test_cache_fuzz.py; several processes at once: test_cache_processes.py.)"""

from __future__ import annotations

import dataclasses
import errno
import os
import shutil

import numpy as np
import pytest
import torch

from novella_mlir import compile_torch, pipeline
from novella_mlir.artifact import cache


def _mlp(seed=0, hidden=16):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, 8)).eval()


KW = dict(dynamic_dim=1, min_len=1, max_len=32)
X = torch.randn(1, 8, 8)


def _compile(model, **kw):
    return compile_torch(model, X, **{**KW, **kw})


def _key(model, x=X, **kw):
    return cache.lookup_key(compile_torch, model, x, **{**KW, **kw})


@pytest.fixture
def on(monkeypatch, tmp_path):
    monkeypatch.setenv("NOVELLA_CACHE", "1")
    monkeypatch.setenv("NOVELLA_CACHE_DIR", str(tmp_path))
    return tmp_path


def _entries(path):
    return sorted(p for p in path.iterdir() if not p.name.startswith("."))


def _close(npu, model, length=13):
    x = torch.randn(1, length, 8)
    torch.testing.assert_close(npu(x), model(x), rtol=1e-4, atol=1e-4)


def test_second_compile_is_a_hit_that_only_exports(on, monkeypatch):
    model = _mlp()
    first = _compile(model)
    assert len(_entries(on)) == 1
    monkeypatch.setattr(pipeline, "_compile_program", lambda *a, **k: pytest.fail("a cache hit must not compile"))
    second = _compile(model)
    assert second.artifact.metadata() == first.artifact.metadata()
    assert second.ir("novella") == first.ir("novella")
    x = torch.randn(1, 31, 8)
    assert torch.equal(first(x), second(x))
    _close(second, model)


def test_key_covers_weights_bounds_config_and_passes(on):
    from simulator import load_config

    base = _key(_mlp())
    assert _key(_mlp()) == base
    assert _key(_mlp(seed=1)) != base
    assert _key(_mlp(), max_len=64) != base
    assert _key(_mlp(), x=X.double()) != base
    assert _key(_mlp(), pass_options={"novella-tile": {"tile-m": 32}}) != base
    assert _key(_mlp(), config=dataclasses.replace(load_config(), dram_bytes_per_cycle=64)) != base
    model = _mlp()
    with torch.no_grad():
        model[0].bias[0] += 1
    assert _key(model) != base


class _Act(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _factory(fn):
    return lambda x: fn(x)


def test_key_covers_what_a_held_function_computes(on):
    fns = (torch.tanh, torch.exp, lambda x: x * 2, lambda x: x * 3, _factory(torch.relu), _factory(torch.sigmoid))
    keys = [_key(_Act(f)) for f in fns]
    assert len(set(keys)) == len(fns)
    assert _key(_Act(_factory(torch.tanh))) == keys[0]  # what traces to tanh is tanh, however it is written


def test_a_hit_across_models_written_apart_runs_right(on):
    """Two lambdas from one factory (the issue's relu vs tanh): each compile runs its own function."""
    relu, tanh = _compile(_Act(_factory(torch.relu))), _compile(_Act(_factory(torch.tanh)))
    x = torch.randn(1, 9, 8)
    torch.testing.assert_close(relu(x), torch.relu(x))
    torch.testing.assert_close(tanh(x), torch.tanh(x), rtol=1e-4, atol=1e-4)
    assert len(_entries(on)) == 2


def test_corrupted_entry_warns_and_recompiles(on):
    model = _mlp()
    _compile(model)
    (entry,) = _entries(on)
    data = (entry / "model.nvla").read_bytes()
    (entry / "model.nvla").write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match="unreadable.*HMAC-SHA256 mismatch.*compiling again"):
        _close(_compile(model), model)
    assert (entry / "sig").exists()  # written again, whole


@pytest.mark.parametrize("part", ["model.nvla", "stages.json", "trace.json", "all"])
def test_an_entry_copied_under_another_key_is_refused(on, part):
    a, b = _mlp(0), _mlp(1)
    _compile(a)
    (ea,) = _entries(on)
    _compile(b)
    (eb,) = [e for e in _entries(on) if e != ea]
    for f in ["model.nvla", "stages.json", "trace.json", "sig"] if part == "all" else [part]:
        shutil.copy(eb / f, ea / f)
    with pytest.warns(UserWarning, match="signature does not match"):
        npu = _compile(a)
    _close(npu, a)


def test_a_signed_hit_skips_the_bound_check(on, monkeypatch):
    from novella_mlir.artifact import format as artifact

    model = _mlp()
    _compile(model)
    assert ((on / ".key").stat().st_mode & 0o777) == 0o600
    monkeypatch.setattr(artifact, "_check_encodes", lambda *a: pytest.fail("a signed hit must not instantiate"))
    _close(_compile(model), model)


@pytest.mark.parametrize("damage", ["mode", "length", "symlink"])
def test_a_bad_signing_key_is_replaced(on, damage, tmp_path_factory):
    model = _mlp()
    _compile(model)
    key = on / ".key"
    if damage == "mode":
        key.chmod(0o644)
    elif damage == "length":
        key.write_bytes(b"short")
    else:
        other = tmp_path_factory.mktemp("elsewhere") / "k"
        other.write_bytes(os.urandom(32))
        other.chmod(0o600)
        key.unlink()
        key.symlink_to(other)
    with pytest.warns(UserWarning, match="making a new one"):
        _close(_compile(model), model)  # the entry signed with the old key: compiled again
    assert cache._key_problem(key) is None
    _compile(model)  # and a clean hit after it


def test_a_failed_write_leaves_nothing_behind(on, monkeypatch):
    from novella_mlir.artifact import format as artifact

    def full(self, path, key=None):
        path.write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(artifact.Artifact, "save", full)
    with pytest.warns(UserWarning, match="could not write the compile cache.*No space left"):
        _compile(_mlp())
    assert [p.name for p in on.iterdir() if p.name.startswith(".tmp")] == []
    assert _entries(on) == []


def test_stale_temp_directories_are_cleaned(on):
    stale = on / ".tmp-dead-writer"
    stale.mkdir()
    (stale / "model.nvla").write_bytes(b"x" * 10)
    old = 1_000_000
    os.utime(stale, (old, old))
    fresh = on / ".tmp-live-writer"
    fresh.mkdir()
    _compile(_mlp())
    assert not stale.exists() and fresh.exists()


def test_size_cap_evicts_the_least_recently_used(on, monkeypatch):
    a, b, c = _mlp(0), _mlp(1), _mlp(2)
    _compile(a)
    (ea,) = _entries(on)
    size = sum(p.stat().st_size for p in ea.iterdir())
    monkeypatch.setenv("NOVELLA_CACHE_MAX_MB", str(2.5 * size / (1 << 20)))
    _compile(b)
    (eb,) = [e for e in _entries(on) if e != ea]
    os.utime(ea / "sig", (1, 1))
    os.utime(eb / "sig", (2, 2))
    _compile(a)  # a hit: a is now the most recently used
    _compile(c)
    assert ea.exists() and not eb.exists() and len(_entries(on)) == 2


@pytest.mark.parametrize("how", ["argument", "env"])
def test_cache_can_be_turned_off(on, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv("NOVELLA_CACHE", "0")
        _compile(_mlp())
    else:
        _compile(_mlp(), cache=False)
    assert _entries(on) == []


def test_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("NOVELLA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.directory() == tmp_path / "novella-mlir"
    assert np.all([cache.enabled(True), not cache.enabled(False)])


def _encoder(norm_first: bool):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=norm_first)
    return torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()


def test_key_covers_plain_module_attributes(on):
    """Same classes and weights, a Python flag apart (norm_first): a hit across them would be wrong."""
    pre, post = _encoder(True), _encoder(False)
    x = torch.randn(1, 5, 16)
    assert _key(pre, x) != _key(post, x)


class _AtOne(torch.nn.Module):
    """relu for T >= 2, `at_one` at T = 1: torch.export traces T >= 2 only, so T = 1 is a program of its own."""

    def __init__(self, at_one):
        super().__init__()
        self.at_one = at_one

    def forward(self, x):
        return torch.relu(x) if x.shape[1] > 1 else self.at_one(x)


def test_a_compile_of_several_exports_is_keyed_on_all_of_them(on, monkeypatch):
    """Both models narrow the same way at their first export; only the T = 1 trace tells them apart."""
    a, b = _AtOne(torch.tanh), _AtOne(torch.sigmoid)
    npu_a, npu_b = _compile(a), _compile(b)
    assert len(_entries(on)) == 2 and len({e.name.split("-")[0] for e in _entries(on)}) == 1
    for npu, m in ((npu_a, a), (npu_b, b)):
        for t in (1, 2, 9):
            x = torch.randn(1, t, 8)
            torch.testing.assert_close(npu(x), m(x), rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(pipeline, "_compile_program", lambda *a, **k: pytest.fail("a cache hit must not compile"))
    x = torch.randn(1, 1, 8)
    torch.testing.assert_close(_compile(b)(x), torch.sigmoid(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(_compile(a)(x), torch.tanh(x), rtol=1e-4, atol=1e-4)
