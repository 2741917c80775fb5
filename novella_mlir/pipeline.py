"""`compile_torch`: the whole pipeline, as one straight list of stages (the export-range strategy is
`frontend/ranges.py`, the compiled model `compiled.py`)."""

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
from .artifact.extract import extract as extract_program
from .compiled import CompiledModel, load  # noqa: F401 (importable from here, as before)
from .errors import CompileError, NovellaError
from .frontend import explain, export_memo, exporting, ranges
from .runtime.step import with_lanes
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
    with export_memo.scope():  # each distinct export once per top-level compile (the parts' compiles share it)
        return _compile_cached(module, example_args, dynamic_dim, min_len, max_len, dynamic_shapes, config,
                               dump_dir, decomposition_table, pass_options, cache, buckets)  # fmt: skip


def _compile_cached(module, example_args, dynamic_dim, min_len, max_len, dynamic_shapes, config, dump_dir,
                    decomposition_table, pass_options, cache, buckets) -> CompiledModel:  # fmt: skip
    config = config or load_config()
    example_args = _unaliased(example_args)
    if dynamic_shapes is None:
        ranges.check_range(dynamic_dim, min_len, max_len)
    if not buckets:
        pass_options = {**(pass_options or {}), "novella-buckets": {"enable": 0}}
    bounds = dynamic_shapes if dynamic_shapes is not None else [dynamic_dim, min_len, max_len]
    rec = compile_cache.start(
        module, example_args, cache=cache, uncached=decomposition_table is not None or dump_dir is not None,
        bounds=bounds, config=config, pass_options=pass_options, exports=ranges.EXPORTS,
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


def _unaliased(example_args) -> tuple:
    """The examples with every tensor that shares storage with an earlier one cloned: torch.export traces
    an input passed twice (`compile_torch(m, x, x)`) as one placeholder, and the program would then read
    the first input for both at run time."""
    seen, out = set(), []
    for a in example_args:
        if isinstance(a, torch.Tensor):
            if a.untyped_storage().data_ptr() in seen:
                a = a.clone()
            seen.add(a.untyped_storage().data_ptr())
        out.append(a)
    return tuple(out)


def _compile_torch(*args) -> CompiledModel:
    """compile_torch's body: the export-range strategy (`frontend/ranges.py`), given what compiles a part."""
    return ranges.compile_range(ranges.Compilers(compile_torch, _compile_program, _combined), *args)


def _combined(artifact, config, stages) -> CompiledModel:
    """The model of an artifact the range strategy combined from parts, its bounds checked."""
    model = CompiledModel(artifact, config, stages)
    _check_bounds_encode(model)
    return model


def _compile_program(prog, bounds, config, dump_dir, decomposition_table, pass_options, names=None) -> CompiledModel:
    """The exported program through the FX importer, the frontend and the backend passes. `bounds`
    (min, max) overrides the one symbol's range; None keeps each symbol's (named after `names`)."""
    sy.forget()  # proofs and kernel searches are remembered within one compile (repeated layers), not across
    kernels.forget()
    forget_ir_memos()
    try:
        return _compile_stages(prog, bounds, config, dump_dir, decomposition_table, pass_options, names)
    except NovellaError as e:  # name what torch.export assumed at the example (a size fixed by an int())
        try:
            hint = explain.assumed(prog, *bounds, exporting.failing_lengths) if bounds is not None else ""
        except Exception:  # noqa: BLE001 - a hint that cannot be computed must not hide the refusal
            hint = ""
        if not hint:
            raise
        raise type(e)(str(e) + hint) from None
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
        # backend: shape-infer, legalize, allocate, buckets, fuse, tile, macro-gen, inst-gen, schedule (each
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
                model.jit.check(with_lanes(art, values))
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
