"""mnist: the MNIST handwritten digits, 28x28 grey, 10 classes (torchvision's MNIST, under DATA_ROOT/MNIST)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import DatasetSpec, LoadOptions

if TYPE_CHECKING:
    from ..images import Dataset

# The authors' MNIST class splits (their split files), seed -> order by original label.
PAPER_ORDERS = {
    1: (2, 9, 6, 4, 0, 3, 1, 7, 8, 5),
    2: (4, 1, 5, 0, 7, 2, 3, 6, 9, 8),
    3: (5, 4, 1, 2, 9, 6, 7, 0, 3, 8),
}

SPEC = DatasetSpec(
    name="mnist",
    description="the MNIST handwritten digits, 28x28 grey, 10 classes",
    load="rmconsole.cl.datasets.mnist:load",
    n_classes=10,
    image_shape=(1, 28, 28),
    mean=(0.1307,),
    std=(0.3081,),
    crop_padding=4,
    required=("MNIST/raw/train-images-idx3-ubyte", "MNIST/raw/t10k-images-idx3-ubyte"),
    verify="rmconsole.cl.datasets.mnist:verify",
    downloadable=True,
    class_orders=PAPER_ORDERS,
    cacheable=True,
    sources=("MNIST/raw",),
)


def load(spec: DatasetSpec, root: Path, options: LoadOptions) -> Dataset:
    from .torchvision_sets import load_torchvision

    return load_torchvision(spec, root, options, "MNIST", "MNIST")


def verify(spec: DatasetSpec, root: Path) -> None:
    """idx headers that match the file sizes and each other, labels 0-9."""
    from .torchvision_sets import verify_idx

    verify_idx(spec, root, "MNIST")
