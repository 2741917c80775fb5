"""The export-range strategy: how compile_torch's length range becomes torch.export calls and programs.

A range ending at 1 or 2, or of one length, is exported over a wider one (the FX importer would make the
dim static) and fixed back; a range torch.export narrows (`NarrowedError`) keeps the part it traces
symbolically and adds a program for each excluded sub-range; a Dim spec whose trace at 1 differs
(`exporting.differs_at_one`) adds a program for each size below 2. The pipeline, above the frontend,
passes down what compiles a part (`Compilers`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import artifact as art_mod
from ..artifact.cache_key import traced
from ..errors import InputError, NovellaError
from . import dynspec, guard_classes, guards, importer
from .exporting import ONE_GUARD, NarrowedError


@dataclass(frozen=True)
class Compilers:
    """What the strategy asks of the pipeline: `compile_torch(module, *args, **kw)` (a part is
    compiled with `cache=False`), `compile_program(prog, bounds, config, dump_dir, decomposition_table,
    pass_options, names=None)` the compile of one exported program, `combined(artifact, config, stages)`
    the model of an artifact combined from parts, its bounds checked."""

    compile_torch: Callable
    compile_program: Callable
    combined: Callable


def check_range(dynamic_dim, min_len, max_len) -> None:
    """compile_torch's length arguments: ints (not bools), 1 <= min_len <= max_len, before any export."""
    for name, v in (("dynamic_dim", dynamic_dim), ("min_len", min_len), ("max_len", max_len)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"{name} must be an int, got {v!r} ({type(v).__name__})")
    if dynamic_dim < 0:
        raise InputError(f"dynamic_dim must be >= 0 (the index of the dynamic dim), got {dynamic_dim}")
    if not 1 <= min_len <= max_len:
        raise InputError(f"the bounds must satisfy 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")


def _export(module, args, dynamic_dim, lo, hi, need_lo=None, need_hi=None, join=True):
    token = guard_classes.JOIN.set(join)
    try:
        return importer.export(module, args, dynamic_dim, lo, hi, need_lo, need_hi)
    finally:
        guard_classes.JOIN.reset(token)


def _export_spec(module, args, spec):
    """The program of a Dim spec and the Dim whose trace at 1 differs from it, if any."""
    prog = importer.export_spec(module, args, spec)
    return prog, importer.differs_at_one(module, args, spec, prog)


def _export_static(module, args):
    return importer.export_static(module, args)


EXPORTS = {"export": _export, "export_spec": _export_spec, "export_static": _export_static}


def compile_range(c: Compilers, module, example_args, dynamic_dim, min_len, max_len, dynamic_shapes, config,
                  dump_dir, decomposition_table, pass_options):  # fmt: skip
    """compile_torch's body: every export through `cache_key.traced`, which keys a cached compile."""
    # torch.export with symbolic sizes, then the torch-mlir FX importer (torch dialect, `?` dims)
    if dynamic_shapes is not None:
        prog, one = traced("export_spec", _export_spec, module, example_args, dynamic_shapes)
        if one is not None:
            kw = dict(config=config, decomposition_table=decomposition_table, pass_options=pass_options)
            return _split_at_one(c, module, example_args, dynamic_shapes, one, kw)
        names = importer.symbol_names(prog, example_args, dynamic_shapes, module)
        return c.compile_program(prog, None, config, dump_dir, decomposition_table, pass_options, names)
    join, joined = guard_classes.JOIN.get(), False
    lo, hi, first_args = min_len, max_len, example_args
    if max_len <= 2:  # torch-mlir imports a dim whose range ends at 2 as static: export over [min, 3]
        lo, hi = min_len, 3
        example_args = tuple(_resized(a, dynamic_dim, 2) for a in example_args)
    elif min_len == max_len:
        lo, hi = min_len - 1, min_len
        example_args = tuple(_resized(a, dynamic_dim, min_len) for a in example_args)
    try:
        prog = traced("export", _export, module, example_args, dynamic_dim, lo, hi, min_len, max_len, join)
        if lo < hi and guards.small_size_hint(prog, lo, hi):  # re-trace where no size is 0 or 1
            example_args = tuple(_resized(a, dynamic_dim, hi) for a in example_args)
            prog = traced("export", _export, module, example_args, dynamic_dim, lo, hi, min_len, max_len, join)
        joined = guard_classes.joined(prog)
        return c.compile_program(prog, (min_len, max_len), config, dump_dir, decomposition_table, pass_options)
    except NarrowedError as e:
        if min_len == max_len or e.kept is None:
            raise
        kw = dict(config=config, decomposition_table=decomposition_table, pass_options=pass_options)
        return _specialize(c, module, example_args, dynamic_dim, (min_len, max_len), e, **kw)
    except NovellaError:
        if not joined:
            raise
    # the program of joined guard classes does not compile (a size fixed on each class varies over the join,
    # a second dynamic dim): each class is traced and compiled on its own, as are the sub-ranges' classes
    token = guard_classes.JOIN.set(False)
    try:
        return compile_range(c, module, first_args, dynamic_dim, min_len, max_len, None, config, dump_dir,
                             decomposition_table, pass_options)  # fmt: skip
    finally:
        guard_classes.JOIN.reset(token)


def _resized(arg, dim: int, length: int):
    """`arg` with dim `dim` of length `length` (an example for export; float values random, integers 0)."""
    if not isinstance(arg, torch.Tensor):
        return arg
    shape = list(arg.shape)
    shape[dim] = length
    return torch.randn(shape, dtype=arg.dtype) if arg.dtype.is_floating_point else torch.zeros(shape, dtype=arg.dtype)


MAX_SPECIALIZED = 4


def _specialize(c: Compilers, module, example_args, dynamic_dim, bounds, narrowed, **kw):
    """torch.export keeps only `narrowed.kept` of `bounds`: one artifact whose programs are that part,
    compiled with the length symbolic, and each excluded sub-range, traced again on its own (symbolic
    when torch keeps it, else one static program per length, at most MAX_SPECIALIZED of them)."""
    (lo, hi), (a, b) = bounds, narrowed.kept
    inner = dict(kw, cache=False)
    main = c.compile_torch(module, *example_args, dynamic_dim=dynamic_dim, min_len=a, max_len=b, **inner)
    guard = f"export guard: {narrowed.guard or narrowed}"
    parts, n = [main.artifact], len(main.artifact.symbols)
    for r0, r1 in ((lo, a - 1), (b + 1, hi)):
        if r0 <= r1:
            parts += _excluded(c, module, example_args, dynamic_dim, (r0, r1), narrowed, guard, inner, n)
    for p in main.artifact.programs:
        if p.reason == "generic":
            p.reason = f"generic: the range torch.export keeps ([{a}, {b}])"
    artifact = art_mod.combine(parts)
    return c.combined(artifact, kw["config"], main.stages)


def _split_at_one(c: Compilers, module, example_args, spec, name, kw):
    """torch.export traces the Dim `name` as at least 2 and its trace at 1 (or 0) differs: one artifact
    whose programs are the spec with `name` over [2, max], and each size of `name` below 2 traced with
    those sizes static (the other Dims still symbolic, each checked the same way by the recursive compile)."""
    lo, hi = dynspec.spec_dims(spec)[name]
    inner = dict(kw, cache=False)
    main = c.compile_torch(module, *example_args, dynamic_shapes=dynspec.without_one(spec, name, hi), **inner)
    names = [s[0] for s in main.artifact.symbols]
    parts = [main.artifact]
    for size in range(lo, 2):
        try:
            small = _at_size(c, module, example_args, spec, name, size, inner)
        except NovellaError as e:
            raise NovellaError(
                f"{name} = 1 traces differently from {name} >= 2, so each {name} below 2 is a program of its own; "
                f"{name} = {size} fails: {e}\n"
                f"Give the Dim min={size + 1} if {name} = {size} need not run."
            ) from None
        own = [s[0] for s in small.symbols]
        for p in small.programs:
            box = dict(zip(own, p.ranges), **{name: [size, size]})
            p.ranges = [list(box[n]) for n in names]
            why = "" if p.reason == "generic" else "; " + p.reason
            p.reason = f"export guard: {ONE_GUARD} ({name} = {size}){why}"
        parts.append(small)
    for p in main.artifact.programs:
        if p.reason == "generic":
            p.reason = f"generic: {name} in [2, {hi}] (the sizes below 2 are programs of their own)"
    return c.combined(art_mod.combine(parts), kw["config"], main.stages)


def _at_size(c: Compilers, module, example_args, spec, name, size, kw):
    """The artifact of the model with the Dim `name` static at `size` (the other Dims still symbolic)."""
    args, spec = dynspec.at_size(module, example_args, spec, name, size)
    if dynspec.spec_dims(spec):
        return c.compile_torch(module, *args, dynamic_shapes=spec, **kw).artifact
    prog = traced("export_static", _export_static, module, args)
    return c.compile_program(prog, None, kw["config"], None, kw["decomposition_table"], kw["pass_options"]).artifact


def _excluded(c: Compilers, module, example_args, dynamic_dim, rng, narrowed, guard, kw, n: int) -> list:
    """The programs (artifacts) of a sub-range torch.export excluded (`n` symbols, all that length): the
    sub-range traced from an example at its top, else (the top is a length of its own, such as the one
    where a patch grid equals the pretrained one) from one in its middle, else one static program per length."""
    r0, r1 = rng
    if r1 - r0 >= 2:
        why = None
        for at in (r1 - 1, (r0 + r1) // 2):  # a top may be special (a pad of 0)
            args = tuple(_resized(x, dynamic_dim, at) for x in example_args)
            try:
                sub = c.compile_torch(module, *args, dynamic_dim=dynamic_dim, min_len=r0, max_len=r1, **kw)
            except NovellaError as e:
                why = why or e
                continue
            for p in sub.artifact.programs:
                p.reason = guard if p.reason == "generic" else p.reason
            return [sub.artifact]
        if r1 - r0 + 1 > MAX_SPECIALIZED:
            raise NovellaError(
                f"{narrowed}\nThe lengths T in [{r0}, {r1}] do not compile on their own: {why}"
            ) from None
    out = []
    for length in range(r0, r1 + 1):
        args = tuple(_resized(x, dynamic_dim, length) for x in example_args)
        try:
            prog = traced("export_static", _export_static, module, args)
        except NovellaError as e:
            raise NovellaError(f"{narrowed}\nThe static program for T = {length} fails too: {e}") from None
        static = c.compile_program(prog, (length, length), kw["config"], None, kw["decomposition_table"],
                                  kw["pass_options"])  # fmt: skip
        for p in static.artifact.programs:
            p.ranges, p.reason = [[length, length]] * n, f"{guard} (static, T = {length})"
        out.append(static.artifact)
    return out
