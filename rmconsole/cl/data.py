"""Datasets as uint8 image tensors + int64 labels, loaded once.

Every dataset the console knows becomes a :class:`Dataset` with a train and a test
:class:`ImageSource`. Streams, memories and minibatches are index tensors into a source;
``source.take(idx)`` returns the uint8 images (N, C, H, W) on the training device. Small
datasets live in memory as one tensor; ImageNet-size folders stream from disk through
`pipeline.StreamingFolder` (decoded ahead in DataLoader workers, or on the GPU).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import torch
from torch import Tensor

from .catalog import (  # noqa: F401  (re-exported for callers of cl.data)
    DATASETS, HOW_TO_GET, DatasetCorrupt, DatasetMissing, check_available, data_root, verify_dataset,
)
from .pipeline import StreamingFolder
from .settings import RunSettings


class ImageSource(Protocol):
    """What the training loop needs of a split: its labels and images by index."""

    labels: Tensor

    def __len__(self) -> int: ...

    def take(self, idx: Tensor) -> Tensor:
        """uint8 images (len(idx), C, H, W) on the source's device."""
        ...

    def to(self, device: torch.device | str) -> "ImageSource": ...


@dataclass
class TensorImages:
    """A split held in memory as one uint8 tensor, so a batch is one index operation."""

    images: Tensor  # uint8 (N, C, H, W)
    labels: Tensor  # int64 (N,)

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.dim() != 4:
            raise ValueError("images must be uint8 (N, C, H, W)")
        if len(self.images) != len(self.labels):
            raise ValueError("images and labels differ in length")

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, idx: Tensor) -> Tensor:
        return self.images[idx.to(self.images.device)]

    def to(self, device: torch.device | str) -> "TensorImages":
        return TensorImages(self.images.to(device), self.labels.to(device))

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(self.images.shape[1:])  # type: ignore[return-value]


FolderImages = StreamingFolder  # the spine's name for a split kept on disk as image files


@dataclass
class Dataset:
    """A dataset with its normalisation and the train-time crop padding it uses."""

    name: str
    train: ImageSource
    test: ImageSource
    class_names: list[str]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    crop_padding: int = 4

    @property
    def n_classes(self) -> int:
        return len(self.class_names)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return self.train.shape  # type: ignore[attr-defined]

    def to(self, device: torch.device | str) -> "Dataset":
        return Dataset(self.name, self.train.to(device), self.test.to(device), self.class_names,
                       self.mean, self.std, self.crop_padding)


MNIST_STATS = ((0.1307,), (0.3081,))
FASHION_STATS = ((0.2860,), (0.3530,))
CIFAR10_STATS = ((0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010))
CIFAR100_STATS = ((0.5071, 0.4867, 0.4408), (0.2675, 0.2565, 0.2761))
IMAGENET_STATS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))


def load_digits() -> Dataset:
    """scikit-learn's bundled 8x8 digits: the embedded default, no download needed.

    A fixed stratified 80/20 split (random_state 0) makes the test set the same on every
    machine, so digits runs are comparable across seeds and installs.
    """
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    bunch = sk_digits()
    images = torch.from_numpy((bunch.images * (255.0 / 16.0)).round().astype("uint8")).unsqueeze(1)
    labels = torch.from_numpy(bunch.target.astype("int64"))
    train_i, test_i = train_test_split(
        torch.arange(len(labels)).numpy(), test_size=0.2, random_state=0, stratify=labels.numpy()
    )
    train_i, test_i = torch.from_numpy(train_i), torch.from_numpy(test_i)
    train = TensorImages(images[train_i].contiguous(), labels[train_i].contiguous())
    test = TensorImages(images[test_i].contiguous(), labels[test_i].contiguous())
    pixels = train.images.float() / 255.0
    return Dataset("digits", train, test, [str(d) for d in range(10)],
                   (round(pixels.mean().item(), 4),), (round(pixels.std().item(), 4),), crop_padding=1)


def _torchvision_split(cls: Callable, root: Path, train: bool, download: bool) -> TensorImages:
    ds = cls(str(root), train=train, download=download)
    data = ds.data
    images = torch.as_tensor(data)
    if images.dim() == 3:  # MNIST-like (N, H, W)
        images = images.unsqueeze(1)
    else:  # CIFAR (N, H, W, C) numpy
        images = images.permute(0, 3, 1, 2)
    return TensorImages(images.contiguous().to(torch.uint8), torch.as_tensor(ds.targets, dtype=torch.int64))




def _load_torchvision(name: str, root: Path, download: bool) -> Dataset:
    from torchvision import datasets

    cls, folder, stats, pad = {
        "mnist": (datasets.MNIST, "MNIST", MNIST_STATS, 4),
        "fashion_mnist": (datasets.FashionMNIST, "FashionMNIST", FASHION_STATS, 4),
        "cifar10": (datasets.CIFAR10, "cifar-10-batches-py", CIFAR10_STATS, 4),
        "cifar100": (datasets.CIFAR100, "cifar-100-python", CIFAR100_STATS, 4),
    }[name]
    try:
        train = _torchvision_split(cls, root, True, download)
        test = _torchvision_split(cls, root, False, download)
        names = list(cls(str(root), train=False, download=False).classes)
    except RuntimeError as err:  # torchvision: "Dataset not found or corrupted"
        raise DatasetMissing(
            f"dataset {name!r} not found or corrupt under {root / folder} ({err}); "
            + HOW_TO_GET.format(name=name)
        ) from None
    except (OSError, ValueError, EOFError, AssertionError) as err:  # torchvision asserts on a bad idx header
        raise DatasetMissing(f"dataset {name!r} under {root / folder} could not be read "
                             f"({type(err).__name__}: {' '.join(str(err).split())[:160]})") from None
    for split, part in (("train", train), ("test", test)):  # labels out of range fail late and obscurely
        if len(part.labels) and (int(part.labels.min()) < 0 or int(part.labels.max()) >= len(names)):
            raise DatasetMissing(f"dataset {name!r} under {root / folder} is corrupt: its {split} labels run from "
                                 f"{int(part.labels.min())} to {int(part.labels.max())}, but it has {len(names)} "
                                 f"classes; " + HOW_TO_GET.format(name=name))
    return Dataset(name, train, test, names, *stats, crop_padding=pad)


def _image_folder(split_dir: Path, classes: list[str] | None = None) -> tuple[list[str], Tensor, list[str]]:
    """(paths, labels, class names) of an ImageFolder tree, classes sorted like torchvision's."""
    from torchvision.datasets import ImageFolder

    folder = ImageFolder(str(split_dir))
    if classes is not None and folder.classes != classes:
        raise DatasetMissing(f"{split_dir} has other classes than the train split")
    paths = [p for p, _ in folder.samples]
    labels = torch.tensor([t for _, t in folder.samples], dtype=torch.int64)
    return paths, labels, folder.classes


def _load_folder(name: str, root: Path, size: int, pipeline: str = "auto", loader_workers: int | None = None,
                 gpu_decode: bool | None = None) -> Dataset:
    """An ImageFolder dataset: streamed from disk (`pipeline.StreamingFolder`) or, when it fits
    (`data_pipeline`), decoded once by the same pipeline into in-memory tensors."""
    from .pipeline import choose_in_memory

    base = root / {"tiny_imagenet": "tiny-imagenet-200", "imagenet": "imagenet"}[name]
    train_dir, test_dir = base / "train", base / "val"
    if not train_dir.is_dir() or not test_dir.is_dir():
        raise DatasetMissing(
            f"dataset {name!r} not found: expected ImageFolder trees {train_dir} and {test_dir} "
            f"(one folder per class); point RMCONSOLE_DATA at the folder that holds {base.name}/"
        )
    train_paths, train_labels, classes = _image_folder(train_dir)
    test_paths, test_labels, _ = _image_folder(test_dir, classes)
    train = StreamingFolder(train_paths, train_labels, size, workers=loader_workers, gpu_decode=gpu_decode)
    test = StreamingFolder(test_paths, test_labels, size, workers=loader_workers, gpu_decode=gpu_decode)
    if choose_in_memory(pipeline, len(train) + len(test), train.shape):
        try:
            loaded: tuple[ImageSource, ImageSource] = (TensorImages(train.decode_all(), train_labels),
                                                       TensorImages(test.decode_all(), test_labels))
        finally:
            train.close()
            test.close()
        train, test = loaded  # type: ignore[assignment]
    return Dataset(name, train, test, classes, *IMAGENET_STATS, crop_padding=4)


CACHE_FORMAT = 1
CACHEABLE = ("digits", "mnist", "fashion_mnist", "cifar10", "cifar100")
_SOURCES = {  # the files a cached copy was made from: a changed file makes a new copy
    "mnist": ("MNIST/raw",), "fashion_mnist": ("FashionMNIST/raw",), "cifar10": ("cifar-10-batches-py",),
    "cifar100": ("cifar-100-python",),
}


def _source_files(name: str, root: Path) -> list[Path]:
    if name == "digits":  # scikit-learn's bundled file, found without importing scikit-learn
        import importlib.util

        spec = importlib.util.find_spec("sklearn")
        base = Path(spec.origin).parent if spec and spec.origin else None
        return [base / "datasets" / "data" / "digits.csv.gz"] if base else []
    return sorted(p for sub in _SOURCES[name] for p in (root / sub).glob("*") if p.is_file())


def cache_key(name: str, root: Path) -> str | None:
    """A name for the cached tensor copy of `name` made from these exact source files (their
    paths, sizes and mtimes), or None when there is nothing to key it on."""
    import hashlib

    files = _source_files(name, root)
    if not files:
        return None
    h = hashlib.sha1(f"{CACHE_FORMAT}:{name}".encode())
    for f in files:
        st = f.stat()
        h.update(f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns};".encode())
    return f"{name}-{h.hexdigest()[:16]}.pt"


def _save_cached(path: Path, data: Dataset) -> None:
    """The dataset's tensors and facts in one file, written atomically (a crash leaves no half file)."""
    assert isinstance(data.train, TensorImages) and isinstance(data.test, TensorImages)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save({"name": data.name, "train": (data.train.images, data.train.labels),
                "test": (data.test.images, data.test.labels), "class_names": data.class_names,
                "mean": data.mean, "std": data.std, "crop_padding": data.crop_padding}, tmp)
    os.replace(tmp, path)


def _load_cached(path: Path) -> Dataset:
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    train = TensorImages(state["train"][0].clone(), state["train"][1].clone())
    test = TensorImages(state["test"][0].clone(), state["test"][1].clone())
    return Dataset(state["name"], train, test, list(state["class_names"]), tuple(state["mean"]), tuple(state["std"]),
                   crop_padding=int(state["crop_padding"]))


def load_cached(name: str, root: Path, cache_dir: Path, load: Callable[[], Dataset]) -> Dataset:
    """`load()`, through a tensor copy under `cache_dir` keyed by the source files: the first
    run decodes the dataset (and, for digits, imports scikit-learn), the next ones read one file.
    A cache that cannot be read or written is passed by, never an error."""
    key = cache_key(name, root)
    path = cache_dir / key if key else None
    if path is not None and path.exists():
        try:
            return _load_cached(path)
        except Exception:  # noqa: BLE001 - a damaged copy: decode the source again and replace it
            pass
    data = load()
    if path is not None:
        try:
            _save_cached(path, data)
        except (OSError, RuntimeError):
            pass
    return data


def load_dataset(name: str, root: Path | None = None, download: bool = False,
                 image_size: int | None = None, in_memory: bool | None = None, *, pipeline: str = "auto",
                 loader_workers: int | None = None, gpu_decode: bool | None = None,
                 cache_dir: Path | None = None) -> Dataset:
    """Load a dataset by name from the data root (downloading only when asked).

    ImageFolder datasets (tiny_imagenet, imagenet) follow `pipeline` (the `data_pipeline` key):
    `memory` decodes them once into tensors, `stream` decodes batches as they are used, and
    `auto` keeps them in memory when the decoded images fit `pipeline.MEMORY_BUDGET_BYTES`
    (Tiny-ImageNet at 64x64: yes; ImageNet: no). `in_memory` is the older spelling of the same.
    """
    root = data_root() if root is None else Path(root)
    if in_memory is not None:
        pipeline = "memory" if in_memory else "stream"
    if cache_dir is not None and name in CACHEABLE and not download:
        return load_cached(name, root, Path(cache_dir), lambda: load_dataset(name, root))
    if name == "digits":
        return load_digits()
    if name in ("mnist", "fashion_mnist", "cifar10", "cifar100"):
        return _load_torchvision(name, root, download)
    if name in ("tiny_imagenet", "imagenet"):
        size = image_size or (64 if name == "tiny_imagenet" else 224)
        return _load_folder(name, root, size, pipeline, loader_workers, gpu_decode)
    raise ValueError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")


def load_run_dataset(cfg: RunSettings, cache_dir: Path | None = None) -> Dataset:
    """The dataset of a run's config, with its input-pipeline keys (through the tensor cache in
    `cache_dir` for the datasets that are decoded whole)."""
    return load_dataset(cfg.dataset, download=cfg.download, image_size=cfg.image_size,
                        pipeline=cfg.data_pipeline, loader_workers=cfg.loader_workers,
                        gpu_decode=None if cfg.gpu_decode == "auto" else bool(cfg.gpu_decode), cache_dir=cache_dir)
