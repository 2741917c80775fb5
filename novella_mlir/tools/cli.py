"""novella: compile, run and inspect models for the Novella NPU.

novella compile pkg.module:factory --example-shape 1,16,384 --dynamic-dim 1 --max-len 1500 -o model.nvla
novella run model.nvla --len 500 [--trace trace.json] [--seed 0] [--no-hazard-check]
novella inspect model.nvla
novella sweep pkg.module:factory --example-shape 1,16,384 --lengths 1,17,500 --configs edge,default,large
novella demo
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

from .. import __version__
from .factory import CliError, load_factory, run_user
from .inspect_artifact import describe, evaluate_shape


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ compile


def _shape(text: str) -> list[int]:
    try:
        dims = [int(d) for d in text.replace("x", ",").split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated ints like 1,16,384, got '{text}'") from None
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"dims must be positive, got '{text}'")
    return dims


def _pass_options(items: list[str]) -> dict:
    """["novella-tile:tile-m=32", ...] -> {"novella-tile": {"tile-m": "32"}}."""
    from ..transforms.registry import PASSES, parse_options
    from .pass_pipeline import PipelineError, parse_option_string

    out: dict = {}
    for item in items:
        flag, sep, opts = item.partition(":")
        if not sep:
            raise CliError(f"expected PASS:name=value for --pass-option, got '{item}'")
        if flag not in PASSES:
            raise CliError(f"--pass-option: unknown pass '{flag}' (passes: {', '.join(PASSES)})")
        try:
            out.setdefault(flag, {}).update(parse_option_string(opts))
            parse_options(flag, out[flag])
        except (PipelineError, ValueError) as e:
            raise CliError(f"--pass-option '{item}': {e}") from None
    return out


def cmd_compile(args) -> int:
    import torch

    from simulator import load_config

    from .. import compile_torch

    t0 = time.perf_counter()
    _check_compile_args(args)
    config = _config(args.config)
    pass_options = _pass_options(args.pass_option)
    _progress(f"[1/3] building {args.target}")
    model = run_user(load_factory(args.target), f"calling '{args.target}'")
    if not isinstance(model, torch.nn.Module):
        raise CliError(f"'{args.target}' returned {type(model).__name__}, expected a torch.nn.Module")
    examples = [torch.randn(*s) for s in args.example_shape]
    _progress(
        f"[2/3] compiling: torch.export with dim {args.dynamic_dim} in [{args.min_len}, {args.max_len}], "
        "lowering, backend passes"
    )
    npu = compile_torch(
        model.eval(),
        *examples,
        dynamic_dim=args.dynamic_dim,
        min_len=args.min_len,
        max_len=args.max_len,
        config=config or load_config(),
        dump_dir=args.dump_dir,
        pass_options=pass_options,
        buckets=not args.no_buckets,
    )
    for stage, secs in npu.stages.seconds.items():
        _progress(f"      {stage:<22} {secs:6.2f} s")
    npu.save(args.output)
    size = Path(args.output).stat().st_size
    _progress(f"[3/3] wrote {args.output} ({size} bytes) in {time.perf_counter() - t0:.1f} s")
    a = npu.artifact
    n_macros, n_tiles = sum(len(p.macros) for p in a.programs), sum(len(p.tiles) for p in a.programs)
    print(
        f"{args.output}: {len(a.programs)} program(s), {n_macros} templates ({a.macro_nbytes} B), {n_tiles} tile "
        f"rules ({a.tile_nbytes} B), weights {a.weight_nbytes} B"
    )
    return 0


def _check_compile_args(args) -> None:
    if not 1 <= args.min_len <= args.max_len:
        raise CliError(f"--min-len {args.min_len} and --max-len {args.max_len}: need 1 <= min-len <= max-len")
    for shape in args.example_shape:
        if not 0 <= args.dynamic_dim < len(shape):
            raise CliError(f"--dynamic-dim {args.dynamic_dim} is not a dim of the example shape {shape}")
        if not args.min_len <= shape[args.dynamic_dim] <= args.max_len:
            raise CliError(
                f"--example-shape {shape}: dim {args.dynamic_dim} is {shape[args.dynamic_dim]}, "
                f"outside [--min-len {args.min_len}, --max-len {args.max_len}]"
            )


def _config(path):
    if path is None:
        return None
    from simulator import load_config

    return load_config(path)


# ------------------------------------------------------------------ run / inspect


def _load(path: str, config_path: str | None):
    from simulator.config import NovellaConfig

    from .. import artifact as art_mod
    from ..pipeline import CompiledModel

    config = _config(config_path)
    art = art_mod.load(path, config)
    if config is None:
        config = NovellaConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in art.config.items()})
    return CompiledModel(art, config)


def symbol_values(spec: str, symbols: list) -> list[int]:
    """`500` (every symbol) or `T=500,S=3` -> values in symbol order, each checked against its bounds."""
    names = [s[0] for s in symbols]
    if "=" not in spec:
        if not spec.strip().lstrip("-").isdigit():
            raise CliError(f"--len expects an int or NAME=INT pairs, got '{spec}'")
        values = [int(spec)] * len(names)
    else:
        given: dict = {}
        for part in spec.split(","):
            name, _, value = (x.strip() for x in part.partition("="))
            if name not in names or not value.lstrip("-").isdigit():
                raise CliError(f"--len: bad '{part}'; the model's symbols are {', '.join(names)}")
            if name in given:
                raise CliError(f"--len: '{name}' is given twice")
            given[name] = int(value)
        missing = [n for n in names if n not in given]
        if missing:
            raise CliError(f"--len: no value for {', '.join(missing)}")
        values = [given[n] for n in names]
    for (name, lo, hi), v in zip(symbols, values):
        if not lo <= v <= hi:
            raise CliError(f"--len: {name}={v} is outside the compiled bounds [{lo}, {hi}]")
    return values


def cmd_run(args) -> int:
    import numpy as np

    npu = _load(args.model, args.config)
    art = npu.artifact
    syms = symbol_values(args.len, art.symbols)
    rng = np.random.default_rng(args.seed)
    metas = art.programs[art.pick(syms)].inputs
    inputs = [rng.standard_normal(evaluate_shape(m, syms), dtype=np.float32) for m in metas]
    outs = npu(*inputs, trace=bool(args.trace), check_hazards=not args.no_hazard_check)
    outs = outs if isinstance(outs, tuple) else (outs,)
    run = npu.last_run
    named = ", ".join(f"{k}={v}" for k, v in run.symbols.items())
    print(
        f"{args.model} at {named}: inputs {[list(x.shape) for x in inputs]} -> outputs {[list(o.shape) for o in outs]}"
    )
    print(
        f"program: {run.program.n_words} instruction words ({run.program.nbytes} B), "
        f"JIT {run.jit_seconds * 1e3:.1f} ms, simulation {run.sim_seconds:.2f} s"
    )
    print(run.stats)
    if args.trace:
        run.trace.to_json(args.trace)
        n = sum(1 for e in run.trace.events if e["ph"] == "X")
        print(f"trace: {args.trace} ({n} events; open in https://ui.perfetto.dev or chrome://tracing)")
    return 0


def cmd_inspect(args) -> int:
    from .. import artifact as art_mod

    art = art_mod.load(args.model, _config(args.config))
    print(describe(art, args.model))
    return 0


# ------------------------------------------------------------------ sweep


def cmd_sweep(args) -> int:
    from . import sweep as sw

    models = [
        sw.ModelSpec(t, tuple(map(tuple, args.example_shape)), args.dynamic_dim, args.min_len, args.max_len)
        for t in args.targets
    ]
    _check_compile_args(args)
    try:
        jobs = sw.jobs(models, args.configs.split(","), args.lengths)
        engine = "in-process" if args.in_process or not sw.ray_available() else f"Ray ({args.address or 'local'})"
        _progress(f"novella sweep: {len(jobs)} compiles x {len(args.lengths)} lengths on {engine}")
        rows = sw.sweep(
            jobs, address=args.address, in_process=args.in_process, working_dir=args.working_dir,
            num_cpus=args.workers, progress=lambda i, n: _progress(f"      {i}/{n} compiles done"),
        )  # fmt: skip
    except sw.SweepError as e:
        raise CliError(str(e)) from None
    out = Path(args.out)
    paths = sw.write_table(rows, out)
    if not args.no_plots:
        paths += sw.write_plots(rows, out)
    print(sw.markdown(rows))
    print("wrote " + ", ".join(map(str, paths)))
    failed = [r for r in rows if not r.get("ok")]
    for r in failed:
        why = r.get("error") or f"max error {r['max_err']:.3g} against eager"
        print(f"novella sweep: {r['model']} on {r['config']} at T={r['T']}: {why}", file=sys.stderr)
    return 1 if failed else 0


def _lengths(text: str) -> list[int]:
    try:
        out = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated lengths like 1,17,500, got '{text}'") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"lengths must be >= 1, got '{text}'")
    return out


# ------------------------------------------------------------------ demo


def demo_module():
    """The demo of the installed package (`novella_mlir.tools.demo`); never a file of the working directory."""
    from . import demo

    return demo


def cmd_demo(args) -> int:
    try:
        result = demo_module().main(args.demo_args, prog="novella demo")
    except SystemExit as e:  # --help, or a bad option (argparse has printed why)
        return int(e.code or 0) if isinstance(e.code, int | None) else 2
    return result if isinstance(result, int) else 0


# ------------------------------------------------------------------ main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="novella",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"novella {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile an nn.Module factory to an artifact")
    c.add_argument(
        "target",
        help="MODULE:FACTORY (imported with the current directory on sys.path, as uvicorn does) "
        "or path/to/file.py:FACTORY, returning an nn.Module",
    )
    c.add_argument(
        "--example-shape",
        type=_shape,
        action="append",
        required=True,
        help="shape of one example input, e.g. 1,16,384 (repeat for several inputs)",
    )
    c.add_argument("--dynamic-dim", type=int, default=1, help="the symbolic dim of the inputs (default 1)")
    c.add_argument("--min-len", type=int, default=1, help="smallest length the artifact accepts (default 1)")
    c.add_argument("--max-len", type=int, default=2048, help="largest length the artifact accepts (default 2048)")
    c.add_argument("--config", help="hardware config TOML (default: the built-in Novella config)")
    c.add_argument("--dump-dir", help="write the IR after every stage (numbered .mlir) and summary.json here")
    c.add_argument(
        "--pass-option",
        action="append",
        default=[],
        metavar="PASS:NAME=VALUE",
        help="e.g. novella-tile:tile-m=32 (repeatable)",
    )
    c.add_argument(
        "--no-buckets", action="store_true", help="one generic program: no shape buckets (--novella-buckets)"
    )
    c.add_argument("-o", "--output", default="model.nvla", help="artifact to write (default model.nvla)")
    r = sub.add_parser("run", help="run an artifact at one length on the simulator with random inputs")
    r.add_argument("model", help="an artifact written by 'novella compile' (.nvla)")
    r.add_argument("--len", required=True, help="the length: an int, or NAME=INT,... for several symbols")
    r.add_argument("--trace", help="write a Chrome/Perfetto trace JSON here")
    r.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default 0)")
    r.add_argument(
        "--no-hazard-check",
        action="store_true",
        help="skip the simulator's race checker (same outputs and cycles, faster)",
    )
    r.add_argument("--config", help="hardware config TOML (default: the one the artifact was compiled for)")
    i = sub.add_parser("inspect", help="show an artifact's templates, tile rules, sizes and config")
    i.add_argument("model", help="an artifact written by 'novella compile' (.nvla)")
    i.add_argument("--config", help="also check the artifact against this config")
    _sweep_parser(sub)
    sub.add_parser(
        "demo", add_help=False, help="run the Whisper-encoder demo of the installed package ('novella demo --help')"
    )
    return p


def _sweep_parser(sub) -> None:
    s = sub.add_parser(
        "sweep", help="compile and run models x lengths x configs (on Ray if installed); table and plots"
    )
    s.add_argument("targets", nargs="+", metavar="MODULE:FACTORY", help="one or more model factories, as for compile")
    s.add_argument("--example-shape", type=_shape, action="append", required=True, help="as for compile")
    s.add_argument("--dynamic-dim", type=int, default=1, help="the symbolic dim of the inputs (default 1)")
    s.add_argument("--min-len", type=int, default=1, help="smallest compiled length (default 1)")
    s.add_argument("--max-len", type=int, default=2048, help="largest compiled length (default 2048)")
    s.add_argument("--lengths", type=_lengths, required=True, help="comma-separated run lengths, e.g. 1,17,500")
    s.add_argument("--configs", default="default", help="shipped config names or TOML paths, comma-separated")
    s.add_argument("--out", default="sweep", help="directory for sweep.csv, sweep.md and the plots")
    s.add_argument("--address", help="a Ray cluster (ray://host:10001 or auto); default: a local Ray")
    s.add_argument("--working-dir", help="ship this directory to the Ray workers (model modules a cluster lacks)")
    s.add_argument("--workers", type=int, help="CPUs of the local Ray instance (default: all)")
    s.add_argument("--in-process", action="store_true", help="no Ray: run the compiles one after another here")
    s.add_argument("--no-plots", action="store_true", help="write the table only, no PNG plots")


COMMANDS = {"compile": cmd_compile, "run": cmd_run, "inspect": cmd_inspect, "sweep": cmd_sweep, "demo": cmd_demo}


def main(argv=None) -> int:
    if not sys.stdout.isatty() and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(line_buffering=True)  # piped: each line as it is printed
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "demo":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.demo_args = extra
    from simulator import SimulatorError
    from simulator.config import ConfigError

    from .. import NovellaError

    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print(f"novella {args.command}: interrupted", file=sys.stderr)
        return 130
    except (CliError, NovellaError, ConfigError, SimulatorError) as e:
        message = str(e)
    except OSError as e:
        message = f"{e.filename}: {e.strerror}" if e.filename and e.strerror else str(e)
    except MemoryError:
        message = "out of memory (a length or shape too large for this machine)"
    except Exception as e:  # the last line of defence: a message, never a traceback
        message = f"internal error: {type(e).__name__}: {e} (set NOVELLA_DEBUG=1 for the traceback, and report it)"
    if os.environ.get("NOVELLA_DEBUG"):
        traceback.print_exc()
    print(f"novella {args.command}: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
