"""Extraction: a module after `--novella-inst-gen` as a one-program artifact (MacroMeta, TileMeta,
DRAM plan, weights); layers of equal shapes share one MacroMeta entry."""

from __future__ import annotations

import json

import numpy as np
from torch_mlir import ir

from simulator import isa

from .. import symbolic as sy
from ..dialects.fields import result_dram
from ..runtime.expr import LANE
from ..symbolic.postfix import to_postfix
from ..transforms.common import body_ops, current, from_attr, functions, ir_memo, remember
from .decide import annotate
from .format import FORMAT_VERSION, Artifact, InstTemplate, MacroMeta, Program, TensorMeta, TileMeta

_ENUMS = {"fn": isa.VecFn, "mode": isa.VecMode}
_POSTFIXES = ir_memo()  # expressions, affine maps and integer sets -> postfix programs (all of a compile's programs)


def extract(module: ir.Module, weights: dict, config, reason: str = "generic") -> Artifact:
    """Builds a one-program artifact from a module after `--novella-inst-gen` (`reason`: why the program exists)."""
    mop = module.operation
    fn = functions(mop)[0]
    block = fn.regions[0].blocks[0]
    dram = _dram_of(fn)
    macros, index, tiles, layout, memo = [], {}, [], {}, current(_POSTFIXES)
    for op in body_ops(fn):
        name = op.operation.name
        if name == "novella.weight":
            wname = ir.StringAttr(op.attributes["name"]).value
            layout[wname] = [sy.evaluate(_dram_expr(op), []), list(weights[wname].shape)]
        elif name == "novella.macro":
            mm, bases, key = _macro(op, dram, memo)
            idx = index.setdefault(key, len(macros))
            if idx == len(macros):
                macros.append(mm)
            tiles.append(TileMeta(idx, f"{mm.kernel.split('.')[1]}_{len(tiles)}", _grid(op, memo), bases))
    ret = list(block.operations)[-1]
    symbols = [[s.name, s.lo, s.hi] for s in sy.read_symbols(mop)]
    program = Program(
        ranges=[[lo, hi] for _, lo, hi in symbols],
        reason=reason,
        inputs=[_tensor_meta(a, dram, _limit(fn, i)) for i, a in enumerate(block.arguments)],
        outputs=[_tensor_meta(v, dram) for v in ret.operands],
        dram_size=to_postfix(sy.map_results(fn.attributes["novella.dram_size"])[0]),
        weight_layout=layout,
        macros=macros,
        tiles=tiles,
        kv=_kv_meta(fn),
    )
    return Artifact(
        version=FORMAT_VERSION,
        config=config.to_dict(),
        config_fingerprint=config.fingerprint(),
        symbols=symbols,
        programs=[annotate(program)],
        weights={k: np.ascontiguousarray(v, np.float32) for k, v in weights.items() if k in layout},
    )


def _kv_meta(fn) -> dict:
    """The paged cache of a function after `--novella-kv-cache` (empty without one)."""
    from ..kernels.kv_cache import PAGED_VBASE, PAGED_VSPAN

    if "novella.kv_cache" not in fn.attributes:
        return {}
    d = from_attr(fn.attributes["novella.kv_cache"])
    window = {"window": d["window"]} if "window" in d else {}
    return window | {
        "page_size": d["page_size"],
        "vbase": PAGED_VBASE,
        "vspan": PAGED_VSPAN,
        "slots": d["slots"],
        "outputs": d["results"],
        "inputs": sorted([int(k), v] for k, v in d["args"].items()),
    }


def _dram_expr(op) -> ir.AffineExpr:
    return sy.map_results(result_dram(op))[0]


def _dram_of(fn):
    """value -> DRAM offset expression, for block arguments and op results."""
    block = fn.regions[0].blocks[0]
    arg_attrs = list(ir.ArrayAttr(fn.attributes["arg_attrs"]))
    out = {}
    for a, d in zip(block.arguments, arg_attrs):
        out[a] = sy.map_results(ir.DictAttr(d)["novella.dram"])[0]
    for op in body_ops(fn):
        if result_dram(op) is not None:
            out[op.results[0]] = _dram_expr(op)
    return out


def _tensor_meta(v, dram, limit: list | None = None) -> TensorMeta:
    shape = sy.shape_of(ir.RankedTensorType(v.type))
    return TensorMeta([to_postfix(e) for e in shape], to_postfix(dram[v]), limit=limit or [])


def _limit(fn, i: int) -> list:
    """[max |value|, why] of input `i` from the function's `novella.input_limits` (an integer scan of it)."""
    from ..frontend.lowering.scan import LIMITS

    return from_attr(fn.attributes[LIMITS]).get(str(i), []) if LIMITS in fn.attributes else []


def _grid(macro, memo: dict) -> list:
    return [_postfix(e, memo) for e in sy.map_results(macro.attributes["grid"])]


def _macro(macro, dram, memo: dict) -> tuple[MacroMeta, dict, tuple]:
    """(MacroMeta, tensor bases, key): macros of equal keys have equal JSON (the templates' JSON)."""
    n_dims = len(sy.map_results(macro.attributes["grid"]))
    bases = {"-1": _postfix(dram[macro.results[0]], memo)}
    insts, texts = [], []
    for inst in macro.regions[0].blocks[0].operations:
        t, text = _template(inst, memo)
        if t.tensor is not None and t.tensor >= 0:
            bases[str(t.tensor)] = _postfix(dram[inst.operands[0]], memo)
        insts.append(t)
        texts.append(text)
    kernel = ir.StringAttr(macro.attributes["kernel"]).value
    schedule = from_attr(macro.attributes["schedule"])
    key = (kernel, n_dims, json.dumps(schedule, sort_keys=True), tuple(texts))
    return MacroMeta(kernel, n_dims, insts, schedule), bases, key


def _postfix(expr, memo: dict) -> list:
    """`to_postfix(expr)`, remembered in `memo` by the expression (uniqued in the context)."""
    key = ("expr", expr)
    if key not in memo:
        memo[key] = to_postfix(expr)
    return list(memo[key])


def _lane_field(prog: list, lane) -> list:
    """A `when` program with its lane's field: symbol n_syms of the set of an op with a `lane` map (the
    grid point's lane, over n_syms symbols) becomes the field at n_syms + lane (`runtime/expr.py` "sym@")."""
    if lane is None:
        return prog
    m = ir.AffineMapAttr(lane).value
    at, out = f"s{m.n_symbols}", []
    for tok in prog:
        out += [*to_postfix(m.results[0]), m.n_symbols, "+", LANE] if tok == at else [tok]
    return out


_TEMPLATES = ir_memo()  # an inst's attributes -> (template, its JSON) (equal layers, shape-bucket programs)


def _template(inst, memo: dict) -> tuple[InstTemplate, str]:
    """The template of one `novella.inst` (a copy: templates share no lists) and its JSON text."""
    items = tuple(inst.attributes.items())
    t, text = remember(_TEMPLATES, items, _new_template, items, memo)
    var = {k: [list(p) for p in v] for k, v in t.var.items()}
    when = [[k, list(p)] for k, p in t.when]
    return InstTemplate(t.opcode, dict(t.const), var, when, t.tensor, dict(t.slot)), text


def _new_template(items: tuple, memo: dict) -> InstTemplate:
    """The template of an inst's attributes (name, attribute) pairs. `memo`: postfix programs by affine
    map / integer set attribute (uniqued in the context), shared by equal layers."""
    attrs = dict(items)
    opcode = ir.StringAttr(attrs.pop("opcode")).value
    tensor = from_attr(attrs.pop("tensor")) if "tensor" in attrs else None
    if opcode == "STORE":
        tensor = -1
    when, lane = [], attrs.pop("lane", None)
    if "when" in attrs:
        a = attrs.pop("when")
        if (a, lane) not in memo:
            memo[a, lane] = [(kind, _lane_field(to_postfix(e), lane)) for kind, e in sy.integer_set_constraints(a)]
        when = [[kind, list(p)] for kind, p in memo[a, lane]]
    slot = from_attr(attrs.pop("slot")) if "slot" in attrs else {}
    const, var = {}, {}
    for k, a in attrs.items():
        if isinstance(a, ir.AffineMapAttr):
            if a not in memo:
                memo[a] = [to_postfix(e) for e in a.value.results]
            var[k] = [list(p) for p in memo[a]]
        else:
            v = from_attr(a)
            const[k] = int(_ENUMS[k][v]) if k in _ENUMS else v
    t = InstTemplate(opcode, const, var, when, tensor, slot)
    return t, json.dumps(t, sort_keys=True, default=vars)
