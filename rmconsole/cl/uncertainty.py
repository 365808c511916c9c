"""Uncertainty of candidate samples by votes over perturbed views (paper Eq. 5, Table 7).

u(x) = 1 - (largest number of views that agree on the arg-max class) / (number of views).
All views of a chunk of candidates are built and scored in one batched forward pass.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from . import augment as A
from .catalog import MEASURES

# The authors' fixed "vr" perturbation list, one view each (sizes for 32x32 images; scaled to
# the image). As in their code (torchvision's RandomHorizontalFlip / RandomVerticalFlip /
# RandomRotation), the flips happen with probability 0.5 and the rotations draw an angle
# uniformly in [-d, d], independently per sample; cutout centres are drawn per sample.
VR_VIEWS = (
    "cutout8",
    "cutout16",
    "cutout24",
    "cutout32",
    "hflip",
    "vflip",
    "rotate45",
    "rotate90",
    "invert",
    "solarize128",
    "solarize64",
    "solarize32",
)


def _vr_view(name: str, images: Tensor, gen: torch.Generator) -> Tensor:
    n, _, h, w = images.shape
    if name.startswith("cutout"):
        size = max(1, round(int(name[6:]) * w / 32))
        return A.cutout(images, size, gen)
    if name in ("hflip", "vflip"):
        flip = (torch.rand(n, generator=gen) < 0.5).to(images.device).view(-1, 1, 1, 1)
        return torch.where(flip, images.flip(-1 if name == "hflip" else -2), images)
    if name.startswith("rotate"):  # torchvision RandomRotation(d): an angle uniform in [-d, d]
        limit = float(name[6:])
        return A.rotate_per_sample(images, (torch.rand(n, generator=gen, dtype=torch.float64) * 2 - 1) * limit)
    if name == "invert":
        return 255 - images
    if name.startswith("solarize"):
        threshold = int(name[8:])
        return torch.where(images >= threshold, 255 - images, images)
    raise ValueError(name)


def perturbed_views(images: Tensor, measure: str, n_views: int, gen: torch.Generator) -> Tensor:
    """(n_views, N, C, H, W) uint8 perturbations of `images`; each view is an independent draw.

    randaug / autoaug: every view of every sample gets its own RandAugment (2 ops, random
    magnitude) / AutoAugment (CIFAR10 policy) draw. vr: view v is VR_VIEWS[v % 12].
    """
    if measure == "randaug":
        stacked = images.repeat(n_views, 1, 1, 1)
        return A.randaugment(stacked, gen).view(n_views, *images.shape)
    if measure == "autoaug":
        stacked = images.repeat(n_views, 1, 1, 1)
        return A.autoaugment(stacked, gen).view(n_views, *images.shape)
    if measure == "vr":
        views = [_vr_view(VR_VIEWS[v % len(VR_VIEWS)], images, gen) for v in range(n_views)]
        return torch.stack(views)
    raise ValueError(f"unknown uncertainty measure {measure!r}; allowed: {', '.join(MEASURES)}")


@torch.inference_mode()
def vote_uncertainty(
    predict: Callable[[Tensor], Tensor],
    images_of: Callable[[Tensor], Tensor],
    candidates: Tensor,
    measure: str,
    n_views: int,
    gen: torch.Generator,
    normalize: Callable[[Tensor], Tensor],
    chunk_images: int = 16384,
    progress: Callable[[int], None] | None = None,
) -> tuple[Tensor, Tensor | None]:
    """(uncertainty in [0, 1], top vote count in [0, n_views]) for every candidate index.

    `predict` maps normalised images to logits; `images_of` maps indices to uint8 images.
    `none` is the non-Monte-Carlo baseline of Table 7: one clean forward pass and
    u(x) = 1 - max softmax probability ("least confidence"); it has no votes (None).
    `progress(n)` is told after each chunk that n more candidates are scored.
    """
    if measure not in MEASURES:
        raise ValueError(f"unknown uncertainty measure {measure!r}; allowed: {', '.join(MEASURES)}")
    if n_views < 1:
        raise ValueError(f"uncertainty needs at least one view, got {n_views}")
    uncertainty = torch.empty(len(candidates))
    votes = torch.empty(len(candidates), dtype=torch.long)
    views_per_chunk = 1 if measure == "none" else n_views
    per_chunk = max(1, chunk_images // views_per_chunk)
    for start in range(0, len(candidates), per_chunk):
        idx = candidates[start : start + per_chunk]
        images = images_of(idx)
        if measure == "none":
            probs = predict(normalize(images)).float().softmax(-1)
            uncertainty[start : start + len(idx)] = (1.0 - probs.max(-1).values).cpu()
            if progress is not None:
                progress(len(idx))
            continue
        views = perturbed_views(images, measure, n_views, gen)
        logits = predict(normalize(views.flatten(0, 1)))
        top = logits.argmax(-1).view(n_views, len(idx))  # (views, candidates)
        counts = torch.zeros(len(idx), logits.shape[-1], dtype=torch.long, device=top.device)
        counts.scatter_add_(1, top.t(), torch.ones_like(top.t()))
        best = counts.max(1).values.cpu()
        votes[start : start + len(idx)] = best
        uncertainty[start : start + len(idx)] = 1.0 - best.float() / n_views
        if progress is not None:
            progress(len(idx))
    return uncertainty, (None if measure == "none" else votes)
