"""Evaluation of the artifact's postfix integer expressions (no MLIR needed).

An expression is a list of tokens: an int (constant), "s<i>" (symbol i),
"d<i>" (grid dim i, usually a numpy array), or one of the binary operators
"+", "*", "floordiv", "ceildiv", "mod" with MLIR affine semantics
(floor division and non-negative modulo). A field with several results is
their minimum (like `affine.min`)."""

from __future__ import annotations

import numpy as np

_OPS = {
    "+": lambda a, b: a + b,
    "*": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "ceildiv": lambda a, b: -((-a) // b),
    "mod": lambda a, b: a % b,
}


def evaluate(program: list, syms, dims=()):
    """Evaluates one postfix program; works elementwise on numpy arrays."""
    stack = []
    for tok in program:
        if isinstance(tok, int):
            stack.append(tok)
        elif tok in _OPS:
            b = stack.pop()
            stack.append(_OPS[tok](stack.pop(), b))
        elif tok[0] == "s":
            stack.append(syms[int(tok[1:])])
        elif tok[0] == "d":
            stack.append(dims[int(tok[1:])])
        else:
            raise ValueError(f"bad expression token {tok!r}")
    if len(stack) != 1:
        raise ValueError(f"malformed expression {program!r}")
    return stack[0]


def evaluate_min(programs: list[list], syms, dims=()):
    """Minimum of several results (a single program is just evaluated)."""
    vals = [evaluate(p, syms, dims) for p in programs]
    out = vals[0]
    for v in vals[1:]:
        out = np.minimum(out, v)
    return out


def validate(program) -> None:
    """Raises ValueError unless `program` is a well-formed postfix expression."""
    if not isinstance(program, list) or not program:
        raise ValueError(f"malformed expression {program!r}")
    depth = 0
    for tok in program:
        if isinstance(tok, int) and not isinstance(tok, bool):
            depth += 1
        elif tok in _OPS:
            depth -= 1
            if depth < 1:
                raise ValueError(f"malformed expression {program!r}")
        elif isinstance(tok, str) and tok[:1] in ("s", "d") and tok[1:].isdigit():
            depth += 1
        else:
            raise ValueError(f"bad expression token {tok!r}")
    if depth != 1:
        raise ValueError(f"malformed expression {program!r}")
