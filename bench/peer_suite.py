"""The peer suite: torch-mlir's own e2e test modules (`projects/pt1/python/torch_mlir_e2e_test/test_suite`
of llvm/torch-mlir, read from a checkout given on the command line; the wheel does not ship it) run
through `compile_torch` with one dynamic dim, and compared with eager.

    .venv/bin/python bench/peer_suite.py --suite <torch-mlir>/projects/pt1/python [--filter Softmax] [--budget 60]

Per test: its module and the inputs its invoker passes to `forward`; the dynamic dim is the first dim
annotated -1 (`annotate_args`) whose example size is at least 2, one `Dim("T")` shared by every
input dim annotated -1 of that size (alone on its input if torch.export refuses the sharing). A test
counts when torch.export takes it with that dim; it passes when it compiles once for T in [lo, 2 n + 3]
and matches eager (atol = rtol = 1e-4, nan where eager is nan) at lo, the example size n, an odd size
and the maximum. Tests run in a subprocess (restarted after a crash), each with a timeout.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import subprocess
import sys
import time
import types
from collections import Counter
from pathlib import Path

TOL = 1e-4


def install_harness(suite: Path) -> list:
    """Stand-ins for the suite's framework (TestUtils) and registry; its annotations module as it is.
    Returns the registry the test modules fill."""
    import torch

    registry: list = []

    class TestUtils:
        def __init__(self):
            torch.manual_seed(0)

        def rand(self, *sizes, low=0.0, high=1.0):
            return torch.empty(sizes).uniform_(low, high)

        def randint(self, *sizes, low=0, high=10, dtype=torch.int64):
            return torch.randint(low, high, sizes, dtype=dtype)

        def nans(self, *sizes):
            return torch.full(sizes, torch.nan)

    def register_test_case(module_factory, timeout_seconds: int = 120):
        def decorator(f):
            registry.append((f.__name__, module_factory, f))
            return f

        return decorator

    pkg = types.ModuleType("torch_mlir_e2e_test")
    pkg.__path__ = [str(suite / "torch_mlir_e2e_test")]
    framework = types.ModuleType("torch_mlir_e2e_test.framework")
    framework.TestUtils = TestUtils
    reg = types.ModuleType("torch_mlir_e2e_test.registry")
    reg.register_test_case = register_test_case
    tests = types.ModuleType("torch_mlir_e2e_test.test_suite")
    tests.__path__ = [str(suite / "torch_mlir_e2e_test" / "test_suite")]
    sys.modules.update({m.__name__: m for m in (pkg, framework, reg, tests)})
    return registry


def load(suite: Path) -> tuple[list, dict]:
    """(registered tests, test-suite modules that did not import -> why)."""
    registry = install_harness(suite)
    failed = {}
    for f in sorted((suite / "torch_mlir_e2e_test" / "test_suite").glob("*.py")):
        if f.stem == "__init__":
            continue
        try:
            importlib.import_module(f"torch_mlir_e2e_test.test_suite.{f.stem}")
        except Exception as e:  # noqa: BLE001 - e.g. torchvision or a custom op library missing
            failed[f.stem] = f"{type(e).__name__}: {e}"[:120]
    return registry, failed


class Recorder:
    """Stands for the module in an invoker: records the method called and its arguments."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args, **kw: self.calls.append((name, args, kw))


def dynamic_spec(module, args, share: bool):
    """(dynamic_shapes, example size) for the first -1 dim of size >= 2, or None."""
    from torch.export import Dim

    ann = getattr(module.forward, "_torch_mlir_arg_annotations", None) or []
    ann = list(ann[1:]) if len(ann) == len(args) + 1 else list(ann)
    pick = None
    for i, (a, x) in enumerate(zip(ann, args)):
        for d, s in enumerate((a or ((),))[0] or ()):
            if s == -1 and x.dim() > d and x.shape[d] >= 2:
                pick = pick or (i, d, x.shape[d])
    if pick is None:
        return None
    i0, d0, n = pick
    t = Dim("T", min=1, max=2 * n + 3)
    spec = []
    for i, (a, x) in enumerate(zip(ann, args)):
        dims = (a or ((),))[0] or ()
        mine = {d: t for d, s in enumerate(dims) if s == -1 and d < x.dim() and x.shape[d] == n}
        spec.append((mine if share else {d0: t} if i == i0 else {}) or None)
    return tuple(spec), n


def resized(args, spec, n: int, seed: int):
    import torch

    g = torch.Generator().manual_seed(seed)
    out = []
    for x, dims in zip(args, spec):
        if not dims:
            out.append(x)
            continue
        size = [n if d in dims else s for d, s in enumerate(x.shape)]
        if x.dtype == torch.bool:
            out.append(torch.rand(size, generator=g) > 0.5)
        elif x.dtype.is_floating_point:
            lo, hi = (float(x.min()), float(x.max())) if x.numel() and x.isfinite().all() else (0.0, 1.0)
            out.append(torch.rand(size, generator=g, dtype=x.dtype) * (hi - lo) + lo)
        else:
            lo, hi = (int(x.min()), int(x.max())) if x.numel() else (0, 1)
            out.append(torch.randint(lo, hi + 1, size, generator=g, dtype=x.dtype))
    return out


def run_test(name, factory, invoker) -> dict:
    import torch

    from novella_mlir import compile_torch
    from novella_mlir.errors import NovellaError

    info: dict = {}
    torch.manual_seed(0)
    module = factory()
    rec = Recorder()
    TestUtils = sys.modules["torch_mlir_e2e_test.framework"].TestUtils
    invoker(rec, TestUtils())
    if len(rec.calls) != 1 or rec.calls[0][0] != "forward" or rec.calls[0][2]:
        return info | {"stage": "not one forward call"}
    args = rec.calls[0][1]
    info["dtypes"] = sorted({str(a.dtype).removeprefix("torch.") for a in args if isinstance(a, torch.Tensor)})
    if not args or not all(isinstance(a, torch.Tensor) for a in args):
        return info | {"stage": "non-tensor input"}
    found, prog_spec = None, None
    for share in (True, False):
        found = dynamic_spec(module, args, share)
        if found is None:
            return info | {"stage": "no dynamic dim"}
        try:
            torch.export.export(module, tuple(args), dynamic_shapes=found[0])
            prog_spec = found
            break
        except Exception as e:  # noqa: BLE001
            why = f"{type(e).__name__}: {' '.join(str(e).split())[:160]}"
    if prog_spec is None:
        return info | {"stage": "export fails", "why": why}
    spec, n = prog_spec
    dims = [s or {} for s in spec]
    t0 = time.perf_counter()
    try:
        npu = compile_torch(module, *args, dynamic_shapes=spec, cache=False, buckets=False)
    except NovellaError as e:
        return info | {"stage": "refused", "why": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    except Exception as e:  # noqa: BLE001 - a crash: the compiler must refuse with a NovellaError instead
        if isinstance(e, TimeoutError):
            raise
        return info | {"stage": "crash", "why": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
    secs = time.perf_counter() - t0
    hi = 2 * n + 3
    checked = []
    for m in sorted({1, n, (n + hi) // 2 | 1, hi}):
        a = resized(args, dims, m, m) if m != n else list(args)
        try:
            with torch.no_grad():
                want = module(*[x.clone() for x in a])
        except Exception:  # noqa: BLE001 - eager itself rejects this size: not a check
            continue
        try:
            got = npu(*a, check_hazards=False)
        except TimeoutError:
            raise
        except Exception as e:  # noqa: BLE001
            return info | {"stage": "run fails", "why": f"T={m}: {type(e).__name__}: {str(e)[:200]}"}
        if not same(got, want):
            return info | {"stage": "wrong", "why": f"T={m}", "compile_s": secs}
        checked.append(m)
    return info | {"stage": "pass" if checked else "no size eager takes", "compile_s": round(secs, 1), "sizes": checked}


def same(got, want) -> bool:
    import torch

    gs, ws = (got, want) if isinstance(want, (tuple, list)) else ((got,), (want,))
    if len(gs) != len(ws):
        return False
    for g, w in zip(gs, ws):
        if not isinstance(w, torch.Tensor):
            continue
        g = torch.as_tensor(g)
        if g.shape != w.shape:
            return False
        if w.dtype.is_floating_point:
            if not torch.allclose(g.to(w.dtype), w, atol=TOL, rtol=TOL, equal_nan=True):
                return False
        elif not torch.equal(g.to(w.dtype), w):
            return False
    return True


def child(suite: Path, names: list[str], per_test: int) -> None:
    import logging
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    registry, _ = load(suite)
    by_name = {r[0]: r for r in registry}
    for name in names:
        signal.signal(signal.SIGALRM, _timeout)
        signal.alarm(per_test)
        try:
            res = run_test(*by_name[name])
        except TimeoutError:
            res = {"stage": "timeout", "why": f"no answer in {per_test} s"}
        except Exception as e:  # noqa: BLE001 - the test's own harness code failed
            res = {"stage": "harness", "why": f"{type(e).__name__}: {str(e)[:160]}"}
        finally:
            signal.alarm(0)
        print(json.dumps({"name": name, **res}), flush=True)
        if res["stage"] == "timeout":  # the alarm may have left the runtime mid-step: the rest in a new child
            sys.exit(_FRESH)


_FRESH = 3


def _timeout(*_):
    raise TimeoutError("timed out")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", required=True, type=Path, help="the torch-mlir checkout's projects/pt1/python")
    p.add_argument("--filter", default="", help="only tests whose name contains one of these (comma-separated)")
    p.add_argument("--timeout", type=int, default=120, help="seconds per test")
    p.add_argument("--budget", type=float, default=1e9, help="minutes: start no test after this")
    p.add_argument("--results", default="/tmp/peer_suite.jsonl", help="results so far (resumed)")
    p.add_argument("--retry", action="store_true", help="run again the counted tests that did not pass")
    p.add_argument("--retry-stages", default="", help="with --retry: only tests that ended so (e.g. timeout)")
    p.add_argument("--reverse", action="store_true", help="from the last test (a second run from the other end)")
    p.add_argument("--out", help="write the counts to this markdown file")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.suite, args.child.split(","), args.timeout)
        return
    registry, failed = load(args.suite)
    for mod, why in failed.items():
        print(f"test module {mod} not loaded: {why}")
    rf = Path(args.results)
    done = {json.loads(x)["name"]: json.loads(x) for x in rf.read_text().splitlines()} if rf.exists() else {}
    stages = set(args.retry_stages.split(",")) if args.retry_stages else None
    again = {n for n, r in done.items() if args.retry and r["stage"] not in _NOT_COUNTED and r["stage"] != "pass"}
    again = {n for n in again if stages is None or done[n]["stage"] in stages}
    keys = args.filter.split(",")
    todo = [r[0] for r in registry if any(k in r[0] for k in keys) and (r[0] not in done or r[0] in again)]
    todo = todo[::-1] if args.reverse else todo
    stop = time.monotonic() + 60 * args.budget
    env = dict(os.environ, NOVELLA_CACHE="0")
    start_lines = len(rf.read_text().splitlines()) if rf.exists() else 0
    while todo and time.monotonic() < stop:
        fresh = {json.loads(x)["name"] for x in rf.read_text().splitlines()[start_lines:]} if rf.exists() else set()
        todo = [t for t in todo if t not in fresh]  # not done since this run began (by it or one from the other end)
        chunk, todo = todo[:40], todo[40:]
        cmd = [sys.executable, __file__, "--suite", str(args.suite), "--timeout", str(args.timeout),
               "--child", ",".join(chunk)]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
        seen = set()
        for line in proc.stdout:
            if line.startswith("{"):
                r = json.loads(line)
                seen.add(r["name"])
                done[r["name"]] = r
                with rf.open("a") as f:
                    f.write(line)
        proc.wait()
        left = [c for c in chunk if c not in seen]
        if left and proc.returncode == _FRESH:
            todo = left + todo
        elif left:  # the child died on left[0]: record it, retry the rest
            done[left[0]] = r = {"name": left[0], "stage": "crash", "why": f"the process died ({proc.returncode})"}
            with rf.open("a") as f:
                f.write(json.dumps(r) + "\n")
            todo = left[1:] + todo
    done = {json.loads(x)["name"]: json.loads(x) for x in rf.read_text().splitlines()} if rf.exists() else {}
    text = report(registry, done, failed)  # --budget 0: only this
    if args.out:
        Path(args.out).write_text(_HEAD.format(machine=_machine()) + text)


def report(registry, done, failed) -> str:
    """The counts as a markdown section (printed, and written by --out)."""
    stages = Counter(r["stage"] for r in done.values())
    counted = [r for r in done.values() if r["stage"] not in _NOT_COUNTED]
    passed = sum(r["stage"] == "pass" for r in counted)
    f32 = [r for r in counted if not set(r.get("dtypes", [])) & {"float64", "float16", "bfloat16", "complex64"}]
    lines = [
        f"{len(registry)} tests registered ({len(failed)} test modules not loaded: {', '.join(failed)}), "
        f"{len(done)} run.",
        "",
        f"**Pass count: {passed} of the {len(counted)} that torch.export takes with a dynamic dim** "
        f"({sum(r['stage'] == 'pass' for r in f32)} of the {len(f32)} without float64/float16 inputs). "
        f"The {len(counted)} are every test but those with no dynamic dim, a non-tensor input, a failing "
        f"export or not one forward call; {stages['timeout']} of them ran out of time, at export or later.",
        "",
        "| stage | tests |",
        "|---|---|",
        *(f"| {stage} | {n} |" for stage, n in stages.most_common()),
        "",
        "| first refusal of the counted tests that do not pass | tests |",
        "|---|---|",
    ]
    why = Counter(_head(r.get("why", "")) for r in counted if r["stage"] != "pass")
    lines += [f"| {w.replace('|', '/')} | {n} |" for w, n in why.most_common(30)]
    text = "\n".join(lines) + "\n"
    print(text)
    return text


_NOT_COUNTED = ("not one forward call", "non-tensor input", "no dynamic dim", "export fails", "harness")


_HEAD = """# Peer suite: torch-mlir's e2e test modules

Generated by `bench/peer_suite.py` ({machine}) from llvm/torch-mlir's
`projects/pt1/python/torch_mlir_e2e_test/test_suite` (read from a checkout, not vendored). Each test's module
gets the inputs its invoker passes, with its first `-1`-annotated dim of size >= 2 as one `Dim("T")`;
a test counts when torch.export takes it so; it passes when it compiles once for T in [1, 2n + 3] and
matches eager (atol = rtol = 1e-4) at 1, n, an odd size and 2n + 3.

"""


def _machine() -> str:
    import platform

    commit = os.environ.get("PEER_COMMIT", "?")
    return f"commit {commit}, {platform.node()} ({os.cpu_count()} cores), torch-mlir checkout {_SUITE_REV}"


_SUITE_REV = os.environ.get("PEER_SUITE_REV", "?")


def _head(why: str) -> str:
    import re

    m = re.search(r"'(torch\.[\w.]+|novella\.[\w.]+)'", why)
    return m.group(1) if m else why[:90]


if __name__ == "__main__":
    main()
