"""Persistent compile cache: a second `compile_torch` of the same model, in any process, loads the artifact.

Like torch.compile's FX graph cache, an entry is found by a key over
everything the compile depends on:

* the model: the source file of every submodule class (and its bases up to
  `nn.Module`; the class's own source where it has no file), the module tree (`repr`), every
  submodule's plain Python attributes (flags such as `norm_first`, sizes, configs, and functions
  by name and bytecode), and a digest of
  every parameter and buffer (values, shapes, dtypes);
* the example inputs' shapes and dtypes, the dynamic dim and the bounds;
* the hardware config (its fingerprint) and the pass options;
* the compiler version: the package version and a digest of the sources of
  `novella_mlir` and `simulator`.

The key does not run torch.export (that is most of a compile); a forward
that reads Python state outside the module (globals, closures) is not in
it, so turn the cache off for such models. A model compiled with a custom
decomposition table or `dump_dir` is not cached.

Entries live in `$NOVELLA_CACHE_DIR`, else `$XDG_CACHE_HOME/novella-mlir`,
else `~/.cache/novella-mlir`. Turn it off with `compile_torch(..., cache=False)`
or `NOVELLA_CACHE=0`. An entry that cannot be read (truncated, corrupted,
from another format) is reported with a warning and recompiled over.

Entries are signed (HMAC-SHA256) with a random key kept in the cache directory
(`.key`, readable by its owner only). A hit whose signature checks out was
written by this compiler, so `artifact.load` skips instantiating it at its bounds
(which would start numba's runtime, 0.3-0.7 s); the checksum and structural
checks still run, and an entry that fails them is compiled again.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import tempfile
import warnings
from functools import lru_cache
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # novella_mlir (this file is in artifact/)
FORMAT = 2  # 2: artifacts hold a list of programs


def enabled(cache: bool | None) -> bool:
    """`cache` if given, else the NOVELLA_CACHE env var (default on)."""
    if cache is not None:
        return bool(cache)
    return os.environ.get("NOVELLA_CACHE", "1").lower() not in ("0", "false", "no", "off")


def directory() -> Path:
    if os.environ.get("NOVELLA_CACHE_DIR"):
        return Path(os.environ["NOVELLA_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "novella-mlir"


@lru_cache(maxsize=1)
def compiler_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("novella-mlir")
    except PackageNotFoundError:
        v = "source"
    h = hashlib.sha256(v.encode())
    for root in (PACKAGE_ROOT, PACKAGE_ROOT.parent / "simulator"):
        for path in sorted(root.rglob("*")):
            if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts:
                h.update(str(path.relative_to(root)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()


_MODULE_SLOTS = ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set")


def _plain(v):
    """`v` as JSON-able data when it is plain (numbers, strings, containers, configs), else its type."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if hasattr(v, "to_dict"):  # transformers configs
        return _plain(v.to_dict())
    if callable(v) and hasattr(v, "__qualname__"):  # a function held by a module (`self.act = torch.tanh`)
        code = getattr(v, "__code__", None)
        body = hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest() if code else ""
        return f"<fn {getattr(v, '__module__', '')}.{v.__qualname__} {body}>"
    return f"<{type(v).__module__}.{type(v).__qualname__}>"


def _state(m) -> str:
    """A submodule's own Python attributes (not its tensors, children or hooks)."""
    items = {k: _plain(v) for k, v in vars(m).items() if k not in _MODULE_SLOTS and not k.endswith("hooks")}
    return json.dumps(items, sort_keys=True, default=str)


def _class_source(cls) -> bytes:
    """A digest of the file that defines `cls` (finding a class's own lines parses its whole file: 0.3 s for
    transformers' models), or of its source where that is not a file (a notebook cell)."""
    try:
        path = inspect.getsourcefile(cls)
        st = os.stat(path) if path else None
    except (OSError, TypeError):
        st = None
    if st is not None:
        return _file_digest(path, st.st_mtime_ns, st.st_size)
    try:
        return inspect.getsource(cls).encode()
    except (OSError, TypeError):
        return b"<no source>"


@lru_cache(maxsize=512)
def _file_digest(path: str, mtime_ns: int, size: int) -> bytes:
    return hashlib.sha256(Path(path).read_bytes()).digest()


def _module_digest(module) -> str:
    import torch

    h = hashlib.sha256(repr(module).encode())
    classes = {c for m in module.modules() for c in type(m).__mro__ if issubclass(c, torch.nn.Module)}
    for cls in sorted(classes - {torch.nn.Module}, key=lambda c: (c.__module__, c.__qualname__)):
        h.update(f"{cls.__module__}.{cls.__qualname__}".encode())
        h.update(_class_source(cls))
    for name, m in module.named_modules():
        h.update(f"{name}:{_state(m)}".encode())
    for name, t in [*module.named_parameters(), *module.named_buffers()]:
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def key(module, example_args, *, dynamic_dim, min_len, max_len, config, pass_options) -> str:
    """The cache key of one compile (a sha256 hex digest)."""
    args = [(tuple(a.shape), str(a.dtype)) if hasattr(a, "shape") else repr(a) for a in example_args]
    parts = {
        "format": FORMAT,
        "compiler": compiler_version(),
        "module": _module_digest(module),
        "args": args,
        "bounds": [dynamic_dim, min_len, max_len],
        "config": config.fingerprint(),
        "passes": pass_options or {},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _signing_key(create: bool) -> bytes | None:
    """The cache directory's secret (32 random bytes in `.key`, mode 0600), made when `create`."""
    path = directory() / ".key"
    try:
        data = path.read_bytes()
        if len(data) == 32:
            return data
    except OSError:
        pass
    if not create:
        return None
    fd, tmp = tempfile.mkstemp(dir=directory(), prefix=".tmp-key-")
    with os.fdopen(fd, "wb") as f:
        f.write(os.urandom(32))
    try:
        os.link(tmp, path)  # the first writer wins; a concurrent one reads its key
    except FileExistsError:
        pass
    except OSError:  # no hard links on this file system
        os.replace(tmp, path)
        return _signing_key(create=False)
    os.unlink(tmp)
    return _signing_key(create=False)


def lookup(k: str, config):
    """The cached (artifact, stage texts, stage seconds) for key `k`, or None (missing or unreadable)."""
    from .. import artifact as art_mod

    entry = directory() / k
    if not entry.exists():
        return None
    try:
        secret = _signing_key(create=False)
        if secret is None:
            raise OSError("the cache's signing key is missing")
        art = art_mod.load(entry / "model.nvla", config, key=secret, check_bounds=False)
        stages = json.loads((entry / "stages.json").read_text())
        return art, stages["texts"], stages["seconds"]
    except Exception as e:  # noqa: BLE001 - any damage to an entry means: compile again
        warnings.warn(f"novella-mlir: compile cache entry {entry} is unreadable ({e}); compiling again", stacklevel=3)
        shutil.rmtree(entry, ignore_errors=True)
        return None


def store(k: str, artifact, stages) -> None:
    """Writes the entry atomically (a temp dir renamed into place); a failure only warns."""
    root = directory()
    try:
        root.mkdir(parents=True, exist_ok=True)
        secret = _signing_key(create=True)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
        artifact.save(tmp / "model.nvla", key=secret)
        (tmp / "stages.json").write_text(json.dumps({"texts": dict(stages.texts), "seconds": stages.seconds}))
        shutil.rmtree(root / k, ignore_errors=True)
        os.replace(tmp, root / k)
    except OSError as e:
        warnings.warn(f"novella-mlir: could not write the compile cache in {root}: {e}", stacklevel=3)
