"""Shared test setup: no test reads or fills the user's compile cache.

Every test gets NOVELLA_CACHE=0 and a private NOVELLA_CACHE_DIR; tests of
the cache itself turn it back on (test_compile_cache.py)."""

import pytest


@pytest.fixture(autouse=True)
def _no_shared_compile_cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("NOVELLA_CACHE", "0")
    monkeypatch.setenv("NOVELLA_CACHE_DIR", str(tmp_path_factory.mktemp("novella-cache")))
