"""Shared test setup: no test reads or fills the user's compile cache; numba's kernels are built once
before xdist starts its workers; the heaviest files are handed out first; hypothesis has a suite profile;
`--durations-by-file N` prints the N files of most seconds (what orders HEAVY_FIRST).

NOVELLA_CACHE=0 is set when the test session starts, so module- and
session-scoped fixtures (which run before any function-scoped fixture) do
not read the user's cache either; every test also gets a private
NOVELLA_CACHE_DIR. Tests of the cache itself turn it back on
(test_compile_cache.py). NOVELLA_SUITE_CACHE_DIR is one compile cache for the whole run (made by the
controller, inherited by xdist's workers, removed at its end): `lm_models.shared_lm` shares a model's
compile between the test files that compile it alike."""

import os
import shutil
import sys
import tempfile

import pytest
from hypothesis import settings

os.environ["NOVELLA_CACHE"] = "0"
os.environ["NOVELLA_CACHE_DIR"] = tempfile.mkdtemp(prefix="novella-cache-")
if "NOVELLA_SUITE_CACHE_DIR" not in os.environ:  # the controller (or a run without xdist): its workers inherit it
    os.environ["NOVELLA_SUITE_CACHE_DIR"] = _SUITE_CACHE = tempfile.mkdtemp(prefix="novella-suite-cache-")

# `suite` (the default) runs each property test on 40 examples; HYPOTHESIS_PROFILE=thorough on 500.
settings.register_profile("suite", max_examples=40, deadline=None, database=None)
settings.register_profile("thorough", max_examples=500, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


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

# The files of most CPU first (`--durations-by-file`, printed by .ci/run; a loaded 2-core host). With `--dist
# loadfile --no-loadscope-reorder` (.ci/run) xdist hands a worker the next file in this order when it runs low,
# so the long files start early and short ones fill the end. Files not listed run after these, the quick
# files last. The second to fourth files decode nothing: the first worker's first decoding test builds numba's
# KV-cache kernels (bucket, step, patch: ~45 s on a fresh clone) while the second worker runs them, so the
# second worker's decoding files load those kernels instead of compiling them a second time at once.
HEAVY_FIRST = (
    "test_causal_lm.py", "test_mamba2_scan.py", "test_linear_search.py", "test_topk_ties.py",
    "test_batched_decode.py", "test_bit_identity.py", "test_notebooks.py", "test_text_constructs.py",
    "test_audio_ranges.py", "test_kv_page_chain.py", "test_models.py", "test_moe_group_limit.py",
    "test_complex_pairs.py", "test_resize.py", "test_engine.py", "test_longtail.py", "test_costmodel.py",
    "test_moe_routing.py", "test_cache_processes.py", "test_readme.py", "test_step_forms.py", "test_configs.py",
    "test_chunked_decompose.py", "test_depthwise_conv1d.py", "test_kv_patterns.py", "test_hardening.py",
    "test_cache_fuzz.py", "test_jit_kernel.py", "test_fuzz.py", "test_generic.py", "test_compile_cache.py",
    "test_oracle.py", "test_fast_path.py", "test_opinfo.py", "test_safe_softmax.py", "test_scan.py",
    "test_frontend_ops.py", "test_lm_trust.py", "test_first_hour.py", "test_cycles.py",
)  # fmt: skip


def _rank(item) -> int:
    name = item.path.name
    if name in HEAVY_FIRST:
        return HEAVY_FIRST.index(name)
    return len(HEAVY_FIRST) + (name in QUICK_FILES)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_rank)  # stable: a file's tests keep their order
    for item in items:
        if item.path.name in QUICK_FILES:
            item.add_marker(pytest.mark.quick)


def pytest_unconfigure(config):
    if "_SUITE_CACHE" in globals():  # the process that made it, after its workers
        shutil.rmtree(_SUITE_CACHE, ignore_errors=True)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist), before any worker starts
        _build_numba_kernels_once()


def pytest_addoption(parser):
    parser.addoption(
        "--durations-by-file", type=int, default=0, metavar="N",
        help="show the N test files of most seconds (setup, call and teardown summed; what orders HEAVY_FIRST)",
    )  # fmt: skip


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Sums each file's seconds (on the controller, from every worker's reports)."""
    name = report.nodeid.split("::")[0]
    _FILE_SECONDS[name] = _FILE_SECONDS.get(name, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter, config):
    n = config.getoption("--durations-by-file")
    if n and _FILE_SECONDS:
        terminalreporter.write_sep("=", f"slowest {n} files (seconds, setup + call + teardown)")
        for name, sec in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:n]:
            terminalreporter.write_line(f"{sec:8.1f}s {name}")


def _build_numba_kernels_once() -> None:
    """Numba caches each kernel's machine code beside its source; in a fresh clone none is there yet, and
    every xdist worker (and every subprocess a test starts) would compile the same kernels at once. A tiny
    model, compiled and run checked and unchecked, builds the JIT's and the simulator's kernels here."""
    from novella_mlir.runtime import _jit_numba
    from simulator import _fast_numba, first_build

    if not (first_build.uncached(_jit_numba) or first_build.uncached(_fast_numba)):
        return
    print("conftest: building numba's kernels once (first run after an install)", file=sys.stderr, flush=True)
    import torch

    from novella_mlir import compile_torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 8)).eval()
    npu = compile_torch(model, torch.randn(1, 4, 8), dynamic_dim=1, min_len=1, max_len=32, cache=False)
    for t in (1, 7, 32):
        x = torch.randn(1, t, 8)
        torch.testing.assert_close(npu(x), model(x), rtol=1e-4, atol=1e-4)
        npu(x, check_hazards=False)
