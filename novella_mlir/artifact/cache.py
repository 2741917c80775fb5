"""Persistent compile cache: a second `compile_torch` of the same program, in any process, loads the artifact.

What the key covers (as torch's FX graph cache): what is compiled, never how its Python was written.
Every torch.export the compile makes is recorded (`cache_key.py`): the exported program in torch's
canonical serialized form (its graph: ops, targets, literals, tensor metadata, signature and
symbolic ranges; no stack traces or module names) and every parameter, buffer and lifted constant
by content; also the example inputs' shapes and dtypes, the dynamic dim or Dim spec and the bounds,
the pass options, the hardware config (its fingerprint), the artifact format and the compiler's
version (the package version and a digest of the sources of `novella_mlir` and `simulator`).
Attributes, hooks, closures, defaults, configs and class source matter exactly as far as they
change what torch.export traces. A hit costs the export(s) plus a load of the entry. A compile
with a custom decomposition table or `dump_dir`, or whose inputs the trace cannot describe, is
not cached.

Entries live in `$NOVELLA_CACHE_DIR`, else `$XDG_CACHE_HOME/novella-mlir`, else
`~/.cache/novella-mlir`; off with `compile_torch(..., cache=False)` or `NOVELLA_CACHE=0`; at most
`$NOVELLA_CACHE_MAX_MB` megabytes (default 2048), the least recently used evicted first.

An entry is a directory named by its key holding `model.nvla`, `stages.json`, `trace.json` and
`sig`: an HMAC-SHA256, with the cache's secret (`.key`: 32 random bytes, a regular file owned by
this user with mode 0600, else regenerated), over the entry's name and every file's digest. A
signed entry was written by this compiler for this key, so `artifact.loads` skips instantiating
it at its bounds; the checksum and structural checks still run. An entry that fails any check is
reported with a warning and compiled over. Writers build an entry in a temp directory and rename
it into place under the directory's lock; readers delete only the entry they found bad.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import json
import os
import shutil
import stat
import sys
import tempfile
import time
import warnings
from functools import lru_cache
from pathlib import Path

from . import cache_key

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
FORMAT = 3  # 3: keyed on the exported programs; entries signed as a whole
FILES = ("model.nvla", "stages.json", "trace.json")
STALE_SECONDS = 3600  # a temp directory this old belongs to a writer that died


class Probed(Exception):  # noqa: N818
    """Raised by `lookup_key`'s compile at its first export, with the key it would look up."""


_PROBE: contextvars.ContextVar = contextvars.ContextVar("novella_cache_probe", default=False)


def lookup_key(compile_fn, module, *args, **kw) -> str:
    """The key `compile_fn(module, *args, **kw)` (compile_torch) looks its entries up under: the digest of
    the key's base parts and its first export, computed without compiling."""
    token = _PROBE.set(True)
    try:
        compile_fn(module, *args, cache=True, **kw)
    except Probed as e:
        return str(e)
    finally:
        _PROBE.reset(token)
    raise RuntimeError("the compile was not cacheable, so it has no key")


class Hit(Exception):  # noqa: N818 - control flow out of a compile, not an error
    """Raised from inside a compile's first export when an entry matches: the compile stops there."""

    def __init__(self, artifact, texts, seconds):
        super().__init__("compile cache hit")
        self.artifact, self.texts, self.seconds = artifact, texts, seconds


def _warn(message: str) -> None:
    """A UserWarning shown at the user's line (the first frame outside novella_mlir)."""
    frame, level = sys._getframe(0), 1
    while frame is not None and frame.f_code.co_filename.startswith(str(PACKAGE_ROOT)):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, stacklevel=level)


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


def max_bytes() -> int:
    try:
        return int(float(os.environ.get("NOVELLA_CACHE_MAX_MB", "2048")) * (1 << 20))
    except ValueError:
        _warn("novella-mlir: NOVELLA_CACHE_MAX_MB is not a number; using 2048")
        return 2048 << 20


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


def base_parts(example_args, *, bounds, config, pass_options) -> list:
    """The key's parts that are not exports: format, compiler, inputs, bounds, config, options."""
    return [FORMAT, compiler_version(), [cache_key.arg_desc(a) for a in example_args], bounds,
            config.fingerprint(), pass_options or {}]  # fmt: skip


class Compile:
    """One cached compile: `with Compile(...) as rec:` around the compile; `rec.store(model)` after it."""

    def __init__(self, module, base: list, config, exports: dict):
        self.base, self.config = base, config
        self.rec = cache_key.Recording(module, exports, self._lookup)
        self.k0 = None

    def __enter__(self):
        self.rec.__enter__()
        return self

    def __exit__(self, *exc):
        self.rec.__exit__(*exc)

    def _lookup(self, rec) -> None:
        if not rec.ok:
            return
        self.k0 = cache_key.digest([self.base, rec.calls[0]])
        if _PROBE.get():
            raise Probed(self.k0)
        root = directory()
        for entry in sorted(root.glob(self.k0 + "-*"), key=_mtime, reverse=True):
            found = _read_entry(entry)
            if found is None:
                continue
            files, trace = found
            if trace["calls"][0] != rec.calls[0] or not rec.replay(trace["calls"][1:]):
                continue
            hit = _load(entry, files, self.config)
            if hit is not None:
                with contextlib.suppress(OSError):
                    os.utime(entry / "sig")  # the LRU order
                raise Hit(*hit)

    def store(self, model) -> None:
        if self.k0 is None or not self.rec.ok:
            return
        calls = self.rec.calls
        name = f"{self.k0}-{cache_key.digest([self.base, calls])[:16]}"
        stages = {"texts": dict(model.stages.texts), "seconds": model.stages.seconds}
        store(name, model.artifact, stages, {"calls": calls})


def start(module, example_args, *, cache, uncached: bool, bounds, config, pass_options, exports: dict):
    """The `Compile` recording one cached compile, or None when the cache is off for it (`uncached`, a
    compile inside a cached one, or inputs the key cannot describe)."""
    if not enabled(cache) or uncached or cache_key.recording() is not None:
        return None
    try:
        bounds = cache_key.spec_desc(bounds)
        base = base_parts(example_args, bounds=bounds, config=config, pass_options=pass_options)
    except cache_key.Uncacheable:
        return None
    return Compile(module, base, config, exports)


def _mtime(p: Path) -> float:
    try:
        return (p / "sig").stat().st_mtime
    except OSError:
        return 0.0


def _signature(secret: bytes, name: str, files: dict) -> str:
    h = hmac.new(secret, f"novella-cache {FORMAT} {name}\0".encode(), hashlib.sha256)
    for f in FILES:
        h.update(f"{f}:{hashlib.sha256(files[f]).hexdigest()}\0".encode())
    return h.hexdigest()


def _read_entry(entry: Path):
    """(file bytes, trace) of an entry whose signature checks out, else None (a bad one is dropped)."""
    sig = _sig_of(entry)
    try:
        files = {f: (entry / f).read_bytes() for f in FILES}
        if sig is None:
            raise FileNotFoundError(entry / "sig")
        secret = signing_key(create=False)
        if secret is None:
            raise OSError(f"the cache's signing key {directory() / '.key'} {_key_problem(directory() / '.key')}")
        if not hmac.compare_digest(sig, _signature(secret, entry.name, files)):
            raise ValueError("its signature does not match its key and files (HMAC-SHA256 mismatch)")
        return files, json.loads(files["trace.json"])
    except FileNotFoundError as e:
        if not entry.exists():  # evicted or discarded while being read
            return None
        _discard(entry, f"{Path(e.filename).name} is missing", sig)
        return None
    except Exception as e:  # noqa: BLE001 - any damage to an entry means: compile again
        _discard(entry, e, sig)
        return None


def _sig_of(entry: Path) -> str | None:
    try:
        return (entry / "sig").read_text().strip()
    except OSError:
        return None


def _load(entry: Path, files: dict, config):
    from . import format as fmt

    try:
        secret = signing_key(create=False)
        art = fmt.loads(files["model.nvla"], config, key=secret, check_bounds=False, where=f"cache entry {entry}")
        stages = json.loads(files["stages.json"])
        return art, stages["texts"], stages["seconds"]
    except Exception as e:  # noqa: BLE001
        _discard(entry, e, _sig_of(entry))
        return None


def _discard(entry: Path, why, sig: str | None) -> None:
    """Drops the bad entry just read, unless a writer has replaced it since (its signature changed)."""
    _warn(f"novella-mlir: compile cache entry {entry} is unreadable ({why}); compiling again")
    with _locked(entry.parent):
        if _sig_of(entry) == sig:
            _remove(entry)


def _remove(entry: Path) -> None:
    """Renames `entry` out of the way, then deletes it (a reader never sees half an entry)."""
    trash = entry.parent / f".trash-{os.getpid()}-{os.urandom(4).hex()}"
    try:
        os.rename(entry, trash)
    except OSError:
        return
    shutil.rmtree(trash, ignore_errors=True)


@contextlib.contextmanager
def _locked(root: Path):
    """The cache directory's lock (publishing, deleting, evicting); none where flock is missing."""
    try:
        import fcntl

        fd = os.open(root / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    except (ImportError, OSError):
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def signing_key(create: bool) -> bytes | None:
    """The cache's secret: `.key` in the cache directory, 32 bytes, a regular file of this user with
    mode 0600. One that fails a check is regenerated when `create` (with a warning: entries signed
    with the old one are compiled again)."""
    path = directory() / ".key"
    problem = _key_problem(path)
    if problem is None:
        return _read_key(path)
    if not create:
        return None
    if problem != "missing":
        _warn(f"novella-mlir: the compile cache's key {path} {problem}; making a new one")
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-key-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(tmp, 0o600)
        if problem == "missing":
            try:
                os.link(tmp, path)  # the first writer wins; a concurrent one reads its key
            except FileExistsError:
                pass
            except OSError:  # no hard links on this file system
                os.replace(tmp, path)
        else:
            os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return signing_key(create=False) if _key_problem(path) is None else None


def _key_problem(path: Path) -> str | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    except OSError as e:
        return f"cannot be read ({e.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return f"belongs to uid {st.st_uid}, not to this user"
    if st.st_mode & 0o077:
        return f"has mode {stat.S_IMODE(st.st_mode):o}: others may read or write it"
    if st.st_size != 32:
        return f"holds {st.st_size} bytes, not 32"
    return None


def _read_key(path: Path) -> bytes | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return data if len(data) == 32 else None


def store(name: str, artifact, stages: dict, trace: dict) -> None:
    """Writes entry `name` in a temp directory and renames it into place; a failure only warns."""
    root = directory()
    tmp = None
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        secret = signing_key(create=True)
        if secret is None:
            raise OSError("no usable signing key")
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
        artifact.save(tmp / "model.nvla", key=secret)
        (tmp / "stages.json").write_text(json.dumps(stages))
        (tmp / "trace.json").write_text(json.dumps(trace))
        files = {f: (tmp / f).read_bytes() for f in FILES}
        (tmp / "sig").write_text(_signature(secret, name, files))
        with _locked(root):
            if not (root / name).exists():
                os.rename(tmp, root / name)  # else an equal entry another writer finished first
                tmp = None
            _evict(root, keep=root / name)
    except OSError as e:
        _warn(f"novella-mlir: could not write the compile cache in {root}: {e}")
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _size(entry: Path) -> int:
    total = 0
    for p in entry.rglob("*"):
        with contextlib.suppress(OSError):
            total += p.stat().st_size
    return total


def _evict(root: Path, keep: Path) -> None:
    """Drops stale temp directories, then the least recently used entries beyond the size cap."""
    now = time.time()
    entries = []
    for p in root.iterdir():
        if p.name.startswith((".tmp-", ".trash-")):
            with contextlib.suppress(OSError):
                if now - p.stat().st_mtime > STALE_SECONDS or p.name.startswith(".trash-"):
                    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink()
        elif not p.name.startswith(".") and p.is_dir():
            entries.append((_mtime(p), _size(p), p))
    total, cap = sum(s for _, s, _ in entries), max_bytes()
    for _, size, p in sorted(entries, key=lambda e: e[0]):
        if total <= cap:
            break
        if p != keep:
            _remove(p)
            total -= size
