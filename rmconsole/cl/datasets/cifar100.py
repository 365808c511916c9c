"""cifar100: CIFAR-100, 32x32 colour, 100 classes (torchvision's CIFAR100, under DATA_ROOT/cifar-100-python)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import DatasetSpec, LoadOptions

if TYPE_CHECKING:
    from ..images import Dataset

SPEC = DatasetSpec(
    name="cifar100",
    description="CIFAR-100, 32x32 colour, 100 classes",
    load="rmconsole.cl.datasets.cifar100:load",
    n_classes=100,
    image_shape=(3, 32, 32),
    mean=(0.5071, 0.4867, 0.4408),
    std=(0.2675, 0.2565, 0.2761),
    crop_padding=4,
    required=("cifar-100-python/train", "cifar-100-python/test"),
    verify="rmconsole.cl.datasets.cifar100:verify",
    downloadable=True,
    cacheable=True,
    sources=("cifar-100-python",),
)


def load(spec: DatasetSpec, root: Path, options: LoadOptions) -> Dataset:
    from .torchvision_sets import load_torchvision

    return load_torchvision(spec, root, options, "CIFAR100", "cifar-100-python")


def verify(spec: DatasetSpec, root: Path) -> None:
    """Every file matches torchvision's MD5 sum."""
    from .torchvision_sets import verify_cifar

    verify_cifar(spec, root, "CIFAR100")
