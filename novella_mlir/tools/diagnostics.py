"""MLIR-style diagnostics for novella-opt, and `--verify-diagnostics`.

Every problem is reported as `file:line:col: error: message`, followed (when
the location is in the input) by the source line and a caret, like
`mlir-opt`. With `--verify-diagnostics`, the diagnostics of each chunk are
matched against `// expected-error {{...}}` comments instead of printed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_LOC = re.compile(r'"([^"]*)":(\d+):(\d+)')
SEVERITIES = ("error", "warning", "note", "remark")


@dataclass
class Diag:
    severity: str
    file: str
    line: int
    col: int
    message: str
    notes: list = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Source:
    """The input text: its display name and lines, and where parsed chunks start."""

    def __init__(self, name: str, text: str):
        self.name = name
        self.lines = text.split("\n")

    def snippet(self, d: Diag) -> list[str]:
        if d.file != self.name or not 1 <= d.line <= len(self.lines):
            return []
        line = self.lines[d.line - 1].rstrip()
        return [line, " " * max(d.col - 1, 0) + "^"] if line.strip() else []

    def render(self, d: Diag) -> str:
        out = [f"{d.where}: {d.severity}: {d.message}", *self.snippet(d)]
        out += [self.render(n) for n in d.notes]
        return "\n".join(out)


def relocate(text: str, source: Source, line_offset: int) -> str:
    """Rewrites `"-":L:C` (the parser's buffer name) into `file:L+offset:C`."""

    def fix(m):
        if m.group(1) != "-":
            return m.group(0)
        return f"{source.name}:{int(m.group(2)) + line_offset}:{m.group(3)}"

    return _LOC.sub(fix, re.sub(r'loc\(("-":\d+:\d+)\)', r"\1", text))


def location_of(loc_text: str, source: Source, line_offset: int) -> tuple[str, int, int]:
    """(file, line, col) of an MLIR location; the first file position inside fused/callsite locations."""
    m = _LOC.search(loc_text)
    if not m:
        return "<unknown>", 0, 0
    if m.group(1) == "-":
        return source.name, int(m.group(2)) + line_offset, int(m.group(3))
    return m.group(1), int(m.group(2)), int(m.group(3))


def from_mlir(diag, source: Source, line_offset: int) -> Diag:
    """A `DiagnosticInfo` (with its notes) from the Python bindings as a `Diag`."""
    severity = str(diag.severity).rsplit(".", 1)[-1].lower()
    file, line, col = location_of(str(diag.location), source, line_offset)
    notes = [from_mlir(n, source, line_offset) for n in diag.notes]
    for n in notes:
        n.severity = "note"
    return Diag(severity, file, line, col, relocate(diag.message, source, line_offset), notes)


def from_mlir_error(e, source: Source, line_offset: int) -> list[Diag]:
    diags = [from_mlir(d, source, line_offset) for d in e.error_diagnostics]
    return diags or [Diag("error", source.name, 0, 0, relocate(str(e), source, line_offset))]


# ------------------------------------------------------------------ verification

_EXPECT = re.compile(r"expected-(error|warning|note|remark)(-re)?\s*(?:@\s*(above|below|[+-]?\d+))?\s*\{\{(.*)\}\}")


@dataclass
class Expectation:
    severity: str
    pattern: str
    regex: bool
    line: int  # target line of the file
    where: str  # file:line:col of the comment
    matched: bool = False

    def matches(self, d: Diag) -> bool:
        if d.severity != self.severity or d.line != self.line:
            return False
        if self.regex:
            return re.search(_regex_of(self.pattern), d.message) is not None
        return self.pattern in d.message


def _regex_of(pattern: str) -> str:
    """mlir-opt's `-re` syntax: literal text with `{{regex}}` groups."""
    parts = re.split(r"\{\{(.*?)\}\}", pattern)
    return "".join(re.escape(p) if i % 2 == 0 else f"(?:{p})" for i, p in enumerate(parts))


def expectations(source: Source, first: int, last: int) -> list[Expectation]:
    """The `expected-*` comments on file lines first..last (1-based, inclusive)."""
    out = []
    for lineno in range(first, last + 1):
        text = source.lines[lineno - 1]
        m = _EXPECT.search(text)
        if not m or "//" not in text[: m.start()]:
            continue
        severity, regex, rel, pattern = m.groups()
        target = lineno + {"above": -1, "below": 1, None: 0}.get(rel, 0)
        if rel not in ("above", "below", None):
            target = lineno + int(rel) if rel[0] in "+-" else int(rel)
        out.append(Expectation(severity, pattern, bool(regex), target, f"{source.name}:{lineno}:{m.start() + 1}"))
    return out


def verify(diags: list[Diag], expected: list[Expectation]) -> list[str]:
    """Error lines for unexpected diagnostics and for expectations nothing produced."""
    errors = []
    for d in _flatten(diags):
        hit = next((x for x in expected if not x.matched and x.matches(d)), None)
        if hit:
            hit.matched = True
        else:
            errors.append(f"{d.where}: error: unexpected {d.severity}: {d.message}")
    for x in expected:
        if not x.matched:
            errors.append(f'{x.where}: error: expected {x.severity} "{x.pattern}" was not produced')
    return errors


def _flatten(diags: list[Diag]) -> list[Diag]:
    out = []
    for d in diags:
        out.append(d)
        out.extend(_flatten(d.notes))
    return out


# ------------------------------------------------------------------ config files


def config_diag(e: Exception, path: str) -> Diag:
    """A hardware-config error located at the offending TOML line when it can be found."""
    message = str(e)
    if message.startswith(f"{path}: "):
        message = message[len(path) + 2 :]
    line, col = _toml_position(message, path)
    return Diag("error", path, line, col, message)


def _toml_position(message: str, path: str) -> tuple[int, int]:
    m = re.search(r"at line (\d+), column (\d+)", message)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = re.search(r"'(\w+)\.(\w+)'", message)
    try:
        lines = open(path).read().split("\n")
    except OSError:
        return 1, 1
    if m:
        section, key = m.groups()
        current = None
        for i, text in enumerate(lines, start=1):
            stripped = text.strip()
            if stripped.startswith("["):
                current = stripped.strip("[] ")
            elif current == section and re.match(rf"{re.escape(key)}\s*=", stripped):
                return i, text.index(key) + 1
    return 1, 1
