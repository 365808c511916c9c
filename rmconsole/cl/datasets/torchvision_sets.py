"""What the torchvision datasets (mnist, fashion_mnist, cifar10, cifar100) share: loading a
torchvision class into uint8 tensors, and checking MNIST-style idx files and CIFAR's MD5 sums
without loading them. The idx checks read headers only (no torch); loading imports torchvision."""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import DatasetCorrupt, DatasetMissing, DatasetSpec, LoadOptions

if TYPE_CHECKING:
    from ..images import Dataset, TensorImages

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _split(cls: Any, root: Path, train: bool, download: bool) -> TensorImages:
    import torch

    from ..images import TensorImages

    ds = cls(str(root), train=train, download=download)
    images = torch.as_tensor(ds.data)
    if images.dim() == 3:  # MNIST-like (N, H, W)
        images = images.unsqueeze(1)
    else:  # CIFAR (N, H, W, C) numpy
        images = images.permute(0, 3, 1, 2)
    return TensorImages(images.contiguous().to(torch.uint8), torch.as_tensor(ds.targets, dtype=torch.int64))


def load_torchvision(spec: DatasetSpec, root: Path, options: LoadOptions, class_name: str, folder: str) -> Dataset:
    """torchvision.datasets.<class_name> under root/<folder> as in-memory uint8 tensors (labels
    checked against its classes: a label out of range would fail late and obscurely)."""
    from torchvision import datasets

    from ..images import Dataset

    cls = getattr(datasets, class_name)
    hint = spec.get_hint(root)
    try:
        train = _split(cls, root, True, options.download)
        test = _split(cls, root, False, options.download)
        names = list(cls(str(root), train=False, download=False).classes)
    except RuntimeError as err:  # torchvision: "Dataset not found or corrupted"
        raise DatasetMissing(
            f"dataset {spec.name!r} not found or corrupt under {root / folder} ({err}); {hint}"
        ) from None
    except (OSError, ValueError, EOFError, AssertionError) as err:  # torchvision asserts on a bad idx header
        raise DatasetMissing(
            f"dataset {spec.name!r} under {root / folder} could not be read "
            f"({type(err).__name__}: {' '.join(str(err).split())[:160]})"
        ) from None
    for split, part in (("train", train), ("test", test)):
        if len(part.labels) and (int(part.labels.min()) < 0 or int(part.labels.max()) >= len(names)):
            raise DatasetMissing(
                f"dataset {spec.name!r} under {root / folder} is corrupt: its {split} labels run from "
                f"{int(part.labels.min())} to {int(part.labels.max())}, but it has {len(names)} "
                f"classes; {hint}"
            )
    assert spec.mean is not None and spec.std is not None
    return Dataset(spec.name, train, test, names, spec.mean, spec.std, crop_padding=spec.crop_padding)


def _idx_shape(path: Path) -> tuple[list[int], int]:
    """(dims, byte size) of an MNIST idx file, plain or .gz, from its header and size alone."""
    import gzip

    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            header = f.read(16)
        with open(path, "rb") as f:  # gzip's trailer holds the uncompressed size (mod 2**32)
            f.seek(-4, os.SEEK_END)
            size = struct.unpack("<I", f.read(4))[0]
    else:
        with open(path, "rb") as f:
            header = f.read(16)
        size = path.stat().st_size
    if len(header) < 8 or header[0] != 0 or header[1] != 0 or header[2] != 0x08 or header[3] not in (1, 3):
        raise ValueError("not an idx file of unsigned bytes (bad magic number)")
    nd = header[3]
    dims = list(struct.unpack(f">{nd}I", header[4 : 4 + 4 * nd]))
    return dims, size


def _check_labels(spec: DatasetSpec, path: Path, n_classes: int, fix: str) -> None:
    """Every label of an idx label file (plain or .gz) is a class of the dataset: a label 12 in
    MNIST would pass the size checks and fail training later, after the run was stored."""
    import gzip

    if not path.exists():
        path = path.with_name(path.name + ".gz")
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                labels = f.read()[8:]
        else:
            labels = path.read_bytes()[8:]
    except (OSError, EOFError) as err:
        raise DatasetCorrupt(f"dataset {spec.name!r} is corrupt: {path} cannot be read ({err}); {fix}") from None
    if max(labels, default=0) >= n_classes:
        bad = next(i for i, label in enumerate(labels) if label >= n_classes)
        raise DatasetCorrupt(
            f"dataset {spec.name!r} is corrupt: {path} holds label {labels[bad]} (sample {bad}), "
            f"but {spec.name} has {n_classes} classes (labels 0-{n_classes - 1}); {fix}"
        )


def verify_idx(spec: DatasetSpec, root: Path, folder: str) -> None:
    """MNIST-style idx files under root/<folder>/raw: headers that match the file sizes and each
    other, labels within the classes (DatasetCorrupt / DatasetMissing, one line)."""
    raw, fix = root / folder / "raw", spec.fix_hint()
    shapes = {}
    for base in IDX_FILES:
        path = raw / base if (raw / base).exists() else raw / f"{base}.gz"
        if not path.exists():
            raise DatasetMissing(f"dataset {spec.name!r} not found: {raw / base} does not exist; {fix}")
        try:
            dims, size = _idx_shape(path)
        except (OSError, ValueError, EOFError, struct.error) as err:
            raise DatasetCorrupt(f"dataset {spec.name!r} is corrupt: {path} cannot be read ({err}); {fix}") from None
        expected = 4 * (len(dims) + 1) + math.prod(dims)
        if size != expected:
            raise DatasetCorrupt(
                f"dataset {spec.name!r} is corrupt: {path} holds {size} bytes, its header says {expected}; {fix}"
            )
        shapes[base] = dims
    for split in ("train", "t10k"):
        if shapes[f"{split}-images-idx3-ubyte"][0] != shapes[f"{split}-labels-idx1-ubyte"][0]:
            raise DatasetCorrupt(f"dataset {spec.name!r} is corrupt: {split} images and labels differ in count; {fix}")
        _check_labels(spec, raw / f"{split}-labels-idx1-ubyte", spec.classes(root), fix)


def verify_cifar(spec: DatasetSpec, root: Path, class_name: str) -> None:
    """Every file of a CIFAR download matches torchvision's MD5 sum (DatasetCorrupt, one line)."""
    from torchvision import datasets
    from torchvision.datasets.utils import check_integrity

    cls = getattr(datasets, class_name)
    for filename, md5 in [*cls.train_list, *cls.test_list, (cls.meta["filename"], cls.meta["md5"])]:
        path = root / cls.base_folder / filename
        if not check_integrity(str(path), md5):
            what = "does not exist" if not path.exists() else "fails its MD5 check"
            raise DatasetCorrupt(f"dataset {spec.name!r} is corrupt: {path} {what}; {spec.fix_hint()}")
