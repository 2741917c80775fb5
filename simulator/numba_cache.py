"""Numba's on-disk cache where nothing is writable: each module of `@njit(cache=True)` kernels calls
`ensure(__file__)` before defining them. Numba stores a kernel's machine code in `NUMBA_CACHE_DIR`, else
the `__pycache__` beside its source, else its per-user cache (under `$HOME`); when none of them is
writable (a read-only install, no home), decorating a cached kernel raises. Then the cache goes to a
fresh temporary directory, with one warning: kernels compile once per process instead of once."""

from __future__ import annotations

import tempfile
import warnings

_fallback: str | None = None


def _probe():
    pass


def writable_locator(module_file: str) -> bool:
    """Whether one of numba's cache locators accepts `module_file` (numba's own check: it writes a file)."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # renamed in numba 0.59
    for cls in impl._locator_classes:
        try:
            if cls.from_function(_probe, module_file) is not None:
                return True
        except Exception:  # noqa: BLE001 - a locator that cannot even look is no locator
            continue
    return False


def ensure(module_file: str) -> None:
    global _fallback
    import numba

    if _fallback is not None or writable_locator(module_file):
        return
    _fallback = tempfile.mkdtemp(prefix="novella-numba-")
    numba.config.CACHE_DIR = _fallback
    warnings.warn(
        f"novella-mlir: numba's kernel cache has no writable directory (NUMBA_CACHE_DIR, the package's "
        f"__pycache__, the per-user cache); using {_fallback} for this process (kernels compile again in the "
        "next one). Set NUMBA_CACHE_DIR to a writable directory to keep them.",
        stacklevel=2,
    )
