"""Lowerings of shape and data-movement ops (view, permute, transpose, slice, ...).

Symbolic ints (`aten.size.int` and the int arithmetic torch.export emits to
build view shapes) become affine expressions of the symbols, or Python ints
when constant. Views are `novella.reshape` (a DRAM alias); ops that only
change strides or copy (clone, contiguous, same-shape expand, eval dropout)
forward their operand."""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import ReshapeOp, SliceOp, TransposeOp
from ...symbolic import box as sb
from ...symbolic.division import quotient


def affine(v) -> ir.AffineExpr:
    """An int or affine expression as an affine expression."""
    return sy.const(v) if isinstance(v, int) else v


def simplify(e: ir.AffineExpr):
    """A constant expression as a Python int, anything else unchanged."""
    e = sy.fold(e)
    v = sy.as_int(e)
    return e if v is None else v


def _int_operand(cx, i: int):
    v = cx.const(i)
    if isinstance(v, bool) or not isinstance(v, (int, ir.AffineExpr)):
        raise cx.error(f"operand #{i} must be an integer or a symbolic size, got {v!r}")
    return v


def size(cx):
    shape = cx.shape(cx.operand(0))
    return simplify(shape[cx.const(1) % len(shape)])


def rounded_up(cx, size, n):
    """size + n, as ceildiv(size, c) * c when n is the pad of size to a multiple of c at every length (so a
    view into blocks of c divides it; sympy cannot prove `s0 + (-(s0 mod c)) mod c` a multiple of c), or the
    constant it is when every length pads to the same size."""
    e, grown = sy.canon(n), sy.canon(size + n)
    c = sy.as_int(e.rhs) if isinstance(e, ir.AffineModExpr) else None
    if not c or len(cx.symbols) != 1 or cx.symbols[0].hi - cx.symbols[0].lo > 1 << 16:
        return grown
    whole = sy.canon(sy.ceildiv(size, c) * c)
    values = {(sy.evaluate(whole, [v]), sy.evaluate(grown, [v])) for v in range(cx.symbols[0].lo, cx.symbols[0].hi + 1)}
    if any(w != g for w, g in values):
        return grown
    return sy.const(values.pop()[0]) if len(values) == 1 else whole  # one chunk at every length: static


def _int_binary(fn):
    def lower(cx):
        a, b = _int_operand(cx, 0), _int_operand(cx, 1)
        if isinstance(a, int) and isinstance(b, int):
            return fn(a, b)
        return simplify(fn(affine(a), affine(b)))

    return lower


def int_add(cx):
    """a + b; the length plus its pad to a whole chunk (Mamba2's `seq_len + pad_size`) as ceildiv(T, c) * c."""
    a, b = _int_operand(cx, 0), _int_operand(cx, 1)
    if isinstance(a, int) and isinstance(b, int):
        return a + b
    for x, n in ((a, b), (b, a)):
        if isinstance(n, ir.AffineExpr) and isinstance(sy.canon(n), ir.AffineModExpr):
            return simplify(rounded_up(cx, affine(x), n))
    return simplify(affine(a) + affine(b))


int_sub = _int_binary(lambda a, b: a - b)


def int_neg(cx):
    a = _int_operand(cx, 0)
    return -a if isinstance(a, int) else simplify(affine(a) * -1)


int_mul = _int_binary(lambda a, b: a * b)


def floordiv(cx):
    a, b = (simplify(affine(_int_operand(cx, i))) for i in (0, 1))
    if not isinstance(b, int):  # `(T ceildiv 16) * 16 // (T ceildiv 16)`: the quotient where it is exact
        at = [s.lo for s in cx.symbols]
        q = sy.evaluate(affine(a), at) // max(sy.evaluate(b, at), 1)
        if sy.equal(affine(a), b * q):
            return q
        raise cx.error(f"{a} floordiv {b}: a division by a size that depends on the length is not an affine size")
    return a // b if isinstance(a, int) else simplify(sy.floordiv(a, b))


def int_mod(cx):
    """`a % b` of sizes by a positive constant `b` (torch.aten.fmod.int truncates, remainder.int floors: the
    same for a >= 0, which fmod must prove over the symbols' bounds); `a` itself where the bounds keep it
    in [0, b) (Mamba2's `seq_len % chunk_size` with every length below one chunk)."""
    a, b = _int_operand(cx, 0), _int_operand(cx, 1)
    if not isinstance(b, int) or b <= 0:
        raise cx.error(f"a remainder by {b} is not an affine size (the divisor must be a positive constant)")
    if isinstance(a, int):
        return a % b if "remainder" in cx.op.operation.name or a >= 0 else -(-a % b)
    box = sy.symbol_box(cx.symbols)
    nonneg = sy.provably_ge(a, 0, box)
    if "fmod" in cx.op.operation.name and not nonneg:
        raise cx.error(f"fmod of {a}, which may be negative, is not an affine size")
    return simplify(a if nonneg and sy.provably_ge(b - 1, a, box) else sy.mod(a, b))


def identity(cx):
    return cx.operand(0)


def dropout(cx):
    if cx.num_operands > 2 and cx.const(2):
        raise cx.error("dropout in training mode is not supported; export the model in eval mode")
    return cx.operand(0)


def view_shape(cx, x, sizes) -> list[ir.AffineExpr]:
    """The symbolic shape of `x` viewed as `sizes` (ints, symbolic sizes, at most one -1)."""
    sizes = [affine(s) for s in sizes]
    holes = [i for i, s in enumerate(sizes) if sy.as_int(s) == -1]
    if len(holes) > 1:
        raise cx.error("view with more than one -1")
    if not holes:
        return [sy.canon(e) for e in sizes]
    rest = _divide(cx, list(cx.shape(x)), [s for s in sizes if sy.as_int(s) != -1])
    sizes[holes[0]] = rest
    return [sy.canon(e) for e in sizes]


def _divide(cx, num: list, den: list) -> ir.AffineExpr:
    """prod(num) / prod(den): an exact polynomial division (`s0 * 16 * 128 / s0`), else cancelling equal
    symbolic factors first."""
    exact = quotient(num, den)
    if exact is not None:
        return exact
    num = list(num)
    static = 1
    for d in den:
        if sy.as_int(d) is not None:
            static *= sy.as_int(d)
            continue
        match = sy.find_equal(num, d)
        if match is None:
            raise cx.error(f"cannot infer the -1 of a view: {d} does not divide {[str(n) for n in num]}")
        num.pop(match)
    out = sy.canon(sy.numel(num))
    if sy.as_int(out) is not None:
        if sy.as_int(out) % static:
            raise cx.error(f"view: {sy.as_int(out)} elements do not split into blocks of {static}")
        return sy.const(sy.as_int(out) // static)
    if static == 1:
        return out
    return sy.floordiv(out, static)


def reshape(cx, x, shape, check: bool = True):
    if sy.equal_shapes(shape, cx.shape(x)):
        return x
    return cx.emit(ReshapeOp, result_shape=shape, check=check, input=x)


def view(cx):
    x = cx.operand(0)
    return reshape(cx, x, view_shape(cx, x, cx.const(1)))


def unsqueeze(cx):
    x = cx.operand(0)
    shape = list(cx.shape(x))
    d = cx.const(1)
    shape.insert(d % (len(shape) + 1), sy.const(1))
    return reshape(cx, x, shape)


def squeeze_dims(cx):
    """squeeze.dims / prims.squeeze: drop the listed size-1 dims; squeeze(): all of them."""
    x = cx.operand(0)
    shape = list(cx.shape(x))
    dims = cx.const(1) if cx.num_operands > 1 else None
    dims = [i for i, e in enumerate(shape) if sy.as_int(e) == 1] if dims is None else [d % len(shape) for d in dims]
    return reshape(cx, x, [e for i, e in enumerate(shape) if not (i in dims and sy.as_int(e) == 1)])


def collapse(cx):
    """prims.collapse(x, start, end): dims start..end (inclusive) merged into one."""
    x, start, end = cx.operand(0), cx.const(1), cx.const(2)
    shape = list(cx.shape(x))
    return reshape(cx, x, shape[:start] + [sy.canon(sy.numel(shape[start : end + 1]))] + shape[end + 1 :])


def unflatten(cx):
    """unflatten(x, dim, sizes): dim split into `sizes` (at most one -1)."""
    x, dim, sizes = cx.operand(0), cx.const(1), list(cx.const(2))
    shape = list(cx.shape(x))
    dim %= len(shape)
    if -1 in sizes:
        known = 1
        for s in sizes:
            known *= s if s != -1 else 1
        d = sy.as_int(shape[dim])
        if d is None:
            raise cx.error("unflatten of a symbolic-size dim with -1 is not supported")
        sizes[sizes.index(-1)] = d // known
    return reshape(cx, x, shape[:dim] + [affine(s) for s in sizes] + shape[dim + 1 :])


def squeeze(cx):
    x = cx.operand(0)
    shape = list(cx.shape(x))
    d = cx.const(1) % len(shape)
    if sy.as_int(shape[d]) == 1:
        shape.pop(d)
    return reshape(cx, x, shape)


def expand(cx):
    x = cx.operand(0)
    have = cx.shape(x)
    want = [affine(s) for s in cx.const(1)]
    if len(want) == len(have) and all(sy.as_int(w) == -1 or sy.equal(w, h) for w, h in zip(want, have)):
        return x
    raise cx.error(
        f"expand of {[str(h) for h in have]} to {[str(w) for w in want]} (a broadcast copy) is not supported"
    )


def transpose(cx, x, perm: list[int], check: bool = True):
    """`x` permuted by `perm`, or `x` itself for the identity permutation."""
    if perm == list(range(len(perm))):
        return x
    shape = cx.shape(x)
    moved = [p for p in perm if sy.as_int(shape[p]) != 1]
    if moved == sorted(moved):  # only size-1 dims move: the same row-major data
        return reshape(cx, x, [shape[p] for p in perm], check=check)
    if unit_last(shape, perm):
        return without_unit_last(cx, x, perm, check)
    return cx.emit(TransposeOp, check=check, input=x, perm=ir.DenseI64ArrayAttr.get(perm))


def swap_perms(rank: int, d: int) -> list[list[int]]:
    """Permutations (each one the NPU transposes directly) that swap dim `d` with the last dim:
    d <-> rank-2 (the last dim stays: row moves), then the last two dims."""
    out = []
    if d != rank - 2 and d != rank - 1:
        p = list(range(rank))
        p[d], p[rank - 2] = p[rank - 2], p[d]
        out.append(p)
    if d != rank - 1:
        out.append(list(range(rank - 2)) + [rank - 1, rank - 2])
    return out


def to_last(cx, x, d: int):
    """`x` with dim `d` swapped with the last dim; `from_last` undoes it."""
    for p in swap_perms(len(cx.shape(x)), d):
        x = transpose(cx, x, p, check=False)
    return x


def from_last(cx, x, d: int, check: bool = True):
    perms = swap_perms(len(cx.shape(x)), d)[::-1]
    for i, p in enumerate(perms):
        x = transpose(cx, x, p, check=check and i == len(perms) - 1)
    return x


def any_transpose(cx, x, perm: list[int], check: bool = True):
    """`x` permuted by `perm` as transposes the NPU runs directly: when the last dim moves,
    first swap the dim that becomes last into place, then a transpose that keeps the last dim."""
    r = len(perm)
    if not r or perm[-1] == r - 1 or perm == list(range(r - 2)) + [r - 1, r - 2]:
        return transpose(cx, x, perm, check=check)
    order = list(range(r))  # order[i]: the source dim now at position i
    for p in swap_perms(r, perm[-1]):
        x = transpose(cx, x, p, check=False)
        order = [order[i] for i in p]
    return transpose(cx, x, [order.index(s) for s in perm], check=check)


def unit_last(shape, perm: list[int]) -> bool:
    """A transpose that keeps a last dim of size 1 and moves others."""
    return len(perm) > 1 and perm[-1] == len(perm) - 1 and sy.as_int(shape[-1]) == 1 and perm != sorted(perm)


def without_unit_last(cx, x, perm: list[int], check: bool):
    """A transpose keeping a last dim of size 1 (Mamba2's head_dim 1) would move one element per block: the
    same data as the transpose of the size > 1 dims with adjacent ones merged (a last-two swap, often)."""
    shape = cx.shape(x)
    keep = [d for d in range(len(perm)) if sy.as_int(shape[d]) != 1]
    order = [p for p in perm if p in keep]
    groups: list[list[int]] = []
    for p in order:
        if groups and keep.index(p) == keep.index(groups[-1][-1]) + 1:
            groups[-1].append(p)
        else:
            groups.append([p])
    by_input = sorted(groups, key=lambda g: g[0])
    inner = [sy.canon(sy.numel([shape[d] for d in g])) for g in by_input]
    y = reshape(cx, x, inner, check=False)
    if len(groups) > 1:
        y = any_transpose(cx, y, [by_input.index(g) for g in groups], check=False)
    return reshape(cx, y, [shape[p] for p in perm], check=check)


def flatten(cx):
    x, start, end = cx.operand(0), cx.const(1), cx.const(2)
    shape = list(cx.shape(x))
    if not shape:
        return reshape(cx, x, [sy.const(1)])
    start, end = start % len(shape), end % len(shape)
    return reshape(cx, x, shape[:start] + [sy.canon(sy.numel(shape[start : end + 1]))] + shape[end + 1 :])


def slice_(cx):
    x = cx.operand(0)
    shape = list(cx.shape(x))
    dim = cx.const(1) % len(shape)
    start, end = cx.const(2), cx.const(3)
    step = cx.const(4) if cx.num_operands > 4 else 1
    if isinstance(end, int) and (end >= INT64_CLAMP or _never_before(cx, shape[dim], end)):
        end = None  # `x[:, :64]` where the length is at most 64: to the end
    start = 0 if start is None else start
    if step != 1:
        from .strided import strided_slice

        return strided_slice(cx, x, dim, start, end, step)
    if not isinstance(start, int) and sy.provably_ge(sy.const(0), start, sy.symbol_box(cx.symbols)):
        start = _from_front(cx, shape[dim], start)  # `mask[:, -T:]` of a length-T mask: from 0
    if not isinstance(start, int) and end is None:
        return symbolic_slice(cx, x, dim, start, shape[dim] - affine(start))
    if not isinstance(start, int):
        return write_target(cx, x, dim, start, end)  # `buf[:, :, P:P + 1] = k` (a KV-cache write), or read
    full = sy.as_int(shape[dim])
    if start < 0 and full is None:
        return _slice_end(cx, x, dim, start, end)
    if start < 0:
        start = max(start + full, 0)
    length = sy.canon(_slice_length(cx, shape[dim], start, end))
    if sy.as_int(length) is not None and sy.as_int(length) <= 0:
        raise cx.empty_error(f"the slice along dim {dim} has length 0")
    if sy.equal(length, shape[dim]):
        return x
    shape[dim] = length
    return cx.emit(SliceOp, result_shape=shape, input=x, dim=_i64(dim), start=_i64(start))


def _never_before(cx, n, end: int) -> bool:
    """Whether a dim of size `n` ends at or before position `end` at every length the bounds allow."""
    return sy.as_int(n) is None and end >= 0 and sb.value_range(n, cx.symbols)[1] <= end


def _from_front(cx, n, start):
    """A start counted back from the end of a dim of size `n` (never after it), from the front where that is
    a constant: 0 where it is at or before the front at every length (Python clamps it), else unchanged."""
    if sb.value_range(n + affine(start), cx.symbols)[1] <= 0:
        return 0
    from_front = simplify(n + affine(start))
    return from_front if isinstance(from_front, int) else start


def _slice_end(cx, x, dim: int, start: int, end):
    """`x[..., start:end]` with a negative start into a `?` dim: `end` is the dim's end or negative too."""
    if end is not None and not (isinstance(end, int) and start < end < 0):
        raise cx.error(
            f"slice [{start}:{end}] of the symbolic-size dim {dim}: a negative start needs no end or a negative "
            "end after it; slice from the start of the dim, or narrow first"
        )
    length = -start if end is None else end - start
    return slice_from_end(cx, x, dim, -start, sy.const(length), f"slice [{start}:{'' if end is None else end}]")


INT64_CLAMP = 2**62  # torch writes `x[a:]` as end = INT64_MAX: any end this large is the dim's end


def _slice_length(cx, size, start: int, end):
    full = sy.as_int(size)
    if end is None or (isinstance(end, int) and full is not None and end >= full):
        return size - sy.const(start) if full is None else sy.const(full - start)
    if isinstance(end, int) and end < 0:
        return size + sy.const(end - start)
    return affine(end) - sy.const(start)


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v)


def slice_from_end(cx, x, dim: int, back: int, length, what: str):
    """Positions [n - back, n - back + length) of the `?` dim `dim` of size n: a slice whose start the JIT
    evaluates from the length (a negative start). n >= back must hold at every length the bounds allow."""
    n = cx.shape(x)[dim]
    lo = sb.value_range(n, cx.symbols)[0]
    if lo < back:
        raise cx.error(
            f"{what} reads position {back} from the end of dim {dim}, whose size {n} can be as small as {lo}; "
            f"raise min_len so that the size is at least {back}, or index from the start"
        )
    shape = list(cx.shape(x))
    shape[dim] = sy.canon(length)
    return cx.emit(SliceOp, result_shape=shape, check=False, input=x, dim=_i64(dim), start=_i64(-back))


@dataclass(frozen=True)
class Positions:
    """`arange(start, stop)` with a symbolic start: the positions an index op writes (no tensor)."""

    start: object
    stop: object


@dataclass(frozen=True)
class WriteTarget:
    """`x[..., start:end, ...]` with a symbolic start: the target of a copy (a KV-cache write), or, where
    an op reads it, the slice itself (`tensor`)."""

    shape: tuple
    source: ir.Value
    dim: int
    start: object

    def __repr__(self) -> str:
        return "a slice with a symbolic start"

    def tensor(self, cx) -> ir.Value:
        return symbolic_slice(cx, self.source, self.dim, self.start, self.shape[self.dim])


def write_target(cx, x, dim: int, start, end) -> WriteTarget:
    shape = list(cx.shape(x))
    shape[dim] = sy.fold(affine(end) - affine(start))
    return WriteTarget(tuple(shape), x, dim, start)


def symbolic_slice(cx, x, dim: int, start, length) -> ir.Value:
    """Positions [start, start + length) of dim `dim`, `start` an expression of the symbols: a copy whose
    DRAM offset the JIT evaluates at each length. The slice must lie inside the dim at every length."""
    shape = list(cx.shape(x))
    box = sy.symbol_box(cx.symbols)
    if not (sy.provably_ge(affine(start), 0, box) and sy.provably_ge(shape[dim], affine(start) + length, box)):
        raise cx.error(
            f"the slice [{start}, {start} + {length}) of dim {dim} (size {shape[dim]}), from a symbolic start, is "
            f"not provably inside the dim at every length of the range ({_bounds(cx)}); Python would clamp it. "
            "Narrow the range (min_len/max_len) to the lengths where it lies inside, or slice from a constant start"
        )
    shape[dim] = sy.canon(length)
    at = sy.make_map([sy.canon(affine(start))], cx.n_syms)
    return cx.emit(SliceOp, result_shape=shape, check=False, input=x, dim=_i64(dim), start=at)


def _bounds(cx) -> str:
    return ", ".join(f"{s.name} in [{s.lo}, {s.hi}]" for s in cx.symbols)
