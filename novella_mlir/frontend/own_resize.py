"""Bilinear and bicubic resizes (`F.interpolate`, antialiased or not) as one matmul per resized axis, for
a resize whose output size may be the length (a ViT's position embeddings interpolated to the patch grid
of the input). Along an axis of static input size m resized to n (an int or a size of the length), the
output is M @ x with M an [n, m] matrix of interpolation weights; M is built from iotas by ATen's own
formulas (the source coordinate, its floor, the clamped taps and the cubic kernel's polynomial weights),
so the compiled graph computes it on the NPU at the run length. An axis whose size does not change is the
identity (ATen's weights are then exactly one tap of 1). An input whose resized axis is itself symbolic is
NotImplemented (the op then stays, refused by name)."""

from __future__ import annotations

import torch

_CUBIC_A, _CUBIC_AA_A = -0.75, -0.5  # ATen's bicubic constant, and PIL's, which the antialiased kernel uses


def _cc1(x, a):
    return ((a + 2) * x - (a + 3)) * x * x + 1


def _cc2(x, a):
    return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a


def _scale(m: int, n, align_corners: bool, scale):
    """ATen's `area_pixel_compute_scale` as a 0-d float32 tensor: input / output pixels per output pixel."""
    one = torch.ones((), dtype=torch.float32)
    if align_corners:
        wide = one * (n - 1)
        return torch.where(wide >= 1, one * (m - 1) / torch.clamp(wide, min=1.0), 0.0)
    if scale is not None and scale > 0:
        return one * float(torch.tensor(1.0 / scale, dtype=torch.float32))
    return one * m / n


def _taps(m: int, n, align_corners: bool, scale, cubic: bool):
    """(positions [n] as float32, weights): ATen's `compute_indices_weights` of a bilinear / bicubic axis,
    as the [n, m] matrix of the weight of input j in output i."""
    i = torch.arange(n, dtype=torch.float32)
    ratio = _scale(m, n, align_corners, scale)
    src = ratio * i if align_corners else ratio * (i + 0.5) - 0.5
    j = torch.arange(m, dtype=torch.float32)
    if cubic:
        lo = torch.floor(src)
        t = src - lo
        weights = (_cc2(t + 1, _CUBIC_A), _cc1(t, _CUBIC_A), _cc1(1 - t, _CUBIC_A), _cc2(2 - t, _CUBIC_A))
        offsets = (-1, 0, 1, 2)
    else:
        src = torch.clamp(src, min=0.0)
        lo = torch.clamp(torch.floor(src), max=m - 1.0)
        frac = torch.clamp(src - lo, min=0.0, max=1.0)
        weights, offsets = (1 - frac, frac), (0, 1)
    out = torch.zeros((), dtype=torch.float32)
    for w, k in zip(weights, offsets):
        tap = torch.clamp(lo + k, min=0.0, max=m - 1.0)
        out = out + torch.where(tap.unsqueeze(-1) == j, w.unsqueeze(-1), 0.0)
    return out


def _aa_filter(x, cubic: bool):
    x = torch.abs(x)
    if not cubic:
        return torch.clamp(1 - x, min=0.0)
    return torch.where(x < 1, _cc1(x, _CUBIC_AA_A), torch.where(x < 2, _cc2(x, _CUBIC_AA_A), 0.0))


def _taps_aa(m: int, n, align_corners: bool, scale, cubic: bool):
    """ATen's `_compute_indices_min_size_weights_aa` as the [n, m] matrix: input j in output i's window
    [max(trunc(center - support + 0.5), 0), min(trunc(center + support + 0.5), m)) weighs
    filter((j - center + 0.5) / max(scale, 1)), normalized by the window's sum; the support widens with
    the scale when downsampling."""
    ratio = _scale(m, n, align_corners, scale)
    half = 2.0 if cubic else 1.0
    down = ratio >= 1.0
    support = torch.where(down, half * ratio, half)
    inv = torch.where(down, 1.0 / ratio, 1.0)
    center = ratio * (torch.arange(n, dtype=torch.float32) + 0.5)
    c = center.unsqueeze(-1)
    lo = torch.clamp(torch.trunc(c - support + 0.5), min=0.0)
    hi = torch.clamp(torch.trunc(c + support + 0.5), max=float(m))
    j = torch.arange(m, dtype=torch.float32)
    inside = (j >= lo) & (j < hi)
    w = torch.where(inside, _aa_filter((j - c + 0.5) * inv, cubic), 0.0)
    total = w.sum(-1, keepdim=True)
    return torch.where(total != 0, w / torch.where(total != 0, total, 1.0), w)


def _axis(x, dim: int, n, align_corners: bool, scale, cubic: bool, aa: bool):
    m = x.shape[dim]
    if not isinstance(m, int):
        return None
    if isinstance(n, int) and n == m and (scale is None or align_corners or float(scale) == 1.0):
        return x
    mat = (_taps_aa if aa else _taps)(m, n, align_corners, scale, cubic)
    moved = x.movedim(dim, -1)
    return torch.matmul(moved, mat.transpose(0, 1)).movedim(-1, dim)


def _resize(x, size, align_corners, scales, cubic: bool, aa: bool):
    if x.dim() != 4 or not x.dtype.is_floating_point or len(size) != 2:
        return NotImplemented
    out = x.to(torch.float32)
    for k, dim in enumerate((2, 3)):
        out = _axis(out, dim, size[k], bool(align_corners), scales[k] if scales else None, cubic, aa)
        if out is None:
            return NotImplemented
    return out.to(x.dtype)


def _output_size(x, output_size, scale_factors):
    if output_size is not None:
        return list(output_size)
    return [int(x.shape[2 + k] * float(s)) for k, s in enumerate(scale_factors)]


def _vec(cubic: bool, aa: bool):
    def decompose(x, output_size, align_corners, scale_factors):
        if output_size is None and not all(isinstance(x.shape[2 + k], int) for k in range(2)):
            return NotImplemented
        return _resize(x, _output_size(x, output_size, scale_factors), align_corners, scale_factors, cubic, aa)

    return decompose


def _default(cubic: bool, aa: bool):
    def decompose(x, output_size, align_corners, scales_h=None, scales_w=None):
        scales = None if scales_h is None and scales_w is None else [scales_h, scales_w]
        return _resize(x, list(output_size), align_corners, scales, cubic, aa)

    return decompose


def resize_decompositions() -> dict:
    """The aten resize overloads -> their matmul decompositions."""
    aten, table = torch.ops.aten, {}
    for packet, cubic, aa in (
        (aten.upsample_bicubic2d, True, False),
        (aten.upsample_bilinear2d, False, False),
        (aten._upsample_bicubic2d_aa, True, True),
        (aten._upsample_bilinear2d_aa, False, True),
    ):
        table[packet.vec] = _vec(cubic, aa)
        table[packet.default] = _default(cubic, aa)
    return table
