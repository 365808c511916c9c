"""What the protocol loop tells the outside world while a run trains.

`cl` never imports the store or a UI: the worker passes a Reporter subclass that turns
these calls into rows; tests and benchmarks use the silent base class.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TaskPlan:
    """One task of the stream, known before training starts (the TUI draws it at once)."""

    task: int
    n_samples: int
    major_classes: list[int]
    composition: list[int]  # samples per class in this task's stream
    stream_hash: str
    # task-free streams: (label, position in this task's stream) of each class first seen here
    first_appearances: list[tuple[int, int]] | None = None


@dataclass
class TaskOutcome:
    """The evaluation after a task: the honest (last-epoch) numbers, and optional extras."""

    task: int
    accuracy: float | None  # percent on the task's evaluation set (None: evaluate_test=false, not measured)
    accuracy_row: list[float | None] | None  # acc[task][j] for every task j (None: not measured)
    class_accuracy: list[float | None] | None
    eval_classes: list[int]
    seconds: float
    best_epoch_accuracy: float | None = None  # the authors' best-over-epochs figure (test-set selection!)
    extra: dict[str, Any] = field(default_factory=dict)
    topk: int = 1  # the run's `topk`; with k > 1 the top-k figures below are measured too
    topk_accuracy: float | None = None  # percent: the label among the k highest-scored classes
    topk_accuracy_row: list[float | None] | None = None  # acc[task][j] in top-k
    # the validation stream (val_fraction > 0): the same evaluation on the held-out train samples
    val_accuracy: float | None = None  # percent, on the held-out samples of eval_classes
    val_accuracy_row: list[float | None] | None = None  # val acc[task][j]
    val_class_accuracy: list[float | None] | None = None


@dataclass
class EpochStats:
    """One training epoch of a task, as `train.fit` measured it (one per epoch, never per step)."""

    task: int
    phase: str  # stream | memory | offline (the `fit` call's phase)
    epoch: int  # 0-based within the call
    epochs: int
    loss: float | None  # mean training loss over the epoch's samples (rank 0's shard); None if not finite
    lr: float
    samples: int
    seconds: float
    test_accuracy: float | None = None  # percent, when the run evaluates after every epoch

    @property
    def samples_per_s(self) -> float | None:
        return self.samples / self.seconds if self.seconds > 0 else None


@dataclass
class AnytimePoint:
    """One anytime evaluation of a task-free run (PROTOCOL §9.3): after `samples` streamed
    samples, the accuracy on the test samples of the `n_classes` classes exposed so far."""

    task: int
    samples: int  # streamed samples so far (the stream's clock; skipped ones included)
    accuracy: float | None  # percent (None: evaluate_test=false, the test split is never read)
    n_classes: int  # classes exposed so far (labels 0 .. n_classes-1)
    class_accuracy: list[float | None] | None = None  # per exposed class, when the run records it
    seconds: float = 0.0  # this evaluation's wall time
    val_accuracy: float | None = None  # percent on the held-out samples of those classes (val_fraction > 0)
    train_flops: float | None = None  # training FLOPs spent so far (cl/compute.py): where `report --budget` reads


class Reporter:
    """Receives the loop's events. Every method is a no-op here."""

    def run_started(
        self, plans: list[TaskPlan], class_order: list[int], class_names: list[str], pipeline: list[str]
    ) -> None: ...

    def phase(self, task: int, name: str, total: int) -> None:
        """A phase of a task starts; `total` samples will be processed in it."""

    def advance(self, n: int) -> None:
        """n more samples of the current phase are done (for a memory update: candidates scored)."""

    def epoch_finished(self, stats: EpochStats) -> None:
        """An epoch of a training phase ended."""

    def memory_updated(self, task: int, histogram: list[int], slots_per_class: int, info: dict[str, Any]) -> None: ...

    def task_finished(self, outcome: TaskOutcome, checkpoint: dict[str, Any] | None) -> None: ...

    def anytime_evaluated(self, point: AnytimePoint) -> None:
        """A task-free run was evaluated along the stream (every `eval_period` samples)."""

    def validation_held_out(self, info: dict[str, Any]) -> None:
        """The run holds out a validation share (val_fraction > 0), before `run_started`:
        {"fraction", "samples", "per_class" (by the run's label), "hash"} (streams.validation_info)."""

    def log(self, message: str) -> None: ...
