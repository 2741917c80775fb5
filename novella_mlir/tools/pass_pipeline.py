"""Pass pipelines for novella-opt, in the syntax of `mlir-opt`.

* `-p 'builtin.module(novella-tile{tile-m=32},novella-macro-gen)'`: a
  textual pipeline. Novella passes are looked up in the registry; any other
  element (`canonicalize`, `func.func(cse)`) is handed to MLIR's parser.
* `--novella-tile` or `--novella-tile="tile-m=32"`: one pass as a flag.

Options are space-separated `name=value` pairs; a value may be quoted or a
`{...}` group. Errors carry the 1-based column of the offending text.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from ..transforms.registry import PASSES, parse_options

ANCHOR = "builtin.module"


class PipelineError(ValueError):
    """A malformed pipeline or option string; `col` is 1-based within it."""

    def __init__(self, message: str, col: int = 1):
        super().__init__(message)
        self.message = message
        self.col = col


@dataclass
class PipelineItem:
    """One pipeline element: a novella pass with typed options, or upstream MLIR text."""

    name: str
    text: str
    col: int
    options: dict = field(default_factory=dict)

    @property
    def is_novella(self) -> bool:
        return self.name in PASSES


def _split_top(text: str, start_col: int, sep: str) -> list[tuple[str, int]]:
    """Splits on `sep` outside (), {} and quotes; returns (piece, 1-based column) pairs."""
    pieces, depth, quote, begin = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "({":
            depth += 1
        elif ch in ")}":
            depth -= 1
            if depth < 0:
                raise PipelineError(f"unbalanced '{ch}'", start_col + i)
        elif ch == sep and depth == 0:
            pieces.append((text[begin:i], start_col + begin))
            begin = i + 1
    if depth or quote:
        raise PipelineError("unbalanced brackets or quotes", start_col + len(text))
    pieces.append((text[begin:], start_col + begin))
    return pieces


def _strip(piece: str, col: int) -> tuple[str, int]:
    lead = len(piece) - len(piece.lstrip())
    return piece.strip(), col + lead


def parse_option_string(text: str, col: int = 1) -> dict[str, str]:
    """`"a=1 b='x y'"` (optionally in braces) -> {"a": "1", "b": "x y"}."""
    text, col = _strip(text, col)
    if text.startswith("{") and text.endswith("}"):
        text, col = text[1:-1], col + 1
    out = {}
    for piece, pcol in _split_top(text, col, " "):
        if not piece:
            continue
        name, eq, value = piece.partition("=")
        if not eq or not name:
            raise PipelineError(f"expected 'name=value' in pass options, got '{piece}'", pcol)
        if value[:1] in ("'", '"') and value[-1:] == value[:1]:
            value = value[1:-1]
        out[name] = value
    return out


def _suggest(name: str) -> str:
    close = difflib.get_close_matches(name, list(PASSES), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def novella_item(name: str, option_text: str, col: int, option_col: int) -> PipelineItem:
    """A registry pass with its options checked (unknown names and bad values raise)."""
    given = parse_option_string(option_text, option_col) if option_text else {}
    try:
        options = parse_options(name, given)
    except ValueError as e:
        raise PipelineError(str(e), _option_col(str(e), option_text, option_col)) from None
    return PipelineItem(name, name, col, options)


def _option_col(message: str, option_text: str, col: int) -> int:
    """Column of the option a registry error names, else of the option string."""
    named = [n for n in re.findall(r"option '([^']+)'", message) if f"{n}=" in option_text]
    return col + option_text.index(f"{named[0]}=") if named else col


def _element(piece: str, col: int) -> PipelineItem:
    piece, col = _strip(piece, col)
    if not piece:
        raise PipelineError("expected a pass name", col)
    name = piece.split("{", 1)[0].split("(", 1)[0].strip()
    rest = piece[len(name) :]
    if name in PASSES:
        if rest and not (rest.startswith("{") and rest.endswith("}")):
            raise PipelineError(f"unexpected '{rest}' after pass '{name}'", col + len(name))
        return novella_item(name, rest, col, col + len(name))
    if rest.startswith("(") and any(p in rest for p in PASSES):
        raise PipelineError(f"novella passes run on '{ANCHOR}' and cannot be nested under '{name}'", col)
    return PipelineItem(name, piece, col)


def parse_pipeline(text: str) -> list[PipelineItem]:
    """Parses `builtin.module(a{opt=v},b)` (or the bare list `a,b`) into items."""
    body, col = _strip(text, 1)
    if body.startswith(ANCHOR + "("):
        if not body.endswith(")"):
            raise PipelineError(f"expected ')' to close '{ANCHOR}('", col + len(body))
        body, col = body[len(ANCHOR) + 1 : -1], col + len(ANCHOR) + 1
    elif "(" in body.split(",", 1)[0].split("{", 1)[0]:
        anchor = body.split("(", 1)[0]
        raise PipelineError(f"the pipeline must be anchored on '{ANCHOR}', not '{anchor}'", col)
    if not body.strip():
        return []
    return [_element(piece, pcol) for piece, pcol in _split_top(body, col, ",")]


def check_upstream(items: list[PipelineItem], context) -> None:
    """Asks MLIR whether each non-novella element names a registered pass (with valid options)."""
    from torch_mlir import passmanager

    for item in items:
        if item.is_novella:
            continue
        try:
            passmanager.PassManager(ANCHOR, context=context).add(item.text)
        except ValueError as e:
            first = str(e).strip().splitlines()[0]
            reason = first.split("error: ", 1)[-1].replace("<Pass-Options-Parser>: ", "")
            raise PipelineError(reason + _suggest(item.name), item.col) from None


def passes_help(indent: str = "  ") -> str:
    """Each registered pass with its description and options (for --help and --list-passes)."""
    lines = []
    for flag, info in PASSES.items():
        lines.append(f"{indent}--{flag}")
        lines.append(f"{indent}    {info.description}")
        for name, (typ, default, help_, *bounds) in info.options.items():
            span = f" (in [{bounds[0][0]}, {bounds[0][1]}])" if bounds else ""
            lines.append(f"{indent}    {name}=<{typ.__name__}>  {help_}{span} (default: {default})")
    return "\n".join(lines)
