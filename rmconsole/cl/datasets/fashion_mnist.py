"""fashion_mnist: Fashion-MNIST clothing, 28x28 grey, 10 classes (torchvision's FashionMNIST, under DATA_ROOT/FashionMNIST)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import DatasetSpec, LoadOptions

if TYPE_CHECKING:
    from ..images import Dataset

SPEC = DatasetSpec(
    name="fashion_mnist",
    description="Fashion-MNIST clothing, 28x28 grey, 10 classes",
    load="rmconsole.cl.datasets.fashion_mnist:load",
    n_classes=10,
    image_shape=(1, 28, 28),
    mean=(0.2860,),
    std=(0.3530,),
    crop_padding=4,
    required=("FashionMNIST/raw/train-images-idx3-ubyte", "FashionMNIST/raw/t10k-images-idx3-ubyte"),
    verify="rmconsole.cl.datasets.fashion_mnist:verify",
    downloadable=True,
    cacheable=True,
    sources=("FashionMNIST/raw",),
)


def load(spec: DatasetSpec, root: Path, options: LoadOptions) -> Dataset:
    from .torchvision_sets import load_torchvision

    return load_torchvision(spec, root, options, "FashionMNIST", "FashionMNIST")


def verify(spec: DatasetSpec, root: Path) -> None:
    """idx headers that match the file sizes and each other, labels 0-9."""
    from .torchvision_sets import verify_idx

    verify_idx(spec, root, "FashionMNIST")
