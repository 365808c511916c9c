"""What the catalogue's rows mean for a task-free run (PROTOCOL §9.3): I_last is not one of the
follow-up's metrics and no joint run is measured against; the loop's figures say what they count."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from rmconsole.cl import metric_catalog as C
from rmconsole.cl.online import Clock, online_summary


@dataclass(frozen=True)
class _Run:  # a RunLike
    id: int
    method: str
    config: dict[str, Any]
    metrics: dict[str, float | None] = field(default_factory=dict)
    status: str = "finished"
    partial: bool = False


def test_i_last_is_measured_for_task_runs_only() -> None:
    same = {"dataset": "mnist", "model": "mlp400", "seed": 1, "image_size": None}
    joint = _Run(1, "joint", same, {"A_last": 95.0})
    task = _Run(2, "er", same, {"A_last": 80.0})
    free = _Run(3, "er", {**same, "stream": "iblurry"}, {"A_last": 80.0})
    i_last = C.BUILTINS["I_last"]
    assert i_last.across is not None
    index = i_last.across.index([joint, task, free])
    assert i_last.cross(task, index, C.RuleContext()) == C.CrossValue(15.0, 1, ())
    # the same dataset, model, seed and image size: still no upper bound of a task-free run
    assert i_last.cross(free, index, C.RuleContext()) == C.CrossValue()
    assert i_last.why_none("task-free") == C.I_LAST_TASK_FREE


def test_the_loop_s_figures_say_what_they_count() -> None:
    # evaluations/s: the anytime evaluations over eval s, which also holds the task-end evaluations
    clock = Clock(arrivals=100, observed=90, skipped=10, train_seconds=3.0, eval_seconds=5.0, evaluations=10)
    figures = online_summary(clock, SimpleNamespace(online_steps=7, cost=270.0))
    assert figures["evaluations_per_s"] == 2.0 and figures["train_samples_per_s"] == 30.0
    help_of = {m.name: m.help for m in C.METRICS}
    assert "eval s also holds the task-end evaluations" in help_of["evaluations_per_s"]
    # image passes: compute_budget's unit, 3 per image per step (90 images, one step each: 270)
    assert "3 per image per optimiser step" in help_of["image_passes"] and "compute_budget" in help_of["image_passes"]
    assert figures["image_passes"] == 3 * figures["samples_trained"]
    # wall s: the stream's tasks, not the whole process
    assert "not the setup" in help_of["wall_seconds"] and "whole run" not in help_of["wall_seconds"]
    assert "seen minus skipped" in help_of["samples_trained"]
    assert figures["samples_trained"] == figures["samples_seen"] - figures["samples_skipped"]
