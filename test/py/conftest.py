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


# The quick subset (`pytest -m quick`, `bash .ci/run quick`): the unit tests of the ISA, simulator, timing,
# op table, symbols, artifact and tools, which compile only small models; other files mark single tests.
QUICK_FILES = {
    "test_artifact.py", "test_dual_unit.py", "test_goldens_switch.py", "test_isa.py", "test_isa_gather.py",
    "test_optable.py", "test_simulator.py", "test_symbols.py", "test_timing.py", "test_tools.py", "test_trace.py",
}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in QUICK_FILES:
            item.add_marker(pytest.mark.quick)
