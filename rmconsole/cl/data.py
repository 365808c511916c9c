"""Datasets as uint8 image tensors + int64 labels, loaded once.

Every dataset the console knows (one `DatasetSpec` each, `cl/datasets/`) becomes a
:class:`Dataset` (`cl/images.py`) with a train and a test :class:`ImageSource`. Streams, memories and minibatches are index tensors into a source;
``source.take(idx)`` returns the uint8 images (N, C, H, W) on the training device. Small
datasets live in memory as one tensor; ImageNet-size folders stream from disk through
`pipeline.StreamingFolder` (decoded ahead in DataLoader workers, or on the GPU).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import torch

from .datasets import (  # noqa: F401  (re-exported for callers of cl.data)
    DatasetCorrupt,
    DatasetMissing,
    DatasetSpec,
    LoadOptions,
    UnknownDataset,
    check_available,
    data_root,
    lookup,
    verify_dataset,
)
from .images import Dataset, FolderImages, ImageSource, TensorImages  # noqa: F401  (re-exported)
from .settings import RunSettings


def load_digits() -> Dataset:
    """scikit-learn's bundled 8x8 digits: the embedded default, no download needed (datasets/digits.py)."""
    from .datasets.digits import load_digits as load

    return load()


CACHE_FORMAT = 1


def _source_files(name: str, root: Path) -> list[Path]:
    return lookup(name).source_paths(root)


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
    torch.save(
        {
            "name": data.name,
            "train": (data.train.images, data.train.labels),
            "test": (data.test.images, data.test.labels),
            "class_names": data.class_names,
            "mean": data.mean,
            "std": data.std,
            "crop_padding": data.crop_padding,
        },
        tmp,
    )
    os.replace(tmp, path)


def _load_cached(path: Path) -> Dataset:
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    train = TensorImages(state["train"][0].clone(), state["train"][1].clone())
    test = TensorImages(state["test"][0].clone(), state["test"][1].clone())
    return Dataset(
        state["name"],
        train,
        test,
        list(state["class_names"]),
        tuple(state["mean"]),
        tuple(state["std"]),
        crop_padding=int(state["crop_padding"]),
    )


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


def load_dataset(
    name: str,
    root: Path | None = None,
    download: bool = False,
    image_size: int | None = None,
    in_memory: bool | None = None,
    *,
    pipeline: str = "auto",
    loader_workers: int | None = None,
    gpu_decode: bool | None = None,
    cache_dir: Path | None = None,
) -> Dataset:
    """Load a dataset by name from the data root (downloading only when asked), through its
    spec's loader (`cl/datasets/`: a built-in, `folder:PATH`, or a registered plug-in).

    ImageFolder datasets (tiny_imagenet, imagenet, folder:PATH) follow `pipeline` (the
    `data_pipeline` key): `memory` decodes them once into tensors, `stream` decodes batches as
    they are used, and `auto` keeps them in memory when the decoded images fit
    `pipeline.MEMORY_BUDGET_BYTES` (Tiny-ImageNet at 64x64: yes; ImageNet: no). `in_memory` is
    the older spelling of the same. A cacheable dataset with a `cache_dir` is read from its tensor copy.
    """
    spec = lookup(name)
    root = data_root() if root is None else Path(root)
    if in_memory is not None:
        pipeline = "memory" if in_memory else "stream"
    if cache_dir is not None and spec.cacheable and not download:
        return load_cached(name, root, Path(cache_dir), lambda: load_dataset(name, root))
    options = LoadOptions(
        download=download,
        image_size=image_size,
        pipeline=pipeline,
        loader_workers=loader_workers,
        gpu_decode=gpu_decode,
    )
    return checked(spec, spec.loader()(spec, root, options))


class DatasetInvalid(DatasetMissing):
    """A loader's dataset disagrees with its declaration (classes, image shape, label range): one line."""


def checked(spec: DatasetSpec, data: Dataset) -> Dataset:
    """What a loader returned, checked against its spec as the built-ins' loaders check their
    files: as many class names as the declared classes, the declared image shape, train and test
    of one shape, labels int64 of one dimension and within 0..n_classes-1 (labels 5-14 of a
    10-class dataset would otherwise train silently as a 15-class run). DatasetInvalid, one line."""
    what = f"dataset {spec.name!r} (loader {spec.load!r})"
    n = data.n_classes
    if spec.n_classes is not None and spec.folder is None and n != spec.n_classes:
        raise DatasetInvalid(f"{what}: declares {spec.n_classes} classes but its loader returned {n} class names")
    if n < 1:
        raise DatasetInvalid(f"{what}: its loader returned no class names")
    shapes = {split: tuple(part.shape) for split, part in (("train", data.train), ("test", data.test))}
    if spec.image_shape is not None and any(shape != tuple(spec.image_shape) for shape in shapes.values()):
        raise DatasetInvalid(
            f"{what}: declares images of shape {tuple(spec.image_shape)} but its loader returned "
            f"train {shapes['train']}, test {shapes['test']}"
        )
    if shapes["train"] != shapes["test"]:
        raise DatasetInvalid(f"{what}: train images are {shapes['train']} but test images are {shapes['test']}")
    for split, part in (("train", data.train), ("test", data.test)):
        labels = part.labels
        if labels.dtype != torch.int64 or labels.dim() != 1:
            raise DatasetInvalid(
                f"{what}: its {split} labels are {labels.dtype} of shape {tuple(labels.shape)}; "
                f"they must be int64 of one dimension"
            )
        if len(labels) == 0:
            raise DatasetInvalid(f"{what}: its {split} split is empty")
        low, high = int(labels.min()), int(labels.max())
        if low < 0 or high >= n:
            raise DatasetInvalid(
                f"{what}: its {split} labels run from {low} to {high}, but it has {n} classes; "
                f"labels must be 0 to {n - 1}"
            )
    channels = shapes["train"][0] if shapes["train"] else None
    if channels is not None and (len(data.mean) != channels or len(data.std) != channels):
        raise DatasetInvalid(
            f"{what}: its mean and std have {len(data.mean)} and {len(data.std)} values for {channels} channels"
        )
    return data


def load_run_dataset(cfg: RunSettings, cache_dir: Path | None = None) -> Dataset:
    """The dataset of a run's config, with its input-pipeline keys (through the tensor cache in
    `cache_dir` for the datasets that are decoded whole)."""
    return load_dataset(
        cfg.dataset,
        download=cfg.download,
        image_size=cfg.image_size,
        pipeline=cfg.data_pipeline,
        loader_workers=cfg.loader_workers,
        gpu_decode=None if cfg.gpu_decode == "auto" else bool(cfg.gpu_decode),
        cache_dir=cache_dir,
    )
