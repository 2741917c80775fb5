"""Higher-order ops that only wrap a region of the graph, inlined before import.

torch.export keeps a `torch.no_grad()` or autocast region of the model (M2M100's sinusoidal position
embedding is decorated `@torch.no_grad()`) as a call of a higher-order op on a submodule:
`wrap_with_set_grad_enabled(False, submod, *operands)`, `wrap_with_autocast(..., submod, *operands)`.
torch-mlir's FX importer has no import for them. For inference the wrapper changes nothing (no grad is
taken; autocast is off on the NPU, which computes in float32), so the submodule's graph is copied
into the caller in its place.
"""

from __future__ import annotations

import operator

import torch


def _wrappers() -> tuple:
    hop = torch.ops.higher_order
    return tuple(getattr(hop, n) for n in ("wrap_with_set_grad_enabled", "wrap_with_autocast") if hasattr(hop, n))


def inline_wrappers(gm: torch.fx.GraphModule) -> bool:
    """Inlines every wrapping higher-order op of `gm` (nested ones too); True if it changed the graph."""
    changed, wrappers = False, _wrappers()
    while True:
        node = next((n for n in gm.graph.nodes if n.op == "call_function" and n.target in wrappers), None)
        if node is None:
            break
        _inline(gm, node)
        changed = True
    if changed:
        gm.graph.eliminate_dead_code()
        gm.delete_all_unused_submodules()
    return changed


def _inline(gm: torch.fx.GraphModule, node: torch.fx.Node) -> None:
    at = next(i for i, a in enumerate(node.args) if isinstance(a, torch.fx.Node) and a.op == "get_attr")
    sub = getattr(gm, node.args[at].target)
    operands = node.args[at + 1 :]
    inputs = [n for n in sub.graph.nodes if n.op == "placeholder"]
    val_map = dict(zip(inputs, operands))
    with gm.graph.inserting_before(node):
        out = gm.graph.graph_copy(sub.graph, val_map)
    results = list(out) if isinstance(out, (tuple, list)) else [out]
    for user in list(node.users):
        if user.op == "call_function" and user.target is operator.getitem:
            user.replace_all_uses_with(results[user.args[1]])
            gm.graph.erase_node(user)
    if node.users:
        node.replace_all_uses_with(results[0])
    gm.graph.erase_node(node)
