"""The run record every face reads (CLI, TUI, report), with its metrics keyed by the metric
catalogue's names, and the cross-run metrics (I_last's joint-run rule) applied to records.

Pure: no SQL here, and no science: the store's queries build records from run rows
(queries.py); the catalogue (cl/metric_catalog.py, via rmconsole/metric_registry.py) computes
every metric, the joint-run rule included; the faces read `metrics`, filter them (filters.py)
and print `to_json()`, the `runs --json` shape.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from .. import metric_registry
from ..cl.metric_catalog import JOINT_KEYS, JSON_ALWAYS, CrossValue, RuleContext, is_upper_bound
from .tables import ACTIVE

BUDGET_KEYS = JOINT_KEYS  # the spine's name for the joint rule's matching keys, kept for existing callers


def finite(value: Any) -> float | None:
    """A stored metric as a number, or None when it is missing, NaN, infinite, or not a number a
    float can hold (a row an older version or a plug-in wrote: 10**400, "abc"), so one bad row
    never breaks a read command."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def count(value: Any) -> int:
    """A stored count (tasks_done) as an int, 0 when it is not a sensible one."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31 else 0


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
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


@dataclass(frozen=True)
class RunRecord:
    """One run as the faces see it: identity, config, lifecycle, live progress, summary metrics.

    Frozen, so a screen can tell "nothing changed" by equality and skip a repaint. `metrics`:
    every measured metric by catalogue name (percent for accuracies; a metric not measured, or
    NaN, is absent), cross-run ones (I_last) included once `with_intransigence` set them;
    `cross`: what each cross-run value was measured against."""

    id: int
    status: str
    preset: str | None
    method: str
    dataset: str
    memory_size: int | None  # K: a column of every runs table, so read out of the config once
    seed: int
    n_tasks: int
    task: int | None
    phase: str | None
    phase_done: int
    phase_total: int
    samples_per_s: float | None
    eta_s: float | None
    tasks_done: int
    sweep_id: str | None
    error: str | None
    metrics: Mapping[str, float] = field(default_factory=dict, hash=False)
    cross: Mapping[str, CrossValue] = field(default_factory=dict, hash=False)  # metric -> its value's provenance
    created_at: datetime | None = None
    heartbeat_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    device: str | None = None
    host: str | None = None
    pid: int | None = None
    log_path: str | None = None
    topk: int | None = None  # k of the top-k metrics (the run's `topk` when > 1)
    config: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False)
    # what the user calls it
    name: str | None = None
    tags: tuple[str, ...] = ()
    note: str | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict, repr=False, hash=False)  # keys unlike the preset's
    archived: bool = False

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    def value(self, name: str) -> float | None:
        """The run's value of metric `name` (None: not measured)."""
        return self.metrics.get(name)

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

    def metric_text(self, name: str, letter: bool = False, digits: int | None = None, mark: bool = True) -> str:
        """Metric `name` as every face writes it: `86.00`, or for a partial run a final-only
        metric as `@3/5 88.06` (`A@3/5 88.06` with `letter`; no mark with `mark=False`, for a
        column beside one that carries it), `—` when not measured; a cross-run metric with its
        `*` when the run it was measured against differs beyond what its rule allows."""
        m = metric_registry.metric(name)
        value = self.metrics.get(name)
        if value is None:
            return "—"
        text = m.text(value, digits)
        if name in self.cross and self.cross[name].differs:
            text += "*"
        if self.partial and m.final_only and mark:
            return f"{m.letter if letter else ''}@{self.progress_mark} {text}"
        return text

    @property
    def overrides_text(self) -> str:
        """The overrides as the CLI writes them: `epochs=64 augment=none`."""
        return " ".join(f"{k}={format_value(v)}" for k, v in self.overrides.items())

    @property
    def label(self) -> str:
        """What a run is called in one word: its name, else its preset."""
        return self.name or self.preset or "—"

    @property
    def phase_fraction(self) -> float | None:
        if not self.phase_total:
            return None
        return min(self.phase_done / self.phase_total, 1.0)

    # I_last's provenance, as the faces' notes write it
    @property
    def i_last_joint_run(self) -> int | None:
        """The joint run I_last was measured against."""
        found = self.cross.get("I_last")
        return found.against if found is not None else None

    @property
    def i_last_differs(self) -> tuple[tuple[str, Any, Any], ...]:
        """Keys (other than the joint run's own recipe) in which that joint run differs: key ->
        (this run's value, the joint run's value); shown as `I_last 6.83*` with a note."""
        found = self.cross.get("I_last")
        return found.differs if found is not None else ()

    @property
    def is_upper_bound(self) -> bool:
        """A finished joint run with an A_last: what I_last is measured against."""
        return is_upper_bound(self)

    @property
    def i_last_note(self) -> str | None:
        """What the `*` beside I_last means, or None when the joint run differs only in its recipe."""
        if not self.i_last_differs or self.i_last_joint_run is None:
            return None
        parts = [f"{k} {show_value(mine)} here, {show_value(theirs)} there" for k, mine, theirs in self.i_last_differs]
        return f"against joint run {self.i_last_joint_run}, which differs in " + "; ".join(parts)

    def i_last_text(self, digits: int = 2) -> str:
        """`6.83`, `6.83*` when the joint run differs beyond its recipe, `—` when there is none."""
        return self.metric_text("I_last", digits=digits)

    def search_text(self) -> str:
        """What free text in a run filter matches against (lower case)."""
        parts = [
            str(self.id),
            self.status,
            self.preset or "",
            self.method,
            self.dataset,
            f"k={self.memory_size}",
            f"seed={self.seed}",
            self.sweep_id or "",
            self.name or "",
            " ".join(self.tags),
            self.note or "",
            self.overrides_text,
        ]
        return " ".join(parts).lower()

    def to_json(self) -> dict[str, Any]:
        """The `runs --json` shape: identity, config, metrics, progress, lifecycle. `metrics` has
        every measured metric by catalogue name, the keys it always had (A_last, A_avg, F_last,
        I_last: null when not measured), each cross-run metric's provenance, and the progress."""
        metrics: dict[str, Any] = {name: self.metrics.get(name) for name in JSON_ALWAYS}
        for name, found in self.cross.items():
            if name == "I_last":  # (the names older versions wrote)
                metrics["I_last_joint_run"] = found.against
                if found.differs:
                    metrics["I_last_joint_differs"] = {
                        k: {"run": mine, "joint": theirs} for k, mine, theirs in found.differs
                    }
            else:
                metrics[f"{name}_against"] = found.against
        metrics.setdefault("I_last_joint_run", None)
        if self.topk is not None:
            metrics["topk"] = self.topk
        metrics.update((k, v) for k, v in self.metrics.items() if k not in metrics)
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
                "task": self.task,
                "n_tasks": self.n_tasks,
                "phase": self.phase,
                "done": self.phase_done,
                "total": self.phase_total,
                "samples_per_s": self.samples_per_s,
                "eta_s": self.eta_s,
            },
            "created_at": iso(self.created_at),
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "heartbeat_at": iso(self.heartbeat_at),
            "device": self.device,
            "error": self.error,
        }


def stored_metrics(stored: Mapping[str, Any] | None, names: set[str] | None = None) -> dict[str, float]:
    """The metrics of a stored `run.metrics` (any version) by catalogue name: every key that
    names a metric (`names`: the catalogue's, plug-ins included) and holds a number (NaN and None
    left out); the run facts beside them (tasks_done, topk, I_last's provenance) are not metrics."""
    if not stored:
        return {}
    names = set(metric_registry.metric_names()) if names is None else names
    out = {}
    for key, value in stored.items():
        if key in names and isinstance(value, (int, float)) and not isinstance(value, bool):
            number = finite(value)
            if number is not None:
                out[key] = number
    return out


# ---------------------------------------------------------------------- cross-run metrics (I_last)


def show_value(value: Any) -> str:
    """A config value as a note writes it: lists joined with '+', an empty list as `none`."""
    if isinstance(value, (list, tuple)):
        return "+".join(map(str, value)) if value else "none"
    return str(value)


@lru_cache(maxsize=1)
def rule_context() -> RuleContext:
    """What the catalogue's cross-run rules need of the config and the methods: the config
    defaults (a run stored before a key existed ran with it) and the methods' parameter keys
    (plug-ins' too)."""
    from ..config import method_keys  # torch-free: every method's own keys

    return RuleContext(defaults=_config_defaults(), method_keys=frozenset(method_keys()))


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


def candidate_filters() -> list[Mapping[str, Any]]:
    """Per cross-run metric, the run columns its other runs must have (the store fetches them)."""
    return [m.across.candidates for m in metric_registry.cross_run_metrics() if m.across is not None]


def with_intransigence(runs: Iterable[RunRecord], candidates: Iterable[RunRecord] | None = None) -> list[RunRecord]:
    """The runs with every cross-run metric (I_last by the joint-run rule) set, and what it was
    measured against, computed by the catalogue among `candidates` (default: the runs themselves)."""
    runs = list(runs)
    pool = runs if candidates is None else list(candidates)
    rules = [(m, m.across.index(pool)) for m in metric_registry.cross_run_metrics() if m.across]
    context = rule_context()
    out = []
    for run in runs:
        metrics, cross = dict(run.metrics), {}
        for m, index in rules:
            name, found = m.name, m.cross(run, index, context)  # (none for a run of another protocol)
            metrics.pop(name, None)
            if found.value is not None:
                metrics[name] = found.value
                if found.against is not None:
                    cross[name] = found
        same = metrics == run.metrics and cross == run.cross
        out.append(run if same else replace(run, metrics=MappingProxyType(metrics), cross=MappingProxyType(cross)))
    return out
