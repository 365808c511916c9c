"""The run record every face reads (CLI, TUI, report), and the one rule for a run's joint run.

Pure: no SQL here. The store's queries build records from run rows (queries.py); the faces
read their fields, filter them (filters.py) and print `to_json()`, the `runs --json` shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import cached_property
from typing import Any, Iterable, Mapping, Optional

from ..cl import metrics as M
from .tables import ACTIVE

# What a joint run must share with a run to be its upper bound: the problem (dataset, image
# size), the network (model) and the seed. Not the training budget: joint training sees the whole
# training set as one task, so its epochs, batch and schedule are its own recipe for reaching the
# upper bound (the paper likewise types one joint accuracy per dataset for every method). Not the
# stream keys either (tasks, blurry, memory): joint training has no stream.
JOINT_KEYS = ("dataset", "model", "seed", "image_size")
BUDGET_KEYS = JOINT_KEYS  # the spine's name for the matching keys, kept for existing callers


def finite(value: Any) -> Optional[float]:
    """A stored metric as a number, or None when it is missing or NaN (nothing to show or compare)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def iso(value: datetime | None) -> str | None:
    """A stored time as the JSON outputs write it: UTC, seconds, `Z`."""
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


@dataclass(frozen=True)
class RunRecord:
    """One run as the faces see it: identity, config, lifecycle, live progress, summary metrics.

    Frozen, so a screen can tell "nothing changed" by equality and skip a repaint. Metrics are
    percent, None when not measured (or NaN). `i_last` is set by the joint-run rule below."""

    id: int
    status: str
    preset: Optional[str]
    method: str
    dataset: str
    memory_size: Optional[int]  # K: a column of every runs table, so read out of the config once
    seed: int
    n_tasks: int
    task: Optional[int]
    phase: Optional[str]
    phase_done: int
    phase_total: int
    samples_per_s: Optional[float]
    eta_s: Optional[float]
    a_last: Optional[float]
    a_avg: Optional[float]
    f_last: Optional[float]
    i_last: Optional[float]
    tasks_done: int
    sweep_id: Optional[str]
    error: Optional[str]
    created_at: Optional[datetime] = None
    heartbeat_at: Optional[datetime] = None
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    device: Optional[str] = None
    host: Optional[str] = None
    pid: Optional[int] = None
    log_path: Optional[str] = None
    i_last_joint_run: Optional[int] = None  # the joint run I_last was measured against
    a_last_best_epoch: Optional[float] = None  # the authors' test-selected figure, when recorded
    a_auc: Optional[float] = None  # task-free runs: mean anytime accuracy (PROTOCOL §9.3)
    online: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False)  # compute-aware numbers
    config: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False)

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def phase_fraction(self) -> Optional[float]:
        if not self.phase_total:
            return None
        return min(self.phase_done / self.phase_total, 1.0)

    @cached_property
    def joint_key(self) -> tuple[str, ...]:
        """The JOINT_KEYS values: a joint run with the same key can be this run's upper bound."""
        return tuple(repr(self.config.get(k)) for k in JOINT_KEYS)

    @cached_property
    def augmentation(self) -> tuple[Any, ...]:
        return tuple(self.config.get("augment") or ())

    @property
    def is_upper_bound(self) -> bool:
        """A finished joint run with an A_last: what I_last is measured against."""
        return self.method == "joint" and self.status == "finished" and self.a_last is not None

    def search_text(self) -> str:
        """What free text in a run filter matches against (lower case)."""
        parts = [str(self.id), self.status, self.preset or "", self.method, self.dataset,
                 f"k={self.memory_size}", f"seed={self.seed}", self.sweep_id or ""]
        return " ".join(parts).lower()

    def to_json(self) -> dict[str, Any]:
        """The `runs --json` shape: identity, config, metrics, progress, lifecycle."""
        metrics: dict[str, Any] = {"A_last": self.a_last, "A_avg": self.a_avg, "F_last": self.f_last,
                                   "I_last": self.i_last, "I_last_joint_run": self.i_last_joint_run}
        if self.a_last_best_epoch is not None:
            metrics["A_last_best_epoch"] = self.a_last_best_epoch
        if self.a_auc is not None:
            metrics["A_auc"] = self.a_auc
        metrics.update(self.online)
        if self.tasks_done:  # stored with the first task's result
            metrics["tasks_done"] = self.tasks_done
        return {
            "id": self.id,
            "status": self.status,
            "preset": self.preset,
            "method": self.method,
            "dataset": self.dataset,
            "seed": self.seed,
            "sweep_id": self.sweep_id,
            "config": dict(self.config),
            "metrics": metrics,
            "progress": {
                "task": self.task, "n_tasks": self.n_tasks, "phase": self.phase, "done": self.phase_done,
                "total": self.phase_total, "samples_per_s": self.samples_per_s, "eta_s": self.eta_s,
            },
            "created_at": iso(self.created_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "heartbeat_at": iso(self.heartbeat_at),
            "device": self.device,
            "error": self.error,
        }


# ---------------------------------------------------------------------- the joint-run rule


class JointRuns:
    """The finished joint runs, indexed by JOINT_KEYS, newest first: built once, then asked for
    each run's upper bound. The one place the rule lives; every view goes through it."""

    def __init__(self, runs: Iterable[RunRecord]) -> None:
        self.by_key: dict[tuple[str, ...], list[RunRecord]] = {}
        for run in sorted((r for r in runs if r.is_upper_bound), key=lambda r: r.id, reverse=True):
            self.by_key.setdefault(run.joint_key, []).append(run)

    def upper_bound(self, run: RunRecord) -> Optional[RunRecord]:
        """`run`'s joint run: among finished joint runs with the same JOINT_KEYS and an A_last,
        the newest with the same augmentation, else the newest. (Never the best one: that would
        be selecting on the test set.) A joint run has none: it is the upper bound itself."""
        if run.method == "joint":
            return None
        matching = self.by_key.get(run.joint_key, [])
        same_augmentation = (j for j in matching if j.augmentation == run.augmentation)
        return next(same_augmentation, matching[0] if matching else None)


def with_intransigence(runs: Iterable[RunRecord], joints: Iterable[RunRecord] | None = None) -> list[RunRecord]:
    """The runs with I_last (and the joint run it is measured against) set by the joint-run
    rule, matched in memory among `joints` (default: the runs themselves)."""
    runs = list(runs)
    index = JointRuns(runs if joints is None else joints)
    out = []
    for run in runs:
        joint = index.upper_bound(run)
        i_last = M.intransigence(joint.a_last if joint is not None else None, run.a_last)
        joint_id = joint.id if joint is not None and i_last is not None else None
        same = (i_last, joint_id) == (run.i_last, run.i_last_joint_run)
        out.append(run if same else replace(run, i_last=i_last, i_last_joint_run=joint_id))
    return out
