"""Verifier helpers shared by the ops of `dialects/novella.py` and `dialects/novella_lower.py`.

An op's verifier reports through `fail` (the op's diagnostic, returns False) or raises `Invalid`
inside a `verified` wrapper; the shape predicates read `?` dims as None (compatible with any size)."""

from __future__ import annotations

from torch_mlir import ir

DYNAMIC = ir.ShapedType.get_dynamic_size()


def fail(op, message: str) -> bool:
    op.location.emit_error(f"'{op.operation.name}' op {message}")
    return False


class Invalid(Exception):
    """A verifier's finding, reported by `verified` as the op's error."""


def verified(n_operands: int | None):
    """Wraps a verifier: operand count (unless None) and ranked, non-empty tensor types are checked
    first, and attribute or type errors become the op's diagnostic instead of a Python exception."""

    def wrap(fn):
        def verify(op) -> bool:
            try:
                if n_operands is not None:
                    structure(op, n_operands)
                return fn(op)
            except Invalid as e:
                return fail(op, str(e))
            except (ValueError, TypeError, KeyError, IndexError) as e:
                return fail(op, f"is malformed: {e}")

        return verify

    return wrap


def structure(op, n_operands: int) -> None:
    if len(op.operands) != n_operands:
        raise Invalid(f"expects {n_operands} operand(s), got {len(op.operands)}")
    for v in (*op.operands, *op.results):
        t = v.type
        if not isinstance(t, ir.RankedTensorType):
            raise Invalid(f"expects ranked tensors, got {t}")
        if 0 in t.shape:  # a `?` dim is DYNAMIC, not 0
            raise Invalid(f"does not support zero-size dims, got {t}")


def attr(op, name: str, kind, default=None):
    """The value of attribute `name`, which must be a `kind` (e.g. ir.StringAttr); `default` if absent."""
    if name not in op.attributes:
        if default is None:
            raise Invalid(f"needs the attribute '{name}'")
        return default
    a = op.attributes[name]
    if not isinstance(a, kind):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        what = " or ".join(k.__name__.removesuffix("Attr").lower() for k in kinds)
        raise Invalid(f"attribute '{name}' must be a {what} attribute, got {a}")
    return a.value


def str_attr(op, name: str) -> str:
    return ir.StringAttr(op.attributes[name]).value


def static_dims(t: ir.RankedTensorType) -> list[int | None]:
    return [None if d == DYNAMIC else d for d in t.shape]


def dims_compatible(a: int | None, b: int | None) -> bool:
    return a is None or b is None or a == b


def broadcast_ok(a: ir.RankedTensorType, b: ir.RankedTensorType, out) -> bool:
    da, db, do = static_dims(a), static_dims(b), static_dims(out)
    rank = len(do)
    if len(da) > rank or len(db) > rank:
        return False
    da = [1] * (rank - len(da)) + da
    db = [1] * (rank - len(db)) + db
    for x, y, z in zip(da, db, do):
        want = y if x == 1 else x
        if x not in (1, None) and y not in (1, None) and x != y:
            return False
        if not dims_compatible(want, z) and not (x == 1 and y == 1 and z == 1):
            return False
    return True


def expands_to(a: ir.RankedTensorType, out: ir.RankedTensorType) -> bool:
    """Every dim of `a` (right-aligned) is 1 or the result's."""
    da, do = static_dims(a), static_dims(out)
    if len(da) > len(do):
        return False
    return all(x == 1 or dims_compatible(x, z) for x, z in zip(da, do[len(do) - len(da) :]))


def f32(*types) -> bool:
    return all(isinstance(t.element_type, ir.F32Type) for t in types)


def heads_major(dims: list, minor: int) -> list:
    """The logical [..., H, L, D] dims of a tensor stored [..., L, H, D] when `minor`, else `dims`."""
    return dims[:-3] + [dims[-2], dims[-3], dims[-1]] if minor else dims


def linear_epilogue(op) -> tuple[bool, bool]:
    """(has a residual, has a norm) of a `novella.linear` or `novella.fused_linear`."""
    if op.operation.name != "novella.fused_linear":
        return False, False
    sizes = _segments(op)
    if len(sizes) != 6 or sizes[:3] != [1, 1, 1] or sizes[5] not in (sizes[4], 0):
        raise Invalid(f"operandSegmentSizes must be [1, 1, 1, 0|1, n, n] (or [.., 1, 0]: an RMSNorm), got {sizes}")
    if sizes[4] > sizes[5] and not norm_on_input(op.attributes):
        raise Invalid("a norm without norm_bias (an RMSNorm) is a prologue only: it needs norm_input = true")
    return bool(sizes[3]), bool(sizes[4])


def norm_is_rms(op) -> bool:
    """A `novella.fused_linear`'s norm is an RMSNorm (`x * rsqrt(mean(x * x) + eps) * norm_weight`): it has
    no norm_bias."""
    sizes = _segments(op)
    return len(sizes) == 6 and sizes[4] > sizes[5]


def _segments(op) -> list:
    return list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))


def norm_on_input(attrs) -> bool:
    """A `novella.fused_linear`'s layer norm normalizes its input rows (a pre-norm prologue), not its output
    (`attrs`: the op's attributes)."""
    return "norm_input" in attrs and ir.BoolAttr(attrs["norm_input"]).value


GATED = "swiglu"  # a fused linear's act: the result times silu(residual), the residual operand a gate


class LinearView:
    """The first three operands of a fused linear, as `LinearOp.verify_invariants` reads an op (`gated`:
    act may be GATED, the op has the gate as its residual operand)."""

    def __init__(self, op):
        self.operation, self.location, self.attributes = op.operation, op.location, op.attributes
        self.operands, self.results = list(op.operands)[:3], op.results
        self.gated = linear_epilogue(op)[0]


@verified(2)
def verify_binary(op) -> bool:
    """f32 operands that broadcast to the result shape."""
    a, b = (v.type for v in op.operands)
    y = op.results[0].type
    if not f32(a, b, y):
        return fail(op, "supports only f32 tensors")
    if not broadcast_ok(a, b, y):
        return fail(op, f"operands {a} and {b} do not broadcast to {y}")
    return True


@verified(1)
def verify_f32(op) -> bool:
    if not f32(op.operands[0].type, op.results[0].type):
        return fail(op, "supports only f32 tensors")
    return True


@verified(1)
def verify_same_shape(op) -> bool:
    """One f32 operand and an f32 result of its shape."""
    x, y = op.operands[0].type, op.results[0].type
    if not f32(x, y):
        return fail(op, "supports only f32 tensors")
    if static_dims(x) != static_dims(y):
        return fail(op, f"result {y} must have the operand's shape {x}")
    return True
