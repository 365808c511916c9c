"""Selection by validation (issue 30): per group of runs (the report's rows, e.g. per method),
the configuration best on a VALIDATION metric, whose TEST figures are then reported.

A sweep is cheap in rmconsole; picking its best setting by test accuracy is the selection the
catalogue labels "test-set selected". This module picks on the held-out validation stream
instead (runs with val_fraction > 0): within a group, a *configuration* is one combination of
the config keys that differ between the group's runs (seed and the keys that change only how a
run computes are not keys of a configuration); its score is the catalogue's aggregate (mean)
over its seeds of the validation metric, and the catalogue's `better` says which end wins.
Only validation metrics may select (`metric.split == "validation"`): a test metric is refused.

Plain data in, plain data out: the faces pass the runs' `to_json()` summaries and print what
`select` returns (the report of the selected runs is tables.build_report's, as for any runs;
a run's key values and the runtime keys are the report's own, tables.key_value/RUNTIME_KEYS).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import metric_registry
from ..store.filters import format_value
from .tables import RUNTIME_KEYS, ReportError, key_value


class SelectionError(ReportError):
    """Bad --select-by input or nothing to select from: one line."""


@dataclass(frozen=True)
class Configuration:
    """One configuration of a group: its differing keys' values and its runs (newest finished
    run per seed), with the validation score (aggregate over those seeds; None: none measured)."""

    values: tuple[tuple[str, Any], ...]
    runs: tuple[dict[str, Any], ...]
    score: float | None
    scored_seeds: int

    def text(self) -> str:
        return ", ".join(f"{k}={format_value(v)}" for k, v in self.values)


@dataclass(frozen=True)
class Choice:
    """What was selected in one group, and among how many configurations."""

    group: tuple[tuple[str, Any], ...]  # the group's keys and values (e.g. (("method", "ewc"),))
    chosen: Configuration | None  # None: no configuration of the group has the metric
    configurations: tuple[Configuration, ...]

    @property
    def scored(self) -> int:
        return sum(c.score is not None for c in self.configurations)

    def line(self, metric: str, digits: int = 2) -> str:
        """`method=ewc: selected ewc_lambda=10, lr=0.01 (val_A_last 81.20 over 3 seeds) among 4 configurations`."""
        where = ", ".join(f"{k}={format_value(v)}" for k, v in self.group) or "all runs"
        n = len(self.configurations)
        among = f"among {n} configuration{'s' if n != 1 else ''}"
        if self.chosen is None or self.chosen.score is None:
            return f"{where}: nothing selected: no configuration has {metric} ({among}; runs need val_fraction > 0)"
        unscored = n - self.scored
        tail = f", {unscored} without {metric}" if unscored else ""
        seeds = self.chosen.scored_seeds
        score = f"{metric} {self.chosen.score:.{digits}f} over {seeds} seed{'s' if seeds != 1 else ''}"
        if not self.chosen.values:
            return f"{where}: its only configuration ({score})"
        return f"{where}: selected {self.chosen.text()} ({score}) {among}{tail}"


@dataclass(frozen=True)
class Selection:
    """The choices per group and the runs to report: the chosen configurations' runs."""

    metric: str
    group_keys: tuple[str, ...]
    choices: tuple[Choice, ...] = field(default_factory=tuple)

    @property
    def runs(self) -> list[dict[str, Any]]:
        return [r for c in self.choices if c.chosen is not None and c.chosen.score is not None for r in c.chosen.runs]

    def lines(self, digits: int = 2) -> list[str]:
        return [c.line(self.metric, digits) for c in self.choices]


def check_metric(name: str) -> Any:
    """The catalogue's Metric `name`, refused in one line unless it is measured on validation."""
    try:
        metric = metric_registry.metric(name)
    except metric_registry.UnknownMetric:
        allowed = ", ".join(m.name for m in metric_registry.validation_metrics())
        raise SelectionError(f"--select-by {name!r}: not a metric; allowed: {allowed}") from None
    if metric.split != "validation":
        allowed = ", ".join(m.name for m in metric_registry.validation_metrics())
        raise SelectionError(
            f"--select-by {name}: measured on the test set, and selecting on test is what "
            f"--select-by prevents; choose a validation metric: {allowed} (runs with val_fraction > 0)"
        )
    return metric


def _finite(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def select(runs: Sequence[dict[str, Any]], metric: str, group_keys: Sequence[str] = ("method",)) -> Selection:
    """Per group of `runs` (same values of `group_keys`), the configuration best on `metric` (a
    validation metric: check_metric) by its aggregate over seeds; ties go to the configuration
    with more seeds, then to the oldest. Only finished runs count (the newest per seed)."""
    measure = check_metric(metric)
    if not runs:
        raise SelectionError("no runs to select from")
    runs = sorted(runs, key=lambda r: r["id"])
    keys: list[str] = []
    for run in runs:
        keys.extend(k for k in run.get("config") or {} if k not in keys)
    skip = {"seed", *RUNTIME_KEYS, *group_keys}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault(tuple(key_value(run, k) for k in group_keys), []).append(run)
    choices = []
    for group, members in groups.items():
        differing = [k for k in keys if k not in skip and len({key_value(r, k) for r in members}) > 1]
        configs: dict[tuple, dict[int, dict[str, Any]]] = {}
        for run in members:  # ascending id: a later finished run of a seed replaces an earlier one
            config = tuple(key_value(run, k) for k in differing)
            per_seed = configs.setdefault(config, {})
            if run["status"] == "finished":
                per_seed[run["seed"]] = run
        candidates = []
        for config, per_seed in configs.items():
            used = tuple(per_seed[s] for s in sorted(per_seed))
            values = [v for r in used if (v := _finite((r.get("metrics") or {}).get(metric))) is not None]
            score = measure.aggregate(values)[0] if values else None
            candidates.append(Configuration(tuple(zip(differing, config)), used, score, len(values)))
        scored = [c for c in candidates if c.score is not None]
        sign = -1.0 if measure.lower_is_better else 1.0
        chosen = (
            max(scored, key=lambda c: (sign * (c.score or 0.0), c.scored_seeds, -min(r["id"] for r in c.runs)))
            if scored
            else None
        )
        choices.append(Choice(tuple(zip(group_keys, group)), chosen, tuple(candidates)))
    selection = Selection(metric, tuple(group_keys), tuple(choices))
    if not selection.runs:
        raise SelectionError(
            f"--select-by {metric}: no finished run of the selection has it (a validation metric "
            f"needs runs with val_fraction > 0)"
        )
    return selection
