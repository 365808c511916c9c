"""digits: scikit-learn's bundled 8x8 handwritten digits, the embedded default (no download)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from . import DatasetSpec, LoadOptions

if TYPE_CHECKING:
    from ..images import Dataset

SPEC = DatasetSpec(
    name="digits",
    description="scikit-learn's bundled 8x8 digits, 10 classes (the embedded default, no download)",
    load="rmconsole.cl.datasets.digits:load",
    n_classes=10,
    image_shape=(1, 8, 8),
    mean=None,
    std=None,  # measured on the train split by the loader
    crop_padding=1,
    how_to_get="it is bundled with scikit-learn (pip install scikit-learn)",
    cacheable=True,
    source_files="rmconsole.cl.datasets.digits:source_files",
)


def load_digits() -> Dataset:
    """A fixed stratified 80/20 split (random_state 0) makes the test set the same on every
    machine, so digits runs are comparable across seeds and installs."""
    import torch
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    from ..images import Dataset, TensorImages

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
    return Dataset(
        "digits",
        train,
        test,
        [str(d) for d in range(10)],
        (round(pixels.mean().item(), 4),),
        (round(pixels.std().item(), 4),),
        crop_padding=SPEC.crop_padding,
    )


def load(spec: DatasetSpec, root: Path, options: LoadOptions) -> Dataset:
    return load_digits()


def source_files(root: Path) -> list[Path]:
    """scikit-learn's bundled file, found without importing scikit-learn (the cache's key)."""
    import importlib.util

    found = importlib.util.find_spec("sklearn")
    base = Path(found.origin).parent if found and found.origin else None
    return [base / "datasets" / "data" / "digits.csv.gz"] if base else []
