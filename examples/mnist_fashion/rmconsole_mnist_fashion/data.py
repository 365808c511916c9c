"""Loading mnist_fashion: torchvision's MNIST and FashionMNIST under the data root, concatenated.

Classes 0-9 are MNIST's digits, 10-19 Fashion-MNIST's garments (its label + 10); the train
splits are MNIST's 60,000 then Fashion's 60,000, the test splits 10,000 + 10,000. Both are
28x28 grey uint8, so one tensor holds each split and a batch is one index operation.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rmconsole.cl.data import Dataset, TensorImages

PARTS = (("MNIST", "MNIST"), ("FashionMNIST", "FashionMNIST"))  # (torchvision class, folder under the root)
MEAN = (0.2084,)  # over both train splits (equal sizes): the mean of MNIST's 0.1307 and Fashion's 0.2860
STD = (0.3403,)  # sqrt of the mean of E[x^2] minus the mean squared


class MissingPart(Exception):
    """One of the two torchvision datasets is not under the data root (one line, what to do)."""


def _split(cls: Any, root: Path, train: bool, download: bool) -> TensorImages:
    ds = cls(str(root), train=train, download=download)
    return TensorImages(
        torch.as_tensor(ds.data).unsqueeze(1).contiguous().to(torch.uint8),
        torch.as_tensor(ds.targets, dtype=torch.int64),
    )


def load_parts(root: Path, download: bool = False) -> Dataset:
    """The 20-class dataset from `root` (RMCONSOLE_DATA), MNIST's classes first."""
    from torchvision import datasets

    trains, tests, names = [], [], []
    for offset, (class_name, folder) in zip((0, 10), PARTS):
        cls = getattr(datasets, class_name)
        try:
            train, test = _split(cls, root, True, download), _split(cls, root, False, download)
            classes = list(cls(str(root), train=False, download=False).classes)
        except (RuntimeError, OSError, ValueError, EOFError, AssertionError) as err:
            raise MissingPart(
                f"dataset 'mnist_fashion' needs {class_name} under {root / folder}: "
                f"{' '.join(str(err).split())[:160]}; get it with `rmconsole data get "
                f"{'mnist' if offset == 0 else 'fashion_mnist'}` or point RMCONSOLE_DATA at a folder "
                f"that has it"
            ) from None
        trains.append(TensorImages(train.images, train.labels + offset))
        tests.append(TensorImages(test.images, test.labels + offset))
        names += [f"{'digit' if offset == 0 else 'fashion'} {c}" for c in classes]
    join = lambda parts: TensorImages(torch.cat([p.images for p in parts]), torch.cat([p.labels for p in parts]))  # noqa: E731
    return Dataset("mnist_fashion", join(trains), join(tests), names, MEAN, STD, crop_padding=4)


def load(spec: Any, root: Path, options: Any) -> Dataset:
    """The spec's loader (declare.SPEC names it): rmconsole calls it with the data root and the
    run's load options (only `download` matters to an in-memory torchvision dataset)."""
    return load_parts(root, bool(options.download))
