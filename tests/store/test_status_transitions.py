"""Status changes (store/transitions.py): each guarded, the first to decide wins."""

from __future__ import annotations

import pytest

from rmconsole import store
from rmconsole.config import load_config

pytestmark = pytest.mark.usefixtures("store_backend")  # each test on SQLite and on PostgreSQL


def _queued() -> int:
    _, cfg = load_config(None, {})
    return store.create_run(cfg.to_dict(), "p")


def test_claim_starts_only_a_queued_run() -> None:
    run_id = _queued()
    claimed = store.claim_run(run_id, status="ignored", host="here", pid=7)
    assert claimed and claimed == store.Transition(True, "running")
    run = store.get_run(run_id)
    assert (run.status, run.host, run.pid) == ("running", "here", 7)
    again = store.claim_run(run_id, host="elsewhere")
    assert not again and again.status == "running" and store.get_run(run_id).host == "here"
    assert store.mark_stopped(run_id, "stop")
    assert store.claim_run(run_id).status == "stopped"  # a stopped run never gets a worker
    with pytest.raises(store.UnknownRun):
        store.claim_run(999)


def test_the_first_end_wins() -> None:
    run_id = _queued()
    assert not store.mark_finished(run_id)  # only a running run finishes
    store.claim_run(run_id)
    failed = store.mark_failed(run_id, "worker killed by signal SIGKILL")
    assert failed and failed.status == "failed"
    late = store.mark_stopped(run_id, "late stop")
    assert not late and late.status == "failed"
    assert not store.mark_finished(run_id, phase="done")
    run = store.get_run(run_id)
    assert (run.status, run.error, run.phase) == ("failed", "worker killed by signal SIGKILL", None)
    assert run.finished_at is not None


def test_finished_run_records_its_last_progress() -> None:
    run_id = _queued()
    store.claim_run(run_id)
    assert store.mark_finished(run_id, phase="done", eta_s=0.0)
    run = store.get_run(run_id)
    assert (run.status, run.phase, run.eta_s) == ("finished", "done", 0.0) and run.finished_at is not None
    assert not store.mark_failed(run_id, "too late") and not store.requeue_run(run_id)


def test_a_stop_nobody_asked_for_becomes_a_failure_keeping_its_end_time() -> None:
    run_id = _queued()
    store.claim_run(run_id)
    assert not store.fail_stopped_run(run_id, "rank failed")  # only a stopped run
    store.mark_stopped(run_id, "stopped by torchrun")
    ended = store.get_run(run_id).finished_at
    relabelled = store.fail_stopped_run(run_id, "a rank failed")
    assert relabelled and relabelled.status == "failed"
    run = store.get_run(run_id)
    assert (run.error, run.finished_at) == ("a rank failed", ended)


def test_requeue_clears_the_dead_worker_and_only_one_resume_wins() -> None:
    run_id = _queued()
    store.claim_run(run_id, pid=123, heartbeat_at=store.utcnow())
    store.mark_failed(run_id, "gone")
    assert store.requeue_run(run_id) and not store.requeue_run(run_id)
    run = store.get_run(run_id)
    assert (run.status, run.pid, run.heartbeat_at, run.error, run.finished_at) == ("queued", None, None, None, None)
    assert store.mark_stopped(run_id, "sweep stopped before this run started", only_from=("queued",))
    assert not store.mark_stopped(run_id, "again", only_from=("queued",))


def test_heartbeat_writes_only_while_running() -> None:
    run_id = _queued()
    assert store.heartbeat(run_id, phase="x") == "queued" and store.get_run(run_id).phase is None
    store.claim_run(run_id)
    assert store.heartbeat(run_id, phase="stream", phase_done=3) == "running"
    assert store.get_run(run_id).phase_done == 3


def test_delete_takes_a_task_free_runs_anytime_rows_with_it() -> None:
    """delete_run deletes from every table with a run's rows (it missed AnytimeEval: a foreign-key error)."""
    from rmconsole.cl.results import AnytimePoint

    run_id = _queued()
    store.claim_run(run_id)
    store.record_anytime(run_id, [AnytimePoint(0, 10, 50.0, 2), AnytimePoint(0, 20, 60.0, 2)])
    assert store.mark_stopped(run_id, "stop") and len(store.anytime_evals(run_id)) == 2
    assert store.delete_run(run_id).applied and store.anytime_evals(run_id) == []
    with pytest.raises(store.UnknownRun):
        store.get_run(run_id)
