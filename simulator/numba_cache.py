"""Numba's on-disk cache where nothing is writable: each module of `@njit(cache=True)` kernels calls
`ensure(__file__)` before defining them. Numba stores a kernel's machine code in `NUMBA_CACHE_DIR`, else
the `__pycache__` beside its source, else its per-user cache (under `$HOME`); when none of them is
writable (a read-only install, no home), decorating a cached kernel raises. Then the cache goes to a
fresh temporary directory, with one warning: kernels compile once per process instead of once.

Numba checks a cached kernel against its own source file only, not against what it inlined or froze
from other modules (`_expr_numba`'s evaluator, the ISA's field positions): after one of those changes,
the cache would hand back old machine code. `ensure` therefore keeps a digest of `SOURCES` in each
cache directory it uses and empties the directory when the digest differs."""

from __future__ import annotations

import hashlib
import tempfile
import warnings
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
# Every module a cached kernel reads or inlines (test_hardening checks the numba modules' imports).
SOURCES = (
    "simulator/isa.py",
    "simulator/_fast_numba.py",
    "novella_mlir/runtime/expr.py",
    "novella_mlir/runtime/_*numba.py",
)
DIGEST_FILE = "novella-sources.digest"
_fallback: str | None = None
_checked: set[str] = set()


def _probe():
    pass


def _locator(module_file: str):
    """The cache locator numba picks for `module_file` (None: no writable one; numba's own check writes a file)."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed in numba 0.59
    for cls in impl._locator_classes:
        try:
            loc = cls.from_function(_probe, module_file)
        except Exception:  # noqa: BLE001 - a locator that cannot even look is no locator
            continue
        if loc is not None:
            return loc
    return None


def writable_locator(module_file: str) -> bool:
    return _locator(module_file) is not None


def sources_digest(root: Path = _ROOT) -> str:
    h = hashlib.sha256()
    for path in sorted(p for pattern in SOURCES for p in root.glob(pattern)):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def drop_stale(cache_dir: Path, digest: str) -> bool:
    """Empties `cache_dir` of numba's index and code files unless it was filled from sources of `digest`;
    whether it dropped any."""
    marker = cache_dir / DIGEST_FILE
    if marker.is_file() and marker.read_text() == digest:
        return False
    stale = [p for pattern in ("*.nbi", "*.nbc") for p in cache_dir.glob(pattern)]
    for path in stale:
        path.unlink(missing_ok=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    marker.write_text(digest)
    return bool(stale)


def ensure(module_file: str) -> None:
    global _fallback
    import numba

    if _fallback is not None:
        return
    loc = _locator(module_file)
    if loc is not None:
        cache_dir = loc.get_cache_path()
        if cache_dir not in _checked:
            _checked.add(cache_dir)
            drop_stale(Path(cache_dir), sources_digest())
        return
    _fallback = tempfile.mkdtemp(prefix="novella-numba-")
    numba.config.CACHE_DIR = _fallback
    warnings.warn(
        f"novella-mlir: numba's kernel cache has no writable directory (NUMBA_CACHE_DIR, the package's "
        f"__pycache__, the per-user cache); using {_fallback} for this process (kernels compile again in the "
        "next one). Set NUMBA_CACHE_DIR to a writable directory to keep them.",
        stacklevel=2,
    )
