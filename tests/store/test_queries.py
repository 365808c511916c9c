"""The store's reads (store/queries.py) and its frozen run record."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support import tui_store
from test_intransigence_upper_bound import _stored

from rmconsole import store

pytestmark = pytest.mark.usefixtures("store_backend")  # each test on SQLite and on PostgreSQL

SUMMARY_KEYS = [
    "id",
    "status",
    "preset",
    "method",
    "dataset",
    "seed",
    "sweep_id",
    "name",
    "tags",
    "note",
    "archived",
    "overrides",
    "config",
    "metrics",
    "progress",
    "created_at",
    "started_at",
    "finished_at",
    "heartbeat_at",
    "device",
    "error",
]


def test_records_carry_the_runs_json_shape() -> None:
    ids = tui_store.build()
    records = {r.id: r for r in store.run_records()}
    assert sorted(records) == sorted(ids.values())
    finished = records[ids["finished"]]
    assert (finished.status, finished.value("A_last"), finished.tasks_done, finished.memory_size) == (
        "finished",
        86.0,
        5,
        200,
    )
    shape = finished.to_json()
    assert list(shape) == SUMMARY_KEYS
    assert list(shape["metrics"]) == [
        "A_last",
        "A_avg",
        "F_last",
        "I_last",
        "I_last_joint_run",
        "F_max",
        "tasks_done",
        "partial",
    ]
    assert shape["metrics"]["partial"] is False and records[ids["running"]].to_json()["metrics"]["partial"] is True
    assert shape["metrics"]["A_last"] == 86.0 and shape["config"] == dict(finished.config)
    assert shape["progress"] == {
        "task": finished.task,
        "n_tasks": 5,
        "phase": finished.phase,
        "done": finished.phase_done,
        "total": finished.phase_total,
        "samples_per_s": finished.samples_per_s,
        "eta_s": finished.eta_s,
    }
    queued = records[ids["queued"]].to_json()
    assert queued["metrics"] == {
        "A_last": None,
        "A_avg": None,
        "F_last": None,
        "I_last": None,
        "I_last_joint_run": None,
    }  # no task done: no tasks_done key
    json.dumps([r.to_json() for r in records.values()])  # plain JSON, the config included
    detail = store.run_detail(ids["finished"])
    assert {k: detail[k] for k in SUMMARY_KEYS} == shape and len(detail["tasks"]) == 5
    assert store.run_record(ids["finished"]) == finished


def test_records_are_frozen() -> None:
    ids = tui_store.build()
    run = store.run_record(ids["finished"])
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.status = "failed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        run.config["epochs"] = 1  # type: ignore[index]
    with pytest.raises(store.UnknownRun):
        store.run_record(999)


def test_counts_statuses_sweeps_and_curves() -> None:
    ids = tui_store.build()
    assert store.count_runs() == 4
    assert store.run_statuses() == {ids[k]: k for k in ("finished", "running", "failed", "queued")}
    config = store.get_run(ids["finished"]).config
    second = store.create_runs([config, config], "p", "sweep-b")
    first = store.create_runs([config], "p", "sweep-a")
    assert store.sweep_ids() == ["sweep-b", "sweep-a"]  # oldest first, by its first run
    assert [r.sweep_id for r in store.run_records(second + first)] == ["sweep-b", "sweep-b", "sweep-a"]
    curves = store.accuracy_curves([ids["finished"], ids["running"], ids["queued"]])
    assert curves == {
        ids["finished"]: tui_store.ACCURACIES,
        ids["running"]: tui_store.ACCURACIES[:2],
        ids["queued"]: [],
    }


def test_run_parts_reread_only_what_changed() -> None:
    ids = tui_store.build()
    run_id = ids["running"]
    first = store.run_parts(run_id)
    assert len(first.streams) == 5 and len(first.results) == 2 and len(first.memory) == 3
    assert first.class_order == tui_store.CLASS_ORDER and first.record.id == run_id
    same = store.run_parts(run_id, first.marks)
    assert (same.streams, same.results, same.memory) == (None, None, None)
    store.record_task(run_id, tui_store._outcome(2))
    grown = store.run_parts(run_id, same.marks)
    assert grown.streams is None and grown.memory is None and len(grown.results) == 3
    store.delete_results_from(run_id, 1)
    shrunk = store.run_parts(run_id, grown.marks)
    assert len(shrunk.results) == 1 and len(shrunk.memory) == 1
    with pytest.raises(store.UnknownRun):
        store.run_parts(999)


def test_one_joint_rule_for_subsets_and_all_runs() -> None:
    """A subset read (compare page, one run) matches I_last against every finished joint run,
    with the same rule as a read of all runs."""
    old_same = _stored("joint", 90.0, augment="cutmix")
    _stored("joint", 80.0, augment="none")
    newest_same = _stored("joint", 95.0, augment="cutmix", epochs=4)  # the budget is the joint run's own
    run = _stored("rm", 70.0, augment="cutmix")
    other_seed = _stored("rm", 70.0, augment="cutmix", seed=9)
    assert store.run_record(run).i_last_joint_run == newest_same and store.run_record(run).value("I_last") == 25.0
    everything = {r.id: r for r in store.run_records()}
    assert everything[run] == store.run_records([run])[0] == store.run_record(run)
    assert everything[other_seed].value("I_last") is None and everything[old_same].value("I_last") is None
    assert store.joint_run(run).id == newest_same and store.joint_accuracy(run) == 95.0
    assert store.run_summary(store.get_run(run)) == everything[run].to_json()
