"""bench/hostile.py's issue-20 cases: what the compile cache returns, its entries, causal-LM files,
threads, decode parameters, read-only environments."""

from __future__ import annotations

import argparse
import dataclasses
import enum
import errno
import functools
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from hostile_lib import ROOT, Wrong, case

X = torch.randn(1, 7, 8)


class _Holder(torch.nn.Module):
    """forward = act(lin(x)) * scale(self) (+ hooks): `scale` and `act` read the attribute a case varies."""

    def __init__(self, attr, scale=lambda m: 1.0, act=torch.relu):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)
        self.attr, self._scale, self._act = attr, scale, act

    def forward(self, x):
        return self._act(self.lin(x)) * self._scale(self)


def _cache_dir() -> Path:
    d = Path(tempfile.mkdtemp(prefix="hostile-cache-"))
    os.environ.update(NOVELLA_CACHE="1", NOVELLA_CACHE_DIR=str(d))
    return d


def _compile(m):
    from novella_mlir import compile_torch

    return compile_torch(m, torch.randn(1, 4, 8), dynamic_dim=1, min_len=1, max_len=16)


def _check(npu, m, what):
    with torch.no_grad():
        err = (npu(X) - m(X)).abs().max().item()
    if err > 1e-4:
        raise Wrong(f"{what}: error {err:.3g} against eager")


def _pair(name, make_a, make_b):
    """Compiles A then B into one cache: B must run B's program."""

    def fn():
        from novella_mlir import NovellaError

        _cache_dir()
        a, b = make_a(), make_b()
        try:
            _check(_compile(a), a, "A")
        except NovellaError:  # refused with a clear error (e.g. an op the frontend lacks): nothing cached
            pass
        try:
            _check(_compile(b), b, "B (after A in the cache)")
        except NovellaError as e:
            print(f"    (refused: {str(e)[:120]})")

    fn.__name__ = name
    case("cache-key")(fn)


@dataclasses.dataclass
class _Cfg:
    gain: float


class _Flag(enum.Enum):
    RELU = 1
    TANH = 2


def _factory(f):
    return lambda t: f(t)


def _setup_keys():
    gain = lambda m: m.attr.gain  # noqa: E731
    _pair("dataclass_config", lambda: _Holder(_Cfg(1.0), gain), lambda: _Holder(_Cfg(2.0), gain))
    ns = argparse.Namespace
    _pair("namespace_config", lambda: _Holder(ns(gain=1.0), gain), lambda: _Holder(ns(gain=3.0), gain))
    flag = lambda m: 1.0 if m.attr is _Flag.RELU else -1.0  # noqa: E731
    _pair("enum_flag", lambda: _Holder(_Flag.RELU, flag), lambda: _Holder(_Flag.TANH, flag))
    val = lambda m: m.attr  # noqa: E731
    _pair("numpy_scalar", lambda: _Holder(np.float32(2), val), lambda: _Holder(np.float32(3), val))
    _pair("tensor_attribute", lambda: _Holder(torch.tensor(2.0), val), lambda: _Holder(torch.tensor(-1.0), val))
    part = functools.partial
    _pair("functools_partial", lambda: _Holder(None, act=part(torch.clamp, min=0.0)),
          lambda: _Holder(None, act=part(torch.clamp, min=0.5)))  # fmt: skip
    _pair("lambdas_of_one_factory", lambda: _Holder(None, act=_factory(torch.relu)),
          lambda: _Holder(None, act=_factory(torch.tanh)))  # fmt: skip
    _pair("default_argument", lambda: _exec_module("def forward(self, x, k=2.0):\n        return self.lin(x) * k"),
          lambda: _exec_module("def forward(self, x, k=3.0):\n        return self.lin(x) * k"))  # fmt: skip
    _pair("classes_without_file", lambda: _exec_module("def forward(self, x):\n        return torch.relu(self.lin(x))"),
          lambda: _exec_module("def forward(self, x):\n        return torch.tanh(self.lin(x))"))  # fmt: skip
    _pair("forward_hook", lambda: _Holder(None), lambda: _hooked(_Holder(None)))


def _hooked(m):
    m.lin.register_forward_hook(lambda mod, i, o: o * 2 + 1)
    return m


def _exec_module(forward: str):
    ns: dict = {}
    src = f"import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
          f"        torch.manual_seed(0)\n        self.lin = torch.nn.Linear(8, 8)\n    {forward}\n"  # fmt: skip
    exec(src, ns)
    return ns["M"]().eval()


_setup_keys()


class _K(torch.nn.Module):
    K = 1.0

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.lin(x) * type(self).K


@case("cache-key")
def class_attribute_changed_at_run_time():
    _cache_dir()
    m = _K()
    _check(_compile(m), m, "K = 1")
    _K.K = 2.5
    try:
        _check(_compile(m), m, "K = 2.5")
    finally:
        _K.K = 1.0


@case("cache-key")
def source_file_edited_after_import():
    _cache_dir()
    d = Path(tempfile.mkdtemp())
    body = "import torch\nclass M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
           "        torch.manual_seed(0)\n        self.lin = torch.nn.Linear(8, 8)\n" \
           "    def forward(self, x):\n        return torch.{}(self.lin(x))\n"  # fmt: skip
    (d / "edited_mod.py").write_text(body.format("relu"))
    sys.path.insert(0, str(d))
    try:
        mod = importlib.import_module("edited_mod")
        (d / "edited_mod.py").write_text(body.format("sigmoid"))  # edited; the class in memory is still relu
        old = mod.M()
        _check(_compile(old), old, "the class imported before the edit")
        new = importlib.reload(mod).M()
        _check(_compile(new), new, "the class after the edit")
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("edited_mod", None)


@case("cache-key")
def python_c_classes_in_two_processes():
    d = _cache_dir()
    code = "import torch\nfrom novella_mlir import compile_torch\nclass M(torch.nn.Module):\n" \
           "    def forward(self, x):\n        return torch.{}(x)\nm = M()\n" \
           "npu = compile_torch(m, torch.randn(1, 4, 8), max_len=16)\nx = torch.randn(1, 5, 8)\n" \
           "print(float((npu(x) - m(x)).abs().max()))\n"  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), NOVELLA_CACHE_DIR=str(d))
    for fn in ("relu", "tanh"):
        out = subprocess.run([sys.executable, "-c", code.format(fn)], env=env, capture_output=True, text=True)
        if out.returncode or float(out.stdout.split()[-1]) > 1e-4:
            raise Wrong(f"python -c with {fn}: {out.stdout.strip()[-200:]} {out.stderr.strip()[-200:]}")


# ------------------------------------------------------------------ cache entries


def _two_entries():
    d = _cache_dir()
    a, b = _Holder(None), _Holder(None, act=torch.tanh)
    _compile(a)
    (ea,) = [p for p in d.iterdir() if not p.name.startswith(".")]
    _compile(b)
    (eb,) = [p for p in d.iterdir() if not p.name.startswith(".") and p != ea]
    return d, a, ea, eb


@case("cache-entry")
def entry_copied_under_another_key():
    _, a, ea, eb = _two_entries()
    for f in eb.iterdir():
        shutil.copy(f, ea / f.name)
    _check(_compile(a), a, "A after B's entry was copied under A's key")


@case("cache-entry")
def stages_json_edited():
    _, a, ea, _ = _two_entries()
    s = json.loads((ea / "stages.json").read_text())
    s["texts"]["novella"] = "edited"
    (ea / "stages.json").write_text(json.dumps(s))
    if _compile(a).ir("novella") == "edited":
        raise Wrong("npu.ir() shows an edited stages.json")


@case("cache-entry")
def key_file_readable_by_others():
    d, a, _, _ = _two_entries()
    (d / ".key").chmod(0o644)
    _check(_compile(a), a, "with a world-readable key")
    if (d / ".key").stat().st_mode & 0o077:
        raise Wrong("the key file was kept readable by others")


@case("cache-entry")
def key_file_bad_length_then_hits_again():
    from novella_mlir import pipeline

    d, a, _, _ = _two_entries()
    (d / ".key").write_bytes(b"short")
    _compile(a)  # refused, compiled again, a new key
    real, calls = pipeline._compile_program, []
    pipeline._compile_program = lambda *x, **k: calls.append(1) or real(*x, **k)
    try:
        _compile(a)
    finally:
        pipeline._compile_program = real
    if calls:
        raise Wrong("the cache never hits again after a bad key file")


@case("cache-entry")
def concurrent_writers_of_one_key():
    d = _cache_dir()
    code = "import torch\nfrom novella_mlir import compile_torch\ntorch.manual_seed(0)\n" \
           "m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())\n" \
           "npu = compile_torch(m, torch.randn(1, 4, 8), max_len=16)\nx = torch.randn(1, 9, 8)\n" \
           "print(float((npu(x) - m(x)).abs().max()))\n"  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT), NOVELLA_CACHE_DIR=str(d))
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(6)]  # fmt: skip
    outs = [p.communicate() for p in procs]
    if any(p.returncode or float(o.split()[-1]) > 1e-4 for p, (o, _) in zip(procs, outs)):
        raise Wrong("a concurrent writer failed or ran a wrong program")
    names = [p.name for p in d.iterdir()]
    entries, temps = [n for n in names if not n.startswith(".")], [n for n in names if n.startswith((".tmp", ".trash"))]
    if len(entries) != 1 or temps:
        raise Wrong(f"{len(entries)} entries and {len(temps)} temp dirs after 6 writers of one key")


@case("cache-entry")
def failed_write_disk_full():
    from novella_mlir.artifact import format as fmt

    d = _cache_dir()
    real = fmt.Artifact.save

    def full(self, path, key=None):
        Path(path).write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    fmt.Artifact.save = full
    try:
        m = _Holder(None)
        _check(_compile(m), m, "with a full disk")
    finally:
        fmt.Artifact.save = real
    if list(d.glob(".tmp-*")):
        raise Wrong("a failed write left a temp dir")


@case("cache-entry")
def size_is_capped():
    d = _cache_dir()
    os.environ["NOVELLA_CACHE_MAX_MB"] = "0.05"
    try:
        for k in range(3):
            _compile(_Holder(float(k + 2), lambda m: m.attr))
    finally:
        del os.environ["NOVELLA_CACHE_MAX_MB"]
    size = sum(p.stat().st_size for p in d.rglob("*") if p.is_file() and p.parent != d)
    if len([p for p in d.iterdir() if not p.name.startswith(".")]) > 1 and size > 0.05 * (1 << 20):
        raise Wrong(f"the cache holds {size} bytes over a 0.05 MB cap")
