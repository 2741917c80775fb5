"""A one-line notice when numba is about to compile kernels its on-disk cache does not hold yet.

The simulator's fast path and the JIT are numba kernels with `cache=True`: the first run after an
install compiles them (tens of seconds on a small machine), later runs load the machine code from
`__pycache__`. `announce(module)` prints one line to stderr for a module whose kernels are not in the
cache, on a terminal only (NOVELLA_PROGRESS=0/1 overrides), once per module and process.
"""

from __future__ import annotations

import os
import sys

_ANNOUNCED: set[str] = set()


def enabled() -> bool:
    env = os.environ.get("NOVELLA_PROGRESS")
    return env == "1" if env in ("0", "1") else sys.stderr.isatty()


def uncached(module) -> list[str]:
    """The names of the module's cached numba kernels that have no index file on disk yet (kernels inlined
    into their callers have none of their own)."""
    out = []
    for name, f in vars(module).items():
        cache = getattr(f, "_cache", None)
        index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
        own = getattr(getattr(f, "py_func", None), "__module__", None) == module.__name__
        inlined = getattr(f, "targetoptions", {}).get("inline") == "always"
        if index and own and not inlined and not os.path.exists(index):
            out.append(name)
    return out


def announce(module) -> None:
    if module.__name__ in _ANNOUNCED or not enabled():
        return
    _ANNOUNCED.add(module.__name__)
    missing = uncached(module)
    if missing:
        where = os.path.dirname(module.__file__) + os.sep + "__pycache__"
        print(
            f"novella-mlir: compiling {len(missing)} numba kernels of {module.__name__} "
            f"(first run after an install only; cached in {where})",
            file=sys.stderr,
            flush=True,
        )
