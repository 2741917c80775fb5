"""torch.export `dynamic_shapes` specs: aligned to forward's arguments as torch aligns them, their Dims,
and copies with one Dim replaced (static at 1, or from 2)."""

from __future__ import annotations

import torch
from torch.export import Dim

from ..errors import NovellaError


def spec_dims(spec) -> dict:
    """name -> (min, max) of every `Dim` in a torch.export `dynamic_shapes` structure."""
    out = {}
    if isinstance(spec, dict):
        items = spec.values()
    elif isinstance(spec, (list, tuple)):
        items = spec
    else:
        items = [spec] if spec is not None else []
    for item in items:
        if isinstance(item, (dict, list, tuple)):
            out.update(spec_dims(item))
        elif hasattr(item, "__name__") and hasattr(item, "min"):
            out[item.__name__] = (int(item.min), int(item.max))
    return out


def aligned_specs(module, args, spec) -> list:
    """(tensor, its dim spec) of every tensor argument, in the order torch.export flattens them: `spec`
    aligned to forward's parameters as torch aligns it (a tuple or list by position, a dict by parameter
    name, nested containers matching the arguments', None for a static argument). A spec torch would
    reject is a NovellaError saying where it differs from the arguments."""
    from torch.export import dynamic_shapes as ds

    try:
        combined = ds._combine_args(module, tuple(args), None)
    except TypeError as e:
        raise NovellaError(f"the example arguments do not fit forward's signature: {e}") from None
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(combined), key=str)
        if unknown:
            raise NovellaError(
                f"dynamic_shapes names {unknown}, which are not parameters of forward {list(combined)}; "
                "key the spec by forward's parameter names, or give a tuple with one entry per argument"
            )
        spec = {k: spec.get(k) for k in combined}
    elif isinstance(spec, (list, tuple)):
        if len(spec) != len(combined):
            raise NovellaError(
                f"dynamic_shapes has {len(spec)} entries but forward takes {len(combined)} arguments "
                f"({', '.join(combined)}); give one entry (None if static) per argument"
            )
        spec = dict(zip(combined, spec))
    elif spec is not None:
        raise NovellaError(
            f"dynamic_shapes must be a tuple, list or dict (by parameter name), not {type(spec).__name__}"
        )
    out = []

    def visit(path, arg, dspec):
        if isinstance(arg, torch.Tensor):
            out.append((arg, dspec))

    try:
        ds._tree_map_with_path(visit, combined, spec, tree_name="inputs")
    except Exception as e:  # noqa: BLE001 - torch's structural mismatch (UserError, ValueError)
        raise NovellaError(f"dynamic_shapes does not match forward's arguments: {e}") from None
    return out


def dim_items(dspec) -> list:
    """(dim, Dim or None) of one tensor's spec: a dict dim -> Dim, or a tuple / list with one entry per dim."""
    if isinstance(dspec, dict):
        return list(dspec.items())
    if isinstance(dspec, (list, tuple)):
        return list(enumerate(dspec))
    return []


def _replace_dim(spec, name: str, new):
    """`spec` with each use of the Dim named `name` replaced by `new` (`Dim.STATIC`: the dim is static)."""
    if hasattr(spec, "__name__") and hasattr(spec, "min"):
        return new if spec.__name__ == name else spec
    if isinstance(spec, dict):
        return {k: _replace_dim(v, name, new) for k, v in spec.items()}
    if isinstance(spec, (list, tuple)):
        return type(spec)(_replace_dim(v, name, new) for v in spec)
    return spec


def at_size(module, args, spec, name: str, size: int):
    """(args, spec) with every dim of the Dim `name` of length `size` and static."""
    resized = {}
    for t, dspec in aligned_specs(module, args, spec):
        shape = list(t.shape)
        for d, dim in dim_items(dspec):
            if getattr(dim, "__name__", None) == name:
                shape[d] = size
        if shape != list(t.shape):
            floating = t.dtype.is_floating_point
            resized[id(t)] = torch.randn(shape, dtype=t.dtype) if floating else torch.zeros(shape, dtype=t.dtype)
    new_args = torch.utils._pytree.tree_map(lambda a: resized.get(id(a), a), list(args))
    return tuple(new_args), _replace_dim(spec, name, Dim.STATIC)


def without_one(spec, name: str, hi: int):
    """`spec` with the Dim `name` over [2, hi]."""
    return _replace_dim(spec, name, Dim(name, min=2, max=hi))
