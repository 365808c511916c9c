"""Per-class accuracy after the latest task, old classes apart from new ones: the recency bias
a continual-learning researcher looks for first (a model that forgets predicts the newest
classes), shown beside each class's memory slots. Plain data, no face: the TUI's run page and
the CLI's `show` both call `class_accuracy_by_age` and draw its result their own way.

The stored task results carry what it needs: `class_accuracy` (percent per class, indexed by
position in the run's class order, None for a class not tested) and `eval_classes` (the classes
seen so far). A class is new at task t when it was not among the classes seen after task t-1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ClassLine:
    """One class after the latest task: its accuracy and its memory slots (None: not known)."""

    index: int
    label: str
    accuracy: float | None
    slots: int | None


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


@dataclass(frozen=True)
class ClassAccuracyByAge:
    """The classes seen after task `task` (0-based), split into those seen before it (`old`)
    and those it introduced (`new`), each in class order."""

    task: int
    old: tuple[ClassLine, ...]
    new: tuple[ClassLine, ...]

    @property
    def old_mean(self) -> float | None:
        return _mean([c.accuracy for c in self.old])

    @property
    def new_mean(self) -> float | None:
        return _mean([c.accuracy for c in self.new])

    @property
    def gap(self) -> float | None:
        """new − old mean accuracy (points): positive = the model favours the newest classes."""
        old, new = self.old_mean, self.new_mean
        return None if old is None or new is None else new - old


def class_accuracy_by_age(
    results: Sequence[Any], histogram: Sequence[int] | None = None, labels: Sequence[str] = ()
) -> ClassAccuracyByAge | None:
    """From a run's task results in task order (anything with `task`, `class_accuracy` and
    `eval_classes`: a TaskOutcome, or show --json's task entries), the classes after the latest task,
    old apart from new, each with its memory slots from `histogram` (the memory's per-class
    counts after that task, class-order indexed) and its label (`labels`, class-order indexed;
    else the index). None when no task result carries per-class accuracy."""
    usable = [r for r in results if getattr(r, "class_accuracy", None) and getattr(r, "eval_classes", None) is not None]
    if not usable:
        return None
    last = usable[-1]
    before = next((r for r in reversed(usable[:-1]) if r.task < last.task), None)
    seen_before = set(before.eval_classes) if before is not None else set()

    def line(c: int) -> ClassLine:
        accuracy = last.class_accuracy[c] if c < len(last.class_accuracy) else None
        slots = int(histogram[c]) if histogram is not None and c < len(histogram) else None
        return ClassLine(c, labels[c] if c < len(labels) else str(c), accuracy, slots)

    classes = sorted(set(last.eval_classes))
    return ClassAccuracyByAge(
        last.task,
        tuple(line(c) for c in classes if c in seen_before),
        tuple(line(c) for c in classes if c not in seen_before),
    )
