"""A_new is acc[T-1][T-1], from a run's stored rows, and only for the task protocol."""

from __future__ import annotations

import pytest
from rmconsole_a_new.metric import METRIC, accuracy_on_newest_task

from rmconsole.cl.results import RunRows, TaskOutcome

TASK = {"stream": "online", "method": "lwf"}


def rows(*matrix, config=TASK) -> RunRows:
    return RunRows(config, [TaskOutcome(k, 0.0, row) for k, row in enumerate(matrix)], n_tasks=3)


def test_the_last_tasks_own_classes_after_it() -> None:
    run = rows([90.0, None, None], [10.0, 80.0, None], [5.0, 20.0, 70.0])
    assert accuracy_on_newest_task(run) == 70.0
    assert METRIC.value(run) == pytest.approx(70.0)


def test_a_partial_run_gives_its_newest_task_and_none_before_any() -> None:
    assert METRIC.value(rows([90.0, None, None], [10.0, 80.0, None])) == 80.0
    assert METRIC.value(rows()) is None
    assert METRIC.value(rows([90.0, None, None], [10.0, None, None])) is None  # its classes not evaluated


def test_not_a_task_free_metric() -> None:
    assert METRIC.value(rows([90.0], config={"stream": "iblurry", "method": "er"})) is None
    assert METRIC.better == "higher" and METRIC.filterable and METRIC.sortable
