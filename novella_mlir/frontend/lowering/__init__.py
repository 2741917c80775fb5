"""Table-driven lowering from the torch dialect to the novella dialect.

A lowering is a function listed for one or more torch op names in the entry
of the novella op it produces (`novella_mlir/optable.py`)::

    def relu(cx: LoweringContext):
        return cx.emit(ReluOp, input=cx.operand(0))

`cx.emit` builds the novella op and computes its result type with the shape
mutator's rule for that op, so every `?` carries its symbolic size.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

from torch_mlir import ir
from torch_mlir.dialects import func

from ... import symbolic as sy
from ...dialects import shapes
from ...dialects.novella import WeightOp
from ...errors import NovellaError, UnsupportedDtypeError
from ...symbolic import box as sb
from .. import dtypes


def source_location(loc: ir.Location) -> str:
    """The innermost user frame (`file:line`) of an FX-imported op location, and the innermost
    library frame (e.g. the transformers line) when the op comes from one: `user.py:9 (in lib.py:258)`; for
    an op of a torch.nn module called by a library, the library's line that calls it."""
    frames = re.findall(r'"([^"]+)":(\d+)', str(loc))
    if not frames:
        return "<unknown location>"
    user = [f for f in frames if "site-packages" not in f[0]]
    lib = frames[0] if "site-packages" in frames[0][0] else None
    if lib and "/site-packages/torch/" in lib[0]:  # an nn module: name the model library's line calling it
        lib = next((f for f in frames if "site-packages" in f[0] and "/site-packages/torch/" not in f[0]), lib)
    where = f"{user[0][0]}:{user[0][1]}" if user else f"{frames[0][0]}:{frames[0][1]}"
    return f"{where} (in {lib[0]}:{lib[1]})" if lib and user else where


class LoweringContext:
    """What a lowering sees: the torch op, its converted operands, and a builder."""

    def __init__(self, op, values: dict, symbols: list, weights: dict):
        self.op = op
        self._values = values
        self.symbols = symbols
        self.n_syms = len(symbols)
        self._weights = weights

    def add_weight(self, hint: str, array) -> ir.Value:
        """A new constant tensor (e.g. a folded or zero bias) in the weight table."""
        name = f"{hint}_{len(self._weights)}"
        self._weights[name] = array.astype("float32")
        t = ir.RankedTensorType.get(list(array.shape), ir.F32Type.get())
        op = WeightOp(ir.StringAttr.get(name), t, loc=self.op.location)
        _tag_values(op, self._weights[name])
        return op.result

    def weight_data(self, v: ir.Value):
        """The data of a `novella.weight` value, or None if `v` is computed."""
        owner = v.owner
        if isinstance(owner, ir.OpView) and owner.operation.name == "novella.weight":
            return self._weights.get(ir.StringAttr(owner.attributes["name"]).value)
        return None

    def scalar(self, value: float) -> ir.Value:
        """A 0-d constant tensor (broadcasts like a torch scalar)."""
        import numpy as np

        return self.add_weight("scalar", np.array(value, dtype=np.float64))

    def kind(self, i: int) -> str:
        """ "float", "int" or "bool": the torch element kind of operand `i` (held as f32 on the NPU)."""
        return dtypes.kind(self.op.operands[i].type)

    def result_kind(self, i: int = 0) -> str:
        return dtypes.kind(self.op.results[i].type)

    def is_tensor(self, i: int) -> bool:
        return i < self.num_operands and isinstance(self._values[self.op.operands[i]], ir.Value)

    def value(self, v):
        return self._values[v]

    def operand(self, i: int) -> ir.Value:
        v = self._values[self.op.operands[i]]
        if hasattr(v, "tensor"):  # a view kept symbolic for a write (shape_ops.WriteTarget), read here
            v = v.tensor(self)
        if not isinstance(v, ir.Value):
            raise self.error(f"operand #{i} must be a tensor, got {v!r}")
        return v

    def const(self, i: int):
        """A compile-time operand: int, float, bool, str, None, list or a symbolic size."""
        v = self._values[self.op.operands[i]]
        if isinstance(v, ir.Value):
            raise self.error(f"operand #{i} must be a compile-time constant")
        return v

    @property
    def num_operands(self) -> int:
        return len(self.op.operands)

    def shape(self, v: ir.Value) -> list:
        return sy.shape_of(ir.RankedTensorType(v.type))

    def torch_result_dims(self) -> list[int | None]:
        t = str(self.op.results[0].type)
        dims = re.match(r"!torch.vtensor<\[([^\]]*)\]", t).group(1)
        return [None if d == "?" else int(d) for d in dims.split(",")] if dims else []

    def emit(self, op_cls, result_shape=None, check: bool = True, **fields) -> ir.Value:
        """Builds `op_cls` with the result type from the shape rule (or `result_shape`);
        `check` compares it with the torch op's static result dims (off for intermediate values)."""
        attrs = {k: v for k, v in fields.items() if isinstance(v, ir.Attribute)}
        operands = []
        for v in fields.values():
            operands += v if isinstance(v, list) else [v] if isinstance(v, ir.Value) else []
        if result_shape is None:
            hint = ir.RankedTensorType.get([1], ir.F32Type.get())
            try:
                result_shape = shapes.infer(op_cls.OPERATION_NAME, [self.shape(v) for v in operands], attrs, hint)
            except shapes.ShapeError as e:
                raise self.error(str(e)) from None
        result_shape = [sb.fixed(e, self.symbols) for e in result_shape]
        if any(sy.as_int(e) == 0 for e in result_shape):
            raise self.empty_error(f"a dim of the result {[str(e) for e in result_shape]} is 0")
        if check:
            self._check_static(result_shape)
        rtype = sy.tensor_type(result_shape, ir.F32Type.get(), self.n_syms)
        return op_cls(**fields, result=rtype, loc=self.op.location).result

    def _check_static(self, exprs):
        want = self.torch_result_dims()
        got = [sy.as_int(e) for e in exprs]
        if len(want) != len(got) or any(w is not None and w != g for w, g in zip(want, got)):
            msg = f"shape mismatch: torch says {want}, the shape rule gives {[str(e) for e in exprs]}"
            fixed = [(i, w, e) for i, (w, g, e) in enumerate(zip(want, got, exprs)) if w is not None and g is None]
            if len(want) == len(got) and fixed:
                i, w, e = fixed[0]
                msg += (
                    f"; torch's trace fixes dim {i} at {w} where the length makes it {e} (e.g. a count of chunks "
                    f"traced at the example length without a guard), so the trace holds only where {e} = {w}: "
                    "compile such a length range on its own"
                )
            raise self.error(msg)

    def empty_error(self, what: str) -> NovellaError:
        return self.error(
            f"{what}, so the result is an empty tensor, which the NPU does not hold (a compiled program "
            "moves no empty values); remove the op from the model, or build the empty tensor outside it"
        )

    def error(self, message: str) -> NovellaError:
        name = self.op.operation.name
        if name == "torch.operator":
            name = ir.StringAttr(self.op.attributes["name"]).value
        return NovellaError(f"{source_location(self.op.location)}: '{name}': {message}")


def _fixed_int(v, symbols):
    """A symbolic int (a size computed by the model) as the Python int it is over the whole range, if it is one."""
    if not isinstance(v, ir.AffineExpr):
        return v
    c = sb.fixed_value(v, symbols)
    return v if c is None else c


def convert(torch_module: ir.Module, imported, table: dict[str, Callable], generic: Callable) -> ir.Module:
    """Converts the imported torch-dialect module to a new novella-dialect module: each op by its lowering in
    `table` (torch op name -> fn(cx), the op table's), or by `generic(cx)` (the generic path, `frontend/linalg`)."""
    src = next(op for op in torch_module.body.operations if op.operation.name == "func.func")
    n_syms = len(imported.symbols)
    with ir.Location.unknown():
        module = ir.Module.create()
        sy.write_symbols(module.operation, imported.symbols)
        arg_types = [_arg_type(s, imported.positions, n_syms) for s in imported.arg_shapes]
        values: dict = {}
        with ir.InsertionPoint(module.body):
            fn = func.FuncOp("forward", (arg_types, []))
            entry = fn.add_entry_block()
        for targ, narg in zip(src.regions[0].blocks[0].arguments, entry.arguments):
            values[targ] = narg
        demoted: list[str] = []
        with ir.InsertionPoint(entry):
            results = _convert_block(
                src.regions[0].blocks[0], values, imported.symbols, imported.weights, table, generic, demoted
            )
            func.ReturnOp(results)
        fn.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(arg_types, [r.type for r in results]))
        _note_demoted(fn, demoted)
        _drop_dead(entry, imported.weights)
    return module


def _note_demoted(fn, demoted: list[str]) -> None:
    """Says in the IR (`novella.demoted_f64` on the function) and once as a warning which ops compute in
    float32 what the model computes in float64."""
    if not demoted:
        return
    fn.attributes["novella.demoted_f64"] = ir.ArrayAttr.get([ir.StringAttr.get(d) for d in demoted])
    m = re.search(r" at (.+?):(\d+)", demoted[0])
    warnings.warn_explicit(
        f"{len(demoted)} op(s) compute in float64 in the model and in float32 on the NPU (the first: "
        f"{demoted[0]}); results differ from eager by float32 rounding there",
        UserWarning,
        m.group(1) if m else "<model>",
        int(m.group(2)) if m else 0,
    )


def _tag_values(op, data) -> None:
    """Says in the IR what a made-up constant holds when a pass may reason about it (a mask's positions,
    `transforms/kv_window.py`): `novella.splat` (every element equal) or `novella.iota` (0, 1, ... along
    the last dim, every other dim 1)."""
    import numpy as np

    flat = data.reshape(-1)
    if flat.size == 0:
        return
    if np.all(flat == flat[0]):
        op.operation.attributes["novella.splat"] = ir.FloatAttr.get_f64(float(flat[0]))
    elif flat.size == data.shape[-1] and np.array_equal(flat, np.arange(flat.size)):
        op.operation.attributes["novella.iota"] = ir.UnitAttr.get()


def _drop_dead(block, weights: dict) -> None:
    """Erases ops whose results are unused (weights replaced by folded copies, dead views), newest first,
    and the weight data no `novella.weight` refers to any more."""
    for op in reversed(list(block.operations)):
        if op.operation.name.startswith("novella.") and op.results and not any(list(r.uses) for r in op.results):
            op.operation.erase()
    used = {
        ir.StringAttr(op.attributes["name"]).value for op in block.operations if op.operation.name == "novella.weight"
    }
    for name in [n for n in weights if n not in used]:
        del weights[name]


def _arg_type(dims, positions, n_syms):
    exprs = [sy.const(d) if isinstance(d, int) else sy.from_sympy(d, positions) for d in dims]
    return sy.tensor_type(exprs, ir.F32Type.get(), n_syms)


def _convert_block(block, values, symbols, weights, table, generic, demoted: list[str]):
    for op in block.operations:
        name = op.operation.name
        if name == "torch.operator":  # an op torch-mlir has no definition of, by its aten name
            name = ir.StringAttr(op.attributes["name"]).value.removesuffix(".default")
        if name == "func.return":
            cx = LoweringContext(op, values, symbols, weights)
            return [cx.operand(i) for i in range(cx.num_operands)]
        if name == "novella.weight":
            t = _vtensor_to_builtin(op.results[0].type, f"{source_location(op.location)}: weight: ")
            values[op.results[0]] = WeightOp(op.attributes["name"], t, loc=op.location).result
            continue
        if name.startswith("torch.constant.") or name == "torch.prim.ListConstruct":
            values[op.results[0]] = _constant(op, values)
            continue
        if name == "torch.prim.ListUnpack":
            for r, v in zip(op.results, values[op.operands[0]]):
                values[r] = v
            continue
        if _check_f32(op, name):
            demoted.append(f"{name} at {source_location(op.location)}")
        cx = LoweringContext(op, values, symbols, weights)
        result = _lower(table.get(name), cx, generic)
        for r, v in zip(op.results, result if isinstance(result, (list, tuple)) else [result]):
            values[r] = _fixed_int(v, symbols)
    raise NovellaError("torch function has no return")


def _lower(fn, cx, generic):
    """The op's lowering from the table; the generic path (torch-mlir's lowering to linalg, then novella)
    for an op the table lacks, or one whose lowering refuses the case (its error stands if both refuse)."""
    if fn is None:
        return generic(cx)
    try:
        return fn(cx)
    except UnsupportedDtypeError:
        raise
    except NovellaError as e:
        try:
            return generic(cx)
        except NovellaError:
            raise e from None


_NOT_F32 = {"f16": "float16", "bf16": "bfloat16"}


def _check_f32(op, name: str) -> bool:
    """Whether the op computes in float64, which the NPU computes in float32 instead (as IREE's
    `--iree-input-demote-f64-to-f32` does); refuses any other float tensor result that is not f32 (a 0-d
    one is a scalar and promotes nothing), naming the op that produces it, the user's line (with its code)
    and the library line it comes from."""
    demoted = False
    for r in op.results:
        e = dtypes.element_type(r.type)
        demoted |= e == "f64" and not str(r.type).startswith("!torch.vtensor<[],")
        if (e in _NOT_F32 or e.startswith("complex")) and not str(r.type).startswith("!torch.vtensor<[],"):
            where = source_location(op.location)
            code = _code(where)
            raise UnsupportedDtypeError(
                f"{where}: '{name}'{code} produces a {_NOT_F32.get(e, e)} tensor ({r.type}); the NPU computes "
                "only in float32 (integers and bools are held as float32; float64 is demoted), so this value "
                "cannot be held. Keep it float32: remove the conversion (e.g. `.half()`, "
                "`.to(torch.bfloat16)`) or the dtype= argument that creates it."
            )
    return demoted


def _code(where: str) -> str:
    """` (`code`)` of the library's `file:line` in `where` (the line of the op), else of the user's line it
    starts with, if the file is readable."""
    import linecache

    m = re.search(r"\(in (.+?):(\d+)\)", where) or re.match(r"(.+?):(\d+)", where)
    text = linecache.getline(m.group(1), int(m.group(2))).strip() if m else ""
    return f" (`{text}`)" if text else ""


def _constant(op, values):
    if op.name == "torch.prim.ListConstruct":
        return [values[v] for v in op.operands]
    if op.name == "torch.constant.none":
        return None
    a = op.attributes["value"]
    if isinstance(a, (ir.BoolAttr, ir.IntegerAttr, ir.FloatAttr, ir.StringAttr)):
        v = a.value
        return bool(v) if op.name == "torch.constant.bool" else v
    raise NovellaError(f"{source_location(op.location)}: unsupported constant {op}")


def _vtensor_to_builtin(t, where: str = "") -> ir.RankedTensorType:
    m = re.match(r"!torch.vtensor<\[([^\]]*)\],([^>]+)>", str(t))
    if not m or dtypes.kind(t) == "":
        raise NovellaError(
            f"{where}only real float, integer and bool tensors are supported (each held as f32), got {t}"
        )
    dims = [int(d) for d in m.group(1).split(",")] if m.group(1) else []
    return ir.RankedTensorType.get(dims, ir.F32Type.get())
