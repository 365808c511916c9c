"""What a method is built from (`Setup`), what it learns (`Task`), and what the engine needs
of it (`Learner`): the contract between `methods.base.Method` and the modules that drive its
hooks (train.py, inference.py), which therefore never import the methods.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import Tensor

from .accel import Accel
from .augment import Augmenter
from .data import Dataset
from .distributed import Dist
from .events import Reporter
from .models import Backbone
from .settings import RunSettings


@dataclass
class Setup:
    """Everything a method is built from. `cfg` is the run's validated config."""

    cfg: RunSettings
    data: Dataset  # sources on the training device
    train_labels: Tensor  # remapped labels of the train split (on the device)
    test_labels: Tensor
    groups: list[list[int]]  # major classes of each task
    device: torch.device
    augmenter: Augmenter
    reporter: Reporter = field(default_factory=Reporter)

    @property
    def n_classes(self) -> int:
        return self.data.n_classes


@dataclass
class Task:
    index: int
    stream: Tensor  # train-set indices in arrival order (CPU)
    n_tasks: int

    def __len__(self) -> int:
        return len(self.stream)


class Learner(Protocol):
    """A method as the engine sees it (`Method` is one): its state and the hooks it runs."""

    setup: Setup
    cfg: RunSettings
    device: torch.device
    model: Backbone
    optimizer: torch.optim.Optimizer | None
    dist: Dist | None
    accel: Accel
    epoch_eval: Callable[[], float] | None
    best_epoch_accuracy: float | None
    seen: Tensor  # classes exposed so far (the mask of unseen logits)
    graphs: dict  # batch size -> graphs.GraphedStep captured for the current optimiser

    @property
    def plain_step(self) -> bool: ...

    @property
    def uses_graphs(self) -> bool: ...

    @property
    def captured_step(self) -> bool: ...

    @property
    def report(self) -> Reporter: ...

    @property
    def train_batch_size(self) -> int: ...

    def labels_of(self, idx: Tensor) -> Tensor: ...

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor: ...

    def after_backward(self) -> None: ...

    def after_step(self) -> None: ...

    def step_key(self, x: Tensor, y: Tensor) -> tuple[Any, ...]: ...

    def logits(self, x: Tensor) -> Tensor: ...

    def predict(self, x: Tensor) -> Tensor: ...

    def class_scores(self, x: Tensor) -> Tensor: ...
