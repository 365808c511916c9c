"""What a run produces, one shape per fact: from the loop to the store to every face.

The protocol drivers (cl/loop.py, cl/online.py) produce these values; the metric catalogue
(cl/metric_catalog.py) computes from a run's `RunRows`; the store maps each to its table in one
place, by the fields (store/mapping.py), and reads them back as the same types; `show`,
`show --json`, the reports, the exports and the TUI read them as the store gives them.

Adding a per-task figure end to end is one `figure(...)` field on `TaskOutcome` (the loop sets
it), its column (store/tables.py) and its schema revision: the store writes and reads it by name,
`show --json` writes it where measured, `show`'s task table, the TUI's task stream and the
exports show it, and the catalogue gives its mean over the tasks (`report --metrics NAME`).

Pure and torch-free: plain frozen values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from .protocols import Protocol, protocol_of


@dataclass(frozen=True)
class Figure:
    """What a per-task figure declared with `figure()` is: how faces label and write it, and which
    way is better (the catalogue's mean over tasks is a metric of the same name)."""

    label: str
    digits: int = 2
    better: str = "higher"  # higher | lower
    description: str = ""
    unit: str = ""


def figure(label: str, digits: int = 2, better: str = "higher", description: str = "", unit: str = "") -> Any:
    """A per-task scalar figure of `TaskOutcome` (None: not measured), shown by every face."""
    return field(default=None, metadata={"figure": Figure(label, digits, better, description or label, unit)})


# ---------------------------------------------------------------------- before training


@dataclass(frozen=True)
class TaskPlan:
    """One task of the stream, known before training starts (the TUI draws it at once)."""

    task: int
    n_samples: int
    major_classes: list[int]
    composition: list[int]  # samples per class in this task's stream
    stream_hash: str
    # task-free streams: (label, position in this task's stream) of each class first seen here
    first_appearances: list[tuple[int, int]] | None = None


# ---------------------------------------------------------------------- while a run trains


@dataclass(frozen=True)
class TaskOutcome:
    """The evaluation after a task: the honest (last-epoch) numbers, and optional extras. What
    the store keeps of it is its fields that are columns of its table (store/tables.py TaskResult)."""

    task: int
    accuracy: float | None  # percent on the task's evaluation set (None: evaluate_test=false, not measured)
    accuracy_row: Sequence[float | None] | None = ()  # acc[task][j] for every task j (None: not measured)
    class_accuracy: Sequence[float | None] | None = None  # per class (None: class not evaluated)
    eval_classes: Sequence[int] = ()
    seconds: float = 0.0
    best_epoch_accuracy: float | None = None  # the authors' best-over-epochs figure (test-set selection!)
    extra: Mapping[str, Any] = field(default_factory=dict)  # the loop's figures (not a column: the run's summary)
    topk: int | None = None  # k of the top-k figures below, when measured (the run's `topk` > 1)
    topk_accuracy: float | None = None  # percent: the label among the k highest-scored classes
    topk_accuracy_row: Sequence[float | None] | None = None  # acc[task][j] in top-k
    # the validation stream (val_fraction > 0): the same evaluation on the held-out train samples
    val_accuracy: float | None = None  # percent, on the held-out samples of eval_classes
    val_accuracy_row: Sequence[float | None] | None = None  # val acc[task][j]
    val_class_accuracy: Sequence[float | None] | None = None
    # per-task figures (`figure()`): below, each declared once


def task_figures() -> list[tuple[str, Figure]]:
    """The per-task figures `TaskOutcome` declares (name, how it is shown), in order."""
    return [(f.name, f.metadata["figure"]) for f in fields(TaskOutcome) if "figure" in f.metadata]


# `show --json`'s per-task keys from the outcome, in their published order (unchanged since the
# first stores): each always written, but the validation ones only where the task measured
# validation; a figure declared after them follows, written only where measured.
TASK_JSON_KEYS = (
    "accuracy",
    "accuracy_row",
    "class_accuracy",
    "eval_classes",
    "best_epoch_accuracy",
    "topk_accuracy",
    "topk_accuracy_row",
    "val_accuracy",
    "val_accuracy_row",
    "val_class_accuracy",
    "seconds",
)
_VALIDATION = ("val_accuracy", "val_accuracy_row", "val_class_accuracy")


def outcome_json(outcome: TaskOutcome | None) -> dict[str, Any]:
    """One task's outcome as `show --json` writes it beside its plan (None: not done yet)."""
    validated = outcome is not None and outcome.val_accuracy is not None
    out = {
        key: (getattr(outcome, key) if outcome is not None else None)
        for key in TASK_JSON_KEYS
        if validated or key not in _VALIDATION
    }
    for name, _ in task_figures():
        value = getattr(outcome, name) if outcome is not None else None
        if value is not None:
            out[name] = value
    return out


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class AnytimePoint:
    """One anytime evaluation of a task-free run (PROTOCOL §9.3): after `samples` streamed
    samples, the accuracy on the test samples of the `n_classes` classes exposed so far."""

    task: int
    samples: int  # streamed samples so far (the stream's clock; skipped ones included)
    accuracy: float | None  # percent (None: evaluate_test=false, the test split is never read)
    n_classes: int  # classes exposed so far (labels 0 .. n_classes-1)
    class_accuracy: Sequence[float | None] | None = None  # per exposed class, when the run records it
    seconds: float = 0.0  # this evaluation's wall time
    val_accuracy: float | None = None  # percent on the held-out samples of those classes (val_fraction > 0)
    train_flops: float | None = None  # training FLOPs spent so far (cl/compute.py): where `report --budget` reads


@dataclass(frozen=True)
class MemoryUpdate:
    """The memory after one update: samples per class (class-order index), the slots per class,
    and what the method said of it (`info`: its policy, a note, RM's uncertainty spread)."""

    task: int
    histogram: Sequence[int]
    slots_per_class: int
    info: Mapping[str, Any] | None = None
    id: int = 0  # the store's row id (0: not stored)
    at: datetime | None = None  # when it was stored

    @property
    def size(self) -> int:
        return sum(self.histogram)

    @property
    def policy(self) -> str | None:
        return (self.info or {}).get("policy")

    @property
    def note(self) -> str | None:
        return (self.info or {}).get("note")

    @property
    def views(self) -> int | None:
        return (self.info or {}).get("views")

    @property
    def candidates_uncertainty(self) -> tuple[int, ...] | None:
        return _ints((self.info or {}).get("candidates_uncertainty"))

    @property
    def chosen_uncertainty(self) -> tuple[int, ...] | None:
        return _ints((self.info or {}).get("chosen_uncertainty"))


def _ints(values: Any) -> tuple[int, ...] | None:
    return tuple(int(v) for v in values) if values else None


# ---------------------------------------------------------------------- one run's rows


@dataclass(frozen=True)
class RunRows:
    """One run's stored rows, as the catalogue reads them: its config, the outcome of each task
    done (in task order), its anytime evaluations (by samples seen), the loop's latest online
    figures (timings, sample counts) and the tasks planned."""

    config: Mapping[str, Any] = field(default_factory=dict)
    tasks: Sequence[TaskOutcome] = ()
    anytime: Sequence[AnytimePoint] = ()
    online: Mapping[str, Any] = field(default_factory=dict)
    n_tasks: int = 0

    @property
    def protocol(self) -> Protocol:
        return protocol_of(self.config)

    @property
    def accuracies(self) -> list[float]:
        """The accuracy after each task done (read only where `tested`: test metrics are guarded)."""
        return [t.accuracy for t in self.tasks if t.accuracy is not None]

    @property
    def matrix(self) -> list[list[float | None]]:
        """acc[k][j] (cl/metrics.py)."""
        return [list(t.accuracy_row or ()) for t in self.tasks]

    @property
    def tested(self) -> bool:
        """Whether every task done has its test figures: a run with evaluate_test=false (a tuning
        trial) has none, and its test metrics are absent, never 0."""
        return all(t.accuracy is not None for t in self.tasks) and all(p.accuracy is not None for p in self.anytime)

    @property
    def topk(self) -> int | None:
        """k when every task done measured its top-k figures with the same k, else None (a run
        resumed with another `topk` has no top-k summary)."""
        if not self.tasks or any(t.topk_accuracy is None for t in self.tasks):
            return None
        k = self.tasks[0].topk
        return k if all(t.topk == k for t in self.tasks) else None
