"""The pass registry: one explicit table from flag to pass.

Python passes cannot be named in MLIR textual pipelines, so `novella-opt`
and the pipeline look them up here and add them to a `PassManager` as
Python callables (so MLIR's verifier and IR printing run around them)."""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field

from torch_mlir import ir, passmanager

from .. import kernels
from ..dialects import discardable
from . import (
    novella_allocate,
    novella_buckets,
    novella_fuse,
    novella_fuse_elementwise,
    novella_inst_gen,
    novella_kv_cache,
    novella_legalize,
    novella_macro_gen,
    novella_resident,
    novella_schedule,
    novella_shape_infer,
    novella_tile,
)
from .common import PassError


@dataclass(frozen=True)
class PassInfo:
    flag: str
    run: object
    description: str
    options: dict = field(default_factory=dict)  # name -> (type, default, help[, (min, max)])


def _info(flag, module, options=None) -> PassInfo:
    doc = (module.__doc__ or "").split("\n\n")[0].split(":", 1)[-1].strip().replace("\n", " ")
    return PassInfo(flag, module.run, doc, options or {})


PASSES: dict[str, PassInfo] = {
    p.flag: p
    for p in (
        _info("novella-shape-infer", novella_shape_infer, novella_shape_infer.OPTIONS),
        _info("novella-legalize", novella_legalize, novella_legalize.OPTIONS),
        _info("novella-kv-cache", novella_kv_cache, novella_kv_cache.OPTIONS),
        _info("novella-fuse-elementwise", novella_fuse_elementwise, novella_fuse_elementwise.OPTIONS),
        _info("novella-allocate", novella_allocate, novella_allocate.OPTIONS),
        _info("novella-buckets", novella_buckets, novella_buckets.OPTIONS),
        _info("novella-fuse", novella_fuse, novella_fuse.OPTIONS),
        _info("novella-resident", novella_resident, novella_resident.OPTIONS),
        _info("novella-tile", novella_tile, novella_tile.OPTIONS),
        _info("novella-macro-gen", novella_macro_gen),
        _info("novella-inst-gen", novella_inst_gen),
        _info("novella-schedule", novella_schedule, novella_schedule.OPTIONS),
    )
}

# The backend stages in pipeline order (after the frontend's conversion).
BACKEND_PIPELINE = (
    "novella-shape-infer",
    "novella-legalize",
    "novella-kv-cache",
    "novella-fuse-elementwise",
    "novella-allocate",
    "novella-buckets",
    "novella-fuse",
    "novella-resident",
    "novella-tile",
    "novella-macro-gen",
    "novella-inst-gen",
    "novella-schedule",
)


def parse_options(flag: str, given: dict) -> dict:
    """Typed options for `flag`, defaults filled in; unknown names raise ValueError."""
    info = PASSES[flag]
    out = {name: spec[1] for name, spec in info.options.items()}
    for name, value in given.items():
        if name not in info.options:
            known = ", ".join(info.options) or "none"
            raise ValueError(f"pass '{flag}' has no option '{name}' (options: {known})")
        typ = info.options[name][0]
        try:
            out[name] = typ(value)
        except ValueError:
            raise ValueError(f"option '{name}' of pass '{flag}' expects {typ.__name__}, got '{value}'") from None
        if len(info.options[name]) > 3:
            lo, hi = info.options[name][3]
            if not lo <= out[name] <= hi:
                raise ValueError(f"option '{name}' of pass '{flag}' must be in [{lo}, {hi}], got {out[name]}")
    return out


def add_pass(pm: passmanager.PassManager, flag: str, config, options: dict | None = None) -> None:
    """Adds the pass `flag` (with options) to a pass manager."""
    info = PASSES[flag]
    opts = parse_options(flag, options or {})

    def run(op, pass_):
        try:
            with ir.Location.unknown(op.context):
                info.run(op, opts, config)
                _check_annotations(op)
        except PassError as e:
            e.op.location.emit_error(f"'{e.op.operation.name}' op {e.message}")
            pass_.signal_pass_failure()
        except Exception as e:  # an internal error must still come out as a diagnostic
            if os.environ.get("NOVELLA_DEBUG"):
                traceback.print_exc()
            op.location.emit_error(f"internal error in pass '{flag}': {type(e).__name__}: {e}")
            pass_.signal_pass_failure()

    pm.add(run, name=pass_name(flag), argument=pass_argument(flag, opts), description=info.description)


def _check_annotations(module_op) -> None:
    """The `novella.*` discardable attributes the pass left are declared ones, in their place and of
    their kind (`dialects/discardable.py`); the op verifiers check the declared fields."""
    found = discardable.check(module_op)
    if found:
        raise PassError(*found)


def pass_name(flag: str) -> str:
    """The pass's class-style name, as MLIR prints it (`novella-tile` -> `NovellaTile`)."""
    return "".join(w.capitalize() for w in flag.split("-"))


def pass_argument(flag: str, opts: dict) -> str:
    """The flag with its options, as MLIR prints a configured pass (`novella-tile{tile-m=32}`)."""
    if not opts:
        return flag
    return flag + "{" + " ".join(f"{k}={v}" for k, v in opts.items()) + "}"


def run_passes(
    module: ir.Module, flags, config, print_ir_after_all: bool = False, verify: bool = True, keep_memos: bool = False
) -> None:
    """Runs `flags` (names, or (name, options) pairs) on `module`; raises ir.MLIRError. `verify=False`
    leaves out MLIR's verifier after each pass, for a caller that verifies the result itself. The kernels'
    tile-search memos start empty unless `keep_memos` (a compile that runs its stages one by one)."""
    if not keep_memos:
        kernels.forget()
    pm = passmanager.PassManager("builtin.module", context=module.context)
    pm.enable_verifier(verify)
    for f in flags:
        name, opts = (f, {}) if isinstance(f, str) else f
        add_pass(pm, name, config, opts)
    if print_ir_after_all:
        pm.enable_ir_printing(print_after_all=True)
    pm.run(module.operation)
