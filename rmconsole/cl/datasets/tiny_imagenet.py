"""tiny_imagenet: Tiny-ImageNet, an ImageFolder tree under DATA_ROOT/tiny-imagenet-200 (train/ and
val/ with one folder per class; 200 classes in the full set, counted from the tree), 64x64 by default.
Loaded by the ImageFolder loader (cl/datasets/folder.py)."""

from __future__ import annotations

from . import IMAGENET_STATS, DatasetSpec

SPEC = DatasetSpec(
    name="tiny_imagenet",
    description="Tiny-ImageNet, an ImageFolder tree under tiny-imagenet-200/ (200 classes, counted from the tree), 64 px",
    folder="tiny-imagenet-200",
    n_classes=200,  # while the tree is absent; its class folders otherwise
    image_size=64,
    mean=IMAGENET_STATS[0],
    std=IMAGENET_STATS[1],
    crop_padding=4,
)
