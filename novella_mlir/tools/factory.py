"""Loading a user's model factory (`MODULE:FACTORY`) for the CLI and the sweep: user errors become `CliError`."""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path


class CliError(Exception):
    """A user-facing error: printed as `novella: error: ...`, exit code 1."""


def load_factory(target: str):
    """`pkg.module:factory` or `path/to/file.py:factory` -> the callable."""
    mod_name, sep, attr = target.rpartition(":")
    if not sep or not mod_name or not attr:
        raise CliError(f"expected MODULE:FACTORY (e.g. mypkg.models:build), got '{target}'")
    if mod_name.endswith(".py") or os.sep in mod_name:
        spec = importlib.util.spec_from_file_location(Path(mod_name).stem, mod_name)
        if spec is None or not Path(mod_name).exists():
            raise CliError(f"cannot find '{mod_name}'")
        module = importlib.util.module_from_spec(spec)
        sys.modules.setdefault(spec.name, module)  # dataclasses and pickling look the module up by name
        run_user(lambda: spec.loader.exec_module(module), f"importing '{mod_name}'")
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = run_user(lambda: importlib.import_module(mod_name), f"importing '{mod_name}'")
    if not hasattr(module, attr):
        raise CliError(f"module '{mod_name}' has no attribute '{attr}'")
    return getattr(module, attr)


def run_user(fn, what: str):
    try:
        return fn()
    except Exception as e:
        if os.environ.get("NOVELLA_DEBUG"):
            traceback.print_exc()
        raise CliError(f"{what} failed: {type(e).__name__}: {e}") from None
