"""imagenet: ImageNet (ILSVRC-2012), an ImageFolder tree under DATA_ROOT/imagenet (train/ and val/
with one folder per class), 224x224 by default. Its classes are the tree's: a 100-class tree is
ImageNet-100 (100 classes, a 100-way head); 1,000 is assumed only while the tree is absent.
Loaded by the ImageFolder loader (cl/datasets/folder.py)."""

from __future__ import annotations

from . import IMAGENET_STATS, DatasetSpec

SPEC = DatasetSpec(
    name="imagenet",
    description="ImageNet, an ImageFolder tree under imagenet/ (its class folders: 1000, or 100 for ImageNet-100), "
    "224 px",
    folder="imagenet",
    n_classes=1000,  # while the tree is absent; its class folders otherwise
    image_size=224,
    mean=IMAGENET_STATS[0],
    std=IMAGENET_STATS[1],
    crop_padding=4,
)
