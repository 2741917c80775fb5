"""`compile_torch`: the whole pipeline, as one straight list of stages."""

from __future__ import annotations

import dataclasses
import itertools
import json
import time
from pathlib import Path

import torch
from torch_mlir import ir

from simulator import isa, load_config

from . import artifact as art_mod
from . import cache as compile_cache
from . import symbolic as sy
from .context import make_context
from .errors import CompileError, InputError, NovellaError
from .frontend import importer
from .frontend.exporting import NarrowedError
from .frontend.lowering import convert, source_location
from .runtime.executor import Executor
from .transforms.registry import BACKEND_PIPELINE, run_passes


class Stages:
    """IR text after each stage, optionally dumped as numbered files."""

    def __init__(self, dump_dir=None):
        self.texts: dict[str, str] = {}
        self.seconds: dict[str, float] = {}
        self.dump_dir = Path(dump_dir) if dump_dir else None
        self._t = time.perf_counter()
        if self.dump_dir:
            self.dump_dir.mkdir(parents=True, exist_ok=True)

    def record(self, name: str, module: ir.Module) -> None:
        _verify(module, name)
        now = time.perf_counter()
        self.seconds[name], self._t = now - self._t, now
        self.texts[name] = str(module)
        if self.dump_dir:
            (self.dump_dir / f"{len(self.texts) - 1:02d}-{name}.mlir").write_text(self.texts[name])


def _verify(module: ir.Module, stage: str) -> None:
    try:
        module.operation.verify()
    except ir.MLIRError as e:
        raise CompileError(f"IR after stage '{stage}' does not verify:\n{e}") from None


def compile_torch(
    module: torch.nn.Module,
    *example_args,
    dynamic_dim: int = 1,
    min_len: int = 1,
    max_len: int = 2048,
    dynamic_shapes=None,
    config=None,
    dump_dir=None,
    decomposition_table=None,
    pass_options: dict | None = None,
    cache: bool | None = None,
) -> CompiledModel:
    """Compiles `module` once, with dim `dynamic_dim` of its inputs symbolic in [min_len, max_len].

    `min_len == max_len` compiles for one length T: torch.export cannot
    take such a Dim, so it exports over [T - 1, T] and the bounds are then
    fixed to [T, T]. A range ending at 1 or 2 is exported over [min_len, 3]
    with an example of length 2 (torch and the FX importer would make the
    dim static) and fixed back to [min_len, max_len] the same way.

    `dynamic_shapes` takes torch.export's spec instead (per input, a dict dim -> `Dim(name, min, max)`;
    a Dim shared by several inputs means equal sizes): one symbol per Dim, each with its own bounds, and
    `dynamic_dim` / `min_len` / `max_len` are ignored.

    `cache` (default: on unless NOVELLA_CACHE=0) looks the compile up in the
    persistent cache (`novella_mlir/cache.py`) and stores it there."""
    config = config or load_config()
    key = None
    if compile_cache.enabled(cache) and decomposition_table is None and dump_dir is None:
        key = compile_cache.key(
            module,
            example_args,
            dynamic_dim=dynamic_dim if dynamic_shapes is None else _spec_text(dynamic_shapes),
            min_len=min_len,
            max_len=max_len,
            config=config,
            pass_options=pass_options,
        )
        hit = compile_cache.lookup(key, config)
        if hit is not None:
            stages = Stages()
            stages.texts, stages.seconds = hit[1], hit[2]
            return CompiledModel(hit[0], config, stages)
    # torch.export with symbolic sizes, then the torch-mlir FX importer (torch dialect, `?` dims)
    if dynamic_shapes is not None:
        prog = importer.export_spec(module, example_args, dynamic_shapes)
        names = importer.symbol_names(prog, example_args, dynamic_shapes)
        model = _compile_program(prog, None, config, dump_dir, decomposition_table, pass_options, names)
    else:
        lo, hi = min_len, max_len
        if max_len <= 2:  # torch-mlir imports a dim whose range ends at 2 as static: export over [min, 3]
            lo, hi = min_len, 3
            example_args = tuple(_resized(a, dynamic_dim, 2) for a in example_args)
        elif min_len == max_len:
            lo, hi = min_len - 1, min_len
            example_args = tuple(_resized(a, dynamic_dim, min_len) for a in example_args)
        try:
            prog = importer.export(module, example_args, dynamic_dim, lo, hi)
        except NarrowedError as e:
            if min_len == max_len or e.kept is None:
                raise
            kw = dict(config=config, decomposition_table=decomposition_table, pass_options=pass_options)
            return _specialize(module, example_args, dynamic_dim, (min_len, max_len), e, **kw)
        model = _compile_program(prog, (min_len, max_len), config, dump_dir, decomposition_table, pass_options)
    if key is not None:
        compile_cache.store(key, model.artifact, model.stages)
    return model


def _compile_program(prog, bounds, config, dump_dir, decomposition_table, pass_options, names=None) -> CompiledModel:
    """The exported program through the FX importer, the frontend and the backend passes. `bounds`
    (min, max) overrides the one symbol's range; None keeps each symbol's (named after `names`)."""
    sy.forget()  # proofs are remembered within one compile (repeated layers), not across compiles
    ctx = make_context()
    stages = Stages(dump_dir)
    imported = importer.import_program(ctx, prog, decomposition_table, names=names)
    if bounds is not None:
        imported.symbols = [dataclasses.replace(s, lo=bounds[0], hi=bounds[1]) for s in imported.symbols]
    with ctx, ir.Location.unknown():
        stages.record("torch", imported.module)
        # frontend: registry-driven lowering to the novella dialect; the shape mutator types every `?`
        mod = convert(imported.module, imported)
        stages.record("novella", mod)
        # backend: shape-infer, legalize, allocate, tile, macro-gen, inst-gen (each verified)
        for flag in BACKEND_PIPELINE:
            _run(mod, flag, config, (pass_options or {}).get(flag, {}))
            stages.record(flag, mod)
        # artifact: MacroMeta + TileMeta (+ weights and DRAM plan)
        artifact = art_mod.extract(mod, imported.weights, config)
    for meta, dtype in zip(artifact.inputs, importer.input_dtypes(prog)):
        meta.dtype = dtype
    model = CompiledModel(artifact, config, stages)
    # validation: the programs at every corner of the bounds instantiate and encode
    _check_bounds_encode(model)
    if dump_dir:
        artifact.save(Path(dump_dir) / "model.nvla")
        (Path(dump_dir) / "summary.json").write_text(json.dumps(model.summary(), indent=2))
    return model


def _spec_text(spec) -> str:
    """A `dynamic_shapes` spec as text for the compile cache key (Dims by name and bounds)."""
    if isinstance(spec, dict):
        return "{" + ",".join(f"{k}:{_spec_text(v)}" for k, v in sorted(spec.items(), key=lambda kv: str(kv[0]))) + "}"
    if isinstance(spec, (list, tuple)):
        return "(" + ",".join(_spec_text(v) for v in spec) + ")"
    if hasattr(spec, "__name__") and hasattr(spec, "min"):
        return f"Dim({spec.__name__},{spec.min},{spec.max})"
    return repr(spec)


def _resized(arg, dim: int, length: int):
    """`arg` with dim `dim` of length `length` (an example for export; float values random, integers 0)."""
    if not isinstance(arg, torch.Tensor):
        return arg
    shape = list(arg.shape)
    shape[dim] = length
    return torch.randn(shape, dtype=arg.dtype) if arg.dtype.is_floating_point else torch.zeros(shape, dtype=arg.dtype)


MAX_SPECIALIZED = 4


def _specialize(module, example_args, dynamic_dim, bounds, narrowed, **kw) -> SpecializedModel:
    """torch.export keeps only `narrowed.kept` of `bounds`: that part compiled once with the length
    symbolic, each excluded length (at most MAX_SPECIALIZED) as its own static program."""
    (lo, hi), (a, b) = bounds, narrowed.kept
    rest = [*range(lo, a), *range(b + 1, hi + 1)]
    if len(rest) > MAX_SPECIALIZED:
        raise narrowed
    main = compile_torch(module, *example_args, dynamic_dim=dynamic_dim, min_len=a, max_len=b, **kw)
    parts = [((a, b), main)]
    for length in rest:
        args = tuple(_resized(x, dynamic_dim, length) for x in example_args)
        try:
            prog = importer.export_static(module, args)
        except NovellaError as e:
            raise NovellaError(f"{narrowed}\nThe static program for T = {length} fails too: {e}") from None
        parts.append(((length, length), _compile_program(prog, (length, length), kw["config"], None,
                                                         kw["decomposition_table"], kw["pass_options"])))  # fmt: skip
    return SpecializedModel(parts, dynamic_dim, str(narrowed))


def _check_bounds_encode(model) -> None:
    """Instantiates the program at every corner of the symbols' bounds, so a field that
    overflows its ISA width is a compile error, not a failure at run time."""
    syms = model.artifact.symbols
    for corner in itertools.product(*[(1, 2)] * len(syms)):
        values = [s[pick] for s, pick in zip(syms, corner)]
        which = "/".join("lower" if p == 1 else "upper" for p in corner) or "lower"
        try:
            model.jit.instantiate(values)
        except isa.EncodingError as e:
            named = ", ".join(f"{s[0]}={v}" for s, v in zip(syms, values))
            raise CompileError(
                f"the program at the {which} bound ({named}) does not encode: {e}. "
                "Lower max_len, or report the kernel that produced the field."
            ) from None


def _run(module, flag, config, options) -> None:
    try:
        run_passes(module, [(flag, options)], config)
    except ir.MLIRError as e:
        lines = [f"{source_location(d.location)}: error: {d.message}" for d in e.error_diagnostics]
        raise CompileError(f"pass '{flag}' failed:\n" + ("\n".join(lines) or str(e))) from None


class CompiledModel:
    """A model compiled once for every length in bounds; call it like the nn.Module."""

    def __init__(self, artifact, config=None, stages: Stages | None = None):
        self.artifact = artifact
        self.config = config or load_config()
        self.stages = stages
        self.executor = Executor(artifact, self.config)

    def __call__(self, *inputs, **options):
        """Runs the model on the simulator like the nn.Module: the outputs of `run` (same options)."""
        return self.run(*inputs, **options)[0]

    def run(
        self, *inputs, trace: bool = False, check_hazards: bool = True, progress: bool | None = None, cast: bool = False
    ):
        """(outputs, RunResult) of one call: thread-safe access to the run's program, stats and trace.

        Inputs must have the dtypes the model was compiled with (as eager requires) unless `cast=True`;
        `check_hazards=False` skips the race checker (same outputs and cycles, faster); `progress` shows
        a tqdm bar (default: on a terminal, for long programs); `last_run` then holds this thread's run."""
        wants = [m.dtype for m in self.artifact.inputs]
        arrays = [_to_numpy(x, i, w, cast) for i, (x, w) in enumerate(zip(inputs, wants))]
        outs, run = self.executor.run_with_result(
            arrays, trace=trace, check_hazards=check_hazards, progress=progress, cast=cast
        )
        outs = [torch.from_numpy(o) for o in outs]
        return (outs[0] if len(outs) == 1 else tuple(outs)), run

    @property
    def last_run(self):
        """The RunResult of the calling thread's last call (per thread; see `run` for the result itself)."""
        return self.executor.last_run

    @property
    def jit(self):
        return self.executor.jit

    def ir(self, stage: str) -> str:
        """IR text after `stage` ("torch", "novella", or a pass flag such as "novella-tile")."""
        if not self.stages or stage not in self.stages.texts:
            known = ", ".join(self.stages.texts) if self.stages else "none (loaded from a file)"
            raise KeyError(f"no IR for stage '{stage}'; stages: {known}")
        return self.stages.texts[stage]

    def summary(self) -> dict:
        a = self.artifact
        return {
            "symbols": a.symbols,
            "macro_meta_bytes": a.macro_nbytes,
            "tile_meta_bytes": a.tile_nbytes,
            "weight_bytes": a.weight_nbytes,
            "macros": len(a.macros),
            "tiles": len(a.tiles),
            "stage_seconds": self.stages.seconds if self.stages else {},
        }

    def save(self, path, key: bytes | str | None = None) -> None:
        """Saves the artifact; with `key` it is signed (HMAC-SHA256) for `load(path, key=key)`."""
        self.artifact.save(path, key=key)


def _to_numpy(x, i: int, want: str, cast: bool):
    """A torch tensor as a numpy array, refusing what has no dense CPU data; other values pass through
    (the executor checks dtypes against the compiled ones, `want`)."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.layout != torch.strided:
        raise InputError(f"input #{i} is a {x.layout} tensor; pass a dense tensor (x.to_dense())")
    if x.device.type == "meta":
        raise InputError(f"input #{i} is a meta tensor, which has no data")
    x = x.detach().cpu().resolve_conj().resolve_neg()
    if x.dtype == torch.bfloat16:  # numpy has no bfloat16
        if not cast:
            raise InputError(
                f"input #{i} has dtype torch.bfloat16, the model was compiled for torch.{want}; "
                "convert it (x.float()) or pass cast=True"
            )
        x = x.float()
    return x.numpy()


class SpecializedModel:
    """Programs for disjoint length ranges, picked by the input's length: the range torch.export
    traces symbolically, plus static programs for the few lengths it excludes (`why`)."""

    def __init__(self, parts, dynamic_dim: int, why: str):
        self.parts = sorted(parts, key=lambda p: p[0])
        self.dynamic_dim = dynamic_dim
        self.why = why
        self.main = max(parts, key=lambda p: p[0][1] - p[0][0])[1]
        self._last = self.main

    def pick(self, length: int) -> CompiledModel:
        for (lo, hi), model in self.parts:
            if lo <= length <= hi:
                return model
        ranges = ", ".join(f"[{lo}, {hi}]" for (lo, hi), _ in self.parts)
        raise InputError(f"length {length} is outside the compiled ranges {ranges}")

    def __call__(self, *inputs, **options):
        return self.run(*inputs, **options)[0]

    def run(self, *inputs, **options):
        """(outputs, RunResult) from the program for the input's length; options as CompiledModel.run."""
        first = next((x for x in inputs if hasattr(x, "shape")), None)
        if first is None or len(first.shape) <= self.dynamic_dim:
            raise InputError(f"no input has a dim {self.dynamic_dim} (the dynamic length) to pick a program by")
        self._last = self.pick(int(first.shape[self.dynamic_dim]))
        return self._last.run(*inputs, **options)

    @property
    def artifact(self):
        return self.main.artifact

    @property
    def last_run(self):
        return self._last.last_run

    def ir(self, stage: str) -> str:
        return self.main.ir(stage)

    def summary(self) -> dict:
        out = self.main.summary()
        out["specializations"] = [{"lengths": list(r), **m.summary()} for r, m in self.parts if m is not self.main]
        out["specialized_because"] = self.why
        return out

    def describe(self) -> str:
        lines = [f"{len(self.parts)} programs, selected by length: {self.why}"]
        for (lo, hi), m in self.parts:
            kind = "symbolic" if m is self.main else "static"
            lines.append(f"  T in [{lo}, {hi}]: {kind}, {len(m.artifact.macros)} macros")
        return "\n".join(lines)

    def save(self, path) -> None:
        """The main program at `path`, each static one beside it as `<path>.T<length>`."""
        for (lo, _), m in self.parts:
            m.save(path if m is self.main else f"{path}.T{lo}")


def load(path, config=None, key: bytes | str | None = None) -> CompiledModel:
    """Loads a saved artifact as a runnable model (validated; authenticated too when `key` is given)."""
    config = config or load_config()
    return CompiledModel(art_mod.load(path, config, key=key), config)
