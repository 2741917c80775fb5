"""torch.export + the torch-mlir FX importer, into our own MLIR context.

Parameters, buffers and tensor literals become `novella.weight` ops whose
data goes to a weight table instead of `dense_resource` blobs, so the DRAM
image can be laid out by `--novella-allocate`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch.export import Dim
from torch.fx.experimental import _config as fx_config
from torch_mlir import ir
from torch_mlir.extras.fx_importer import FxImporter, FxImporterHooks

from .. import symbolic as sy
from ..dialects.novella import WeightOp
from ..errors import NovellaError
from . import explain

# Ops the NPU runs better whole than decomposed (see issue: keep high-level ops).
KEEP_HIGH_LEVEL = (
    "aten.linear",
    "aten.gelu",
    "aten.layer_norm",
    "aten.native_layer_norm",
    "aten._softmax",
    "aten.softmax",
    "aten.scaled_dot_product_attention",
    "aten.conv1d",
)


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


class _WeightHooks(FxImporterHooks):
    def __init__(self):
        self.weights: dict[str, np.ndarray] = {}

    def _weight(self, name: str, tensor: torch.Tensor, ir_type) -> ir.Value:
        self.weights[name] = tensor.detach().to(torch.float32).contiguous().numpy()
        return WeightOp(ir.StringAttr.get(name), ir_type).result

    def resolve_input(self, gni, value, info):
        if not isinstance(value, torch.Tensor):
            return None
        return self._weight(info.input_spec.target, value, info.ir_type)

    def resolve_literal(self, gni, literal, info):
        if not isinstance(literal, torch.Tensor) or literal.dim() == 0:
            return None
        name = f"const_{len(self.weights)}"
        ir_type = gni._cc.tensor_to_vtype(literal)
        return self._weight(name, literal, ir_type)


def default_decomposition_table() -> dict:
    """torch-mlir's default table minus the ops we lower whole."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = get_decomposition_table()
    return {k: v for k, v in table.items() if not any(str(k).startswith(h) for h in KEEP_HIGH_LEVEL)}


def export(module: torch.nn.Module, args, dynamic_dim: int, min_len: int, max_len: int):
    """torch.export with dim `dynamic_dim` of every tensor argument symbolic in [min, max].

    The dim is a `Dim.DYNAMIC` hint traced size-obliviously: sizes derived
    from it (e.g. a strided conv's `(T - 1) // 2 + 1`) may be 1 at the low
    end without torch's 0/1 specialization narrowing the range, and
    divisibility guards of views (`384*n % (64*n) == 0`) need no named-Dim
    solver. If torch still narrows the range, the export is refused."""
    length = Dim.DYNAMIC(min=min_len, max=max_len)
    dyn = tuple({dynamic_dim: length} if isinstance(a, torch.Tensor) else None for a in args)
    explain.check_dtypes(module)
    try:
        with explain.quiet(), fx_config.patch(backed_size_oblivious=True):
            prog = torch.export.export(module.eval(), tuple(args), dynamic_shapes=dyn, strict=False)
    except Exception as e:  # torch raises many kinds; explain names the construct and the user's line
        raise NovellaError(explain.export_error(e, module, dynamic_dim, min_len, max_len)) from None
    data_dependent = explain.unbacked(prog)
    if data_dependent:
        raise NovellaError(data_dependent)
    _check_range(prog, dynamic_dim, min_len, max_len)
    return prog


def _check_range(prog, dynamic_dim: int, lo: int, hi: int) -> None:
    ranges = [(int(r.lower), int(r.upper)) for r in prog.range_constraints.values()]
    if not ranges:
        raise NovellaError(f"torch.export specialized dim {dynamic_dim}: the model is static in it")
    if any(r != (lo, hi) for r in ranges):
        raise NovellaError(
            f"torch.export narrowed dim {dynamic_dim} from [{lo}, {hi}] to {ranges}: the model "
            "specializes on the length in part of the range (e.g. a check or a size-dependent branch)."
        )


def import_program(ctx: ir.Context, prog, decomposition_table=None) -> Imported:
    """Runs decompositions, then the FX importer, into `ctx`."""
    table = default_decomposition_table() if decomposition_table is None else decomposition_table
    hooks = _WeightHooks()
    importer = FxImporter(context=ctx, hooks=hooks)
    with explain.quiet():
        prog = prog.run_decompositions(table)
        with ctx:
            importer.import_program(prog, func_name="forward")
    symbols, positions = _symbols(prog)
    user_inputs = [n for n in prog.graph.nodes if n.op == "placeholder" and _is_user_input(prog, n)]
    out_node = next(n for n in prog.graph.nodes if n.op == "output")
    outs = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else [out_node.args[0]]
    return Imported(
        module=importer.module,
        weights=hooks.weights,
        symbols=symbols,
        arg_shapes=[_shape(n, positions) for n in user_inputs],
        out_shapes=[_shape(n, positions) for n in outs],
        positions=positions,
        exported=prog,
    )


def _is_user_input(prog, node) -> bool:
    spec = next(s for s in prog.graph_signature.input_specs if s.arg.name == node.name)
    return spec.kind.name == "USER_INPUT"


def _symbols(prog):
    syms, positions = [], {}
    for i, (s, vr) in enumerate(sorted(prog.range_constraints.items(), key=lambda kv: str(kv[0]))):
        positions[s] = i
        syms.append(sy.Symbol(i, "T" if i == 0 else str(s), int(vr.lower), int(vr.upper)))
    return syms, positions


def _shape(node, positions):
    return [d if isinstance(d, int) else d.node.expr for d in node.meta["val"].shape]
