"""`compile_torch`: the whole pipeline, as one straight list of stages."""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import torch
from torch_mlir import ir

from simulator import isa, load_config

from . import artifact as art_mod
from . import kernels
from . import symbolic as sy
from .artifact import cache as compile_cache
from .artifact.cache_key import traced
from .artifact.extract import extract as extract_program
from .errors import CompileError, InputError, NovellaError
from .runtime.executor import Executor, check_count
from .transforms.common import forget_ir_memos
from .transforms.registry import BACKEND_PIPELINE, run_passes


class IRTexts(Mapping):
    """Stage name -> IR text. Each stage keeps a clone of its module (a C++ copy, ~0.05 ms) and prints
    it when first read: printing the encoder's 15 stages is ~70 ms of a compile that may never read them."""

    def __init__(self):
        self._items: dict = {}  # name -> text, a module clone not printed yet, or ("alias", stage)

    def __getitem__(self, name: str) -> str:
        v = self._items[name]
        if isinstance(v, tuple):
            return self[v[1]]
        if not isinstance(v, str):
            v = self._items[name] = str(v)
        return v

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def keep(self, name: str, module: ir.Module) -> None:
        self._items[name] = module.operation.clone()

    def alias(self, name: str, of: str) -> None:
        self._items[name] = ("alias", of)


class Stages:
    """IR text after each stage (`texts`, printed when read), optionally dumped as numbered files; on a
    terminal (NOVELLA_PROGRESS=0/1 overrides) a tqdm bar of the stages."""

    def __init__(self, dump_dir=None):
        from tqdm import tqdm

        from simulator.first_build import enabled

        self.texts: Mapping[str, str] = IRTexts()
        self.seconds: dict[str, float] = {}
        self.dump_dir = Path(dump_dir) if dump_dir else None
        self._t = time.perf_counter()
        if self.dump_dir:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
        self.bar = tqdm(total=len(BACKEND_PIPELINE) + 3, desc="compile", unit="stage", disable=not enabled(),
                        file=sys.stderr, leave=False, bar_format="{desc}: {n_fmt}/{total_fmt} stages {bar} {elapsed}")  # fmt: skip

    def step(self, name: str) -> None:
        """Advances the bar past a stage of the generic program, naming the next."""
        if self.bar is not None and " @ " not in name:
            self.bar.update(1)
            self.bar.set_description_str(f"compile: {name}", refresh=True)

    def finish(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def alias(self, name: str, of: str) -> None:
        """`name` shows the text recorded as `of` (the generic program's stages, by its range too)."""
        self.texts.alias(name, of)

    def record(self, name: str, module: ir.Module) -> None:
        _verify(module, name)
        now = time.perf_counter()
        self.seconds[name], self._t = now - self._t, now
        self.texts.keep(name, module)
        self.step(name)
        if self.dump_dir:
            (self.dump_dir / f"{len(self.texts) - 1:02d}-{name}.mlir").write_text(self.texts[name])


_PER_PROGRAM = BACKEND_PIPELINE[BACKEND_PIPELINE.index("novella-buckets") + 1 :]


def stage_name(flag: str, module) -> str:
    """The stage name of one program's IR when a module splits into programs: `novella-tile @ T in [1, 64]`."""
    box = ", ".join(f"{s.name} in [{s.lo}, {s.hi}]" for s in sy.read_symbols(module.operation))
    return f"{flag} @ {box}"


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
    buckets: bool = True,
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
    persistent cache (`novella_mlir/artifact/cache.py`) and stores it there.

    `buckets=False` compiles one generic program per export range: no shape buckets (`--novella-buckets`,
    where the cost model may add a program tiled for short lengths)."""
    config = config or load_config()
    if dynamic_shapes is None:
        check_range(dynamic_dim, min_len, max_len)
    if not buckets:
        pass_options = {**(pass_options or {}), "novella-buckets": {"enable": 0}}
    bounds = dynamic_shapes if dynamic_shapes is not None else [dynamic_dim, min_len, max_len]
    rec = compile_cache.start(
        module, example_args, cache=cache, uncached=decomposition_table is not None or dump_dir is not None,
        bounds=bounds, config=config, pass_options=pass_options, exports=_EXPORTS,
    )  # fmt: skip
    args = (module, example_args, dynamic_dim, min_len, max_len, dynamic_shapes, config, dump_dir,
            decomposition_table, pass_options)  # fmt: skip
    if rec is None:
        return _compile_torch(*args)
    try:
        with rec:
            model = _compile_torch(*args)
    except compile_cache.Hit as hit:
        stages = Stages()
        stages.texts, stages.seconds = hit.texts, hit.seconds
        return CompiledModel(hit.artifact, config, stages)
    rec.store(model)
    return model


def check_range(dynamic_dim, min_len, max_len) -> None:
    """compile_torch's length arguments: ints (not bools), 1 <= min_len <= max_len, before any export."""
    for name, v in (("dynamic_dim", dynamic_dim), ("min_len", min_len), ("max_len", max_len)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise InputError(f"{name} must be an int, got {v!r} ({type(v).__name__})")
    if dynamic_dim < 0:
        raise InputError(f"dynamic_dim must be >= 0 (the index of the dynamic dim), got {dynamic_dim}")
    if not 1 <= min_len <= max_len:
        raise InputError(f"the bounds must satisfy 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")


def _export(module, args, dynamic_dim, lo, hi):
    from .frontend import importer

    return importer.export(module, args, dynamic_dim, lo, hi)


def _export_spec(module, args, spec):
    """The program of a Dim spec and the Dim whose trace at 1 differs from it, if any."""
    from .frontend import exporting, importer

    prog = importer.export_spec(module, args, spec)
    return prog, exporting.differs_at_one(module, args, spec, prog)


def _export_static(module, args):
    from .frontend import importer

    return importer.export_static(module, args)


_EXPORTS = {"export": _export, "export_spec": _export_spec, "export_static": _export_static}


def _compile_torch(module, example_args, dynamic_dim, min_len, max_len, dynamic_shapes, config, dump_dir,
                   decomposition_table, pass_options) -> CompiledModel:  # fmt: skip
    """compile_torch's body: every export through `cache_key.traced`, which keys a cached compile."""
    # torch.export with symbolic sizes, then the torch-mlir FX importer (torch dialect, `?` dims)
    from .frontend import importer
    from .frontend.exporting import NarrowedError

    if dynamic_shapes is not None:
        prog, one = traced("export_spec", _export_spec, module, example_args, dynamic_shapes)
        if one is not None:
            kw = dict(config=config, decomposition_table=decomposition_table, pass_options=pass_options)
            return _split_at_one(module, example_args, dynamic_shapes, one, kw)
        names = importer.symbol_names(prog, example_args, dynamic_shapes, module)
        return _compile_program(prog, None, config, dump_dir, decomposition_table, pass_options, names)
    lo, hi = min_len, max_len
    if max_len <= 2:  # torch-mlir imports a dim whose range ends at 2 as static: export over [min, 3]
        lo, hi = min_len, 3
        example_args = tuple(_resized(a, dynamic_dim, 2) for a in example_args)
    elif min_len == max_len:
        lo, hi = min_len - 1, min_len
        example_args = tuple(_resized(a, dynamic_dim, min_len) for a in example_args)
    try:
        prog = traced("export", _export, module, example_args, dynamic_dim, lo, hi)
    except NarrowedError as e:
        if min_len == max_len or e.kept is None:
            raise
        kw = dict(config=config, decomposition_table=decomposition_table, pass_options=pass_options)
        return _specialize(module, example_args, dynamic_dim, (min_len, max_len), e, **kw)
    return _compile_program(prog, (min_len, max_len), config, dump_dir, decomposition_table, pass_options)


def _compile_program(prog, bounds, config, dump_dir, decomposition_table, pass_options, names=None) -> CompiledModel:
    """The exported program through the FX importer, the frontend and the backend passes. `bounds`
    (min, max) overrides the one symbol's range; None keeps each symbol's (named after `names`)."""
    sy.forget()  # proofs and kernel searches are remembered within one compile (repeated layers), not across
    kernels.forget()
    forget_ir_memos()
    try:
        return _compile_stages(prog, bounds, config, dump_dir, decomposition_table, pass_options, names)
    finally:
        forget_ir_memos()  # they hold this compile's context


def _compile_stages(prog, bounds, config, dump_dir, decomposition_table, pass_options, names) -> CompiledModel:
    from . import optable
    from .dialects.context import make_context
    from .frontend import importer, linalg
    from .frontend.lowering import convert
    from .transforms import novella_buckets

    ctx = make_context()
    stages = Stages(dump_dir)
    imported = importer.import_program(ctx, prog, decomposition_table, names=names)
    if bounds is not None:
        imported.symbols = [dataclasses.replace(s, lo=bounds[0], hi=bounds[1]) for s in imported.symbols]
    with ctx, ir.Location.unknown():
        stages.record("torch", imported.module)
        # frontend: registry-driven lowering to the novella dialect; the shape mutator types every `?`
        mod = convert(imported.module, imported, optable.torch_lowerings(), linalg.lower)
        stages.record("novella", mod)
        # backend: shape-infer, legalize, allocate, buckets, tile, macro-gen, inst-gen, schedule (each
        # verified); from --novella-buckets on, once per program (a shape bucket, or the generic one)
        programs, main = [(mod, "generic")], 0
        for flag in BACKEND_PIPELINE:
            for i, (m, _) in enumerate(programs):
                _run(m, flag, config, (pass_options or {}).get(flag, {}))
                stages.record(flag if i == main else stage_name(flag, m), m)
                if i == main and len(programs) > 1:
                    stages.alias(stage_name(flag, m), flag)
            if flag == "novella-buckets":
                programs = novella_buckets.programs(mod)
                main = next((i for i, (_, r) in enumerate(programs) if r == "generic"), 0)
        # artifact: MacroMeta + TileMeta (+ weights and DRAM plan) of each program, in one artifact
        parts = [extract_program(m, imported.weights, config, reason) for m, reason in programs]
        artifact = parts[0] if len(parts) == 1 else art_mod.combine(parts)
    in_dtypes, out_dtypes = importer.input_dtypes(prog), importer.output_dtypes(prog)
    for program in artifact.programs:
        for meta, dtype in zip(program.inputs, in_dtypes):
            meta.dtype = dtype
        for meta, dtype in zip(program.outputs, out_dtypes):
            meta.dtype = dtype
    model = CompiledModel(artifact, config, stages)
    # validation: the programs at every corner of the bounds instantiate and encode
    stages.step("checking the bounds")
    _check_bounds_encode(model)
    stages.finish()  # (an exception leaves the bar to tqdm, which clears it when it is collected)
    if dump_dir:
        artifact.save(Path(dump_dir) / "model.nvla")
        (Path(dump_dir) / "summary.json").write_text(json.dumps(model.summary(), indent=2))
    return model


def _resized(arg, dim: int, length: int):
    """`arg` with dim `dim` of length `length` (an example for export; float values random, integers 0)."""
    if not isinstance(arg, torch.Tensor):
        return arg
    shape = list(arg.shape)
    shape[dim] = length
    return torch.randn(shape, dtype=arg.dtype) if arg.dtype.is_floating_point else torch.zeros(shape, dtype=arg.dtype)


MAX_SPECIALIZED = 4


def _specialize(module, example_args, dynamic_dim, bounds, narrowed, **kw) -> CompiledModel:
    """torch.export keeps only `narrowed.kept` of `bounds`: one artifact whose programs are that part,
    compiled with the length symbolic, and each excluded sub-range, traced again on its own (symbolic
    when torch keeps it, else one static program per length, at most MAX_SPECIALIZED of them)."""
    (lo, hi), (a, b) = bounds, narrowed.kept
    inner = dict(kw, cache=False)
    main = compile_torch(module, *example_args, dynamic_dim=dynamic_dim, min_len=a, max_len=b, **inner)
    guard = f"export guard: {narrowed.guard or narrowed}"
    parts, n = [main.artifact], len(main.artifact.symbols)
    for r0, r1 in ((lo, a - 1), (b + 1, hi)):
        if r0 <= r1:
            parts += _excluded(module, example_args, dynamic_dim, (r0, r1), narrowed, guard, inner, n)
    for p in main.artifact.programs:
        if p.reason == "generic":
            p.reason = f"generic: the range torch.export keeps ([{a}, {b}])"
    artifact = art_mod.combine(parts)
    model = CompiledModel(artifact, kw["config"], main.stages)
    _check_bounds_encode(model)
    return model


def _split_at_one(module, example_args, spec, name, kw) -> CompiledModel:
    """torch.export traces the Dim `name` as at least 2 and its trace at 1 (or 0) differs: one artifact
    whose programs are the spec with `name` over [2, max], and each size of `name` below 2 traced with
    those sizes static (the other Dims still symbolic, each checked the same way by the recursive compile)."""
    from .frontend import dynspec
    from .frontend.exporting import ONE_GUARD

    lo, hi = dynspec.spec_dims(spec)[name]
    inner = dict(kw, cache=False)
    main = compile_torch(module, *example_args, dynamic_shapes=dynspec.without_one(spec, name, hi), **inner)
    names = [s[0] for s in main.artifact.symbols]
    parts = [main.artifact]
    for size in range(lo, 2):
        try:
            small = _at_size(module, example_args, spec, name, size, inner)
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
    model = CompiledModel(art_mod.combine(parts), kw["config"], main.stages)
    _check_bounds_encode(model)
    return model


def _at_size(module, example_args, spec, name, size, kw):
    """The artifact of the model with the Dim `name` static at `size` (the other Dims still symbolic)."""
    from .frontend import dynspec

    args, spec = dynspec.at_size(module, example_args, spec, name, size)
    if dynspec.spec_dims(spec):
        return compile_torch(module, *args, dynamic_shapes=spec, **kw).artifact
    prog = traced("export_static", _export_static, module, args)
    return _compile_program(prog, None, kw["config"], None, kw["decomposition_table"], kw["pass_options"]).artifact


def _excluded(module, example_args, dynamic_dim, rng, narrowed, guard, kw, n: int) -> list:
    """The programs (artifacts) of a sub-range torch.export excluded (`n` symbols, all that length)."""

    r0, r1 = rng
    if r1 - r0 >= 2:
        args = tuple(_resized(x, dynamic_dim, r1) for x in example_args)
        try:
            sub = compile_torch(module, *args, dynamic_dim=dynamic_dim, min_len=r0, max_len=r1, **kw)
        except NovellaError as e:
            sub, why = None, e
        if sub is not None:
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
        static = _compile_program(prog, (length, length), kw["config"], None, kw["decomposition_table"],
                                  kw["pass_options"])  # fmt: skip
        for p in static.artifact.programs:
            p.ranges, p.reason = [[length, length]] * n, f"{guard} (static, T = {length})"
        out.append(static.artifact)
    return out


def _check_bounds_encode(model) -> None:
    """Instantiates the program at every corner of the symbols' bounds, so a field that
    overflows its ISA width is a compile error, not a failure at run time."""
    art = model.artifact
    for i, prog in enumerate(art.programs):
        syms = [[s[0], lo, hi] for s, (lo, hi) in zip(art.symbols, prog.ranges)]
        for corner in itertools.product(*[(1, 2)] * len(syms)):
            values = [s[pick] for s, pick in zip(syms, corner)]
            which = "/".join("lower" if p == 1 else "upper" for p in corner) or "lower"
            try:
                model.jit.check(values)
            except isa.EncodingError as e:
                named = ", ".join(f"{s[0]}={v}" for s, v in zip(syms, values))
                what = f"program {i} ({prog.reason})" if len(art.programs) > 1 else "the program"
                raise CompileError(
                    f"{what} at the {which} bound ({named}) does not encode: {e}. "
                    "Lower max_len, or report the kernel that produced the field."
                ) from None


def _run(module, flag, config, options) -> None:
    from .frontend.lowering import source_location

    try:
        run_passes(module, [(flag, options)], config, verify=False, keep_memos=True)  # Stages.record verifies it
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

    def __repr__(self) -> str:
        return f"<CompiledModel {self.artifact!r}>"

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
        metas = self.artifact.programs[0].inputs
        check_count(inputs, metas)  # before the zip below, which would drop extra inputs
        arrays = [_to_numpy(x, i, m.dtype, cast) for i, (x, m) in enumerate(zip(inputs, metas))]
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

    def ir(self, stage: str, at=None) -> str:
        """IR text after `stage` ("torch", "novella", or a pass flag such as "novella-tile"): of the generic
        program, or with `at` (symbol values) of the program that runs them (a shape bucket's, from
        `novella-buckets` on)."""
        name = stage
        if at is not None and self.stages and len(self.artifact.programs) > 1:
            prog = self.artifact.programs[self.artifact.pick(at)]
            box = ", ".join(f"{s[0]} in [{lo}, {hi}]" for s, (lo, hi) in zip(self.artifact.symbols, prog.ranges))
            name = f"{stage} @ {box}" if stage in _PER_PROGRAM else stage
        if not self.stages or name not in self.stages.texts:
            known = ", ".join(self.stages.texts) if self.stages else "none (loaded from a file)"
            raise KeyError(f"no IR for stage '{name}'; stages: {known}")
        return self.stages.texts[name]

    def summary(self) -> dict:
        a = self.artifact
        return {
            "symbols": a.symbols,
            "macro_meta_bytes": a.macro_nbytes,
            "tile_meta_bytes": a.tile_nbytes,
            "weight_bytes": a.weight_nbytes,
            "programs": [
                {
                    "ranges": p.ranges,
                    "reason": p.reason,
                    "macro_meta_bytes": mb,
                    "tile_meta_bytes": tb,
                    "macros": len(p.macros),
                    "tiles": len(p.tiles),
                }
                for p, (mb, tb) in ((p, a.program_nbytes(i)) for i, p in enumerate(a.programs))
            ],
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


def load(path, config=None, key: bytes | str | None = None) -> CompiledModel:
    """Loads a saved artifact as a runnable model (validated; authenticated too when `key` is given)."""
    config = config or load_config()
    return CompiledModel(art_mod.load(path, config, key=key), config)
