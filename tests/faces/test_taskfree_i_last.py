"""A task-free run has no I_last, in every face (the follow-up defines no intransigence,
PROTOCOL §9.3; a stored joint run is a task run: another protocol's training and test classes).

Before this was pinned, a task-free run with a joint run of the same dataset, model, seed and
image size showed `I_last 15.00 (vs joint run 1)` in `show`, `runs`, `runs --json` and the TUI."""

from __future__ import annotations

import json

from support.cli import in_process

from rmconsole import store
from rmconsole.cl.events import TaskOutcome
from rmconsole.cl.metric_catalog import BUILTINS, I_LAST_TASK_FREE
from rmconsole.config import load_config

TASK_FREE = {"stream": "iblurry", "schedule": "constant"}  # (cosine is refused on a task-free stream)


def _stored(method: str, a_last: float, **overrides) -> int:
    _, cfg = load_config(None, {"method": method, **overrides})
    run_id = store.create_run(cfg.to_dict(), f"{method}-preset")
    store.record_task(run_id, TaskOutcome(0, a_last, [a_last], [a_last] * 10, list(range(10)), 1.0))
    store.update_run(run_id, status="finished", n_tasks=1)
    return run_id


def test_a_task_free_run_has_no_i_last_in_any_face(isolated_home) -> None:
    from rmconsole.tui import data

    joint = _stored("joint", 95.0)  # same dataset, model, seed, image size as both runs below
    task = _stored("er", 70.0)
    free = _stored("er", 80.0, **TASK_FREE)
    # the task run keeps its I_last (nothing changed for the RM protocol)
    assert store.run_detail(task)["metrics"]["I_last"] == 25.0
    assert store.run_detail(task)["metrics"]["I_last_joint_run"] == joint
    views = {
        "show --json": store.run_detail(free)["metrics"]["I_last"],
        "runs --json": next(r for r in json.loads(in_process("runs", "--json").stdout) if r["id"] == free)["metrics"][
            "I_last"
        ],
        "tui runs table": next(r for r in data.load_run_rows() if r.id == free).value("I_last"),
        "tui run page": data.load_run_view(free).row.value("I_last"),
        "tui compare": data.load_compare([free]).rows[0].value("I_last"),
        "record": store.run_record(free).value("I_last"),
    }
    assert views == dict.fromkeys(views, None)
    listed = next(r for r in json.loads(in_process("runs", "--json").stdout) if r["id"] == free)["metrics"]
    assert listed["I_last_joint_run"] is None and "I_last_joint_differs" not in listed
    shown = " ".join(in_process("show", str(free)).stdout.split())
    assert f"I_last — ({I_LAST_TASK_FREE})" in shown
    assert "vs joint run" not in shown and "no matching joint run" not in shown
    table = in_process("runs").stdout.splitlines()
    row = next(line for line in table if line.split()[:1] == [str(free)])
    assert row.split()[-1] == "—"  # the I_last column
    # a report mixing both protocols: the task row's I_last, the task-free row's "—" and why
    report = " ".join(in_process("report", "--metrics", "A_last,I_last", "--format", "md").stdout.split())
    assert "| 25.00 |" in report and f"I_last: {I_LAST_TASK_FREE}" in report


def test_the_reason_is_the_catalogue_row_s() -> None:
    i_last = BUILTINS["I_last"]
    assert not i_last.applies_to("task-free") and i_last.applies_to("task")
    assert i_last.why_none("task-free") == I_LAST_TASK_FREE
    assert i_last.why_none("task") == "no joint run to match"
    assert I_LAST_TASK_FREE in i_last.missing and "budget" not in i_last.missing  # budget is not matched
    assert "image size" in i_last.missing
