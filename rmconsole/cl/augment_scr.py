"""SCR's own augmentation recipe (Mai et al., CVPR-W 2021), batched with per-sample draws.

SCR's code makes its second view of a batch with kornia, each sample its own parameters:
RandomResizedCrop(scale 0.2-1, ratio 3/4-4/3, back to the image size), RandomHorizontalFlip,
ColorJitter(brightness 0.4, contrast 0.4, saturation 0.4, hue 0.1) with probability 0.8 and
RandomGrayscale with probability 0.2; its first view is the un-augmented image. torchvision's v2
transforms draw one set of parameters per call, so a batched call would crop every image alike;
here the parameters are drawn per sample on the host (one generator, always in the same order)
and applied on the images' device in a few batched tensor operations -- no per-sample loop, no
PIL:

- crop, resize and flip are one affine grid per sample and one bilinear `grid_sample`
  (torchvision's RandomResizedCrop rule: ten tries of (area, log-ratio), the first that fits,
  else the whole image; the crop's corner uniform over where it fits);
- the colour jitter is brightness, contrast, saturation, hue in that fixed order (torchvision
  permutes the order per call), a sample that draws no jitter gets factors 1 and hue 0;
- saturation, hue and greyscale need three channels: on a one-channel image (MNIST) they
  change nothing, as on a grey image they would not either.

Images come in as uint8 (N, C, H, W) and leave normalised, like `Augmenter.train`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as nnf
from torch import Tensor

SCALE = (0.2, 1.0)
RATIO = (3.0 / 4.0, 4.0 / 3.0)
JITTER = (0.4, 0.4, 0.4, 0.1)  # brightness, contrast, saturation, hue
P_JITTER = 0.8
P_GRAY = 0.2
TRIES = 10


@dataclass(frozen=True)
class RecipeDraw:
    """The random part of `recipe_view` for n images (host tensors)."""

    theta: Tensor  # (n, 2, 3) float32: output -> source affine maps (crop, resize, flip)
    factors: Tensor  # (n, 4) float32: brightness, contrast, saturation factors and hue shift
    gray: Tensor  # (n,) bool


def recipe_draw(n: int, h: int, w: int, gen: torch.Generator) -> RecipeDraw:
    """Per-sample crop boxes, flips, jitter factors and greyscale flags, drawn from `gen`."""
    area = float(h * w)
    target = area * (SCALE[0] + (SCALE[1] - SCALE[0]) * torch.rand(n, TRIES, generator=gen, dtype=torch.float64))
    log_lo, log_hi = math.log(RATIO[0]), math.log(RATIO[1])
    ratio = torch.exp(log_lo + (log_hi - log_lo) * torch.rand(n, TRIES, generator=gen, dtype=torch.float64))
    cw = torch.sqrt(target * ratio).round()
    ch = torch.sqrt(target / ratio).round()
    fits = (cw > 0) & (cw <= w) & (ch > 0) & (ch <= h)
    first = fits.to(torch.int8).argmax(1)
    any_fit = fits.any(1)
    rows = torch.arange(n)
    cw = torch.where(any_fit, cw[rows, first], torch.full((n,), float(w), dtype=torch.float64))
    ch = torch.where(any_fit, ch[rows, first], torch.full((n,), float(h), dtype=torch.float64))
    u = torch.rand(n, 2, generator=gen, dtype=torch.float64)
    top = torch.floor(u[:, 0] * (h - ch + 1))
    left = torch.floor(u[:, 1] * (w - cw + 1))
    flip = torch.rand(n, generator=gen) < 0.5
    # normalised coordinates (align_corners=False): output x in [-1, 1] -> source centre + half-size * x
    theta = torch.zeros(n, 2, 3, dtype=torch.float64)
    theta[:, 0, 0] = (cw / w) * torch.where(flip, -1.0, 1.0).double()
    theta[:, 0, 2] = (2 * left + cw) / w - 1
    theta[:, 1, 1] = ch / h
    theta[:, 1, 2] = (2 * top + ch) / h - 1
    jitter_on = torch.rand(n, generator=gen) < P_JITTER
    b, c, s, hue = JITTER
    lo = torch.tensor([1 - b, 1 - c, 1 - s, -hue], dtype=torch.float32)
    hi = torch.tensor([1 + b, 1 + c, 1 + s, hue], dtype=torch.float32)
    factors = lo + (hi - lo) * torch.rand(n, 4, generator=gen)
    factors = torch.where(jitter_on[:, None], factors, torch.tensor([1.0, 1.0, 1.0, 0.0]))
    gray = torch.rand(n, generator=gen) < P_GRAY
    return RecipeDraw(theta.float(), factors, gray)


def _gray(x: Tensor) -> Tensor:
    """ITU-R 601 luma (torchvision's rgb_to_grayscale weights), (N, 1, H, W)."""
    r, g, b = x.unbind(1)
    return (0.2989 * r + 0.587 * g + 0.114 * b).unsqueeze(1)


def _rgb_to_hsv(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    r, g, b = x.unbind(1)
    maxc, _ = x.max(1)
    minc, _ = x.min(1)
    delta = maxc - minc
    safe = torch.where(delta > 0, delta, torch.ones_like(delta))
    hr = torch.remainder((g - b) / safe, 6.0)
    hg = (b - r) / safe + 2.0
    hb = (r - g) / safe + 4.0
    hue = torch.where(maxc == r, hr, torch.where(maxc == g, hg, hb))
    hue = torch.where(delta > 0, hue / 6.0, torch.zeros_like(hue))
    sat = torch.where(maxc > 0, delta / torch.where(maxc > 0, maxc, torch.ones_like(maxc)), torch.zeros_like(maxc))
    return hue, sat, maxc


def _hsv_to_rgb(hue: Tensor, sat: Tensor, val: Tensor) -> Tensor:
    h6 = torch.remainder(hue, 1.0) * 6.0
    sector = torch.floor(h6)
    f = h6 - sector
    p = val * (1 - sat)
    q = val * (1 - sat * f)
    t = val * (1 - sat * (1 - f))
    sector = sector.long() % 6
    # (r, g, b) per sector 0..5
    table_r = torch.stack([val, q, p, p, t, val])
    table_g = torch.stack([t, val, val, q, p, p])
    table_b = torch.stack([p, p, t, val, val, q])
    pick = sector.unsqueeze(0)
    r = table_r.gather(0, pick).squeeze(0)
    g = table_g.gather(0, pick).squeeze(0)
    b = table_b.gather(0, pick).squeeze(0)
    return torch.stack([r, g, b], 1)


def recipe_apply(images: Tensor, draw: RecipeDraw) -> Tensor:
    """uint8 (N, C, H, W) -> float in [0, 1]: `draw`'s crop, flip, jitter and greyscale."""
    x = images.float().div(255.0)
    n, c, h, w = x.shape
    theta = draw.theta.to(x.device)
    grid = nnf.affine_grid(theta, [n, c, h, w], align_corners=False)
    x = nnf.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    f = draw.factors.to(x.device)
    col = [f[:, i].view(n, 1, 1, 1) for i in range(4)]
    x = (x * col[0]).clamp(0, 1)  # brightness: a blend with black
    mean = (_gray(x) if c == 3 else x).mean(dim=(1, 2, 3), keepdim=True)
    x = ((x - mean) * col[1] + mean).clamp(0, 1)  # contrast: a blend with the mean grey
    if c == 3:
        g = _gray(x)
        x = ((x - g) * col[2] + g).clamp(0, 1)  # saturation: a blend with the grey image
        hue, sat, val = _rgb_to_hsv(x)
        x = _hsv_to_rgb(hue + f[:, 3].view(n, 1, 1), sat, val).clamp(0, 1)
        gray = draw.gray.to(x.device).view(n, 1, 1, 1)
        x = torch.where(gray, _gray(x).expand_as(x), x)
    return x


def recipe_view(images: Tensor, gen: torch.Generator, mean: Tensor, std: Tensor) -> Tensor:
    """SCR's augmented view of uint8 images, normalised like the run's pipeline."""
    n, _, h, w = images.shape
    x = recipe_apply(images, recipe_draw(n, h, w, gen))
    return x.sub(mean.to(x.device)).div(std.to(x.device))
