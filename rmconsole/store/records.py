"""The run record every face reads (CLI, TUI, report), and the one rule for a run's joint run.

Pure: no SQL here. The store's queries build records from run rows (queries.py); the faces
read their fields, filter them (filters.py) and print `to_json()`, the `runs --json` shape.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from functools import cached_property, lru_cache
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
# What a joint run may differ in without changing what I_last means: its own training recipe,
# the stream and method keys (it has no stream, no memory, no method parameters), and keys that
# change only how or where a run computes. Any other difference (the augmentation, the top-k,
# the class order, a key added later) is shown beside I_last: `I_last 6.83*` and a note naming
# the joint run and the difference.
JOINT_RECIPE_KEYS = ("epochs", "batch_size", "memory_batch_size", "lr", "schedule", "weight_decay", "reset_head",
                     "train_head")
STREAM_KEYS = ("method", "memory_size", "n_tasks", "blurry", "stream", "uncertainty", "uncertainty_views",
               "memory_policy")
COMPUTE_KEYS = ("device", "threads", "download", "eval_every_epoch", "data_pipeline", "loader_workers",
                "gpu_decode", "amp", "channels_last", "compile", "cuda_graphs", "gpus")


def finite(value: Any) -> Optional[float]:
    """A stored metric as a number, or None when it is missing or NaN (nothing to show or compare)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def format_value(value: Any) -> str:
    """How a config value is written in a table: lists joined with '+', as on the command line."""
    if isinstance(value, (tuple, list)):
        return "+".join(format_value(v) for v in value) or "none"
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


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
    # keys (other than the joint run's own recipe) in which that joint run differs: key -> (this
    # run's value, the joint run's value); shown as `I_last 6.83*` with a note
    i_last_differs: tuple[tuple[str, Any, Any], ...] = ()
    topk: Optional[int] = None  # k of the top-k figures below (the run's `topk` when > 1)
    a_last_topk: Optional[float] = None
    a_avg_topk: Optional[float] = None
    f_last_topk: Optional[float] = None
    a_last_best_epoch: Optional[float] = None  # the authors' test-selected figure, when recorded
    a_auc: Optional[float] = None  # task-free runs: mean anytime accuracy (PROTOCOL §9.3)
    online: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False)  # compute-aware numbers
    config: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False)
    # what the user calls it
    name: Optional[str] = None
    tags: tuple[str, ...] = ()
    note: Optional[str] = None
    overrides: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False)  # keys unlike the preset's
    archived: bool = False

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def partial(self) -> bool:
        """Its metrics cover only some tasks: it has results, but not of every task (a running,
        stopped or failed run). A partial A_last is the accuracy after task `tasks_done`, not
        the run's final accuracy: shown as `A@3/5`, never averaged, never matched for I_last."""
        return 0 < self.tasks_done < self.n_tasks

    @property
    def progress_mark(self) -> str:
        """`3/5`: the tasks the metrics cover, for partial metrics."""
        return f"{self.tasks_done}/{self.n_tasks}"

    def metric_text(self, value: Optional[float], letter: str = "", digits: int = 2) -> str:
        """A metric as every face writes it: `86.00`, or for a partial run `A@3/5 88.06` (`letter`
        A, F...; without one `@3/5 88.06`), `—` when not measured."""
        if value is None:
            return "—"
        if self.partial:
            return f"{letter}@{self.progress_mark} {value:.{digits}f}"
        return f"{value:.{digits}f}"

    @property
    def overrides_text(self) -> str:
        """The overrides as the CLI writes them: `epochs=64 augment=none`."""
        return " ".join(f"{k}={format_value(v)}" for k, v in self.overrides.items())

    @property
    def label(self) -> str:
        """What a run is called in one word: its name, else its preset."""
        return self.name or self.preset or "—"

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

    @property
    def i_last_note(self) -> Optional[str]:
        """What the `*` beside I_last means, or None when the joint run differs only in its recipe."""
        if not self.i_last_differs or self.i_last_joint_run is None:
            return None
        parts = [f"{k} {show_value(mine)} here, {show_value(theirs)} there" for k, mine, theirs in self.i_last_differs]
        return f"against joint run {self.i_last_joint_run}, which differs in " + "; ".join(parts)

    def i_last_text(self, digits: int = 2) -> str:
        """`6.83`, `6.83*` when the joint run differs beyond its recipe, `—` when there is none."""
        if self.i_last is None:
            return "—"
        return f"{self.i_last:.{digits}f}" + ("*" if self.i_last_differs else "")

    def search_text(self) -> str:
        """What free text in a run filter matches against (lower case)."""
        parts = [str(self.id), self.status, self.preset or "", self.method, self.dataset,
                 f"k={self.memory_size}", f"seed={self.seed}", self.sweep_id or "", self.name or "",
                 " ".join(self.tags), self.note or "", self.overrides_text]
        return " ".join(parts).lower()

    def to_json(self) -> dict[str, Any]:
        """The `runs --json` shape: identity, config, metrics, progress, lifecycle."""
        metrics: dict[str, Any] = {"A_last": self.a_last, "A_avg": self.a_avg, "F_last": self.f_last,
                                   "I_last": self.i_last, "I_last_joint_run": self.i_last_joint_run}
        if self.i_last_differs:
            metrics["I_last_joint_differs"] = {k: {"run": mine, "joint": theirs} for k, mine, theirs in self.i_last_differs}
        if self.a_last_best_epoch is not None:
            metrics["A_last_best_epoch"] = self.a_last_best_epoch
        if self.topk is not None:
            metrics.update(topk=self.topk, A_last_topk=self.a_last_topk, A_avg_topk=self.a_avg_topk,
                           F_last_topk=self.f_last_topk)
        if self.a_auc is not None:
            metrics["A_auc"] = self.a_auc
        metrics.update(self.online)
        if self.tasks_done:  # stored with the first task's result
            metrics["tasks_done"] = self.tasks_done
            metrics["partial"] = self.partial  # true: the metrics are after task tasks_done of n_tasks
        return {
            "id": self.id,
            "status": self.status,
            "preset": self.preset,
            "method": self.method,
            "dataset": self.dataset,
            "seed": self.seed,
            "sweep_id": self.sweep_id,
            "name": self.name,
            "tags": list(self.tags),
            "note": self.note,
            "archived": self.archived,
            "overrides": dict(self.overrides),
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


def show_value(value: Any) -> str:
    """A config value as a note writes it: lists joined with '+', an empty list as `none`."""
    if isinstance(value, (list, tuple)):
        return "+".join(map(str, value)) if value else "none"
    return str(value)


def _ignored_in_joint_comparison() -> frozenset[str]:
    from ..config import method_keys  # torch-free: every method's own keys, plug-ins' too

    return frozenset((*JOINT_KEYS, *JOINT_RECIPE_KEYS, *STREAM_KEYS, *COMPUTE_KEYS, "seed", *method_keys()))


@lru_cache(maxsize=1)
def _config_defaults() -> dict[str, Any]:
    """Every key's default: the keys every run has and each method's own (a run reads only its
    method's: `config.method_reads`)."""
    from ..config import config_defaults

    return config_defaults()


def config_value(config: Any, key: str) -> Any:
    """A run's value for a config key; a run stored before the key existed ran as its default.
    Another method's parameter is None (the run never read it), even where a run stored by an
    earlier version holds every method's keys."""
    from ..config import method_reads

    if not method_reads(config.get("method"), key):
        return None
    if key in config:
        return config[key]
    return _config_defaults().get(key)


def joint_differences(run: RunRecord, joint: RunRecord) -> tuple[tuple[str, Any, Any], ...]:
    """The keys, beyond the joint run's own recipe, in which `joint` differs from `run`:
    (key, run's value, joint's value), in config order. A key one of them lacks (stored before
    it existed) counts as its default."""
    ignored = _ignored_in_joint_comparison()
    keys = [k for k in dict.fromkeys([*run.config, *joint.config]) if k not in ignored]
    out = []
    for key in keys:
        mine, theirs = config_value(run.config, key), config_value(joint.config, key)
        if _comparable(mine) != _comparable(theirs):
            out.append((key, mine, theirs))
    return tuple(out)


def _comparable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def with_intransigence(runs: Iterable[RunRecord], joints: Iterable[RunRecord] | None = None) -> list[RunRecord]:
    """The runs with I_last (and the joint run it is measured against) set by the joint-run
    rule, matched in memory among `joints` (default: the runs themselves)."""
    runs = list(runs)
    index = JointRuns(runs if joints is None else joints)
    out = []
    for run in runs:
        joint = index.upper_bound(run) if not run.partial else None  # a partial A_last has no I_last
        i_last = M.intransigence(joint.a_last if joint is not None else None, run.a_last)
        joint_id = joint.id if joint is not None and i_last is not None else None
        differs = joint_differences(run, joint) if joint_id is not None and joint is not None else ()
        same = (i_last, joint_id, differs) == (run.i_last, run.i_last_joint_run, run.i_last_differs)
        out.append(run if same else replace(run, i_last=i_last, i_last_joint_run=joint_id, i_last_differs=differs))
    return out
