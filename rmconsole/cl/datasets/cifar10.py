"""cifar10: CIFAR-10, 32x32 colour, 10 classes (torchvision's CIFAR10, under DATA_ROOT/cifar-10-batches-py),
with the paper's class splits (supplement Table 8)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import DatasetSpec, LoadOptions

if TYPE_CHECKING:
    from ..images import Dataset

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
PAPER_ORDERS = {  # seed -> the paper's class order (supplement Table 8), by original label
    1: tuple(
        CLASSES.index(c)
        for c in ["truck", "automobile", "frog", "airplane", "cat", "bird", "dog", "horse", "deer", "ship"]
    ),
    2: tuple(
        CLASSES.index(c)
        for c in ["airplane", "dog", "ship", "cat", "horse", "truck", "bird", "frog", "automobile", "deer"]
    ),
    3: tuple(
        CLASSES.index(c)
        for c in ["ship", "airplane", "dog", "truck", "automobile", "frog", "horse", "cat", "bird", "deer"]
    ),
}

SPEC = DatasetSpec(
    name="cifar10",
    description="CIFAR-10, 32x32 colour, 10 classes",
    load="rmconsole.cl.datasets.cifar10:load",
    n_classes=10,
    image_shape=(3, 32, 32),
    mean=(0.4914, 0.4822, 0.4465),
    std=(0.2023, 0.1994, 0.2010),
    crop_padding=4,
    required=("cifar-10-batches-py/data_batch_1", "cifar-10-batches-py/test_batch"),
    verify="rmconsole.cl.datasets.cifar10:verify",
    downloadable=True,
    class_orders=PAPER_ORDERS,
    cacheable=True,
    sources=("cifar-10-batches-py",),
)


def load(spec: DatasetSpec, root: Path, options: LoadOptions) -> Dataset:
    from .torchvision_sets import load_torchvision

    return load_torchvision(spec, root, options, "CIFAR10", "cifar-10-batches-py")


def verify(spec: DatasetSpec, root: Path) -> None:
    """Every file matches torchvision's MD5 sum."""
    from .torchvision_sets import verify_cifar

    verify_cifar(spec, root, "CIFAR10")
