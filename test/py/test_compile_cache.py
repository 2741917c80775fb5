"""The persistent compile cache: hits, misses on every key part, corrupted entries, off switches."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from novella_mlir import compile_torch
from novella_mlir.artifact import cache
from novella_mlir.frontend import importer


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32)).eval()


def _compile(model, **kw):
    return compile_torch(model, torch.randn(1, 8, 32), dynamic_dim=1, min_len=1, max_len=256, **kw)


@pytest.fixture
def on(monkeypatch, tmp_path):
    monkeypatch.setenv("NOVELLA_CACHE", "1")
    monkeypatch.setenv("NOVELLA_CACHE_DIR", str(tmp_path))
    return tmp_path


def _entries(path):
    return [p for p in path.iterdir() if not p.name.startswith(".")]


def test_second_compile_is_a_hit_without_export(on, monkeypatch):
    model = _mlp()
    first = _compile(model)
    assert len(_entries(on)) == 1
    monkeypatch.setattr(importer, "export", lambda *a, **k: pytest.fail("a cache hit must not export"))
    second = _compile(model)
    assert second.artifact.metadata() == first.artifact.metadata()
    assert second.ir("novella") == first.ir("novella")
    x = torch.randn(1, 37, 32)
    assert torch.equal(first(x), second(x))
    torch.testing.assert_close(second(x), model(x), rtol=1e-4, atol=1e-4)


def test_key_covers_weights_bounds_config_and_passes(on):
    from simulator import load_config

    model = _mlp()
    kw = dict(dynamic_dim=1, min_len=1, max_len=256, config=load_config(), pass_options=None)
    args = (torch.randn(1, 8, 32),)
    base = cache.key(model, args, **kw)
    assert cache.key(_mlp(), args, **kw) == base
    assert cache.key(_mlp(seed=1), args, **kw) != base
    assert cache.key(model, args, **{**kw, "max_len": 512}) != base
    assert cache.key(model, (torch.randn(1, 8, 32, dtype=torch.float64),), **kw) != base
    assert cache.key(model, args, **{**kw, "pass_options": {"novella-tile": {"tile-m": 32}}}) != base
    with torch.no_grad():
        model[0].bias[0] += 1
    assert cache.key(model, args, **kw) != base


class _Act(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def test_key_covers_a_function_the_module_holds(on):
    from simulator import load_config

    kw = dict(dynamic_dim=1, min_len=1, max_len=64, config=load_config(), pass_options=None)
    args = (torch.randn(1, 8, 32),)
    keys = {cache.key(_Act(f), args, **kw) for f in (torch.tanh, torch.exp, lambda x: x * 2, lambda x: x * 3)}
    assert len(keys) == 4
    assert cache.key(_Act(torch.tanh), args, **kw) in keys


def test_corrupted_entry_warns_and_recompiles(on):
    model = _mlp()
    _compile(model)
    (entry,) = _entries(on)
    data = (entry / "model.nvla").read_bytes()
    (entry / "model.nvla").write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match="unreadable.*compiling again"):
        npu = _compile(model)
    x = torch.randn(1, 5, 32)
    torch.testing.assert_close(npu(x), model(x), rtol=1e-4, atol=1e-4)
    _compile(model)  # the entry was rewritten: a clean hit


def test_a_signed_hit_skips_the_bound_check(on, monkeypatch):
    from novella_mlir.artifact import format as artifact

    model = _mlp()
    _compile(model)
    assert ((on / ".key").stat().st_mode & 0o777) == 0o600
    monkeypatch.setattr(artifact, "_check_encodes", lambda *a: pytest.fail("a signed hit must not instantiate"))
    npu = _compile(model)
    x = torch.randn(1, 9, 32)
    torch.testing.assert_close(npu(x), model(x), rtol=1e-4, atol=1e-4)


def test_an_entry_not_signed_with_the_caches_key_is_recompiled(on):
    from novella_mlir import artifact

    model = _mlp()
    first = _compile(model)
    (entry,) = _entries(on)
    first.artifact.save(entry / "model.nvla", key=b"another key")  # well-formed, checksum fine, foreign signer
    with pytest.warns(UserWarning, match="HMAC-SHA256 mismatch.*compiling again"):
        _compile(model)
    artifact.load(entry / "model.nvla", key=(on / ".key").read_bytes(), check_bounds=False)  # rewritten, signed


def test_unsigned_load_cannot_skip_the_bound_check(tmp_path):
    from novella_mlir import ArtifactError, artifact

    with pytest.raises(ArtifactError, match="needs the signing key"):
        artifact.load(tmp_path / "x.nvla", check_bounds=False)


@pytest.mark.parametrize("how", ["argument", "env"])
def test_cache_can_be_turned_off(on, monkeypatch, how):
    if how == "env":
        monkeypatch.setenv("NOVELLA_CACHE", "0")
        _compile(_mlp())
    else:
        _compile(_mlp(), cache=False)
    assert _entries(on) == []


def test_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("NOVELLA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.directory() == tmp_path / "novella-mlir"
    assert np.all([cache.enabled(True), not cache.enabled(False)])


def _encoder(norm_first: bool):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True, norm_first=norm_first)
    return torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()


def test_key_covers_plain_module_attributes(on):
    """Two models with the same classes and weights that differ only in a Python flag (norm_first)
    compute different things: a hit across them would be a silently wrong answer."""
    pre, post = _encoder(True), _encoder(False)
    assert [t.tolist() for t in pre.state_dict().values()] == [t.tolist() for t in post.state_dict().values()]
    first, second = _compile(post), _compile(pre)
    assert len(_entries(on)) == 2
    x = torch.randn(1, 11, 32)
    torch.testing.assert_close(second(x), pre(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(first(x), post(x), rtol=1e-4, atol=1e-4)
