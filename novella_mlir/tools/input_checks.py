"""Checks novella-opt runs on its input before and around MLIR's parser.

* `decode`: the bytes must be UTF-8; the first bad byte is located.
* `too_deep`: brackets and regions nested deeper than `MAX_DEPTH` would
  overflow the parser's native stack (a segfault), so they are refused first.
* `with_defaults`: attributes the dialect declares with a default
  (`transpose_rhs` of `novella.matmul`, ...) may be left out of the textual
  IR; MLIR's IRDL verifier requires them, so the parse is retried with the
  declared default inserted into the op's attribute dictionary.
"""

from __future__ import annotations

import re

import numpy as np
from torch_mlir import ir
from torch_mlir.dialects import ext

MAX_DEPTH = 256
_SKIP = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*')
_MISSING = re.compile(r"attribute \"([\w.]+)\" is expected but not provided")


def _line_col(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    return line, index - (text.rfind("\n", 0, index) + 1) + 1


def decode(data: bytes) -> tuple[str | None, tuple[int, int, str] | None]:
    """(text, None), or (None, (line, col, message)) at the first byte that is not UTF-8."""
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError as e:
        good = data[: e.start].decode("utf-8")
        line, col = _line_col(good, len(good))
        return None, (line, col, f"invalid UTF-8 byte 0x{data[e.start]:02x}; MLIR input must be UTF-8 text")


def too_deep(text: str) -> tuple[int, int, int] | None:
    """(line, col, depth) where ( [ { nesting outside strings and comments first exceeds MAX_DEPTH."""
    masked = _SKIP.sub(lambda m: " " * len(m.group(0)), text)
    a = np.frombuffer(masked.encode("utf-32-le"), np.uint32)
    step = np.isin(a, [ord(c) for c in "([{"]).astype(np.int32) - np.isin(a, [ord(c) for c in ")]}"])
    depth = np.cumsum(step)
    over = np.flatnonzero(depth > MAX_DEPTH)
    if not over.size:
        return None
    line, col = _line_col(text, int(over[0]))
    return line, col, int(depth.max())


def attribute_defaults(dialect) -> dict[str, dict[str, str]]:
    """op name -> {attribute: default as text} for the dialect's attributes declared with a default."""
    out: dict = {}
    with ir.Context():
        for cls in dialect.operations:
            for f in cls._fields:
                if isinstance(f, ext.AttributeDef) and f.default_factory:
                    out.setdefault(cls.OPERATION_NAME, {})[f.name] = str(f.default_factory())
    return out


def with_defaults(text: str, error: ir.MLIRError, defaults: dict) -> str | None:
    """`text` with the missing defaulted attributes the parse `error` names filled in, else None."""
    lines = text.split("\n")
    edits = []
    for d in error.error_diagnostics:
        m = _MISSING.search(d.message)
        loc = re.search(r'"-":(\d+):(\d+)', str(d.location))
        op = re.match(r"'([\w.]+)' op", d.message)
        if not (m and loc and op) or m.group(1) not in defaults.get(op.group(1), {}):
            return None
        edits.append((int(loc.group(1)) - 1, int(loc.group(2)) - 1, m.group(1), defaults[op.group(1)][m.group(1)]))
    for line, col, name, value in sorted(set(edits), reverse=True):
        patched = _insert_attr(lines[line], col, f"{name} = {value}")
        if patched is None:
            return None
        lines[line] = patched
    return "\n".join(lines) if edits else None


def _insert_attr(line: str, col: int, entry: str) -> str | None:
    """Adds `entry` to the attribute dict of the generic op starting at `col` (`"name"(operands) {...}`)."""
    m = re.compile(r'"[\w.]+"\s*\(').match(line, col)
    if not m:
        return None
    depth, i = 1, m.end()
    while i < len(line) and depth:
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        i += 1
    if depth:
        return None
    rest = line[i:]
    brace = re.match(r"\s*\{", rest)
    if brace:
        j = i + brace.end()
        sep = "" if line[j:].lstrip().startswith("}") else ", "
        return line[:j] + entry + sep + line[j:]
    return line[:i] + " {" + entry + "}" + line[i:]
