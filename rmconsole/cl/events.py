"""What the protocol loop tells the outside world while a run trains.

`cl` never imports the store or a UI: the worker passes a Reporter subclass that turns
these calls into rows; tests and benchmarks use the silent base class.
"""

from __future__ import annotations

from typing import Any

from .results import AnytimePoint, EpochStats, TaskOutcome, TaskPlan

__all__ = ["AnytimePoint", "EpochStats", "Reporter", "TaskOutcome", "TaskPlan"]  # (the values: cl/results.py)


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
