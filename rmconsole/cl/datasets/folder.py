"""ImageFolder datasets (tiny_imagenet, imagenet, `folder:PATH`, a plug-in's tree): the loader
and the file check every folder spec shares. Imported only when such a dataset is loaded or
verified (torch, torchvision)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from . import DatasetCorrupt, DatasetMissing, DatasetSpec, LoadOptions

if TYPE_CHECKING:
    from torch import Tensor

    from ..images import Dataset


def _has_entries(folder: str) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is not None


def verify_tree(spec: DatasetSpec, root: Path) -> None:
    """train/ and val/ hold the same class folders, none empty (DatasetCorrupt, one line)."""
    base, fix = spec.base(root), spec.fix_hint()
    classes = {}
    for split in ("train", "val"):
        folders = sorted(
            (e for e in os.scandir(base / split) if e.is_dir() and not e.name.startswith(".")), key=lambda e: e.name
        )
        empty = next((f.path for f in folders if not _has_entries(f.path)), None)
        if not folders or empty:
            raise DatasetCorrupt(
                f"dataset {spec.name!r} is corrupt: {empty or base / split} has no images "
                f"(expected one folder of images per class); {fix}"
            )
        classes[split] = [f.name for f in folders]
    if classes["train"] != classes["val"]:
        raise DatasetCorrupt(
            f"dataset {spec.name!r} is corrupt: {base / 'val'} has other class folders than {base / 'train'}; {fix}"
        )


def _image_folder(split_dir: Path, classes: list[str] | None = None) -> tuple[list[str], Tensor, list[str]]:
    """(paths, labels, class names) of an ImageFolder tree, classes sorted like torchvision's."""
    import torch
    from torchvision.datasets import ImageFolder

    folder = ImageFolder(str(split_dir))
    if classes is not None and folder.classes != classes:
        raise DatasetMissing(f"{split_dir} has other classes than the train split")
    paths = [p for p, _ in folder.samples]
    labels = torch.tensor([t for _, t in folder.samples], dtype=torch.int64)
    return paths, labels, folder.classes


def load_tree(spec: DatasetSpec, root: Path, options: LoadOptions) -> Dataset:
    """An ImageFolder dataset: streamed from disk (`pipeline.StreamingFolder`) or, when it fits
    (`data_pipeline`), decoded once by the same pipeline into in-memory tensors. Its classes are
    its tree's class folders, whatever the spec's nominal count."""
    base = spec.base(root)
    train_dir, test_dir = base / "train", base / "val"
    if not train_dir.is_dir() or not test_dir.is_dir():
        raise DatasetMissing(
            f"dataset {spec.name!r} not found: expected ImageFolder trees {train_dir} and {test_dir} "
            f"(one folder per class); {spec.get_hint(root)}"
        )
    train_paths, train_labels, classes = _image_folder(train_dir)
    test_paths, test_labels, _ = _image_folder(test_dir, classes)
    return load_lists(spec, options, (train_paths, train_labels), (test_paths, test_labels), classes)


def load_lists(
    spec: DatasetSpec,
    options: LoadOptions,
    train_split: tuple[list[str], Tensor],
    test_split: tuple[list[str], Tensor],
    classes: list[str],
) -> Dataset:
    """A dataset of image files given as (paths, labels) per split (an ImageFolder tree's, or a
    split read from a dataset's own list files: CUB-200, ImageNet-R), streamed or decoded into
    memory like any folder dataset (`data_pipeline`)."""
    from ..images import Dataset, ImageSource, TensorImages
    from ..pipeline import StreamingFolder, choose_in_memory

    size = options.image_size or spec.image_size or 224
    (train_paths, train_labels), (test_paths, test_labels) = train_split, test_split
    workers, gpu_decode = options.loader_workers, options.gpu_decode
    train = StreamingFolder(train_paths, train_labels, size, workers=workers, gpu_decode=gpu_decode)
    test = StreamingFolder(test_paths, test_labels, size, workers=workers, gpu_decode=gpu_decode)
    splits: tuple[ImageSource, ImageSource] = (train, test)
    if choose_in_memory(options.pipeline, len(train) + len(test), train.shape):
        try:
            splits = (TensorImages(train.decode_all(), train_labels), TensorImages(test.decode_all(), test_labels))
        finally:
            train.close()
            test.close()
    mean, std = spec.mean or (0.5, 0.5, 0.5), spec.std or (0.5, 0.5, 0.5)
    return Dataset(spec.name, splits[0], splits[1], classes, tuple(mean), tuple(std), crop_padding=spec.crop_padding)
