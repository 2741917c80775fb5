"""Top-k over values tied for every input: torch's CPU `topk` picks among equal values in the order its
sort library leaves them (of 4 equal scores it returns indices 2 and 3), a choice no rule describes, while
the NPU's `topk` (frontend/own_decompositions.py) takes the lowest indices. A router whose weight rows are
equal (a zero-initialized one) ties every expert for every token; the compiled model would then route
to other experts than eager does. Such a top-k is refused at compile time when the two choices differ.

The proof is a small forward analysis of the exported graph: a value is *tied* when it is equal along its
last dim whatever the inputs are (a constant equal along it; a linear whose weight rows and bias are equal;
pointwise ops, casts, softmax, and views that keep or cut the last dim, of tied or broadcast operands). Anything
else is not proven tied, so ties that depend on the input's values are not caught."""

from __future__ import annotations

import re

import torch

from ..errors import NovellaError

aten = torch.ops.aten
_SAME = {aten._to_copy.default, aten.to.dtype, aten.clone.default, aten.alias.default, aten.detach.default,
         aten.contiguous.default, aten._softmax.default, aten.softmax.int, aten._log_softmax.default,
         aten.log_softmax.int}  # fmt: skip
_VIEWS = {aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.unsqueeze.default,
          aten.squeeze.dim, aten.squeeze.dims, aten.expand.default, aten.flatten.using_ints}  # fmt: skip
_TOPK = aten.topk.default


def check_topk_ties(prog) -> None:
    """Refuses a `topk` along the last dim of a value tied for every input, where torch's choice among the
    ties is not the lowest indices."""
    topks = [n for n in prog.graph.nodes if n.op == "call_function" and n.target is _TOPK]
    if not topks:
        return
    consts, memo, needed = _constants(prog), {}, _ancestors(topks)
    for node in prog.graph.nodes:  # in graph order, so that no proof recurses deeper than one operand
        if node in needed:
            _tied(node, consts, memo)
    for node in topks:
        x, k, *rest = list(node.args) + [None] * 4
        dim = node.kwargs.get("dim", rest[0] if rest[0] is not None else -1)
        largest = node.kwargs.get("largest", rest[1] if rest[1] is not None else True)
        in_order = node.kwargs.get("sorted", rest[2] if rest[2] is not None else True)
        val = x.meta.get("val")
        n = val.shape[-1]
        if dim % val.dim() != val.dim() - 1 or not isinstance(n, int) or not _tied(x, consts, memo):
            continue
        torch_pick = torch.topk(torch.zeros(n), k, largest=largest, sorted=in_order).indices.tolist()
        if torch_pick != list(range(k)):
            raise NovellaError(
                f"{_innermost(node)}torch.topk(k={k}) over the last dim of values equal along it for "
                f"every input (a router whose weight rows are all equal, e.g. zero-initialized): among {n} tied "
                f"values torch's CPU kernel returns indices {torch_pick} (its sort's order, not a rule), the "
                f"NPU's topk the lowest {list(range(k))}, so the model would route differently from eager; "
                "give the router distinct weights (load trained ones or initialize it randomly)"
            )


def _ancestors(nodes) -> set:
    seen, stack = set(), list(nodes)
    while stack:
        for arg in stack.pop().all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                stack.append(arg)
    return seen


def _constants(prog) -> dict:
    """Placeholder name -> the parameter, buffer or constant tensor it stands for."""
    out = {}
    for spec in prog.graph_signature.input_specs:
        value = prog.state_dict.get(spec.target) if spec.target else None
        if value is None and spec.target in getattr(prog, "constants", {}):
            value = prog.constants[spec.target]
        if isinstance(value, torch.Tensor):
            out[spec.arg.name] = value.detach()
    return out


def _equal_along_last(t: torch.Tensor) -> bool:
    return t.dim() == 0 or bool((t == t[..., :1]).all())


def _tied(node, consts: dict, memo: dict) -> bool:
    if not isinstance(node, torch.fx.Node):
        return not isinstance(node, torch.Tensor)  # a Python scalar broadcasts
    if node not in memo:
        memo[node] = _tied_node(node, consts, memo)
    return memo[node]


def _tied_node(node, consts: dict, memo: dict) -> bool:
    if node.op == "placeholder":
        return node.name in consts and _equal_along_last(consts[node.name])
    if node.op != "call_function":
        return False
    target, args = node.target, node.args
    if target is aten.linear.default:
        weight = consts.get(getattr(args[1], "name", None))
        bias = args[2] if len(args) > 2 else None
        rows_equal = weight is not None and bool((weight == weight[:1]).all())
        return rows_equal and (bias is None or _broadcast_tied(bias, consts, memo))
    if target in _SAME:
        return _tied(args[0], consts, memo)
    if target in _VIEWS:
        return _keeps_last(args[0], node) and _tied(args[0], consts, memo)
    if isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags:
        return all(_broadcast_tied(a, consts, memo) for a in args)
    return False


def _broadcast_tied(arg, consts: dict, memo: dict) -> bool:
    """An operand of a pointwise op that is equal along the result's last dim: a scalar, a size-1 last
    dim, or a tied value."""
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    if isinstance(val, torch.Tensor) and (val.dim() == 0 or val.shape[-1] == 1):
        return True
    return _tied(arg, consts, memo)


def _keeps_last(src, node) -> bool:
    a, b = src.meta.get("val"), node.meta.get("val")
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.dim() == 0 or b.dim() == 0:
        return False
    old, new = a.shape[-1], b.shape[-1]
    return isinstance(old, int) and isinstance(new, int) and new > 0 and old % new == 0  # rows cut, not merged


def _innermost(node) -> str:
    """`file:line: ` of the source line that called the op (the model's, not the caller's), or ''."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
    return f"{frames[-1][0]}:{frames[-1][1]}: " if frames else ""
