"""What the runtime must know about a program's expressions, decided at compile time (with MLIR) and
stored in the artifact, so that the runtime (`runtime/step.py`) never opens an MLIR context:

* `TileMeta.last`: the [template, guard] pairs of a tile whose `eq` guard says "the last point of a
  grid dim" (g == extent_k - 1 - d_k, up to sign, for every symbol value, with a symbol-dependent
  extent): its outcome follows from the grid extents, so it adds nothing to a step bucket's key;
* `InstTemplate.affine`: the symbol-dependent variable fields whose every result is affine in the
  symbols once the dims are fixed; `TileMeta.affine`: the tensor slots whose base is. The step
  patcher evaluates those as a + b . s, without the expression interpreter (and refuses a bucket
  where one gets no such form); it tries the others as such sums plus floordivs by constants
  (`runtime/_bucket_numba.prepare`), the interpreter where that fails.

Absent facts are the safe side: a guard in the key, a field tried, else through the interpreter.
"""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..runtime import expr
from ..symbolic.postfix import from_postfix
from .format import Program


def annotate(program: Program) -> Program:
    """Sets the facts above on `program`'s templates and tiles (in place) and returns it."""
    with ir.Context():
        for mm in program.macros:
            for t in mm.insts:
                t.affine = sorted(n for n, progs in t.var.items() if expr.has_symbol(progs) and _affine(progs))
        for tile in program.tiles:
            insts = program.macros[tile.macro].insts
            tile.last = [[j, g] for j, t in enumerate(insts) for g, (kind, p) in enumerate(t.when)
                         if kind == "eq" and expr.has_symbol([p]) and _last_point(p, tile.grid)]  # fmt: skip
            tile.affine = sorted(s for s, p in tile.bases.items() if expr.has_symbol([p]) and _affine([p]))
    return program


def _affine(progs) -> bool:
    return all(sy.affine_in_symbols(from_postfix(p)) for p in progs)


def _last_point(prog, grid) -> bool:
    g = from_postfix(prog)
    for k, ext in enumerate(grid):
        last = sy.dim(k) - from_postfix(ext) + sy.const(1)
        if expr.has_symbol([ext]) and (sy.equal(g, last) or sy.equal(g, last * -1)):
            return True
    return False
