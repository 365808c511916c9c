"""Batched, per-sample image augmentation on the training device.

torchvision's RandAugment/AutoAugment draw ONE op and magnitude per call, so a batched call
augments every image the same way. RM needs each sample to get its own draw (training
diversity, and the 12 independent views of uncertainty scoring). Here every op of
torchvision's augmentation space takes a per-sample magnitude tensor and runs once per op
over all the samples that drew it: colour ops are the same blends torchvision computes, and
the geometric ops build one affine grid per sample with torchvision's own inverse-matrix and
grid conventions (tests compare each op with `torchvision.transforms.v2.functional`).

Images stay uint8 (N, C, H, W) until `normalize`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import torch
import torch.nn.functional as nnf
from torch import Tensor
from torchvision.transforms.v2 import functional as F

from .catalog import AUGMENTATIONS, parse_augment  # noqa: F401  (re-exported)

OPS = (
    "Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate",
    "Brightness", "Color", "Contrast", "Sharpness", "Posterize", "Solarize",
    "AutoContrast", "Equalize", "Invert",
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


# ----------------------------------------------------------------------------- kernels


def _column(values: Tensor, like: Tensor) -> Tensor:
    return values.to(device=like.device, dtype=torch.float32).view(-1, 1, 1, 1)


def _ratios(factor: Tensor, like: Tensor) -> tuple[Tensor, Tensor]:
    """(r, 1 - r) as float32 columns, 1 - r taken in float64 as torchvision's Python floats are."""
    factor = factor.to(torch.float64)
    return _column(factor, like), _column(1.0 - factor, like)


def _blend(images: Tensor, degenerate: Tensor, factor: Tensor) -> Tensor:
    """torchvision's _blend with one ratio per sample (same float operations, same result)."""
    ratio, rest = _ratios(factor, images)
    out = images.float().mul_(ratio).addcmul_(degenerate.expand_as(images), rest)
    return out.clamp_(0, 255).to(torch.uint8)


def _grayscale(images: Tensor) -> Tensor:
    if images.shape[1] == 1:
        return images.float()
    r, g, b = images.float().unbind(1)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(1).floor_()


def affine_per_sample(images: Tensor, angle: Tensor, translate: Tensor, shear: Tensor,
                      center: Tensor, fill: float = 0.0) -> Tensor:
    """F.affine (nearest) with per-sample angle (deg), translate (px, 2), shear (deg, 2) and
    center (2, pixels relative to the image centre), following torchvision's conventions."""
    n, c, h, w = images.shape
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
    theta = torch.stack([torch.stack([m0, m1, m2], 1), torch.stack([m3, m4, m5], 1)], 1)
    theta = theta.to(torch.float32).to(images.device)
    xs = torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, w, device=images.device).view(1, 1, w)
    ys = torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, h, device=images.device).view(1, h, 1)
    scale = torch.tensor([0.5 * w, 0.5 * h], device=images.device).view(1, 2, 1)
    t = (theta / scale).unsqueeze(-1).unsqueeze(-1)  # (n, 2, 3, 1, 1)
    grid = torch.stack([xs * t[:, 0, 0] + ys * t[:, 0, 1] + t[:, 0, 2],
                        xs * t[:, 1, 0] + ys * t[:, 1, 1] + t[:, 1, 2]], -1)  # (n, h, w, 2)
    out = nnf.grid_sample(images.float(), grid, mode="nearest", padding_mode="zeros", align_corners=False)
    if fill:
        inside = nnf.grid_sample(torch.ones(n, 1, h, w, device=images.device), grid, mode="nearest",
                                 padding_mode="zeros", align_corners=False)
        out = torch.where(inside < 0.5, torch.full_like(out, fill), out)
    return out.round_().to(torch.uint8)


def _geometric(images: Tensor, op_ids: Tensor, mags: Tensor) -> Tensor:
    """ShearX/Y, TranslateX/Y and Rotate, mixed within one batch, in one grid_sample."""
    _, _, h, w = images.shape
    m = mags.cpu().to(torch.float64)
    zero = torch.zeros_like(m)
    is_op = {name: op_ids == OP_ID[name] for name in GEOMETRIC}
    shear_deg = torch.rad2deg(torch.atan(m))
    shear = torch.stack([torch.where(is_op["ShearX"], shear_deg, zero),
                         torch.where(is_op["ShearY"], shear_deg, zero)], 1)
    # torchvision shears about the top-left corner, and translates by whole pixels
    corner = torch.tensor([-w * 0.5, -h * 0.5], dtype=torch.float64)
    center = torch.where((is_op["ShearX"] | is_op["ShearY"])[:, None], corner, zero[:, None])
    translate = torch.stack([torch.where(is_op["TranslateX"], m.trunc(), zero),
                             torch.where(is_op["TranslateY"], m.trunc(), zero)], 1)
    angle = torch.where(is_op["Rotate"], -m, zero)  # F.rotate builds its matrix with -angle
    return affine_per_sample(images, angle, translate, shear, center)


def _sharpness(images: Tensor, factor: Tensor) -> Tensor:
    n, c, h, w = images.shape
    if h <= 2 or w <= 2:
        return images.clone()
    a, b = 1.0 / 13.0, 5.0 / 13.0
    kernel = torch.tensor([[a, a, a], [a, b, a], [a, a, a]], device=images.device).expand(c, 1, 3, 3)
    out = images.float()
    blurred = nnf.conv2d(out, kernel, groups=c).round_()
    view = out[..., 1:-1, 1:-1]
    view.addcmul_(blurred.sub_(view), _ratios(factor, images)[1])
    return out.clamp_(0, 255).to(torch.uint8)


def _posterize(images: Tensor, bits: Tensor) -> Tensor:
    bits = bits.round().long().clamp(0, 8)
    mask = (((1 << bits) - 1) << (8 - bits)).to(torch.uint8).to(images.device).view(-1, 1, 1, 1)
    return images & mask


def _solarize(images: Tensor, level: Tensor) -> Tensor:
    threshold = _column(level * 255.0, images)
    return torch.where(images.float() >= threshold, 255 - images, images)


def _colour(op: str, images: Tensor, mags: Tensor) -> Tensor:
    factor = 1.0 + mags.to(torch.float64)
    if op == "Brightness":
        return _blend(images, torch.zeros((1, 1, 1, 1), device=images.device), factor)
    if op == "Color":
        return images.clone() if images.shape[1] == 1 else _blend(images, _grayscale(images), factor)
    if op == "Contrast":
        mean = _grayscale(images).mean(dim=(1, 2, 3), keepdim=True)
        return _blend(images, mean, factor)
    if op == "Sharpness":
        return _sharpness(images, factor)
    if op == "Posterize":
        return _posterize(images, mags)
    if op == "Solarize":
        return _solarize(images, mags)
    if op == "AutoContrast":
        return F.autocontrast(images)
    if op == "Equalize":
        return F.equalize(images)
    if op == "Invert":
        return F.invert(images)
    if op == "Identity":
        return images.clone()
    raise ValueError(f"unknown op {op!r}")


def apply_ops(images: Tensor, op_ids: Tensor, mags: Tensor) -> Tensor:
    """Apply op `OPS[op_ids[i]]` with signed magnitude `mags[i]` to image i, for all i at once.

    One kernel call per distinct op (the geometric ones share a single call), whatever the
    number of distinct magnitudes.
    """
    op_ids = op_ids.cpu()
    mags = mags.cpu().float()
    out = images.clone()
    present = op_ids.unique().tolist()
    geo_ids = [OP_ID[g] for g in GEOMETRIC]
    geo = torch.isin(op_ids, torch.tensor(geo_ids)).nonzero().flatten()
    if len(geo):
        geo_d = geo.to(images.device)
        out[geo_d] = _geometric(images[geo_d], op_ids[geo], mags[geo])
    for op_id in present:
        if op_id in geo_ids or OPS[op_id] == "Identity":
            continue
        sel = (op_ids == op_id).nonzero().flatten()
        sel_d = sel.to(images.device)
        out[sel_d] = _colour(OPS[op_id], images[sel_d], mags[sel])
    return out


# ----------------------------------------------------------------------------- policies


_SIGNED_MASK = torch.tensor([op in SIGNED for op in OPS])


def _signed(op_ids: Tensor, mags: Tensor, gen: torch.Generator) -> Tensor:
    flip = torch.rand(len(op_ids), generator=gen) <= 0.5
    return torch.where(_SIGNED_MASK[op_ids] & flip, -mags, mags)


def _magnitude_table(n_bins: int, h: int, w: int) -> Tensor:
    table = torch.zeros(len(OPS), n_bins)
    for i, op in enumerate(OPS):
        m = magnitudes(op, n_bins, h, w)
        if m is not None:
            table[i] = m
    return table


def randaugment(images: Tensor, gen: torch.Generator, num_ops: int = 2, magnitude: int | None = None,
                num_bins: int = 31) -> Tensor:
    """RandAugment with an independent draw per sample: `num_ops` ops chosen uniformly from
    torchvision's space, each with a random sign and, when `magnitude` is None, a random
    magnitude bin (the RM authors' "random magnitude" RandAugment)."""
    n, _, h, w = images.shape
    table = _magnitude_table(num_bins, h, w)
    for _ in range(num_ops):
        op_ids = torch.randint(len(RANDAUGMENT_OPS), (n,), generator=gen)
        bins = (torch.randint(num_bins, (n,), generator=gen) if magnitude is None
                else torch.full((n,), magnitude))
        images = apply_ops(images, op_ids, _signed(op_ids, table[op_ids, bins], gen))
    return images


def _policy_tables(policy) -> tuple[Tensor, Tensor, Tensor]:
    ops = torch.tensor([[OP_ID[op] for op, _, _ in sub] for sub in policy])
    prob = torch.tensor([[p for _, p, _ in sub] for sub in policy])
    bins = torch.tensor([[b or 0 for _, _, b in sub] for sub in policy])
    return ops, prob, bins


_CIFAR10_TABLES = _policy_tables(CIFAR10_POLICY)


def autoaugment(images: Tensor, gen: torch.Generator) -> Tensor:
    """AutoAugment (CIFAR10 policy) with an independent sub-policy, coin flips and signs per sample."""
    n, _, h, w = images.shape
    table = _magnitude_table(10, h, w)
    ops, prob, bins = _CIFAR10_TABLES
    choice = torch.randint(len(ops), (n,), generator=gen)
    for slot in range(2):
        applied = torch.rand(n, generator=gen) <= prob[choice, slot]
        op_ids = torch.where(applied, ops[choice, slot], OP_ID["Identity"])
        images = apply_ops(images, op_ids, _signed(op_ids, table[op_ids, bins[choice, slot]], gen))
    return images


def crop_flip(images: Tensor, padding: int, gen: torch.Generator, flip: bool = True) -> Tensor:
    """Random crop with zero padding and horizontal flip, a different draw per sample."""
    n, c, h, w = images.shape
    dev = images.device
    if padding > 0:
        padded = nnf.pad(images, (padding, padding, padding, padding))
        oy = torch.randint(2 * padding + 1, (n,), generator=gen).to(dev)
        ox = torch.randint(2 * padding + 1, (n,), generator=gen).to(dev)
        rows = (oy[:, None] + torch.arange(h, device=dev))[:, :, None]  # (n, h, 1)
        cols = (ox[:, None] + torch.arange(w, device=dev))[:, None, :]  # (n, 1, w)
        batch = torch.arange(n, device=dev)[:, None, None]
        images = padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)
    if flip:
        do_flip = (torch.rand(n, generator=gen) < 0.5).to(dev).view(-1, 1, 1, 1)
        images = torch.where(do_flip, images.flip(-1), images)
    return images.contiguous()


def cutout(images: Tensor, size: int, gen: torch.Generator, fill: int = 0) -> Tensor:
    """A size x size square at a random centre (clipped at the border) set to `fill`, per sample."""
    n, _, h, w = images.shape
    dev = images.device
    y0 = torch.randint(h, (n,), generator=gen).to(dev)[:, None, None] - size // 2
    x0 = torch.randint(w, (n,), generator=gen).to(dev)[:, None, None] - size // 2
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
    return (images.float().div_(255.0) - mean) / std


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
    x[:, :, draw.y1:draw.y2, draw.x1:draw.x2] = x[perm, :, draw.y1:draw.y2, draw.x1:draw.x2]
    return x, y, y[perm], draw.lam


def cutmix(x: Tensor, y: Tensor, rng: random.Random, gen: torch.Generator,
           alpha: float = 1.0) -> tuple[Tensor, Tensor, Tensor, float]:
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
    normalisation; CutMix is applied per batch by the trainer with `mix`."""

    names: tuple[str, ...]
    mean: Tensor
    std: Tensor
    padding: int
    seed: int
    gen: torch.Generator = field(init=False)
    rng: random.Random = field(init=False)

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

    def train(self, images: Tensor) -> Tensor:
        images = crop_flip(images, self.padding, self.gen)
        if "randaug" in self.names:
            images = randaugment(images, self.gen)
        elif "autoaug" in self.names:
            images = autoaugment(images, self.gen)
        return normalize(images, self.mean, self.std)

    def test(self, images: Tensor) -> Tensor:
        return normalize(images, self.mean, self.std)

    def maybe_cutmix(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor, float] | None:
        """CutMix with probability 0.5 when enabled; None means train on (x, y) as is."""
        draw = self.draw_mix(len(x), x.shape[-2], x.shape[-1])
        return None if draw is None else apply_cutmix(x, y, draw)

    def draw_mix(self, n: int, h: int, w: int) -> CutMixDraw | None:
        """The random part of `maybe_cutmix`, for a step that applies the box itself."""
        if not self.uses_cutmix or self.rng.random() >= 0.5:
            return None
        return draw_cutmix(n, h, w, self.rng, self.gen)

    def state_dict(self) -> dict:
        return {"gen": self.gen.get_state(), "rng": self.rng.getstate()}

    def load_state_dict(self, state: dict) -> None:
        self.gen.set_state(state["gen"])
        self.rng.setstate(state["rng"])
