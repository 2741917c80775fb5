"""novella-opt: parse MLIR with novella ops, run passes given as flags, print the result.

Follows mlir-opt: `novella-opt in.mlir --novella-legalize --novella-tile`,
`--split-input-file`, `-o`, stdin when no file (or `-`). Errors are
printed as `file:line:col: error: ...` diagnostics, never tracebacks.
"""

from __future__ import annotations

import argparse
import re
import sys

from torch_mlir import ir

from simulator import load_config
from simulator.config import ConfigError

from ..context import make_context
from ..transforms.registry import PASSES, run_passes

SPLIT_MARKER = "// -----"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="novella-opt", description=__doc__.split("\n\n")[0])
    p.add_argument("input", nargs="?", default="-", help="input .mlir file (default: stdin)")
    p.add_argument("-o", dest="output", default="-", help="output file (default: stdout)")
    p.add_argument("--split-input-file", action="store_true", help="split the input on '// -----' lines")
    p.add_argument("--config", help="hardware config TOML (default: the built-in Novella config)")
    p.add_argument("--mlir-print-ir-after-all", action="store_true", help="print the IR after every pass to stderr")
    for flag, info in PASSES.items():
        p.add_argument(
            f"--{flag}",
            dest="passes",
            action="append_const",
            const=flag,
            help=info.description,
        )
    return p


def _split(text: str, split: bool) -> list[tuple[int, str]]:
    """(first line number - 1, chunk) pairs; line numbers stay those of the file."""
    if not split:
        return [(0, text)]
    chunks, start, cur = [], 0, []
    for i, line in enumerate(text.split("\n")):
        if line.strip() == SPLIT_MARKER:
            chunks.append((start, "\n".join(cur)))
            start, cur = i + 1, []
        else:
            cur.append(line)
    chunks.append((start, "\n".join(cur)))
    return chunks


def _relocate(message: str, filename: str, line_offset: int) -> str:
    """Rewrites the parser's `"-":L:C` / `loc("-":L:C)` into `file:L':C`."""

    def fix(m):
        return f"{filename}:{int(m.group(1)) + line_offset}:{m.group(2)}"

    message = re.sub(r'loc\("-":(\d+):(\d+)\)', fix, message)
    return re.sub(r'"-":(\d+):(\d+)', fix, message)


def _format_error(e: ir.MLIRError, filename: str, line_offset: int) -> str:
    lines = []
    for d in e.error_diagnostics:
        loc = _relocate(str(d.location), filename, line_offset)
        loc = loc[4:-1] if loc.startswith("loc(") else loc
        lines.append(f"{loc}: error: {_relocate(d.message, filename, line_offset)}")
        for note in d.notes:
            nloc = _relocate(str(note.location), filename, line_offset)
            lines.append(f"{nloc}: note: {_relocate(note.message, filename, line_offset)}")
    return "\n".join(lines) or _relocate(str(e), filename, line_offset)


def _process(chunk: str, args, config, filename: str, offset: int) -> tuple[str | None, str | None]:
    ctx = make_context()
    with ctx, ir.Location.unknown():
        try:
            module = ir.Module.parse(chunk)
            run_passes(module, args.passes or [], config, print_ir_after_all=args.mlir_print_ir_after_all)
        except ir.MLIRError as e:
            return None, _format_error(e, filename, offset)
        return str(module), None


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    filename = "<stdin>" if args.input == "-" else args.input
    try:
        text = sys.stdin.read() if args.input == "-" else open(args.input).read()
        config = load_config(args.config)
    except (OSError, ConfigError) as e:
        print(f"novella-opt: error: {e}", file=sys.stderr)
        return 1
    outputs, failed = [], False
    for offset, chunk in _split(text, args.split_input_file):
        out, err = _process(chunk, args, config, filename, offset)
        if err:
            print(err, file=sys.stderr)
            failed = True
        else:
            outputs.append(out)
    result = f"\n{SPLIT_MARKER}\n".join(o.rstrip("\n") for o in outputs) + "\n"
    if args.output == "-":
        sys.stdout.write(result)
    else:
        with open(args.output, "w") as f:
            f.write(result)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
