"""Decompositions of our own, for ops neither the op table nor torch-mlir's linalg lowering takes: each
rewrites one op into ops the NPU lowers, with the op's exact semantics, or returns NotImplemented (the op
then stays and is refused by name). Most are the routing of a mixture of experts (transformers'
`grouped_mm` experts): a top-k over the experts, a sort of the expert ids, a histogram of them, an
index_put of the inverse permutation and the grouped matmul. The sort-like ones compare every pair of
positions (an [n, n] mask): meant for the n = tokens x top-k of a router, not for long vectors."""

from __future__ import annotations

import torch

from ..errors import NovellaError
from .own_resize import resize_decompositions

_ONE_HOT_MAX = 256  # the widest axis gathered by a one-hot sum: an MoE's experts, not a vocabulary


def topk_by_rounds(x, k, dim=-1, largest=True, sorted=True):
    """`aten.topk` as k rounds of max / argmax, each masking the index it took: for the small static k of
    an MoE router over its expert axis (torch-mlir lowers topk only to TMTensor, not to linalg). The values
    come sorted (as `sorted=True` has them) and ties go to the lower index, as argmax takes them. A value taken
    is masked by the dtype's lowest finite value."""
    if not isinstance(k, int):
        raise NovellaError(f"topk with a symbolic k ({k}): the NPU takes a top-k with a fixed k only")
    y = x if largest else -x
    iota = torch.arange(x.shape[dim], device=x.device).view([-1] + [1] * (x.dim() - 1 - dim % x.dim()))
    values, indices = [], []
    for _ in range(k):
        i = y.argmax(dim, keepdim=True)
        values.append(y.amax(dim, keepdim=True))
        indices.append(i)
        y = torch.where(iota == i, torch.finfo(y.dtype).min, y)  # not -inf: an amax over a non-last dim makes it nan
    out = torch.cat(values, dim)
    return (out if largest else -out), torch.cat(indices, dim)


def gather_by_one_hot(x, dim, index, sparse_grad=False):
    """`aten.gather` along a small static axis that is not a row lookup (an MoE router's scores at its top-k
    experts): out[..., j] = sum over e of x[..., e] where index[..., j] == e, the input cut to the index's
    sizes on the other dims. A lookup (every other dim 1), or an index not provably within the input, stays
    as it is (NotImplemented)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true as known

    dim %= x.dim()
    n = x.shape[dim]
    others = [d for d in range(x.dim()) if d != dim]
    lookup = all(known(x.shape[d] == 1) and known(index.shape[d] == 1) for d in others)
    fits = x.dim() == index.dim() and all(known(index.shape[d] <= x.shape[d]) for d in others)
    if lookup or not fits or not isinstance(n, int) or n > _ONE_HOT_MAX:
        return NotImplemented
    for d in others:  # gather reads the input only where the index has positions
        if not known(index.shape[d] == x.shape[d]):
            x = x.narrow(d, 0, index.shape[d])
    hot = index.movedim(dim, -1).unsqueeze(-1) == torch.arange(n, device=x.device)
    out = torch.where(hot, x.movedim(dim, -1).unsqueeze(-2), torch.zeros((), dtype=x.dtype)).sum(-1)
    return out.to(x.dtype).movedim(-1, dim)


def scatter_value_by_compare(x, dim, index, value):
    """`aten.scatter.value` along a small static axis (`mask.scatter_(1, top_groups, 1)` of an MoE router's
    group limit): out[..., e] = value where some index[..., j] == e, else x[..., e]; the index must cover
    x on the other dims (else NotImplemented), and duplicates write the same value."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true as known

    dim %= x.dim()
    n = x.shape[dim]
    others = [d for d in range(x.dim()) if d != dim]
    covers = x.dim() == index.dim() and all(known(index.shape[d] == x.shape[d]) for d in others)
    if not covers or not isinstance(n, int) or n > _ONE_HOT_MAX:
        return NotImplemented
    hot = (index.movedim(dim, -1).unsqueeze(-1) == torch.arange(n, device=x.device)).sum(-2).movedim(-1, dim) > 0
    return torch.where(hot, torch.full((), value, dtype=x.dtype, device=x.device), x)


def scatter_src_by_compare(x, dim, index, src):
    """`aten.scatter.src` along a small static axis (Llama 4's router: `full_like(logits, -inf).scatter_(1,
    top_indices, top_values)`): the index's columns j in order, each writing src[..., j] where index[..., j]
    == e (a later column wins a duplicate, as ATen's loop leaves it). The index must cover x on the other
    dims (else NotImplemented); src is read only where the index has positions."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true as known

    dim %= x.dim()
    n, k = x.shape[dim], index.shape[dim]
    others = [d for d in range(x.dim()) if d != dim]
    covers = x.dim() == index.dim() == src.dim() and all(known(index.shape[d] == x.shape[d]) for d in others)
    if not covers or not isinstance(n, int) or n > _ONE_HOT_MAX or not isinstance(k, int) or k > _ONE_HOT_MAX:
        return NotImplemented
    for d in range(src.dim()):
        if not known(src.shape[d] == index.shape[d]):
            src = src.narrow(d, 0, index.shape[d])
    iota = torch.arange(n, device=x.device)
    out = x.movedim(dim, -1)
    idx, val = index.movedim(dim, -1), src.movedim(dim, -1).to(x.dtype)
    for j in range(k):
        out = torch.where(idx[..., j : j + 1] == iota, val[..., j : j + 1], out)
    return out.movedim(-1, dim)


def slice_scatter_by_cat(x, src, dim=0, start=None, end=None, step=1):
    """`aten.slice_scatter` of a static range of a static dim (DeepSeek-V2's keys written into
    `new_empty(...)[..., :d].copy_(k_nope)`): x before the range, src, x after it, concatenated. A symbolic
    range (a KV-cache append, which the op table lowers as such) is NotImplemented."""
    dim %= x.dim()
    n = x.shape[dim]
    start = 0 if start is None else start
    end = n if end is None else end
    if step != 1 or not all(isinstance(v, int) for v in (n, start, end)):
        return NotImplemented
    start, end = (min(max(v + n if v < 0 else v, 0), n) for v in (start, end))
    end = max(end, start)
    parts = [x.narrow(dim, 0, start), src, x.narrow(dim, end, n - end)]
    return torch.cat([p for p in parts if p.shape[dim] != 0], dim)


def max_dim_by_parts(x, dim, keepdim=False):
    """`aten.max.dim` (values and indices: phimoe's sparsemixer router) as amax and argmax, which the op
    table lowers: the first index of the maximum, NaN taken as it (as ATen's max.dim takes them)."""
    return x.amax(dim, keepdim), x.argmax(dim, keepdim)


def min_dim_by_parts(x, dim, keepdim=False):
    """`aten.min.dim` as amin and argmin (the first index of the minimum, NaN taken as it)."""
    return x.amin(dim, keepdim), x.argmin(dim, keepdim)


def _last_index_where(hot):
    """Per row of the [m, n] mask, the last column that is set (-1 when none)."""
    iota = torch.arange(hot.shape[-1], device=hot.device)
    return torch.where(hot, iota, -1).amax(-1)


def sort_by_rank(x, dim=-1, descending=False):
    """`aten.sort` of a 1-D tensor, stable: position i goes to rank(i) = #{j: x_j before x_i} +
    #{j < i: x_j ties x_i}, NaN last as torch puts it (first when descending); the permutation is the
    inverse of the ranks, each value the one maximum of its rank's row (NaN, -0.0 kept). A [1, n] row
    sorted along its last dim (ViTMAE's argsort of its [batch 1, patches] noise) is the 1-D sort."""
    if x.dim() == 2 and x.shape[0] == 1 and dim in (1, -1):
        values, order = sort_by_rank(x[0], 0, descending)
        return values.unsqueeze(0), order.unsqueeze(0)
    if x.dim() != 1:
        return NotImplemented
    a, b = x.unsqueeze(0), x.unsqueeze(1)  # a[., j] = x_j, b[i, .] = x_i
    before = a > b if descending else a < b
    if x.dtype.is_floating_point:
        nan_a, nan_b = a != a, b != b
        before = before | (nan_a & ~nan_b) if descending else before | (nan_b & ~nan_a)
        ties = (a == b) | (nan_a & nan_b)
    else:
        ties = a == b
    iota = torch.arange(x.shape[0], device=x.device)
    earlier = iota.unsqueeze(0) < iota.unsqueeze(1)
    rank = (before | (ties & earlier)).sum(-1)
    hot = rank.unsqueeze(0) == iota.unsqueeze(1)  # hot[r, i]: x_i goes to r
    low = -torch.inf if x.dtype.is_floating_point else torch.iinfo(x.dtype).min
    return torch.where(hot, a, low).amax(-1), _last_index_where(hot)


def stable_sort_by_rank(x, *, stable=None, dim=-1, descending=False):
    """`aten.sort.stable`: `sort_by_rank` is stable whatever `stable` says."""
    return sort_by_rank(x, dim, descending)


def histc_by_compare(x, bins=100, min=0, max=0):
    """`aten.histc` with a given range: bin = floor((x - min) * bins / (max - min)) as ATen computes it
    (the element at max in the last bin), counted by comparing against the integers 1..bins-1; elements
    outside [min, max] and NaN are not counted. A range taken from the data (min == max) is NotImplemented."""
    if min == max or not x.dtype.is_floating_point:
        return NotImplemented
    flat = x.reshape(-1)
    pos = (flat - min) * bins / (max - min)
    edges = torch.arange(1, bins, device=x.device, dtype=x.dtype)
    index = (pos.unsqueeze(-1) >= edges).sum(-1)
    inside = (flat >= min) & (flat <= max)
    hot = (index.unsqueeze(-1) == torch.arange(bins, device=x.device)) & inside.unsqueeze(-1)
    return hot.sum(0).to(x.dtype)


def bucketize_without_boundaries(x, boundaries, *, out_int32=False, right=False):
    """`aten.bucketize.Tensor` on no boundaries (`arange(1 / n, 1.0, 1 / n)` of a one-patch side, idefics3's
    position buckets): every element is in bucket 0. Other boundaries keep the op (NotImplemented)."""
    if boundaries.numel() != 0:
        return NotImplemented
    return torch.zeros_like(x, dtype=torch.int32 if out_int32 else torch.int64)


def index_put_by_compare(x, indices, values, accumulate=False):
    """`aten.index_put` with one index tensor on dim 0 (`x[idx] = values`): row j of the result is the
    value of the last position i with idx_i == j (torch leaves duplicates unordered), else x's row j;
    picked as the one maximum over i of the rows written to j (NaN, -0.0 kept)."""
    if accumulate or len(indices) != 1 or indices[0] is None or indices[0].dim() != 1:
        return NotImplemented
    idx = indices[0]
    idx = torch.where(idx < 0, idx + x.shape[0], idx)
    hot = idx.unsqueeze(0) == torch.arange(x.shape[0], device=x.device).unsqueeze(1)  # hot[j, i]
    last = _last_index_where(hot)
    one = (torch.arange(idx.shape[0], device=x.device).unsqueeze(0) == last.unsqueeze(1)).view(
        *hot.shape, *[1] * (x.dim() - 1)
    )
    values = values.expand(idx.shape[0], *x.shape[1:]).unsqueeze(0)
    low = -torch.inf if x.dtype.is_floating_point else torch.iinfo(x.dtype).min
    picked = torch.where(one, values, low).amax(1)
    keep = (last >= 0).view(-1, *[1] * (x.dim() - 1))
    return torch.where(keep, picked, x)


def grouped_mm_by_experts(x, weight, offs):
    """transformers' `grouped_mm_fallback(x [S, K], weight [E, K, N], offs [E])`: row s of x, sorted by
    group, times the weight of its group g(s) = #{e: offs[e] <= s}; rows past offs[-1] are zero, as the
    fallback leaves them. Each of the E groups is one [S, K] @ [K, N] matmul, selected per row (dense:
    E / top-k times the routed MACs, exact per row)."""
    experts = weight.shape[0]
    if not isinstance(experts, int) or experts > _ONE_HOT_MAX:
        return NotImplemented
    rows = torch.arange(x.shape[0], device=x.device, dtype=offs.dtype)
    group = (offs.unsqueeze(0) <= rows.unsqueeze(1)).sum(-1)
    out = torch.zeros(x.shape[0], weight.shape[2], dtype=x.dtype, device=x.device)
    for e in range(experts):
        out = torch.where((group == e).unsqueeze(-1), x @ weight[e], out)
    return out


def avg_pool2d_by_windows(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                          divisor_override=None):  # fmt: skip
    """`aten.avg_pool2d` with windows that tile the input (stride = kernel, no padding: SEW's squeeze,
    `AvgPool1d(k, k)`, which torch.export traces as a 2-D pool of one row): the whole windows viewed as
    [N, C, Ho, kh, Wo, kw], moved to [N, C, Ho, Wo, kh * kw] and averaged. Other pools: NotImplemented."""
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride) if stride else (kh, kw)
    if (sh, sw) != (kh, kw) or _pair(padding) != (0, 0) or ceil_mode or divisor_override or x.dim() != 4:
        return NotImplemented
    n, c, h, w = x.shape
    ho, wo = h // kh, w // kw
    x = x[:, :, : ho * kh, : wo * kw].reshape(n, c, ho, kh, wo, kw)
    if kh != 1:
        x = x.permute(0, 1, 2, 4, 3, 5)
    return x.reshape(n, c, ho, wo, kh * kw).mean(-1)


def _pair(v) -> tuple[int, int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (v[0], v[-1])


_ATEN = {
    torch.ops.aten.avg_pool2d.default: avg_pool2d_by_windows,
    torch.ops.aten.topk.default: topk_by_rounds,
    torch.ops.aten.gather.default: gather_by_one_hot,
    torch.ops.aten.sort.default: sort_by_rank,
    torch.ops.aten.sort.stable: stable_sort_by_rank,
    torch.ops.aten.histc.default: histc_by_compare,
    torch.ops.aten.bucketize.Tensor: bucketize_without_boundaries,
    torch.ops.aten.index_put.default: index_put_by_compare,
    torch.ops.aten.scatter.value: scatter_value_by_compare,
    torch.ops.aten.scatter.src: scatter_src_by_compare,
    torch.ops.aten.slice_scatter.default: slice_scatter_by_cat,
    torch.ops.aten.max.dim: max_dim_by_parts,
    torch.ops.aten.min.dim: min_dim_by_parts,
    **resize_decompositions(),
}
_CUSTOM = {"transformers::grouped_mm_fallback": grouped_mm_by_experts}  # ops registered by a library


def own_decompositions(graph_targets) -> dict:
    """The decompositions above for the ops of the graph (a library's op by its registered name)."""
    table = {t: fn for t, fn in _ATEN.items() if t in graph_targets}
    for t in graph_targets:
        name = t.name() if isinstance(t, torch._ops.OpOverload) else None
        if name in _CUSTOM:
            table[t] = _CUSTOM[name]
    return table
