"""A dataset in memory or on disk: `Dataset` (its train and test `ImageSource`s, class names,
normalisation), `TensorImages` (a split as one uint8 tensor) and `FolderImages` (a split streamed
from image files). What every dataset loader (cl/datasets/) returns; cl.data re-exports them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from .pipeline import StreamingFolder


class ImageSource(Protocol):
    """What the training loop needs of a split: its labels, its image shape and images by index."""

    @property
    def labels(self) -> Tensor: ...

    @property
    def shape(self) -> tuple[int, int, int]:
        """(C, H, W) of every image."""
        ...

    def __len__(self) -> int: ...

    def take(self, idx: Tensor) -> Tensor:
        """uint8 images (len(idx), C, H, W) on the source's device."""
        ...

    def to(self, device: torch.device | str) -> ImageSource: ...


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

    def to(self, device: torch.device | str) -> TensorImages:
        return TensorImages(self.images.to(device), self.labels.to(device))

    @property
    def shape(self) -> tuple[int, int, int]:
        c, h, w = self.images.shape[1:]  # (N, C, H, W): __post_init__ checked
        return (c, h, w)


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
        return self.train.shape

    def to(self, device: torch.device | str) -> Dataset:
        return Dataset(
            self.name,
            self.train.to(device),
            self.test.to(device),
            self.class_names,
            self.mean,
            self.std,
            self.crop_padding,
        )
