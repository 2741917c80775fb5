"""Helpers shared by the novella passes."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.attrs import (  # noqa: F401 (the passes' helpers, kept importable from here)
    current,
    forget_ir_memos,
    from_attr,
    ir_memo,
    module_of,
    remember,
    set_attr,
    to_attr,
)
from ..machine.target import MAX_LENGTH
from ..symbolic import box as sb


class PassError(Exception):
    """Raised inside a pass; reported as an MLIR error at `op`'s location."""

    def __init__(self, op, message: str):
        super().__init__(message)
        self.op = op
        self.message = message


def functions(module_op) -> list:
    return [op for op in module_op.regions[0].blocks[0].operations if op.operation.name == "func.func"]


def body_ops(fn) -> list:
    return list(fn.regions[0].blocks[0].operations)


def fold_fixed_sizes(module_op, symbols) -> None:
    """Types each result dim that the symbols' bounds fix (`symbolic.box.fixed`: a pattern's op built
    from a `?` input whose size over the range is one value, `W floordiv 16` over W in [32, 47]) as that
    constant, as the frontend and --novella-shape-infer type them."""
    for fn in functions(module_op):
        for op in body_ops(fn):
            for r in op.results:
                shape = sy.shape_of(r.type) if isinstance(r.type, ir.RankedTensorType) else None
                if shape is None or all(sy.as_int(e) is not None for e in shape):
                    continue
                folded = [sb.fixed(e, symbols) for e in shape]
                if [sy.as_int(e) for e in folded] != [sy.as_int(e) for e in shape]:
                    r.set_type(sy.tensor_type(folded, ir.RankedTensorType(r.type).element_type, len(symbols)))


def n_symbols(module_op) -> int:
    return len(sy.read_symbols(module_op))


def is_tensor_op(op) -> bool:
    return op.operation.name.startswith("novella.") and op.operation.name not in ("novella.weight",)


def attr_dict(op) -> dict:
    """All attributes of `op` by name."""
    return dict(op.operation.attributes.items())


# ------------------------------------------------------------------ preconditions

MAX_SYMBOL_VALUE = MAX_LENGTH  # the ISA's row_bound field
_STRUCTURAL = ("novella.weight", "novella.macro", "novella.inst", "func.return")


def check_symbols(module_op) -> list[sy.Symbol]:
    """The module's `novella.symbols`, refused with a located error unless well formed and in range."""
    if "novella.symbols" in module_op.attributes and not isinstance(
        module_op.attributes["novella.symbols"], ir.DictAttr
    ):
        raise PassError(module_op, 'novella.symbols must be a dictionary such as {s0 = ["T", 1, 2048]}')
    try:
        symbols = sy.read_symbols(module_op)
    except (ValueError, TypeError, IndexError) as e:
        raise PassError(
            module_op, f'novella.symbols entries must be sN = ["name", min, max] with integer bounds ({e})'
        ) from None
    if [s.position for s in symbols] != list(range(len(symbols))):
        raise PassError(
            module_op, f"novella.symbols must name s0, s1, ... in order, got {[s.position for s in symbols]}"
        )
    for s in symbols:
        if not 0 <= s.lo <= s.hi <= MAX_SYMBOL_VALUE:
            raise PassError(
                module_op,
                f"symbol s{s.position} ('{s.name}') has bounds [{s.lo}, {s.hi}]; "
                f"need 0 <= min <= max <= {MAX_SYMBOL_VALUE} (the ISA's 24-bit row fields)",
            )
    _check_symbol_uses(module_op, len(symbols))
    return symbols


def _check_symbol_uses(module_op, n: int) -> None:
    """Every affine map in types and attributes uses only declared symbols."""
    found: list = []
    types, maps = set(), set()  # seen (uniqued): a repeated one was found, or passed, at its first use

    def check(op):
        for v in (*op.operands, *op.results):
            t = v.type
            if t not in types:
                types.add(t)
                if isinstance(t, ir.RankedTensorType) and isinstance(t.encoding, ir.AffineMapAttr):
                    found.append((op, t.encoding, f"type {t}"))
        for a in op.attributes.values():
            if type(a) is ir.AffineMapAttr and a not in maps:  # the bindings' class of every affine map
                maps.add(a)
                found.append((op, a, None))
        return ir.WalkResult.ADVANCE

    for fn in functions(module_op):
        for i, a in enumerate(fn.regions[0].blocks[0].arguments):
            if isinstance(a.type, ir.RankedTensorType) and isinstance(a.type.encoding, ir.AffineMapAttr):
                found.append((fn, a.type.encoding, f"argument #{i} ({a.type})"))
    module_op.operation.walk(check)
    for op, attr, what in found:
        used = attr.value.n_symbols
        if used > n:
            what = what or next(f"attribute '{k}'" for k, a in attr_dict(op).items() if a == attr)
            declared = ", ".join(f"s{i}" for i in range(n)) or "none"
            raise PassError(
                op,
                f"{what} uses symbol s{used - 1}, but novella.symbols declares {declared}; "
                f'add s{used - 1} = ["name", min, max] to the module attribute novella.symbols',
            )


def tensor_ops(module_op) -> list:
    """The novella tensor ops of every function (not weights, macros or instructions)."""
    return [
        op
        for fn in functions(module_op)
        for op in body_ops(fn)
        if op.operation.name.startswith("novella.") and op.operation.name not in _STRUCTURAL
    ]


def require_stage(module_op, flag: str, need: str | None, producer: str) -> None:
    """Refuses IR of the wrong stage: each tensor op must carry `need` (set by `producer`).

    Also refuses torch-dialect ops (the frontend converts them) and `?` dims
    without a symbolic size (from --novella-shape-infer)."""
    for fn in functions(module_op):
        for op in body_ops(fn):
            if op.operation.name.startswith("torch."):
                raise PassError(
                    op,
                    f"is a torch-dialect op, but --{flag} runs on the novella dialect; convert the module with "
                    "the frontend first (compile_torch(..., dump_dir=...) writes it as 01-novella.mlir)",
                )
    if flag == "novella-shape-infer":
        return
    sized = set()  # types seen (uniqued): a repeated one passed at its first use
    for op in tensor_ops(module_op):
        for v in (*op.operands, *op.results):
            t = v.type
            if t in sized:
                continue
            if isinstance(t, ir.RankedTensorType) and sy.shape_of(t) is None:
                raise PassError(
                    op, f"has a '?' dim without a symbolic size ({t}); --{flag} needs --novella-shape-infer first"
                )
            sized.add(t)
        if need and need not in op.attributes and op.operation.name != "novella.reshape":
            raise PassError(op, f"has no '{need}' attribute: --{flag} expects the output of --{producer}; run it first")
