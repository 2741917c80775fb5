"""Shared test setup: no test reads or fills the user's compile cache.

NOVELLA_CACHE=0 is set when the test session starts, so module- and
session-scoped fixtures (which run before any function-scoped fixture) do
not read the user's cache either; every test also gets a private
NOVELLA_CACHE_DIR. Tests of the cache itself turn it back on
(test_compile_cache.py)."""

import os
import tempfile

import pytest

os.environ["NOVELLA_CACHE"] = "0"
os.environ["NOVELLA_CACHE_DIR"] = tempfile.mkdtemp(prefix="novella-cache-")


@pytest.fixture(autouse=True)
def _no_shared_compile_cache(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("NOVELLA_CACHE", "0")
    monkeypatch.setenv("NOVELLA_CACHE_DIR", str(tmp_path_factory.mktemp("novella-cache")))
