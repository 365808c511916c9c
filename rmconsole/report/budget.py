"""Equal-compute comparisons (`rmconsole report --budget TFLOP`; Prabhu et al., CVPR 2023).

Each task-free run's anytime curve is read at the budget: its accuracy at the last anytime
evaluation whose cumulative training FLOPs (recorded with every evaluation, cl/compute.py) are
within the budget (`A_budget`) and the mean over those evaluations (`A_auc_budget`). A run that
spent more than the budget is cut there and marked ▲ in its cell; a run that spent less is read
at its end (it had compute to spare). Pure: runs in as `runs --json` dicts, curves as rows.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from .. import metric_registry
from ..cl.metrics_anytime import at_budget
from ..cl.protocols import is_task_free

BUDGET_METRICS = ("A_budget", "A_auc_budget", "train_tflop", "A_auc", "A_last")  # the table's default columns


def read_at_budget(
    runs: Sequence[dict[str, Any]], curves: Mapping[int, Sequence[tuple[int, float, float]]], budget_tflop: float
) -> tuple[list[dict[str, Any]], frozenset[int]]:
    """The runs (copies, same order) with A_budget and A_auc_budget among their metrics (None for a
    run of the task protocol, or one whose evaluations recorded no FLOPs), and the ids of the runs
    that spent more than the budget."""
    out, over = [], set()
    for run in runs:
        run = copy.deepcopy(run)
        metrics = run["metrics"] = dict(run.get("metrics") or {})
        metrics["A_budget"] = metrics["A_auc_budget"] = None
        spent, points = metrics.get("train_tflop"), curves.get(run["id"]) or []
        if is_task_free(run.get("config") or {}) and spent is not None and points:
            read = at_budget(points, budget_tflop * 1e12, float(spent) * 1e12)
            metrics["A_budget"], metrics["A_auc_budget"] = read.accuracy, read.auc
            if read.over:
                over.add(run["id"])
        out.append(run)
    return out, frozenset(over)


def compute_lines(detail: dict[str, Any]) -> list[str]:
    """What `rmconsole show` prints of a run's compute (the catalogue's "compute" figures), with
    what the counter counts; nothing for a run stored before they were measured."""
    m = detail.get("metrics") or {}
    shown = [x for x in metric_registry.catalogue() if x.family == "compute" and m.get(x.name) is not None]
    if not shown:
        return []
    parts = []
    for x in shown:
        value = m[x.name]
        parts.append(f"{x.label} {value:,.0f}" if x.unit == "bytes" else f"{x.label} {x.text(value)}")
    return ["FLOPs and memory: " + "  ".join(parts), f"  ({shown[0].note})"]


__all__ = ["BUDGET_METRICS", "compute_lines", "read_at_budget"]
