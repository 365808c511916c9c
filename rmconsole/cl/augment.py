"""Batched, per-sample image augmentation on the training device.

torchvision's RandAugment/AutoAugment draw ONE op and magnitude per call, so a batched call
augments every image the same way. RM needs each sample to get its own draw (training
diversity, and the 12 independent views of uncertainty scoring). Here every op of
torchvision's augmentation space takes a per-sample magnitude tensor and runs once per op
over all the samples that drew it: colour ops are the same blends torchvision computes, and
the geometric ops build one affine grid per sample with torchvision's own inverse-matrix and
grid conventions (tests compare each op with `torchvision.transforms.v2.functional`).

Every augmentation is a *draw* and an *apply*. The draw makes the random parameters of each
sample on the host from the run's generator, always in the same order; the apply transforms
the pixels on the device without a host synchronisation (per-sample parameters travel in
one asynchronous copy). The training engine draws several chunks' parameters in the order
an unbatched loop draws them and applies them in one call (train.py), so how many images one
call holds changes no draw and no pixel. Nearest-neighbour geometry (crop, flip, shear,
translate, rotate) is a gather through a pixel index map: the map of each (op, magnitude)
is what torchvision's affine grid and `grid_sample` pick, computed once and cached, in
arithmetic that is the same on every CPU. torchvision's own grid is a BLAS product, so at a
source coordinate exactly on a half it picks a CPU-dependent neighbour; the tests compare
away from such ties (docs/performance.md, "What is bit-stable across CPUs").

Images stay uint8 (N, C, H, W) until `normalize`.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import cast

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .catalog import AUGMENTATIONS, parse_augment  # noqa: F401  (re-exported)

OPS = (
    "Identity",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "Rotate",
    "Brightness",
    "Color",
    "Contrast",
    "Sharpness",
    "Posterize",
    "Solarize",
    "AutoContrast",
    "Equalize",
    "Invert",
)
OP_ID = {name: i for i, name in enumerate(OPS)}
GEOMETRIC = ("ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate")
SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness"}
RANDAUGMENT_OPS = OPS[:14]  # torchvision's RandAugment space: everything but Invert


def magnitudes(op: str, bins: int, height: int, width: int) -> Tensor | None:
    """torchvision's magnitude table for RandAugment/AutoAugment (None: the op has none)."""
    if op in ("ShearX", "ShearY"):
        return torch.linspace(0.0, 0.3, bins)
    if op == "TranslateX":
        return torch.linspace(0.0, 150.0 / 331.0 * width, bins)
    if op == "TranslateY":
        return torch.linspace(0.0, 150.0 / 331.0 * height, bins)
    if op == "Rotate":
        return torch.linspace(0.0, 30.0, bins)
    if op in ("Brightness", "Color", "Contrast", "Sharpness"):
        return torch.linspace(0.0, 0.9, bins)
    if op == "Posterize":
        return (8 - (torch.arange(bins) / ((bins - 1) / 4))).round().int().float()
    if op == "Solarize":
        return torch.linspace(1.0, 0.0, bins)
    return None


# AutoAugment's CIFAR10 policy (Cubuk et al. 2019): 25 sub-policies of two (op, p, bin).
# The RM authors use it for every dataset (PROTOCOL §4).
CIFAR10_POLICY = (
    (("Invert", 0.1, None), ("Contrast", 0.2, 6)),
    (("Rotate", 0.7, 2), ("TranslateX", 0.3, 9)),
    (("Sharpness", 0.8, 1), ("Sharpness", 0.9, 3)),
    (("ShearY", 0.5, 8), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.5, None), ("Equalize", 0.9, None)),
    (("ShearY", 0.2, 7), ("Posterize", 0.3, 7)),
    (("Color", 0.4, 3), ("Brightness", 0.6, 7)),
    (("Sharpness", 0.3, 9), ("Brightness", 0.7, 9)),
    (("Equalize", 0.6, None), ("Equalize", 0.5, None)),
    (("Contrast", 0.6, 7), ("Sharpness", 0.6, 5)),
    (("Color", 0.7, 7), ("TranslateX", 0.5, 8)),
    (("Equalize", 0.3, None), ("AutoContrast", 0.4, None)),
    (("TranslateY", 0.4, 3), ("Sharpness", 0.2, 6)),
    (("Brightness", 0.9, 6), ("Color", 0.2, 8)),
    (("Solarize", 0.5, 2), ("Invert", 0.0, None)),
    (("Equalize", 0.2, None), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.2, None), ("Equalize", 0.6, None)),
    (("Color", 0.9, 9), ("Equalize", 0.6, None)),
    (("AutoContrast", 0.8, None), ("Solarize", 0.2, 8)),
    (("Brightness", 0.1, 3), ("Color", 0.7, 0)),
    (("Solarize", 0.4, 5), ("AutoContrast", 0.9, None)),
    (("TranslateY", 0.9, 9), ("TranslateY", 0.7, 9)),
    (("AutoContrast", 0.9, None), ("Solarize", 0.8, 3)),
    (("Equalize", 0.8, None), ("Invert", 0.1, None)),
    (("TranslateY", 0.7, 9), ("AutoContrast", 0.9, None)),
)


# ----------------------------------------------------------------------------- host -> device


def _to(values: Tensor, device: torch.device) -> Tensor:
    """A host tensor on `device`, copied without blocking the host (from pinned memory).
    Always through `.to` (on one device it returns `values`), so an audit sees the copy a GPU makes."""
    if device.type == "cuda" and values.device.type == "cpu":
        return values.pin_memory().to(device, non_blocking=True)
    return values.to(device)


def _on(values: Tensor, like: Tensor) -> Tensor:
    return _to(values, like.device)


# ----------------------------------------------------------------------------- kernels


def _blend(images: Tensor, degenerate: Tensor, ratio: Tensor, rest: Tensor) -> Tensor:
    """torchvision's _blend with one ratio per sample (same float operations, same result);
    `ratio` and `rest` = 1 - ratio are float32 columns (1 - ratio taken in float64 on the host,
    as torchvision's Python floats are)."""
    out = images.float().mul_(ratio).addcmul_(degenerate.expand_as(images), rest)
    return out.clamp_(0, 255).to(torch.uint8)


def _grayscale(images: Tensor) -> Tensor:
    if images.shape[1] == 1:
        return images.float()
    r, g, b = images.float().unbind(1)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(1).floor_()


def _inverse_matrices(angle: Tensor, translate: Tensor, shear: Tensor, center: Tensor) -> Tensor:
    """(n, 2, 3) float64 inverse matrices of F.affine (torchvision's `_get_inverse_affine_matrix`),
    per sample; the tests check that every table magnitude's entries round to float32 with room
    to spare, so a last-ulp difference in another CPU's float64 cos/tan cannot move them."""
    dt = torch.float64
    rot, sx, sy = angle.to(dt).deg2rad(), shear[:, 0].to(dt).deg2rad(), shear[:, 1].to(dt).deg2rad()
    cx, cy = center[:, 0].to(dt), center[:, 1].to(dt)
    tx, ty = translate[:, 0].to(dt), translate[:, 1].to(dt)
    a = torch.cos(rot - sy) / torch.cos(sy)
    b = -(a * torch.tan(sx) + torch.sin(rot))
    cc = torch.sin(rot - sy) / torch.cos(sy)
    d = torch.cos(rot) - cc * torch.tan(sx)
    m0, m1, m3, m4 = d, -b, -cc, a
    m2 = cx - m0 * (cx + tx) - m1 * (cy + ty)
    m5 = cy - m3 * (cx + tx) - m4 * (cy + ty)
    return torch.stack([torch.stack([m0, m1, m2], 1), torch.stack([m3, m4, m5], 1)], 1)


def _affine_grid(
    angle: Tensor, translate: Tensor, shear: Tensor, center: Tensor, h: int, w: int, device: torch.device
) -> Tensor:
    """(n, h, w, 2) sampling grid of F.affine with per-sample angle (deg), translate (px, 2),
    shear (deg, 2) and center (2, pixels relative to the image centre): torchvision's
    inverse matrix (float64, rounded to float32 as torchvision does) and its grid arithmetic
    (float32, one correctly rounded elementwise operation at a time, so the same on every CPU;
    torchvision's own grid is a BLAS product whose rounding is the CPU's, see docs/reproducing.md)."""
    theta = _inverse_matrices(angle, translate, shear, center).to(torch.float32)
    return _grid_of(_to(theta, torch.device(device)), h, w, device)


def _grid_of(theta: Tensor, h: int, w: int, device: torch.device) -> Tensor:
    """(n, h, w, 2) grid of float32 inverse matrices `theta` (n, 2, 3), as torchvision's
    `_affine_grid` defines it, in separate elementwise float32 operations (see `_affine_grid`)."""
    n = len(theta)
    xs = torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, w, device=device).view(1, 1, w)
    ys = torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, h, device=device).view(1, h, 1)
    scale = _to(torch.tensor([0.5 * w, 0.5 * h]), torch.device(device)).view(1, 2, 1)
    t = (theta / scale).unsqueeze(-1).unsqueeze(-1)  # (n, 2, 3, 1, 1)
    grid = torch.empty(n, h, w, 2, device=device)
    for k in range(2):  # written in place: the same float operations as stacking the two planes
        torch.add(xs * t[:, k, 0] + ys * t[:, k, 1], t[:, k, 2], out=grid[..., k])
    return grid


def affine_per_sample(
    images: Tensor, angle: Tensor, translate: Tensor, shear: Tensor, center: Tensor, fill: float = 0.0
) -> Tensor:
    """F.affine (nearest) with per-sample angle (deg), translate (px, 2), shear (deg, 2) and
    center (2, pixels relative to the image centre), following torchvision's conventions."""
    n, c, h, w = images.shape
    grid = _affine_grid(angle, translate, shear, center, h, w, images.device)
    out = nnf.grid_sample(images.float(), grid, mode="nearest", padding_mode="zeros", align_corners=False)
    if fill:
        inside = nnf.grid_sample(
            torch.ones(n, 1, h, w, device=images.device),
            grid,
            mode="nearest",
            padding_mode="zeros",
            align_corners=False,
        )
        out = torch.where(inside < 0.5, torch.full_like(out, fill), out)
    return out.round_().to(torch.uint8)


def _geometric_matrix(op: str, m: float, h: int, w: int) -> list[float]:
    """The float64 inverse matrix (row-major 2x3) with which torchvision's RandAugment/AutoAugment
    apply ShearX/Y, TranslateX/Y or Rotate of magnitude `m`: their arguments to F.affine / F.rotate
    (shear = degrees(atan(m)) about the top-left corner, whole-pixel translation, rotation by -m
    about the centre) through `_get_inverse_affine_matrix`'s formula, in the same Python `math`
    calls in the same order. So it is torchvision's matrix bit for bit on any machine: some of its
    entries sit exactly on a float32 rounding midpoint (e.g. -w/2 * tan(atan(0.28))), where the
    last float64 bit of tan decides the float32 theta, so a vectorised torch.tan could differ."""
    rot = sx = sy = cx = cy = tx = ty = 0.0
    if op in ("ShearX", "ShearY"):
        shear = math.radians(math.degrees(math.atan(m)))
        sx, sy = (shear, 0.0) if op == "ShearX" else (0.0, shear)
        cx, cy = -w * 0.5, -h * 0.5
    elif op == "TranslateX":
        tx = float(int(m))
    elif op == "TranslateY":
        ty = float(int(m))
    else:
        rot = math.radians(-m)  # F.rotate builds its matrix with -angle
    cos_sy, tan_sx = math.cos(sy), math.tan(sx)
    a = math.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot - sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    matrix = [d, -b, 0.0, -c, a, 0.0]
    matrix[2] += cx - matrix[0] * (cx + tx) - matrix[1] * (cy + ty)
    matrix[5] += cy - matrix[3] * (cx + tx) - matrix[4] * (cy + ty)
    return matrix


# Pixel index maps of the geometric ops: (h, w, device) -> {(op, magnitude) key: int32 (h*w,)},
# where a map entry is the source pixel (row-major) or h*w for "outside" (filled with 0).
_MAPS: dict[tuple[int, int, str], dict[int, Tensor]] = {}
_MAP_BUDGET_BYTES = 256 * 2**20  # per image size and device; cleared when full (RandAugment needs ~310 maps)


def _map_keys(op_ids: Tensor, mags: Tensor) -> Tensor:
    """One int64 per (op, float32 magnitude): the op id and the magnitude's bits."""
    bits = mags.to(torch.float32).contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return (op_ids.to(torch.int64) << 32) | bits


def _geometric_maps(keys: list[int], h: int, w: int, device: torch.device) -> list[Tensor]:
    """The (h*w,) int64 index map of each key, computed where missing from the exact grid
    `affine_per_sample` uses, with grid_sample's nearest rule (so a map picks what it would)."""
    cache = _MAPS.setdefault((h, w, str(device)), {})
    missing = [k for k in dict.fromkeys(keys) if k not in cache]
    if missing:
        if h * w >= 2**24:
            raise ValueError(f"images of {h}x{w} pixels are too large for the geometric ops")
        if (len(cache) + len(missing)) * h * w * 8 > _MAP_BUDGET_BYTES:
            cache.clear()
        miss = torch.tensor(missing, dtype=torch.int64)
        op_ids = (miss >> 32).tolist()
        mags = (miss & 0xFFFFFFFF).to(torch.int32).view(torch.float32).tolist()
        theta = torch.tensor(
            [_geometric_matrix(OPS[i], m, h, w) for i, m in zip(op_ids, mags)], dtype=torch.float32
        ).view(len(missing), 2, 3)
        grid = _grid_of(_to(theta, torch.device(device)), h, w, device)
        # grid_sample(nearest, align_corners=False) picks round-half-even(((g + 1) * size - 1) / 2);
        # spelled out as separate float32 operations, each correctly rounded on any CPU or GPU,
        # rather than left to grid_sample's compiled kernel (fused multiply-add is a build choice).
        # The same picks as grid_sample's on every grid tried (tests/cl/test_augment.py).
        ix = grid[..., 0].add(1.0).mul_(w).sub_(1.0).div_(2.0).round_()
        iy = grid[..., 1].add(1.0).mul_(h).sub_(1.0).div_(2.0).round_()
        inside = (ix >= 0) & (ix <= w - 1) & (iy >= 0) & (iy <= h - 1)
        index = torch.where(inside, iy.to(torch.int64) * w + ix.to(torch.int64), h * w)
        index = index.view(len(missing), h * w)
        for k, row in zip(missing, index):
            cache[k] = row
    return [cache[k] for k in keys]


def _remap(images: Tensor, maps: list[Tensor], counts: list[int], out: Tensor) -> None:
    """`out` = pixels through index maps: the first counts[0] images through maps[0], and so
    on (a map entry h*w gives 0)."""
    n, c, h, w = images.shape
    src = nnf.pad(images.reshape(n, c, h * w), (0, 1))
    dst = out.view(n, c, h * w)
    start = 0
    for index, count in zip(maps, counts):
        torch.gather(
            src[start : start + count],
            2,
            index.view(1, 1, h * w).expand(count, c, h * w),
            out=dst[start : start + count],
        )
        start += count


def _smoothed(out: Tensor) -> Tensor:
    """torchvision's sharpness blur of the interior, round(conv2d(image, [[1 1 1] [1 5 1] [1 1 1]] / 13)),
    from the whole-number sum S of the kernel (exact in float32): conv2d's float sum is within
    3e-4 of S / 13, and S / 13 is never closer than 1/26 to a half, so both round alike."""
    rows = out[..., :, :-2] + out[..., :, 1:-1] + out[..., :, 2:]
    total = rows[..., :-2, :] + rows[..., 1:-1, :] + rows[..., 2:, :]
    return total.add_(out[..., 1:-1, 1:-1], alpha=4).mul_(1.0 / 13.0).round_()


def _sharpness(images: Tensor, rest: Tensor) -> Tensor:
    n, c, h, w = images.shape
    if h <= 2 or w <= 2:
        return images.clone()
    out = images.float()
    view = out[..., 1:-1, 1:-1]
    view.addcmul_(_smoothed(out).sub_(view), rest)
    return out.clamp_(0, 255).to(torch.uint8)


def _colour(op: str, images: Tensor, ratio: Tensor, rest: Tensor, mask: Tensor, threshold: Tensor) -> Tensor:
    """A colour op on `images`, with its per-sample parameters as device columns."""
    if op == "Brightness":  # blending with black: torchvision adds 0 * (1 - ratio), which changes nothing
        return images.float().mul_(ratio).clamp_(0, 255).to(torch.uint8)
    if op == "Color":
        return images.clone() if images.shape[1] == 1 else _blend(images, _grayscale(images), ratio, rest)
    if op == "Contrast":
        mean = _grayscale(images).mean(dim=(1, 2, 3), keepdim=True)
        return _blend(images, mean, ratio, rest)
    if op == "Sharpness":
        return _sharpness(images, rest)
    if op == "Posterize":
        return images & mask
    if op == "Solarize":  # float(v) >= t  <=>  v >= ceil(t) for whole v: no float image
        return torch.where(images >= threshold, 255 - images, images)
    if op == "AutoContrast":
        return _autocontrast(images)
    if op == "Equalize":
        return _equalize(images)
    if op == "Invert":
        return images.bitwise_not()
    if op == "Identity":
        return images.clone()
    raise ValueError(f"unknown op {op!r}")


def _equalize(images: Tensor) -> Tensor:
    """torchvision's (and PIL's) histogram equalisation of uint8 images, channel by channel:
    whole-number arithmetic, so the same LUT; an image of one value (but for a few pixels)
    is left as it is."""
    flat = images.flatten(-2).long()
    hist = torch.zeros(*images.shape[:-2], 256, dtype=torch.int64, device=images.device)
    hist.scatter_add_(-1, flat, torch.ones_like(flat))
    top = images.flatten(-2).amax(-1, keepdim=True).long()  # the last bin in use
    step = (flat.shape[-1] - hist.gather(-1, top)).div_(255, rounding_mode="floor")
    lut = hist.cumsum(-1)[..., :-1].add_(step // 2).div_(step.clamp(min=1), rounding_mode="floor").clamp_(0, 255)
    lut = nnf.pad(lut, (1, 0)).to(torch.uint8)  # lut[0] = 0
    equalized = lut.gather(-1, flat).view_as(images)
    return torch.where((step != 0).unsqueeze(-1), equalized, images)


def _autocontrast(images: Tensor) -> Tensor:
    """torchvision's autocontrast (the same float operations), with `where` in place of its
    boolean-mask assignments, which would wait for the device."""
    x = images.float()
    minimum = x.amin(dim=(-2, -1), keepdim=True)
    maximum = x.amax(dim=(-2, -1), keepdim=True)
    flat = maximum == minimum
    inv_scale = torch.where(flat, 1.0, maximum.sub_(minimum).mul_(1.0 / 255))
    return x.sub_(torch.where(flat, 0.0, minimum)).div_(inv_scale).clamp_(0, 255).to(torch.uint8)


def _colour_params(m: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The colour ops' per-sample parameters of float32 magnitudes `m`, as float32 columns (each
    exact): the blend ratio 1 + m and its 1 - ratio (taken in float64, as torchvision's Python
    floats are), Posterize's bit mask, Solarize's whole-number threshold."""
    factor = 1.0 + m.to(torch.float64)
    bits = m.round().long().clamp(0, 8)
    mask = ((1 << bits) - 1) << (8 - bits)
    threshold = torch.ceil(m * 255.0).clamp(0, 256)
    return factor.float(), (1.0 - factor).float(), mask.float(), threshold


# samples are sorted by group: 0 Identity, 1 every geometric op (one gather), then one per colour op
_GROUP = torch.tensor([0 if op == "Identity" else 1 if op in GEOMETRIC else 2 + i for i, op in enumerate(OPS)])
_GROUP_OP = {int(g): op for op, g in zip(OPS, _GROUP.tolist()) if g >= 2}


def apply_ops(images: Tensor, op_ids: Tensor, mags: Tensor) -> Tensor:
    """Apply op `OPS[op_ids[i]]` with signed magnitude `mags[i]` to image i, for all i at once.

    One kernel call per distinct colour op and one gather for all the geometric ones, whatever
    the number of distinct magnitudes. The per-sample parameters are worked out on the host
    and reach the device in one asynchronous copy: no host synchronisation.
    """
    n, c, h, w = images.shape
    op_ids = op_ids.cpu().to(torch.int64)
    mags = mags.cpu().float()
    if n == 0:
        return images.clone()
    if n >= 2**24:  # the per-sample parameters travel as float32
        half = n // 2
        return torch.cat(
            [apply_ops(images[:half], op_ids[:half], mags[:half]), apply_ops(images[half:], op_ids[half:], mags[half:])]
        )
    group = _GROUP[op_ids]
    order = torch.argsort(group, stable=True)
    counts = torch.bincount(group, minlength=len(OPS) + 2).tolist()
    ids, m = op_ids[order], mags[order]
    factor, rest, mask, threshold = _colour_params(m)
    start_geo, n_geo = counts[0], counts[1]
    keys: list[int] = []
    if n_geo:  # the geometric samples, grouped by (op, magnitude): one index map per group
        seg = slice(start_geo, start_geo + n_geo)
        uniq, inverse = torch.unique(_map_keys(ids[seg], m[seg]), return_inverse=True)
        keys, key_counts = uniq.tolist(), torch.bincount(inverse, minlength=len(uniq)).tolist()
        order[seg] = order[seg][torch.argsort(inverse, stable=True)]
    if counts[0] == n:
        return images.clone()
    back = torch.empty_like(order)
    back[order] = torch.arange(n)
    # one float32 block: exact for indices < 2**24, float32 ratios, 8-bit masks and thresholds
    params = torch.stack([order.float(), back.float(), factor, rest, mask, threshold], 1)
    params = _on(params, images)
    # work on the samples sorted by group (contiguous slices), then put them back in order
    src = images.index_select(0, params[:, 0].long())
    out = torch.empty_like(src)
    if counts[0]:
        out[: counts[0]] = src[: counts[0]]
    if n_geo:
        seg = slice(start_geo, start_geo + n_geo)
        _remap(src[seg], _geometric_maps(keys, h, w, images.device), key_counts, out[seg])
    start = start_geo + n_geo
    for g in range(2, len(counts)):
        count = counts[g]
        if not count:
            continue
        seg = slice(start, start + count)
        start += count
        col = params[seg].view(count, 6, 1, 1, 1).unbind(1)
        out[seg] = _colour(_GROUP_OP[g], src[seg], col[2], col[3], col[4].to(torch.uint8), col[5].to(torch.int16))
    return out.index_select(0, params[:, 1].long())


def apply_slots(images: Tensor, slots: Iterable[tuple[Tensor, Tensor]]) -> Tensor:
    """The op slots of a RandAugment/AutoAugment draw, one after the other."""
    for op_ids, mags in slots:
        images = apply_ops(images, op_ids, mags)
    return images


# ----------------------------------------------------------------------------- static shapes


class GeometricTable:
    """Every index map an augmentation space's geometric ops can draw, as one device table:
    row 0 the identity, then one row per (op, signed magnitude) key (`_map_keys`). With it a
    draw becomes data (a row per sample) and `apply_static` runs the same operators on the same
    shapes for every batch of n images: what a CUDA graph can replay."""

    def __init__(self, keys: Tensor, h: int, w: int, device: torch.device) -> None:
        self.keys, _ = torch.sort(torch.unique(keys))
        maps = _geometric_maps(self.keys.tolist(), h, w, device)
        identity = torch.arange(h * w, device=device)
        self.maps = torch.stack([identity, *maps])  # (1 + keys, h * w) int64

    @staticmethod
    def of_space(names: Sequence[str], h: int, w: int, device: torch.device) -> GeometricTable:
        """The table of `Augmenter`'s RandAugment (31 bins) or AutoAugment (the CIFAR10 policy's
        geometric entries), both signs of every magnitude (`_signed` flips them)."""
        geometric = torch.tensor([OP_ID[op] for op in GEOMETRIC])
        if "randaug" in names:
            ops = geometric.repeat_interleave(31)
            mags = _magnitude_table(31, h, w)[ops, torch.arange(31).repeat(len(GEOMETRIC))]
        elif "autoaug" in names:
            policy_ops, _, policy_bins = _CIFAR10_TABLES
            pick = torch.isin(policy_ops, geometric)
            ops, mags = policy_ops[pick], _magnitude_table(10, h, w)[policy_ops[pick], policy_bins[pick]]
        else:
            ops, mags = geometric[:0], torch.zeros(0)
        return GeometricTable(_map_keys(torch.cat([ops, ops]), torch.cat([mags, -mags])), h, w, device)

    def rows(self, op_ids: Tensor, mags: Tensor) -> Tensor | None:
        """Each sample's row (0: not geometric), or None when a key is not in the table."""
        geo = _GROUP[op_ids] == 1
        if not len(self.keys):
            return None if bool(geo.any()) else torch.zeros_like(op_ids)
        keys = _map_keys(op_ids, mags)
        at = torch.searchsorted(self.keys, keys).clamp_(max=len(self.keys) - 1)
        if bool((geo & (self.keys[at] != keys)).any()):
            return None
        return torch.where(geo, at + 1, 0)


def colour_ops(names: Sequence[str]) -> tuple[str, ...]:
    """The colour ops `Augmenter`'s RandAugment or AutoAugment can draw (`apply_static` runs each)."""
    if "randaug" in names:
        space: Iterable[str] = RANDAUGMENT_OPS
    elif "autoaug" in names:
        space = [op for sub in CIFAR10_POLICY for op, _, _ in sub]
    else:
        space = ()
    drawn = set(space) - {"Identity", *GEOMETRIC}
    return tuple(op for op in OPS if op in drawn)


_STATIC_SLOT = 6  # per op slot: op id, table row, factor, 1 - factor, posterize mask, solarize threshold


def static_params(draw: TrainDraw, table: GeometricTable) -> Tensor | None:
    """A draw as one float32 host block (n, 3 + 6 per slot), `apply_static`'s data: crop offsets
    and flip, then each slot's op, map row and colour parameters, worked out as `apply_ops` does
    (every value exact in float32). None when a geometric key is not in `table`."""
    n = draw.n
    columns = [torch.zeros(n, 3)]
    if draw.offsets is not None:
        columns[0][:, :2] = draw.offsets
    if draw.flips is not None:
        columns[0][:, 2] = draw.flips
    for op_ids, mags in draw.slots:
        op_ids, m = op_ids.to(torch.int64), mags.float()
        rows = table.rows(op_ids, m)
        if rows is None:
            return None
        columns.append(torch.stack([op_ids.float(), rows.float(), *_colour_params(m)], 1))
    return torch.cat(columns, 1)


def apply_static(
    images: Tensor, params: Tensor, table: GeometricTable, padding: int, colour_ops: Sequence[str]
) -> Tensor:
    """crop + flip, then each slot's op, from `static_params` on the device: the pixels
    `crop_flip_apply` then `apply_slots` make, through operators whose shapes depend on n alone
    (no grouping of the samples by op: every colour op of the space runs on the whole batch and
    `where` keeps it for the samples that drew it). More arithmetic than `apply_ops` (the price
    of a CUDA graph: no host work per op), the same uint8 result (tests/cl/test_augment.py)."""
    n, c, h, w = images.shape
    out = _crop_flip_gather(images, max(padding, 0), params[:, :3].long())
    slots = (params.shape[1] - 3) // _STATIC_SLOT
    for s in range(slots):
        col = params[:, 3 + s * _STATIC_SLOT : 3 + (s + 1) * _STATIC_SLOT].view(n, _STATIC_SLOT, 1, 1, 1).unbind(1)
        op_ids = col[0].long()
        maps = table.maps.index_select(0, col[1].view(n).long())  # identity for every non-geometric sample
        flat = nnf.pad(out.reshape(n, c, h * w), (0, 1))
        moved = flat.gather(2, maps.view(n, 1, h * w).expand(n, c, h * w)).view(n, c, h, w)
        mask, threshold = col[4].to(torch.uint8), col[5].to(torch.int16)
        for op in colour_ops:
            moved = torch.where(op_ids == OP_ID[op], _colour(op, out, col[2], col[3], mask, threshold), moved)
        out = moved
    return out


# ----------------------------------------------------------------------------- policies


_SIGNED_MASK = torch.tensor([op in SIGNED for op in OPS])


def _signed(op_ids: Tensor, mags: Tensor, gen: torch.Generator) -> Tensor:
    flip = torch.rand(len(op_ids), generator=gen) <= 0.5
    return torch.where(_SIGNED_MASK[op_ids] & flip, -mags, mags)


@lru_cache(maxsize=64)
def _magnitude_table(n_bins: int, h: int, w: int) -> Tensor:
    table = torch.zeros(len(OPS), n_bins)
    for i, op in enumerate(OPS):
        m = magnitudes(op, n_bins, h, w)
        if m is not None:
            table[i] = m
    return table


Slots = list[tuple[Tensor, Tensor]]  # per op slot: (op ids, signed magnitudes), host tensors


def randaugment_draw(
    n: int, h: int, w: int, gen: torch.Generator, num_ops: int = 2, magnitude: int | None = None, num_bins: int = 31
) -> Slots:
    """The random part of `randaugment` for n images of h x w (same draws, same order)."""
    table = _magnitude_table(num_bins, h, w)
    slots = []
    for _ in range(num_ops):
        op_ids = torch.randint(len(RANDAUGMENT_OPS), (n,), generator=gen)
        bins = torch.randint(num_bins, (n,), generator=gen) if magnitude is None else torch.full((n,), magnitude)
        slots.append((op_ids, _signed(op_ids, table[op_ids, bins], gen)))
    return slots


def randaugment(
    images: Tensor, gen: torch.Generator, num_ops: int = 2, magnitude: int | None = None, num_bins: int = 31
) -> Tensor:
    """RandAugment with an independent draw per sample: `num_ops` ops chosen uniformly from
    torchvision's space, each with a random sign and, when `magnitude` is None, a random
    magnitude bin (the RM authors' "random magnitude" RandAugment)."""
    n, _, h, w = images.shape
    return apply_slots(images, randaugment_draw(n, h, w, gen, num_ops, magnitude, num_bins))


def _policy_tables(policy: Sequence[Sequence[tuple[str, float, int | None]]]) -> tuple[Tensor, Tensor, Tensor]:
    ops = torch.tensor([[OP_ID[op] for op, _, _ in sub] for sub in policy])
    prob = torch.tensor([[p for _, p, _ in sub] for sub in policy])
    bins = torch.tensor([[b or 0 for _, _, b in sub] for sub in policy])
    return ops, prob, bins


_CIFAR10_TABLES = _policy_tables(CIFAR10_POLICY)


def autoaugment_draw(n: int, h: int, w: int, gen: torch.Generator) -> Slots:
    """The random part of `autoaugment` for n images of h x w (same draws, same order)."""
    table = _magnitude_table(10, h, w)
    ops, prob, bins = _CIFAR10_TABLES
    choice = torch.randint(len(ops), (n,), generator=gen)
    slots = []
    for slot in range(2):
        applied = torch.rand(n, generator=gen) <= prob[choice, slot]
        op_ids = torch.where(applied, ops[choice, slot], OP_ID["Identity"])
        slots.append((op_ids, _signed(op_ids, table[op_ids, bins[choice, slot]], gen)))
    return slots


def autoaugment(images: Tensor, gen: torch.Generator) -> Tensor:
    """AutoAugment (CIFAR10 policy) with an independent sub-policy, coin flips and signs per sample."""
    n, _, h, w = images.shape
    return apply_slots(images, autoaugment_draw(n, h, w, gen))


def crop_flip_draw(
    n: int, padding: int, gen: torch.Generator, flip: bool = True
) -> tuple[Tensor | None, Tensor | None]:
    """The random part of `crop_flip`: (n, 2) crop offsets (None without padding), (n,) flips."""
    offsets = None
    if padding > 0:
        oy = torch.randint(2 * padding + 1, (n,), generator=gen)
        ox = torch.randint(2 * padding + 1, (n,), generator=gen)
        offsets = torch.stack([oy, ox], 1)
    flips = torch.rand(n, generator=gen) < 0.5 if flip else None
    return offsets, flips


def crop_flip_apply(images: Tensor, padding: int, offsets: Tensor | None, flips: Tensor | None) -> Tensor:
    """Zero-padded crops at `offsets` then horizontal flips where `flips`: one gather."""
    n, c, h, w = images.shape
    if (offsets is None and flips is None) or n == 0:
        return images.contiguous()
    p = max(padding, 0) if offsets is not None else 0
    params = torch.zeros(n, 3, dtype=torch.int64)
    if offsets is not None:
        params[:, :2] = offsets
    if flips is not None:
        params[:, 2] = flips
    return _crop_flip_gather(images, p, _on(params, images))


def _crop_flip_gather(images: Tensor, p: int, crop: Tensor) -> Tensor:
    """Crops of the images zero-padded by p at (n, 3) device offsets (y, x, flip), then flipped
    where flip: one gather, with shapes that depend on the batch's alone."""
    n, c, h, w = images.shape
    dev = images.device
    cols = torch.arange(w, device=dev)
    cols = torch.where(crop[:, 2:3].bool(), cols.flip(0), cols) + crop[:, 1:2]  # (n, w)
    rows = (crop[:, 0:1] + torch.arange(h, device=dev)) * (w + 2 * p)  # (n, h)
    index = (rows[:, :, None] + cols[:, None, :]).view(n, 1, h * w).expand(n, c, h * w)
    src = nnf.pad(images, (p, p, p, p)) if p else images
    return src.reshape(n, c, -1).gather(2, index).view(n, c, h, w)


def crop_flip(images: Tensor, padding: int, gen: torch.Generator, flip: bool = True) -> Tensor:
    """Random crop with zero padding and horizontal flip, a different draw per sample."""
    return crop_flip_apply(images, padding, *crop_flip_draw(len(images), padding, gen, flip))


def cutout(images: Tensor, size: int, gen: torch.Generator, fill: int = 0) -> Tensor:
    """A size x size square at a random centre (clipped at the border) set to `fill`, per sample."""
    n, _, h, w = images.shape
    dev = images.device
    corner = _on(
        torch.stack([torch.randint(h, (n,), generator=gen), torch.randint(w, (n,), generator=gen)], 1) - size // 2,
        images,
    )
    y0, x0 = corner[:, 0, None, None], corner[:, 1, None, None]
    ys = torch.arange(h, device=dev)[None, :, None]
    xs = torch.arange(w, device=dev)[None, None, :]
    inside = (ys >= y0) & (ys < y0 + size) & (xs >= x0) & (xs < x0 + size)
    return torch.where(inside.unsqueeze(1), torch.full_like(images, fill), images)


def rotate_per_sample(images: Tensor, degrees: Tensor) -> Tensor:
    n = len(images)
    zeros = torch.zeros(n, 2, dtype=torch.float64)
    return affine_per_sample(images, -degrees.to(torch.float64), zeros, zeros, zeros)


def normalize(images: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """uint8 (N, C, H, W) -> float, scaled to [0, 1] and standardised per channel."""
    return images.float().div_(255.0).sub_(mean).div_(std)


@dataclass(frozen=True)
class TrainDraw:
    """The random part of `Augmenter.train` for n images (host tensors): crop offsets, flips
    and the op slots. Draws of consecutive calls concatenate into one (`TrainDraw.cat`)."""

    n: int
    offsets: Tensor | None
    flips: Tensor | None
    slots: tuple[tuple[Tensor, Tensor], ...]

    @staticmethod
    def cat(draws: list[TrainDraw]) -> TrainDraw:
        if len(draws) == 1:
            return draws[0]

        def join(parts: list[Tensor | None]) -> Tensor | None:
            return None if parts[0] is None else torch.cat(cast("list[Tensor]", parts))  # all None, or all tensors

        slots = tuple(
            (torch.cat([d.slots[s][0] for d in draws]), torch.cat([d.slots[s][1] for d in draws]))
            for s in range(len(draws[0].slots))
        )
        return TrainDraw(
            sum(d.n for d in draws), join([d.offsets for d in draws]), join([d.flips for d in draws]), slots
        )


@dataclass(frozen=True)
class CutMixDraw:
    """One batch's CutMix: the box [y1:y2, x1:x2] pasted from `perm` of the batch, and the
    area-corrected lambda. Drawn on the host, so a captured training step can take it as data."""

    perm: Tensor  # CPU, int64
    x1: int
    x2: int
    y1: int
    y2: int
    lam: float


def draw_cutmix(n: int, h: int, w: int, rng: random.Random, gen: torch.Generator, alpha: float = 1.0) -> CutMixDraw:
    """The random part of `cutmix` (same draws, same order)."""
    lam = rng.betavariate(alpha, alpha)
    cut = math.sqrt(1.0 - lam)
    cut_w, cut_h = int(w * cut), int(h * cut)
    cx, cy = rng.randrange(w), rng.randrange(h)
    x1, x2 = max(cx - cut_w // 2, 0), min(cx + cut_w // 2, w)
    y1, y2 = max(cy - cut_h // 2, 0), min(cy + cut_h // 2, h)
    perm = torch.randperm(n, generator=gen)
    return CutMixDraw(perm, x1, x2, y1, y2, 1.0 - (x2 - x1) * (y2 - y1) / (w * h))


def apply_cutmix(x: Tensor, y: Tensor, draw: CutMixDraw) -> tuple[Tensor, Tensor, Tensor, float]:
    perm = draw.perm.to(x.device)
    x = x.clone()
    x[:, :, draw.y1 : draw.y2, draw.x1 : draw.x2] = x[perm, :, draw.y1 : draw.y2, draw.x1 : draw.x2]
    return x, y, y[perm], draw.lam


def cutmix(
    x: Tensor, y: Tensor, rng: random.Random, gen: torch.Generator, alpha: float = 1.0
) -> tuple[Tensor, Tensor, Tensor, float]:
    """CutMix as the RM authors apply it: lambda ~ Beta(alpha, alpha), a box of side
    sqrt(1 - lambda) at a random centre pasted from a random permutation of the batch, lambda
    recomputed from the clipped box. Returns (x, y_a, y_b, lambda) for
    loss = lambda * CE(y_a) + (1 - lambda) * CE(y_b); hard labels stay available to
    methods that need them (distillation, BiC), which torchvision's soft-label CutMix hides.
    """
    n, _, h, w = x.shape
    return apply_cutmix(x, y, draw_cutmix(n, h, w, rng, gen, alpha))


@dataclass
class Augmenter:
    """A run's train-time pipeline: crop+flip, then RandAugment or AutoAugment per sample, then
    normalisation; CutMix is applied per batch by the trainer with `mix`.

    `train(images)` = `apply(images, draw(n, h, w))`. The engine may draw the CutMix of coming
    steps ahead (`plan_mix`, in the order the steps would draw them): `draw_mix` then hands
    them out one per call."""

    names: tuple[str, ...]
    mean: Tensor
    std: Tensor
    padding: int
    seed: int
    gen: torch.Generator = field(init=False)
    rng: random.Random = field(init=False)
    mix_calls: int = field(init=False, default=0)  # draw_mix calls so far (the engine checks its plan)
    plan_broken: bool = field(init=False, default=False)  # a call did not match the planned draw
    _planned: deque = field(init=False, repr=False, default_factory=deque)
    _tables: dict = field(init=False, repr=False, default_factory=dict)  # (h, w, device) -> GeometricTable

    def __post_init__(self) -> None:
        self.names = parse_augment(tuple(self.names))  # an unknown name is an error, never dropped
        self.gen = torch.Generator().manual_seed(self.seed)
        self.rng = random.Random(self.seed)

    @property
    def uses_cutmix(self) -> bool:
        return "cutmix" in self.names

    def describe(self) -> list[str]:
        """The effective pipeline, recorded on the run."""
        steps = [f"random_crop(padding={self.padding})", "horizontal_flip(p=0.5)"]
        if "randaug" in self.names:
            steps.append("randaugment(ops=2, magnitude=random, per-sample)")
        if "autoaug" in self.names:
            steps.append("autoaugment(policy=cifar10, per-sample)")
        steps.append("normalize")
        if self.uses_cutmix:
            steps.append("cutmix(p=0.5, alpha=1.0, per-batch)")
        return steps

    def draw(self, n: int, h: int, w: int) -> TrainDraw:
        """The random part of `train` for n images of h x w."""
        offsets, flips = crop_flip_draw(n, self.padding, self.gen)
        slots: Slots = []
        if "randaug" in self.names:
            slots = randaugment_draw(n, h, w, self.gen)
        elif "autoaug" in self.names:
            slots = autoaugment_draw(n, h, w, self.gen)
        return TrainDraw(n, offsets, flips, tuple(slots))

    def apply(self, images: Tensor, draw: TrainDraw) -> Tensor:
        """Augmented, normalised images: `draw` applied (one call, whatever it holds)."""
        images = crop_flip_apply(images, self.padding, draw.offsets, draw.flips)
        return normalize(apply_slots(images, draw.slots), self.mean, self.std)

    def train(self, images: Tensor) -> Tensor:
        return self.apply(images, self.draw(len(images), images.shape[-2], images.shape[-1]))

    def static_params(self, images: Tensor, draw: TrainDraw) -> Tensor | None:
        """`draw` as `apply_static`'s data on `images`' device (one asynchronous copy), or None
        when it holds a geometric op the space's table lacks (then `apply` it)."""
        params = static_params(draw, self.geometric_table(images.shape[-2], images.shape[-1], images.device))
        return None if params is None else _on(params, images)

    def apply_static(self, images: Tensor, params: Tensor) -> Tensor:
        """`apply` with the draw as data (`static_params`): the same normalised images, from
        operators whose shapes depend on the batch's alone, so a CUDA graph can replay it."""
        table = self.geometric_table(images.shape[-2], images.shape[-1], images.device)
        out = apply_static(images, params, table, self.padding, colour_ops(self.names))
        return normalize(out, self.mean, self.std)

    def geometric_table(self, h: int, w: int, device: torch.device) -> GeometricTable:
        key = (h, w, str(device))
        if key not in self._tables:
            self._tables[key] = GeometricTable.of_space(self.names, h, w, device)
        return self._tables[key]

    def test(self, images: Tensor) -> Tensor:
        return normalize(images, self.mean, self.std)

    def maybe_cutmix(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor, float] | None:
        """CutMix with probability 0.5 when enabled; None means train on (x, y) as is."""
        draw = self.draw_mix(len(x), x.shape[-2], x.shape[-1])
        return None if draw is None else apply_cutmix(x, y, draw)

    def draw_mix(self, n: int, h: int, w: int) -> CutMixDraw | None:
        """The random part of `maybe_cutmix`, for a step that applies the box itself: the next
        planned draw when the engine planned this step's, else drawn now."""
        self.mix_calls += 1
        if self._planned:
            shape, draw = self._planned.popleft()
            if shape == (n, h, w):
                return draw
            self.plan_broken = True  # a step the plan did not foresee: draw live from here on
            self._planned.clear()
        return self._draw_mix(n, h, w)

    def _draw_mix(self, n: int, h: int, w: int) -> CutMixDraw | None:
        if not self.uses_cutmix or self.rng.random() >= 0.5:
            return None
        return draw_cutmix(n, h, w, self.rng, self.gen)

    def plan_mix(self, sizes: list[int], h: int, w: int) -> None:
        """Draw now the CutMix of coming steps of `sizes` images, as those steps would draw it."""
        for n in sizes:
            self._planned.append(((n, h, w), self._draw_mix(n, h, w)))

    def drop_plan(self) -> int:
        """Forget planned draws no step took (the count: 0 when the plan matched the steps)."""
        left = len(self._planned)
        self._planned.clear()
        return left

    def state_dict(self) -> dict:
        return {"gen": self.gen.get_state(), "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.gen.set_state(state["gen"])
        self.rng.setstate(state["rng"])
