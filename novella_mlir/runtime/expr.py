"""The artifact's postfix integer expressions: their grammar, their evaluation and their compiled form,
for every evaluator (host `evaluate`, the numba JIT `_jit_numba`, the numba step patcher
`_step_numba`, the artifact check). No MLIR needed: `symbolic.postfix.to_postfix` writes them at compile time.

An expression is a list of tokens: an int (constant), "s<i>" (symbol i),
"d<i>" (grid dim i, usually a numpy array), or one of the binary operators
"+", "*", "floordiv", "ceildiv", "mod" with MLIR affine semantics
(floor division and non-negative modulo). "sym@" pops an index and pushes that symbol: a batched
decode step's lane fields follow its symbols (`LANE`), so a guard reads the field of its grid
point's lane. A field with several results is their minimum (like `affine.min`).

Compiled, a token is an (op, arg) pair of int64s: op `CONST` (arg: the value), `SYM` / `DIM` (arg:
the index) or an operator's code in `OPCODES` (`_expr_numba` evaluates them)."""

from __future__ import annotations

import numpy as np

CONST, SYM, DIM = 0, 1, 2
OPCODES = {"+": 3, "*": 4, "floordiv": 5, "ceildiv": 6, "mod": 7, "sym@": 8}
ADD, MUL, FLOORDIV, CEILDIV, MOD, SYMAT = OPCODES.values()
LANE = "sym@"  # the one unary operator: the symbol at the index on the stack
_OPS = {
    "+": lambda a, b: a + b,
    "*": lambda a, b: a * b,
    "floordiv": lambda a, b: a // b,
    "ceildiv": lambda a, b: -((-a) // b),
    "mod": lambda a, b: a % b,
}
OPERATORS = tuple(_OPS)


def apply(op: str, a, b):
    """The binary operator `op` on ints or numpy arrays (elementwise)."""
    return _OPS[op](a, b)


def evaluate(program: list, syms, dims=()):
    """Evaluates one postfix program; works elementwise on numpy arrays."""
    stack = []
    for tok in program:
        if isinstance(tok, int):
            stack.append(tok)
        elif tok in _OPS:
            b = stack.pop()
            stack.append(_OPS[tok](stack.pop(), b))
        elif tok == LANE:
            i = stack.pop()
            stack.append(np.asarray(syms, np.int64)[i] if isinstance(i, np.ndarray) else syms[i])
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


def has_symbol(programs) -> bool:
    """Some program of `programs` refers to a symbol (a lane field too)."""
    return any(isinstance(tok, str) and tok[0] == "s" for p in programs for tok in p)


def has_lane(programs) -> bool:
    """Some program of `programs` reads a lane field (`LANE`)."""
    return any(tok == LANE for p in programs for tok in p)


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
        elif tok == LANE:
            if depth < 1:
                raise ValueError(f"malformed expression {program!r}")
        elif isinstance(tok, str) and tok[:1] in ("s", "d") and tok[1:].isdigit():
            depth += 1
        else:
            raise ValueError(f"bad expression token {tok!r}")
    if depth != 1:
        raise ValueError(f"malformed expression {program!r}")


def encode(program: list) -> list[tuple[int, int]]:
    """The compiled tokens (op, arg) of one program."""
    out = []
    for tok in program:
        if isinstance(tok, int):
            out.append((CONST, tok))
        elif tok in OPCODES:
            out.append((OPCODES[tok], 0))
        else:
            out.append((SYM if tok[0] == "s" else DIM, int(tok[1:])))
    return out


def _key(x):
    return tuple(_key(v) for v in x) if isinstance(x, list) else x


class Table:
    """Expressions and minimums of expressions as one flat int64 array (what `_step_numba` reads):
    [n_exprs, n_mins, n_items, per expression its token range, per min its item range, the items
    (expression ids), the tokens (op, arg)]. Equal programs and equal minimums share one id."""

    def __init__(self):
        self.ranges, self.tokens, self.mins, self.items = [], [], [], []
        self._ids: dict = {}
        self._mins: dict = {}

    def expr(self, prog) -> int:
        """The id of one program."""
        k = _key(prog)
        if k not in self._ids:
            start = len(self.tokens) // 2
            for op, arg in encode(prog):
                self.tokens += [op, arg]
            self._ids[k] = len(self.ranges)
            self.ranges.append((start, len(self.tokens) // 2))
        return self._ids[k]

    def min(self, progs) -> int:
        """The id of the minimum of `progs`."""
        k = _key(progs)
        if k not in self._mins:
            ids = [self.expr(p) for p in progs]
            self._mins[k] = len(self.mins)
            self.mins.append((len(self.items), len(self.items) + len(ids)))
            self.items += ids
        return self._mins[k]

    def array(self) -> np.ndarray:
        head = [len(self.ranges), len(self.mins), len(self.items)]
        flat = head + [v for r in self.ranges for v in r] + [v for r in self.mins for v in r] + self.items
        return np.asarray(flat + self.tokens, np.int64)
