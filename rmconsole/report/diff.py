"""Two runs side by side: the rows of `rmconsole diff` (identity, config, metrics B − A, tasks)."""

from __future__ import annotations

from typing import Any

from .. import metric_registry
from ..cl.protocols import protocol_of
from ..numbers import fmt
from ..store.filters import config_value, format_value
from .tables import _hashable


def _metric_text(detail: dict[str, Any], metric: Any) -> str:
    """A metric of a `show --json` detail: `86.00`, `A@3/5 88.06` when partial (final-only metrics)."""
    value = (detail.get("metrics") or {}).get(metric.name)
    if value is None:
        return "—"
    if (detail.get("metrics") or {}).get("partial") and metric.final_only:
        return f"{metric.letter}@{detail['metrics']['tasks_done']}/{detail['progress']['n_tasks']} {metric.text(value)}"
    return metric.text(value)


def run_diff(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """What differs between two runs (`show --json` details): identity, config keys (values as
    `--set` writes them), metrics with B − A (only when both are final, never partial vs final),
    and the accuracy after each task. The same rows feed `rmconsole diff` and the TUI's compare."""
    identity = []
    # who the runs are, as `show`'s head line names it ("sweep", never `sweep_id`: that reads as
    # a config key, and a run's sweep is where it was queued, not how it trained)
    for label, key in (("name", "name"), ("preset", "preset"), ("sweep", "sweep_id"), ("status", "status")):
        va, vb = a.get(key), b.get(key)
        if va != vb:
            identity.append((label, format_value(va), format_value(vb)))
    if a.get("tags") != b.get("tags"):
        identity.append(("tags", " ".join(a.get("tags") or []) or "—", " ".join(b.get("tags") or []) or "—"))
    ca, cb = a.get("config") or {}, b.get("config") or {}
    keys = list(dict.fromkeys([*ca, *cb]))
    config = [
        (k, format_value(config_value(ca, k)), format_value(config_value(cb, k)))
        for k in keys
        if _hashable(config_value(ca, k)) != _hashable(config_value(cb, k))
    ]
    metrics = []
    notes = []
    final = not (a["metrics"].get("partial") or b["metrics"].get("partial"))
    protocols = {protocol_of(ca), protocol_of(cb)}
    measured = {k for d in (a, b) for k, v in d["metrics"].items() if v is not None}
    for m in metric_registry.listed(protocols | {"task"}, measured):  # the catalogue's, not the loop's clock
        if m.family == "online":
            continue
        va, vb = a["metrics"].get(m.name), b["metrics"].get(m.name)
        delta = f"{vb - va:+.{m.digits}f}" if va is not None and vb is not None and (final or not m.final_only) else ""
        metrics.append((m.name, _metric_text(a, m), _metric_text(b, m), delta))
    if not final:
        notes.append("B − A is left out: a partial run's metrics (@k/T) are not final")
    ta = {t["task"]: t.get("accuracy") for t in a.get("tasks", [])}
    tb = {t["task"]: t.get("accuracy") for t in b.get("tasks", [])}
    tasks = []
    for t in sorted(set(ta) | set(tb)):
        va, vb = ta.get(t), tb.get(t)
        delta = f"{vb - va:+.2f}" if va is not None and vb is not None else ""
        tasks.append((f"acc after T{t + 1}", fmt(va), fmt(vb), delta))
    va_ = {t["task"]: t.get("val_accuracy") for t in a.get("tasks", [])}
    vb_ = {t["task"]: t.get("val_accuracy") for t in b.get("tasks", [])}
    if any(v is not None for v in (*va_.values(), *vb_.values())):  # validation beside test (val_fraction > 0)
        for t in sorted(set(va_) | set(vb_)):
            va, vb = va_.get(t), vb_.get(t)
            delta = f"{vb - va:+.2f}" if va is not None and vb is not None else ""
            tasks.append((f"val after T{t + 1}", fmt(va), fmt(vb), delta))
    return {
        "a": a["id"],
        "b": b["id"],
        "identity": identity,
        "config": config,
        "metrics": metrics,
        "tasks": tasks,
        "notes": notes,
    }
