"""What exists: dataset, model, method, augmentation, memory-policy and uncertainty names,
and the paper's class orders. Plain Python (no torch), so the CLI can validate a config and
list runs without paying for importing torch."""

from __future__ import annotations

import os
from pathlib import Path

from .methods import REGISTRY as METHOD_REGISTRY

DATASET_CLASSES = {
    "digits": 10, "mnist": 10, "fashion_mnist": 10, "cifar10": 10, "cifar100": 100,
    "tiny_imagenet": 200, "imagenet": 1000,
}
DATASETS = tuple(DATASET_CLASSES)
MODEL_NAMES = ("mlp400", "resnet18", "resnet32", "resnet34")
METHOD_NAMES = tuple(METHOD_REGISTRY)
MEMORY_POLICIES = ("uncertainty", "random", "reservoir", "prototype", "class_balanced", "greedy_balanced")
MEASURES = ("randaug", "autoaug", "vr", "none")
AUGMENTATIONS = ("none", "cutmix", "randaug", "autoaug")


class DatasetMissing(Exception):
    """A dataset is not under the data root; the message says where we looked and what to do."""


def data_root() -> Path:
    """RMCONSOLE_DATA, or ./data: where datasets are looked for (and downloaded, if asked)."""
    return Path(os.environ.get("RMCONSOLE_DATA", "data")).expanduser()


def parse_augment(spec: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`"cutmix+autoaug"` or ["cutmix", "autoaug"] -> ("cutmix", "autoaug"); rejects unknown names
    instead of silently dropping them (the authors' issue #11)."""
    parts = spec.replace(",", "+").split("+") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for part in parts:
        name = str(part).strip().lower()
        if not name:
            continue
        if name not in AUGMENTATIONS:
            raise ValueError(f"unknown augmentation {part!r}; allowed: {', '.join(AUGMENTATIONS)} (join with '+')")
        if name != "none" and name not in names:
            names.append(name)
    if "randaug" in names and "autoaug" in names:
        raise ValueError("choose one of randaug and autoaug, not both")
    return tuple(names)


# The paper's class splits (supplement Table 8 and the authors' MNIST files), by original label.
_CIFAR10 = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
PAPER_CLASS_ORDERS: dict[tuple[str, int], list[int]] = {
    ("cifar10", 1): [_CIFAR10.index(c) for c in
                     "truck automobile frog airplane cat bird dog horse deer ship".split()],
    ("cifar10", 2): [_CIFAR10.index(c) for c in
                     "airplane dog ship cat horse truck bird frog automobile deer".split()],
    ("cifar10", 3): [_CIFAR10.index(c) for c in
                     "ship airplane dog truck automobile frog horse cat bird deer".split()],
    ("mnist", 1): [2, 9, 6, 4, 0, 3, 1, 7, 8, 5],
    ("mnist", 2): [4, 1, 5, 0, 7, 2, 3, 6, 9, 8],
    ("mnist", 3): [5, 4, 1, 2, 9, 6, 7, 0, 3, 8],
}


HOW_TO_GET = (
    "get it with `rmconsole data get {name}` (needs internet), or point RMCONSOLE_DATA at a folder "
    "that has it"
)


_REQUIRED = {
    "mnist": ["MNIST/raw/train-images-idx3-ubyte", "MNIST/raw/t10k-images-idx3-ubyte"],
    "fashion_mnist": ["FashionMNIST/raw/train-images-idx3-ubyte", "FashionMNIST/raw/t10k-images-idx3-ubyte"],
    "cifar10": ["cifar-10-batches-py/data_batch_1", "cifar-10-batches-py/test_batch"],
    "cifar100": ["cifar-100-python/train", "cifar-100-python/test"],
    "tiny_imagenet": ["tiny-imagenet-200/train", "tiny-imagenet-200/val"],
    "imagenet": ["imagenet/train", "imagenet/val"],
}


def check_available(name: str, root: Path | None = None) -> None:
    """Raise DatasetMissing, without loading anything, when a dataset's files are absent.

    Called before a run is stored, so a missing dataset costs the user one line and leaves
    nothing behind."""
    if name == "digits":
        return
    root = data_root() if root is None else Path(root)
    for rel in _REQUIRED[name]:
        path = root / rel
        if not (path.exists() or path.with_name(path.name + ".gz").exists()):
            how = ("point RMCONSOLE_DATA at the folder that holds it" if name in ("tiny_imagenet", "imagenet")
                   else HOW_TO_GET.format(name=name) + ", or set download=true")
            raise DatasetMissing(f"dataset {name!r} not found: {path} does not exist; {how}")


class DatasetCorrupt(DatasetMissing):
    """A dataset's files are there but damaged (wrong size, bad header, checksum mismatch)."""


_IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def _idx_shape(path: Path) -> tuple[list[int], int]:
    """(dims, byte size) of an MNIST idx file, plain or .gz, from its header and size alone."""
    import gzip
    import struct

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
    dims = list(struct.unpack(f">{nd}I", header[4:4 + 4 * nd]))
    return dims, size


def _has_entries(folder: str) -> bool:
    with os.scandir(folder) as entries:
        return next(entries, None) is not None


def _check_labels(name: str, path: Path, n_classes: int, fix: str) -> None:
    """Every label of an idx label file (plain or .gz) is a class of the dataset: a label 12 in
    MNIST would pass the size checks and fail training later, after the run was stored."""
    import gzip

    if not path.exists():
        path = path.with_name(path.name + ".gz")
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as f:  # type: ignore[operator]
            labels = f.read()[8:]
    except (OSError, EOFError) as err:
        raise DatasetCorrupt(f"dataset {name!r} is corrupt: {path} cannot be read ({err}); {fix}") from None
    bad = next((i for i, label in enumerate(labels) if label >= n_classes), None) if max(labels, default=0) >= n_classes \
        else None
    if bad is not None:
        raise DatasetCorrupt(f"dataset {name!r} is corrupt: {path} holds label {labels[bad]} (sample {bad}), but "
                             f"{name} has {n_classes} classes (labels 0-{n_classes - 1}); {fix}")


def verify_dataset(name: str, root: Path | None = None) -> None:
    """Check a dataset's files without loading it: present (check_available), and not damaged:
    MNIST-style idx headers must match the file sizes and each other, CIFAR files must match
    torchvision's MD5 sums, ImageFolder trees must hold the same non-empty class folders.
    Raises DatasetMissing / DatasetCorrupt with one line; the CLI calls it before storing a run."""
    import math
    import struct

    root = data_root() if root is None else Path(root)
    check_available(name, root)
    fix = (f"fetch it again (`rmconsole data get {name}`, needs internet) or point RMCONSOLE_DATA at a good copy"
           if name in ("mnist", "fashion_mnist", "cifar10", "cifar100") else "point RMCONSOLE_DATA at a good copy")
    if name in ("mnist", "fashion_mnist"):
        raw = root / {"mnist": "MNIST", "fashion_mnist": "FashionMNIST"}[name] / "raw"
        shapes = {}
        for base in _IDX_FILES:
            path = raw / base if (raw / base).exists() else raw / f"{base}.gz"
            if not path.exists():
                raise DatasetMissing(f"dataset {name!r} not found: {raw / base} does not exist; {fix}")
            try:
                dims, size = _idx_shape(path)
            except (OSError, ValueError, EOFError, struct.error) as err:
                raise DatasetCorrupt(f"dataset {name!r} is corrupt: {path} cannot be read ({err}); {fix}") from None
            expected = 4 * (len(dims) + 1) + math.prod(dims)
            if size != expected:
                raise DatasetCorrupt(f"dataset {name!r} is corrupt: {path} holds {size} bytes, its header says "
                                     f"{expected}; {fix}")
            shapes[base] = dims
        for split in ("train", "t10k"):
            if shapes[f"{split}-images-idx3-ubyte"][0] != shapes[f"{split}-labels-idx1-ubyte"][0]:
                raise DatasetCorrupt(f"dataset {name!r} is corrupt: {split} images and labels differ in count; {fix}")
            _check_labels(name, raw / f"{split}-labels-idx1-ubyte", DATASET_CLASSES[name], fix)
    elif name in ("cifar10", "cifar100"):
        from torchvision.datasets import CIFAR10, CIFAR100
        from torchvision.datasets.utils import check_integrity

        cls = CIFAR10 if name == "cifar10" else CIFAR100
        for filename, md5 in [*cls.train_list, *cls.test_list, (cls.meta["filename"], cls.meta["md5"])]:
            path = root / cls.base_folder / filename
            if not check_integrity(str(path), md5):
                what = "does not exist" if not path.exists() else "fails its MD5 check"
                raise DatasetCorrupt(f"dataset {name!r} is corrupt: {path} {what}; {fix}")
    elif name in ("tiny_imagenet", "imagenet"):
        base = root / {"tiny_imagenet": "tiny-imagenet-200", "imagenet": "imagenet"}[name]
        classes = {}
        for split in ("train", "val"):
            folders = sorted((e for e in os.scandir(base / split) if e.is_dir()), key=lambda e: e.name)
            empty = next((f.path for f in folders if not _has_entries(f.path)), None)
            if not folders or empty:
                raise DatasetCorrupt(f"dataset {name!r} is corrupt: {empty or base / split} has no images "
                                     f"(expected one folder of images per class); {fix}")
            classes[split] = [f.name for f in folders]
        if classes["train"] != classes["val"]:
            raise DatasetCorrupt(f"dataset {name!r} is corrupt: {base / 'val'} has other class folders than "
                                 f"{base / 'train'}; {fix}")
