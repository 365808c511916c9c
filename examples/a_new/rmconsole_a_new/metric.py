"""A_new: the accuracy on the last task's classes after the last task, acc[T-1][T-1].

Why a column of its own: A_last mixes old and new classes and F_last measures only the old
ones. A_new is the other side of the stability-plasticity trade-off: a method that forgets
nothing because it barely learns the new classes (a strong regulariser: LwF with a large
lambda_o, EWC with a large lambda) shows a low A_new; plain fine-tuning a high one.

Plain Python, no torch: rmconsole computes it from a run's stored rows when it summarises a run
(the store, `runs`, `report`, filters and the TUI all read it through the metric catalogue).
"""

from __future__ import annotations

from typing import Any

from rmconsole.cl.metric_catalog import Metric


def accuracy_on_newest_task(rows: Any) -> float | None:
    """acc[k][k] for the last task k done (`rows.matrix`: acc[k][j], the accuracy on task j's
    classes after task k); None before the first task, or when that task's classes were not
    evaluated."""
    matrix = rows.matrix
    if not matrix:
        return None
    k = len(matrix) - 1
    row = matrix[k]
    return row[k] if k < len(row) else None


METRIC = Metric(
    "A_new",
    "A_new",
    "accuracy on the last task's classes after the last task (plasticity)",
    compute=accuracy_on_newest_task,
    protocols=("task",),
    sortable=True,
    note="A_new: accuracy on the last task's own classes after learning it",
)
