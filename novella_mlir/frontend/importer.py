"""torch.export + the torch-mlir FX importer, into our own MLIR context.

Parameters, buffers and tensor literals become `novella.weight` ops whose
data goes to a weight table instead of `dense_resource` blobs, so the DRAM
image can be laid out by `--novella-allocate`.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.fx.experimental import _config as fx_config
from torch_mlir import ir
from torch_mlir.extras.fx_importer import FxImporter, FxImporterHooks

from .. import symbolic as sy
from ..dialects.novella import WeightOp
from ..errors import NovellaError
from . import dtypes, explain, export_memo, exporting, guard_code, ties
from .complex_pairs import complex_as_pairs
from .hops import inline_wrappers
from .own_decompositions import own_decompositions
from .traceable import every_frame, symbolic_kernels, uncached_fake_dispatch

# The only decompositions the frontend runs (torch's own, from torch._decomp): composite ops
# whose parts the NPU lowers. Everything else in the exported graph is lowered as it is.
NEEDED_DECOMPOSITIONS = (
    "silu", "triu", "tril", "var_mean", "hardtanh", "elu",
    "leaky_relu", "stack", "unbind", "masked_fill", "softplus", "mish",
    "hardswish", "hardsigmoid", "glu", "addcmul", "lerp", "native_dropout", "linalg_vector_norm",
    "rsub", "clamp_min", "clamp_max", "_to_copy", "baddbmm", "index_copy", "_weight_norm_interface", "fill",
)  # fmt: skip
# Composite ops torch.export keeps whole, replaced by their own CompositeImplicitAutograd kernel: `diff`
# (transformers' packed-sequence check) -> slices and sub, `to.device` -> a copy or nothing, `min`/`max`
# of two tensors -> minimum/maximum, `repeat_interleave` by an int -> expand and view, `W.T` -> permute.
COMPOSITE_DECOMPOSITIONS = ("diff.default", "to.device", "min.other", "max.other", "repeat_interleave.self_int",
                            "numpy_T.default")  # fmt: skip


# the functional ops the retrace makes of a write into a view (`x[..., i, :i] = row`): their decompositions go
# in the same table as the graph's own, so one retrace both functionalizes and decomposes
FUNCTIONAL_FORMS = frozenset({torch.ops.aten.slice_scatter.default, torch.ops.aten.select_scatter.default})


@dataclass
class Imported:
    """The torch-dialect module plus what the importer learned on the way."""

    module: ir.Module
    weights: dict[str, np.ndarray]
    symbols: list[sy.Symbol]
    arg_shapes: list[list]  # per user input: list of int | sympy expr
    out_shapes: list[list]
    positions: dict  # sympy symbol -> affine symbol position
    exported: torch.export.ExportedProgram = field(repr=False, default=None)
    seconds: dict = field(default_factory=dict)  # export / decompose / import wall times
    decomposed: list = field(default_factory=list)  # the aten ops the decomposition step rewrote


class _WeightHooks(FxImporterHooks):
    def __init__(self):
        self.weights: dict[str, np.ndarray] = {}

    def _weight(self, name: str, tensor: torch.Tensor, ir_type) -> ir.Value:
        self.weights[name] = dtypes.to_npu(tensor.detach(), f"constant '{name}'")
        return WeightOp(ir.StringAttr.get(name), ir_type).result

    def resolve_input(self, gni, value, info):
        if not isinstance(value, torch.Tensor):
            return None
        return self._weight(info.input_spec.target, value, info.ir_type)

    def resolve_literal(self, gni, literal, info):
        """A tensor literal as a weight; a 0-d float64 one (`torch.tensor(2.5, dtype=float64)`) is a scalar,
        held as float32 like every 0-d value."""
        if not isinstance(literal, torch.Tensor):
            return None
        name = f"const_{len(self.weights)}"
        dtype = torch.float32 if literal.dim() == 0 and literal.dtype.is_floating_point else literal.dtype
        ir_type = gni._cc.get_vtensor_type(literal.size(), dtype)
        return self._weight(name, literal, ir_type)


def decomposition_table(graph_targets, generic: bool = True) -> dict:
    """torch's decompositions of the NEEDED_DECOMPOSITIONS ops, when one occurs in the graph (all of them
    then: a decomposition may emit another, e.g. mish -> softplus) and the COMPOSITE_DECOMPOSITIONS;
    empty (no retrace) otherwise."""
    from torch._decomp import decomposition_table as table
    from torch._export.utils import _get_decomp_for_cia

    aten = torch.ops.aten
    wanted = {getattr(aten, n) for n in NEEDED_DECOMPOSITIONS if hasattr(aten, n)}
    composite = {_overload(n) for n in COMPOSITE_DECOMPOSITIONS} | unlowered_composites(graph_targets)
    own = own_decompositions(set(graph_targets) | (FUNCTIONAL_FORMS if any(map(_mutates, graph_targets)) else set()))
    if any(
        getattr(t, "overloadpacket", None) in wanted and t in table or t in composite | set(own) for t in graph_targets
    ):
        unknown = _generic_decompositions() if generic else {}
    elif generic and _unlowered_overloads(graph_targets):  # torch-mlir's table (~0.09 s) has only unlowered ops
        unknown = _generic_decompositions()
        if not any(t in unknown for t in graph_targets):
            return {}
    else:
        return {}
    picked = {t: fn for t, fn in table.items() if getattr(t, "overloadpacket", None) in wanted}
    cia = {op: _get_decomp_for_cia(op) for op in composite if op not in unknown}
    return picked | cia | unknown | own


@functools.cache
def _generic_decompositions() -> dict:
    """torch-mlir's own FX decompositions (those `fx.export_and_import` runs) of the aten ops the op table
    has no lowering for: they run first, and what they leave unlowered takes the generic path
    (frontend/linalg/). Its C++ `torch-decompose-complex-ops` gets some wrong (softshrink: x - l for x < -l)."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    from ..optable import torch_lowerings

    known = torch_lowerings() | dict.fromkeys(LINALG_DIRECT)
    return {t: fn for t, fn in get_decomposition_table().items() if _mlir_name(t) not in known}


# ops without a table lowering that `convert-torch-to-linalg` takes whole (one linalg.transpose): torch-mlir's FX
# decompositions of them (to permute) would retrace every exported program with a transpose
LINALG_DIRECT = ("torch.aten.transpose.int", "torch.aten.t")


def _unlowered_overloads(graph_targets) -> bool:
    """Whether some aten op of the graph has no lowering in the op table (only those can be in
    `_generic_decompositions`)."""
    from ..optable import torch_lowerings

    known = torch_lowerings()
    return any(isinstance(t, torch._ops.OpOverload) and _mlir_name(t) not in known for t in graph_targets)


def _mlir_name(target) -> str:
    """`torch.aten.<name>[.<overload>]`, the torch-mlir op name of an aten OpOverload."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return ""
    overload = getattr(target, "_overloadname", "default")
    name = schema.name.replace("::", ".")
    return f"torch.{name}" + ("" if overload == "default" else f".{overload}")


# composites kept whole for the generic path: torch-mlir lowers them to linalg with `?` dims, while their
# CompositeImplicitAutograd kernel makes a native op with run-time size operands (native_group_norm's HxW)
WHOLE_FOR_GENERIC = frozenset({"group_norm"})


def unlowered_composites(graph_targets) -> set:
    """The graph's aten ops that the op table does not lower but that have a CompositeImplicitAutograd
    kernel (expand_as, movedim, broadcast_to, hstack, cosine_similarity...): decomposed by that kernel."""
    from ..optable import torch_lowerings

    table, out = torch_lowerings(), set()
    for t in graph_targets:
        if not isinstance(t, torch._ops.OpOverload) or t.namespace != "aten":
            continue
        name = f"torch.aten.{t._opname}" + ("" if t._overloadname == "default" else f".{t._overloadname}")
        cia = torch._C._dispatch_has_kernel_for_dispatch_key(t.name(), "CompositeImplicitAutograd")
        if cia and name not in table and t._opname not in WHOLE_FOR_GENERIC:
            out.add(t)
    return out


def _overload(name: str):
    packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet), overload)


def export(module: torch.nn.Module, args, dynamic_dim: int, min_len: int, max_len: int, need_lo=None, need_hi=None):
    """torch.export with dim `dynamic_dim` of every tensor argument a named `Dim("T", min, max)`.

    Sizes are traced size-obliviously (a strided conv's `(T - 1) // 2 + 1`
    may be 1 at the low end) and guards torch cannot decide become deferred
    runtime asserts, which `exporting.check_asserts` proves over the whole
    range before they are dropped. If torch narrows the range, the error
    names the guard in words."""
    explain.check_dtypes(module)
    with explain.quiet(), symbolic_kernels(), every_frame(), uncached_fake_dispatch():
        prog = exporting.export(module, args, dynamic_dim, min_len, max_len, need_lo, need_hi)
    data_dependent = explain.unbacked(prog)
    if data_dependent:
        raise NovellaError(data_dependent)
    return prog


def export_spec(module: torch.nn.Module, args, dynamic_shapes):
    """torch.export with torch's `dynamic_shapes` spec of named Dims (see `exporting.export_spec`)."""
    with symbolic_kernels(), every_frame(), uncached_fake_dispatch():
        return exporting.export_spec(module, args, dynamic_shapes)


def differs_at_one(module, args, dynamic_shapes, prog) -> str | None:
    """`exporting.differs_at_one`, its traces at 1 made as the spec's export was (the same Python kernels,
    torch's fake-tensor cache off: see `uncached_fake_dispatch`)."""
    with explain.quiet(), symbolic_kernels(), every_frame(), uncached_fake_dispatch():
        return exporting.differs_at_one(module, args, dynamic_shapes, prog)


def symbol_names(prog, args, dynamic_shapes, module) -> dict:
    return exporting.symbol_names(prog, args, dynamic_shapes, module)


def export_static(module: torch.nn.Module, args):
    """torch.export at the example's shapes (one length: a static program)."""
    try:
        with explain.quiet(), symbolic_kernels(), every_frame(), uncached_fake_dispatch():
            return export_memo.export(module.eval(), args)
    except Exception as e:  # torch raises many kinds; keep the message, drop the trace
        raise exporting.NovellaError(f"torch.export failed: {str(e).splitlines()[0]}") from None


def import_program(ctx: ir.Context, prog, decomposition_table=None, names: dict | None = None) -> Imported:
    """Runs only the decompositions the graph needs (none: no retrace), then the FX importer, into `ctx`.
    When the importer cannot take what one of torch-mlir's generic-path decompositions made (e.g. a
    `sym_float`), the import is tried once more without those (the op then takes the generic path)."""
    t0 = time.perf_counter()
    inline_wrappers(prog.graph_module)
    exporting.strip_asserts(prog, recompile=False)  # the importer reads the graph, not its code
    ties.check_topk_ties(prog)
    complex_as_pairs(prog)
    try:
        return _import(ctx, prog, decomposition_table, names, t0, generic=True)
    except NotImplementedError as e:
        if decomposition_table is not None:
            raise _importer_error(e) from None
    try:
        return _import(ctx, prog, None, names, t0, generic=False)
    except NotImplementedError as e:
        raise _importer_error(e) from None


def _importer_error(e: NotImplementedError) -> NovellaError:
    """The FX importer's 'Unimplemented call_function' as the node it cannot import and the user's line."""
    text = str(e)
    target = re.search(r"target=(<[^>]*>|\S+?),", text)
    where = re.search(r'File "([^"]+)", line (\d+)', text)
    line = f"{where.group(1)}:{where.group(2)}: " if where else ""
    what = target.group(1) if target else text.splitlines()[0][:120]
    return NovellaError(
        f"{line}torch-mlir's FX importer cannot import the graph node {what} (a decomposition of the op on this "
        "line computes with a size as a float); rewrite the op so the length stays an integer size, or report it"
    )


def _import(ctx, prog, decomposition_table, names, t0, generic: bool) -> Imported:
    prog, table = _decompose(prog, decomposition_table, generic)
    drop_empty_cat_operands(prog.graph)
    fill_empty_pads(prog.graph)
    spell_out_conv_lists(prog.graph)
    chosen = exporting.fold_size_min_max(prog)
    t1 = time.perf_counter()
    check_outputs(prog)
    hooks = _WeightHooks()
    importer = FxImporter(context=ctx, hooks=hooks)
    with ctx:
        try:
            importer.import_program(prog, func_name="forward")
        except ValueError as e:  # the FX importer's refusals (e.g. as_strided of a `?`)
            raise NovellaError(f"the torch-mlir FX importer cannot import the exported program: {e}") from None
    t2 = time.perf_counter()
    symbols, positions = _symbols(prog, names)
    user_inputs = [n for n in prog.graph.nodes if n.op == "placeholder" and _is_user_input(prog, n)]
    out_node = next(n for n in prog.graph.nodes if n.op == "output")
    outs = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else [out_node.args[0]]
    return Imported(
        module=importer.module,
        weights=hooks.weights,
        symbols=symbols,
        arg_shapes=[_shape(n, chosen) for n in user_inputs],
        out_shapes=[_shape(n, chosen) for n in outs],
        positions=positions,
        exported=prog,
        seconds={"decompose": t1 - t0, "import": t2 - t1},
        decomposed=sorted(str(t) for t in table),
    )


def _decompose(prog, fixed, generic: bool = True):
    """(program, table): the decompositions the graph needs (or `fixed`), then those of the ops the first
    round made (a composite's kernel may call another: hstack -> atleast_1d; functionalization makes
    `fill_` a `fill`), at most 3 more rounds."""
    targets = {n.target for n in prog.graph.nodes if n.op == "call_function"}
    table = decomposition_table(targets, generic) if fixed is None else fixed
    rounds = 0
    while table or any(_mutates(t) for t in targets):
        prog.graph_module.recompile()  # run_decompositions retraces the code
        prog = _retraced(prog, table)
        exporting.strip_asserts(prog, recompile=False)
        targets = {n.target for n in prog.graph.nodes if n.op == "call_function"}
        more = {} if fixed is not None or rounds == 3 else decomposition_table(targets, generic)
        if not any(t in more and t not in table for t in targets):
            break
        table, rounds = {**table, **more}, rounds + 1
    return prog, table


def _retraced(prog, table):
    """`prog.run_decompositions(table)`, traced size-obliviously as `exporting.export` traces: a
    retrace that evaluates every size check at the example's sizes specializes what the export kept
    symbolic (the 64 rows of a chunk a `(T + pad) // ((T + pad) // 64)`, which costs qwen3_5_text
    ~1,200 guards and two thirds of its compile). A retrace that makes an input's symbolic size a number
    (torch fixed it at the example's value) is a refusal, not a program for the example's length only; one
    that replaces an input's symbol by another input's (the mask's length proved equal to the ids') is not."""
    before = _symbolic_input_dims(prog)
    with explain.quiet(), symbolic_kernels(), uncached_fake_dispatch(), fx_config.patch(backed_size_oblivious=True):
        with guard_code.decided_during(prog):
            out = prog.run_decompositions(table)
    after = _symbolic_input_dims(out)
    lost = [(dim, *before[(i, dim)]) for i, dim in before if (i, dim) not in after]
    if lost:
        dim, name, size = lost[0]
        raise NovellaError(
            f"decomposing the exported program fixed the length (its size symbol {size}, dim {dim} of input "
            f"'{name}') at the example's value instead of keeping it symbolic (torch's retrace specialized it): "
            "compile from an example at another length, or a narrower range (min_len/max_len)"
        )
    return out


def _symbolic_input_dims(prog) -> dict:
    """(user input's position, dim) -> (its placeholder's name, the size's expression), for each symbolic
    size of a user input."""
    out = {}
    inputs = [n for n in prog.graph.nodes if n.op == "placeholder" and _is_user_input(prog, n)]
    for i, n in enumerate(inputs):
        val = n.meta.get("val")
        for d, size in enumerate(val.shape if isinstance(val, torch.Tensor) else ()):
            if isinstance(size, torch.SymInt) and size.node.expr.free_symbols:
                out[(i, d)] = (n.name, size.node.expr)
    return out


def check_outputs(prog) -> None:
    """Refuses a forward that returns a Python value (an int, a bool, a tuple of them) instead of tensors."""
    out = next(n for n in prog.graph.nodes if n.op == "output").args[0]
    for i, v in enumerate(out if isinstance(out, (tuple, list)) else [out]):
        if not isinstance(v, torch.fx.Node) or not isinstance(v.meta.get("val"), torch.Tensor):
            raise NovellaError(
                f"output #{i} of the model is the Python value {v!r}, not a tensor computed from the inputs: the "
                "NPU returns tensors only; return tensors from forward (e.g. torch.tensor(value) outside it)"
            )


def spell_out_conv_lists(graph) -> None:
    """A convolution's one-element stride / padding / dilation / output_padding (torch's `conv2d(padding=
    "valid")` gives padding [0]) repeated per spatial dim: torch-mlir's linalg lowering crashes on [0]."""
    for node in graph.nodes:
        if node.op != "call_function" or node.target is not torch.ops.aten.convolution.default:
            continue
        weight = node.args[1].meta.get("val") if isinstance(node.args[1], torch.fx.Node) else None
        rank = weight.dim() - 2 if isinstance(weight, torch.Tensor) else 0
        args = list(node.args)
        for i in (3, 4, 5, 7):
            if rank > 1 and i < len(args) and isinstance(args[i], (list, tuple)) and len(args[i]) == 1:
                args[i] = list(args[i]) * rank
        node.args = tuple(args)


def drop_empty_cat_operands(graph) -> None:
    """Folds away the operands of a `cat` that are empty along the cat dim (`x[..., d:]` of width 0):
    a cat of one non-empty operand is that operand (unless it is an output, which the program's signature
    names: then a cat of one operand); the empty values' producers become dead and go."""
    cat = torch.ops.aten.cat.default
    changed = False
    for node in [n for n in graph.nodes if n.op == "call_function" and n.target is cat]:
        items = list(node.args[0])
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        keep = [v for v in items if not _empty_along(v, dim)]
        if not keep or len(keep) == len(items):
            continue
        changed = True
        if len(keep) == 1 and not any(u.op == "output" for u in node.users):  # outputs are named in the signature
            node.replace_all_uses_with(keep[0])
            graph.erase_node(node)
        else:
            node.args = (keep, *node.args[1:])
    if changed:
        graph.eliminate_dead_code()


def fill_empty_pads(graph) -> None:
    """A constant pad of an empty tensor (`F.pad(x[:, 1:], (0, 0, 0, 1))` at length 1, as MobileBERT's
    trigram embedding does) is all pad value: a `full` of its static shape, so the empty slice goes dead."""
    pads = {torch.ops.aten.constant_pad_nd.default: 2, torch.ops.aten.pad.default: 3}
    changed = False
    for node in [n for n in graph.nodes if n.op == "call_function" and n.target in pads]:
        src, out = node.args[0].meta.get("val"), node.meta.get("val")
        empty = isinstance(src, torch.Tensor) and any(isinstance(d, int) and d == 0 for d in src.shape)
        mode = node.args[2] if node.target is torch.ops.aten.pad.default and len(node.args) > 2 else "constant"
        if not empty or mode != "constant" or not all(isinstance(d, int) for d in out.shape):
            continue
        at = pads[node.target]
        value = (node.args[at] if len(node.args) > at else node.kwargs.get("value")) or 0
        with graph.inserting_before(node):
            full = graph.call_function(torch.ops.aten.full.default, (list(out.shape), value),
                                       {"dtype": out.dtype, "device": out.device})  # fmt: skip
        full.meta = dict(node.meta)
        node.replace_all_uses_with(full)
        graph.erase_node(node)
        changed = True
    if changed:
        graph.eliminate_dead_code()


def _empty_along(v, dim: int) -> bool:
    val = v.meta.get("val") if isinstance(v, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or val.dim() == 0:
        return False
    size = val.shape[dim % val.dim()]
    return isinstance(size, int) and size == 0


def _mutates(target) -> bool:
    """An in-place aten op (e.g. `detach_`), which only functionalization (a retrace) removes."""
    schema = getattr(target, "_schema", None)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def input_dtypes(prog) -> list[str]:
    """The torch dtype of each user input, e.g. "float32", "int64", "bool"."""
    nodes = [n for n in prog.graph.nodes if n.op == "placeholder" and _is_user_input(prog, n)]
    return [str(n.meta["val"].dtype).removeprefix("torch.") for n in nodes]


def output_dtypes(prog) -> list[str]:
    """The torch dtype of each output (an integer or bool output is held as fp32 and returned as its dtype)."""
    out = next(n for n in prog.graph.nodes if n.op == "output").args[0]
    vals = [n.meta.get("val") for n in (out if isinstance(out, (tuple, list)) else [out])]
    return [str(v.dtype).removeprefix("torch.") if isinstance(v, torch.Tensor) else "float32" for v in vals]


def _is_user_input(prog, node) -> bool:
    spec = next(s for s in prog.graph_signature.input_specs if s.arg.name == node.name)
    return spec.kind.name == "USER_INPUT"


def _symbols(prog, names: dict | None = None):
    """One affine symbol per size symbol of the user inputs, in order of first use, named after its Dim
    (`names`: sympy symbol -> Dim name; default "T" for the first). A retrace may add unbacked symbols
    no input has; they are dropped."""
    syms, positions = [], {}
    for i, s in enumerate(_input_symbols(prog)):
        vr = prog.range_constraints[s]
        positions[s] = i
        name = (names or {}).get(s) or ("T" if i == 0 else str(s))
        syms.append(sy.Symbol(i, name, int(vr.lower), int(vr.upper)))
    return syms, positions


def _input_symbols(prog) -> list:
    """The size symbols of the user inputs that have a range, in order of first use."""
    order = []
    for n in prog.graph.nodes:
        val = n.meta.get("val") if n.op == "placeholder" and _is_user_input(prog, n) else None
        if not isinstance(val, torch.Tensor):
            continue
        for d in getattr(val, "shape", ()):
            e = getattr(getattr(d, "node", None), "expr", None)
            for s in sorted(getattr(e, "free_symbols", ()), key=str):
                if s in prog.range_constraints and s not in order:
                    order.append(s)
    return order


def _shape(node, chosen: dict):
    """The node's sizes, each sympy Min/Max of sizes replaced by the side `fold_size_min_max` chose."""
    return [d if isinstance(d, int) else d.node.expr.xreplace(chosen) for d in node.meta["val"].shape]
