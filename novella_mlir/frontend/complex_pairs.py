"""Complex values as pairs of reals, in the exported graph before import: the NPU computes in float32
only, and rotary embeddings written with complex numbers (DeepSeek-V2's `torch.polar` and
`view_as_complex(q) * freqs_cis`, then `view_as_real`) compute nothing a real pair cannot. A complex
tensor of shape S becomes a float tensor [*S, 2] (real, imaginary), as `view_as_real` lays it out:
`view_as_complex` and `view_as_real` are then the identity, `polar` is (r cos a, r sin a), a product
(ac - bd, ad + bc), a sum the sum of the pairs. A complex op outside these is refused by name."""

from __future__ import annotations

import re

import torch

from ..errors import UnsupportedDtypeError

aten = torch.ops.aten
_SAME = {aten.to.dtype_layout, aten.to.dtype, aten._to_copy.default, aten.clone.default, aten.alias.default,
         aten.detach.default, aten.contiguous.default}  # fmt: skip
_ASSERTS = {aten._assert_tensor_metadata.default}


def _dim(d: int, rank: int) -> int:
    return d % rank if rank else d


# ops that move the elements of a complex tensor: the same op on its pairs, with each dim argument counted
# from the front (the pair dim is the last) and the pair dim appended to each shape: (rank out, rank in, rest)
_LAYOUT = {
    aten.slice.Tensor: lambda o, i, rest: (_dim(rest[0], i), *rest[1:]) if rest else (),
    aten.select.int: lambda o, i, rest: (_dim(rest[0], i), *rest[1:]),
    aten.squeeze.dim: lambda o, i, rest: (_dim(rest[0], i),),
    aten.squeeze.dims: lambda o, i, rest: ([_dim(d, i) for d in rest[0]],),
    aten.transpose.int: lambda o, i, rest: (_dim(rest[0], i), _dim(rest[1], i)),
    aten.permute.default: lambda o, i, rest: ([_dim(d, i) for d in rest[0]] + [i],),
    aten.view.default: lambda o, i, rest: (list(rest[0]) + [2],),
    aten.reshape.default: lambda o, i, rest: (list(rest[0]) + [2],),
    aten._unsafe_view.default: lambda o, i, rest: (list(rest[0]) + [2],),
    aten.expand.default: lambda o, i, rest: (list(rest[0]) + [2], *rest[1:]),
}


def complex_as_pairs(prog) -> None:
    """Rewrites the complex values computed inside `prog`'s graph as real pairs (in place)."""
    graph = prog.graph
    if not any(_is_complex(n) for n in graph.nodes if n.op == "call_function"):
        return
    pairs: dict = {}
    for node in list(graph.nodes):
        if node.op != "call_function" or not (_is_complex(node) or any(a in pairs for a in node.all_input_nodes)):
            continue
        if node.target in _ASSERTS:
            graph.erase_node(node)
            continue
        with graph.inserting_before(node):
            new = _Emit(graph, node).rewrite(pairs)
        if _is_complex(node):
            pairs[node] = new
        else:
            node.replace_all_uses_with(new)
    graph.eliminate_dead_code()
    left = [n for n in graph.nodes if n.op == "call_function" and _is_complex(n)]
    if left:
        raise _refuse(left[0], "is still complex after the rewrite")


def _is_complex(node) -> bool:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.is_complex()


class _Emit:
    """New real nodes before `node`, each with its fake value (the importer reads types from them)."""

    def __init__(self, graph, node):
        self.graph, self.node = graph, node

    def __call__(self, target, *args):
        new = self.graph.call_function(target, args)
        vals = [_val(a) for a in args]
        with torch._guards.detect_fake_mode(torch.utils._pytree.tree_leaves(vals)):
            new.meta["val"] = target(*vals)
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in self.node.meta:
                new.meta[key] = self.node.meta[key]
        return new

    def pair(self, re_, im):
        return self(aten.cat.default, [self(aten.unsqueeze.default, re_, -1), self(aten.unsqueeze.default, im, -1)], -1)

    def parts(self, p):
        return self(aten.select.int, p, -1, 0), self(aten.select.int, p, -1, 1)

    def rewrite(self, pairs: dict):
        node, t = self.node, self.node.target
        args = [pairs.get(a, a) if isinstance(a, torch.fx.Node) else a for a in node.args]
        if t is aten.view_as_complex.default or t is aten.view_as_real.default:
            return args[0]
        if t is aten.polar.default:
            r, a = args
            return self.pair(self(aten.mul.Tensor, r, self(aten.cos.default, a)),
                             self(aten.mul.Tensor, r, self(aten.sin.default, a)))  # fmt: skip
        if t in _SAME and len(args) == 1 and node.args[0] in pairs and node.meta["val"].dtype == torch.complex64:
            return args[0]
        if t is aten.unsqueeze.default:
            d = args[1]
            return self(aten.unsqueeze.default, args[0], d if d >= 0 else d - 1)
        if t in _LAYOUT and node.args[0] in pairs:
            return self(t, args[0], *_LAYOUT[t](node.meta["val"].dim(), node.args[0].meta["val"].dim(), args[1:]))
        if t in (aten.add.Tensor, aten.sub.Tensor) and len(args) == 2 and all(a in pairs for a in node.args):
            return self(t, *args)
        if t is aten.mul.Tensor and len(args) == 2:
            return self._mul(node.args, args, pairs)
        raise _refuse(node, "has no rewrite as real pairs (polar, view_as_complex/real, mul, add, sub, "
                      "slices, views and complex64 casts have)")  # fmt: skip

    def _mul(self, raw, args, pairs):
        a, b = args
        if all(x in pairs for x in raw):
            (ar, ai), (br, bi) = self.parts(a), self.parts(b)
            m = lambda x, y: self(aten.mul.Tensor, x, y)  # noqa: E731
            return self.pair(self(aten.sub.Tensor, m(ar, br), m(ai, bi)), self(aten.add.Tensor, m(ar, bi), m(ai, br)))
        p, other = (a, b) if raw[0] in pairs else (b, a)
        if isinstance(other, torch.fx.Node):
            if _is_complex(other):
                raise _refuse(self.node, "multiplies by a complex value the graph does not compute")
            other = self(aten.unsqueeze.default, other, -1)
        return self(aten.mul.Tensor, p, other)


def _val(a):
    if isinstance(a, list):
        return [_val(x) for x in a]
    return a.meta["val"] if isinstance(a, torch.fx.Node) else a


def _refuse(node, why: str) -> UnsupportedDtypeError:
    frames = re.findall(r'File "([^"]+)", line (\d+)', node.meta.get("stack_trace") or "")
    where = f"{frames[-1][0]}:{frames[-1][1]}: " if frames else ""
    return UnsupportedDtypeError(
        f"{where}'{node.target}' on complex values {why}; the NPU computes in float32, complex values as "
        "(real, imaginary) pairs: write the op with real tensors (e.g. cos/sin instead of torch.polar)"
    )
