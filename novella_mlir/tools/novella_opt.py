"""novella-opt: parse MLIR with novella ops, run passes, print the result.

Follows mlir-opt: passes as flags (`--novella-tile="tile-m=32"`) or as a
textual pipeline (`-p 'builtin.module(novella-tile{tile-m=32})'`),
`--split-input-file`, `--verify-diagnostics`, `--mlir-print-ir-after-all`,
`-o`, and stdin when no file (or `-`) is given. Every error is printed as a
`file:line:col: error: ...` diagnostic, never as a traceback.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
import traceback
from dataclasses import dataclass

from torch_mlir import ir, passmanager

from simulator import load_config
from simulator.config import ConfigError

from .. import __version__
from ..dialects.context import make_context
from ..dialects.novella import Novella
from ..transforms.registry import PASSES, add_pass
from . import diagnostics as dg
from . import input_checks as checks
from .pass_pipeline import PipelineError, check_upstream, novella_item, parse_pipeline, passes_help

SPLIT_MARKER = "// -----"
DEFAULTS = checks.attribute_defaults(Novella)
_PASS_FLAG = re.compile(r"^--?([A-Za-z][\w.-]*)(?:=(.*))?$", re.S)


class UsageError(Exception):
    def __init__(self, message: str, col: int):
        super().__init__(message)
        self.message, self.col = message, col


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message, 1)


def _parser() -> _Parser:
    p = _Parser(
        prog="novella-opt",
        description=__doc__.split("\n\n")[0],
        epilog='passes (in the order given; options as --pass="name=value ..."):\n' + passes_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"novella-opt {__version__}")
    p.add_argument("input", nargs="?", default="-", help="input .mlir file (default: stdin)")
    p.add_argument("-o", dest="output", default="-", help="output file (default: stdout)")
    p.add_argument("-p", "--pass-pipeline", help="textual pipeline, e.g. 'builtin.module(novella-tile{tile-m=32})'")
    p.add_argument("--split-input-file", action="store_true", help="split the input on '// -----' lines")
    p.add_argument("--verify-diagnostics", action="store_true", help="check diagnostics against expected-* comments")
    p.add_argument("--config", help="hardware config TOML (default: the built-in Novella config)")
    p.add_argument("--list-passes", action="store_true", help="list the passes and their options, then exit")
    p.add_argument("--allow-unregistered-dialect", action="store_true", help="accept ops of unknown dialects")
    for flag, help_ in (
        ("--mlir-print-ir-before-all", "print the IR before every pass to stderr"),
        ("--mlir-print-ir-after-all", "print the IR after every pass to stderr"),
        ("--mlir-print-ir-after-change", "print the IR after every pass that changed it"),
        ("--mlir-print-ir-after-failure", "print the IR after a pass fails"),
        ("--mlir-print-op-generic", "print ops in the generic form"),
        ("--mlir-print-debuginfo", "print locations"),
    ):
        p.add_argument(flag, action="store_true", help=help_)
    return p


def _columns(argv: list[str]) -> list[int]:
    cols, pos = [], 1
    for a in argv:
        cols.append(pos)
        pos += len(a) + 1
    return cols


def parse_args(argv: list[str]):
    """argparse for the fixed options; pass flags (with `=options`) are taken out first, in order."""
    cols = _columns(argv)
    items, rest, rest_cols = [], [], []
    for arg, col in zip(argv, cols):
        m = _PASS_FLAG.match(arg)
        if m and m.group(1) in PASSES:
            opt_col = col + (m.start(2) if m.group(2) is not None else len(arg))
            try:
                items.append(novella_item(m.group(1), m.group(2) or "", col, opt_col))
            except PipelineError as e:
                raise UsageError(e.message, e.col) from None
        else:
            rest.append(arg)
            rest_cols.append(col)
    parser = _parser()
    args, unknown = parser.parse_known_args(rest)
    if unknown:
        raise UsageError(_unknown_message(parser, unknown[0]), rest_cols[rest.index(unknown[0])])
    args.passes, args.argv, args.cols = items, argv, cols
    return args


def _unknown_message(parser, arg: str) -> str:
    known = [s for a in parser._actions for s in a.option_strings] + [f"--{f}" for f in PASSES]
    close = difflib.get_close_matches(arg.split("=")[0], known, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else "; see 'novella-opt --help'"
    return f"unknown command line argument '{arg}'{hint}"


@dataclass
class Chunk:
    text: str
    offset: int  # file line of the chunk's line 0

    @property
    def last_line(self) -> int:
        return self.offset + self.text.count("\n") + 1


def split_chunks(text: str, split: bool) -> list[Chunk]:
    """The input, or its `// -----` separated chunks; line numbers stay those of the file."""
    if not split:
        return [Chunk(text, 0)]
    chunks, start, cur = [], 0, []
    for i, line in enumerate(text.split("\n")):
        if line.strip() == SPLIT_MARKER:
            chunks.append(Chunk("\n".join(cur), start))
            start, cur = i + 1, []
        else:
            cur.append(line)
    chunks.append(Chunk("\n".join(cur), start))
    return chunks


class Opt:
    """One novella-opt invocation: config, pipeline, and per-chunk processing."""

    def __init__(self, args, source: dg.Source, config):
        self.args, self.source, self.config = args, source, config

    def pass_manager(self, ctx) -> passmanager.PassManager:
        pm = passmanager.PassManager("builtin.module", context=ctx)
        for item in self.args.passes:
            if item.is_novella:
                add_pass(pm, item.name, self.config, item.options)
            else:
                pm.add(item.text)
        a = self.args
        after = a.mlir_print_ir_after_all or a.mlir_print_ir_after_change or a.mlir_print_ir_after_failure
        if after or a.mlir_print_ir_before_all:
            pm.enable_ir_printing(
                print_before_all=a.mlir_print_ir_before_all,
                print_after_all=after,
                print_after_change=a.mlir_print_ir_after_change,
                print_after_failure=a.mlir_print_ir_after_failure,
                enable_debug_info=a.mlir_print_debuginfo,
                print_generic_op_form=a.mlir_print_op_generic,
            )
        return pm

    def process(self, chunk: Chunk) -> tuple[str | None, list[dg.Diag]]:
        ctx = make_context()
        ctx.allow_unregistered_dialects = self.args.allow_unregistered_dialect
        seen = []
        ctx.attach_diagnostic_handler(lambda d: seen.append(dg.from_mlir(d, self.source, chunk.offset)) or True)
        deep = checks.too_deep(chunk.text)
        if deep:
            line, col, depth = deep
            message = (
                f"input nests {depth} levels deep; novella-opt refuses more than {checks.MAX_DEPTH} "
                "nested brackets or regions before parsing (deeper input would overflow the parser's stack)"
            )
            return None, [dg.Diag("error", self.source.name, chunk.offset + line, col, message)]
        with ctx, ir.Location.unknown():
            try:
                module = self._parse(chunk.text, seen)
                self.pass_manager(ctx).run(module.operation)
            except ir.MLIRError as e:
                return None, seen + dg.from_mlir_error(e, self.source, chunk.offset)
            except Exception as e:  # a crashing Python verifier must still come out as a diagnostic
                if os.environ.get("NOVELLA_DEBUG"):
                    traceback.print_exc()
                message = f"internal error while processing this input: {type(e).__name__}: {e}"
                return None, [*seen, dg.Diag("error", self.source.name, chunk.offset + 1, 1, message)]
            text = module.operation.get_asm(
                enable_debug_info=self.args.mlir_print_debuginfo,
                print_generic_op_form=self.args.mlir_print_op_generic,
            )
            return text, seen

    def _parse(self, text: str, seen: list) -> ir.Module:
        """Parses, filling in attributes the dialect declares with a default when the text omits them."""
        for _ in range(64):
            try:
                return ir.Module.parse(text)
            except ir.MLIRError as e:
                patched = checks.with_defaults(text, e, DEFAULTS)
                if patched is None:
                    raise
                text = patched
                seen.clear()
        return ir.Module.parse(text)

    def report(self, chunk: Chunk, diags: list[dg.Diag]) -> bool:
        """Prints the chunk's diagnostics (or verifies them); True if it failed."""
        if self.args.verify_diagnostics:
            expected = dg.expectations(self.source, chunk.offset + 1, chunk.last_line)
            errors = dg.verify(diags, expected)
            for e in errors:
                print(e, file=sys.stderr)
            return bool(errors)
        for d in diags:
            print(self.source.render(d), file=sys.stderr)
        return any(d.severity == "error" for d in diags)

    def run(self) -> tuple[list[str], bool]:
        outputs, failed = [], False
        for chunk in split_chunks("\n".join(self.source.lines), self.args.split_input_file):
            out, diags = self.process(chunk)
            failed |= self.report(chunk, diags)
            if out is not None:
                outputs.append(out)
        return outputs, failed


def _error(source: dg.Source, col: int, message: str, line: int = 1) -> int:
    print(source.render(dg.Diag("error", source.name, line, col, message)), file=sys.stderr)
    return 1


def _setup(args):
    """(source, config) or an exit code after printing the diagnostic."""
    cmd = dg.Source("<command-line>", " ".join(args.argv))
    if args.pass_pipeline is not None:
        if args.passes:
            return _error(cmd, args.passes[0].col, "a pass flag cannot be combined with -p/--pass-pipeline")
        try:
            args.passes = parse_pipeline(args.pass_pipeline)
            check_upstream(args.passes, make_context())
        except PipelineError as e:
            return _error(dg.Source("<pass-pipeline>", args.pass_pipeline), e.col, e.message)
    try:
        config = load_config(args.config)
    except ConfigError as e:
        d = dg.config_diag(e, args.config)
        print(dg.Source(args.config, open(args.config).read()).render(d), file=sys.stderr)
        return 1
    except OSError as e:
        return _error(cmd, _col_of(args, args.config), f"cannot read config '{args.config}': {e.strerror}")
    name = "<stdin>" if args.input == "-" else args.input
    try:
        data = _read_stdin() if args.input == "-" else open(args.input, "rb").read()
    except OSError as e:
        return _error(cmd, _col_of(args, args.input), f"cannot open input file '{args.input}': {e.strerror or e}")
    text, bad = checks.decode(data)
    if bad:
        return _error(dg.Source(name, ""), bad[1], bad[2], line=bad[0])
    return dg.Source(name, text), config


def _read_stdin() -> bytes:
    stream = getattr(sys.stdin, "buffer", None)
    return stream.read() if stream is not None else sys.stdin.read().encode("utf-8", "surrogateescape")


def _col_of(args, value: str) -> int:
    for arg, col in zip(args.argv, args.cols):
        if arg.endswith(value):
            return col + len(arg) - len(value)
    return 1


def _write(path: str, outputs: list[str]) -> None:
    result = f"\n{SPLIT_MARKER}\n".join(o.rstrip("\n") for o in outputs) + "\n" if outputs else ""
    if path == "-":
        sys.stdout.write(result)
    else:
        with open(path, "w") as f:
            f.write(result)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parse_args(argv)
    except UsageError as e:
        return _error(dg.Source("<command-line>", " ".join(argv)), e.col, e.message)
    except SystemExit as e:  # --help
        return int(e.code or 0)
    if args.list_passes:
        print("Available passes:\n" + passes_help())
        return 0
    setup = _setup(args)
    if isinstance(setup, int):
        return setup
    outputs, failed = Opt(args, *setup).run()
    try:
        _write(args.output, outputs)
    except OSError as e:
        return _error(dg.Source("<command-line>", " ".join(argv)), _col_of(args, args.output), str(e))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
