"""No finished work lost (issue 38): two RMCONSOLE_HOMEs sharing one RMCONSOLE_DB — a run stopped in
home A after task 1 resumed from home B with "no checkpoint: no task had finished" and trained
task 1 again. Now B finds A's checkpoint beside the run's log (vouched for by the store's
checksums) or refuses naming the paths it expected."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import train_in_process
from support.campaign import claim

from rmconsole import store
from rmconsole.config import load_config
from rmconsole.runner import checkpoints, launch
from rmconsole.store import db

HERE = "test_shared_store_border.py::"


def stopped_after_task_one(home_a: Path) -> int:
    _, cfg = load_config(None, {"epochs": 1, "n_tasks": 2, "augment": "none", "memory_size": 50})
    run_id = store.create_run(cfg.to_dict(), "two homes")
    store.update_run(run_id, log_path=str(launch.log_path(run_id)))  # (what starting its worker records)
    train_in_process(run_id, fail_after_task=0)
    assert checkpoints.checkpoint_path(run_id).is_file() and store.checkpoint_checksums(run_id)
    return run_id


@pytest.fixture
def home_b(isolated_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Home B, on home A's (isolated_home's) store."""
    home = tmp_path / "home-b"
    monkeypatch.setenv("RMCONSOLE_DB", f"sqlite:///{isolated_home / 'rmconsole.db'}")
    return home


def switch_to(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db.dispose_engines()
    monkeypatch.setenv("RMCONSOLE_HOME", str(home))


def no_worker(*args: object, **kwargs: object) -> None:
    raise AssertionError("a worker was started: the finished task would be trained again")


def test_resume_from_another_home_finds_the_finished_tasks_checkpoint(
    isolated_home: Path, home_b: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = stopped_after_task_one(isolated_home)
    switch_to(home_b, monkeypatch)
    assert store.get_run(run_id).status == "failed"  # the same store, seen from B
    found = checkpoints.adopt_checkpoint(run_id)
    assert found == isolated_home / "checkpoints" / f"run-{run_id}.pt"
    state = checkpoints.load_checkpoint(run_id)  # B's copy, verified against the store
    assert state is not None and state["task"] == 0
    assert checkpoints.adopt_checkpoint(run_id) is None  # here now: nothing to bring
    claim(
        "resume in another home sharing the store",
        HERE + "test_resume_from_another_home_finds_the_finished_tasks_checkpoint",
    ).check(None, "")


def test_resume_from_another_home_without_its_checkpoint_refuses_naming_the_paths(
    isolated_home: Path, home_b: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = stopped_after_task_one(isolated_home)
    (isolated_home / "checkpoints" / f"run-{run_id}.pt").unlink()  # home A's disk is gone
    switch_to(home_b, monkeypatch)
    monkeypatch.setattr(launch, "start_worker", no_worker)
    with pytest.raises(checkpoints.CheckpointError) as err:
        launch.resume_run(run_id)
    text = str(err.value)
    assert f"run {run_id} finished task 1 in another home" in text and "\n" not in text
    assert str(home_b / "checkpoints" / f"run-{run_id}.pt") in text
    assert str(isolated_home / "checkpoints" / f"run-{run_id}.pt") in text
    assert store.get_run(run_id).status == "failed"  # untouched
    claim(
        "resume in another home, the checkpoint nowhere",
        HERE + "test_resume_from_another_home_without_its_checkpoint_refuses_naming_the_paths",
    ).check(None, text)


# ---------------------------------------------------------------------- every plug-in that trained it

V02 = {"kind": "method", "name": "mine", "package": "plug-mine", "version": "0.2"}
V03 = {"kind": "method", "name": "mine", "package": "plug-mine", "version": "0.3"}


def test_a_resumed_run_records_every_plugin_version_that_trained_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reproduction: a run resumed after its method plug-in went from 0.2 to 0.3 recorded only
    0.3. The worker's claim keeps the earlier attempts' plug-ins; the new start adds its own."""
    from rmconsole.cl.events import TaskPlan
    from rmconsole.runner import worker

    _, cfg = load_config(None)
    run_id = store.create_run(cfg.to_dict(), "digits")
    store.claim_run(run_id, versions={"rmconsole": "0.1.0"})
    plans = [TaskPlan(t, 10, [t], [1] * 5, f"h{t}") for t in range(5)]
    store.record_start(run_id, plans, list(range(5)), [str(i) for i in range(5)], ["normalize"], plugins=[V02])
    store.mark_failed(run_id, "stopped after task 2 (simulated)")
    claimed: dict = {}

    def captured(run: int, fields: dict, lease: object) -> str:  # the resumed worker's claim, captured
        claimed.update(fields)
        store.claim_run(run, **fields)
        return "stopped"  # (and it goes no further)

    store.requeue_run(run_id, ("failed",))
    monkeypatch.setattr(worker, "_claim", captured)
    with pytest.raises(worker.Superseded):
        worker.train(run_id)
    assert claimed["versions"]["plugins"] == [V02]
    store.record_start(run_id, plans, list(range(5)), [str(i) for i in range(5)], ["normalize"], plugins=[V03])
    assert store.get_run(run_id).versions["plugins"] == [V02, V03]
    store.record_start(run_id, plans, list(range(5)), [str(i) for i in range(5)], ["normalize"], plugins=[V03])
    assert store.get_run(run_id).versions["plugins"] == [V02, V03]  # (once each)
    claim(
        "a run resumed after its plug-in was upgraded",
        HERE + "test_a_resumed_run_records_every_plugin_version_that_trained_it",
    ).check(None, "")


# ---------------------------------------------------------------------- a database outage


def test_a_foreground_sweep_waits_out_a_database_outage_as_its_workers_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reproduction: PostgreSQL stopped for 13 s during `run --seeds 1,2,3`: the running worker
    waited it out, the sweep's driver exited at once and the other runs stayed queued. Now the
    driver holds on for the workers' grace (RMCONSOLE_DB_GRACE_S, default 60 s)."""
    from support.cli import in_process

    from rmconsole.cli import sweeps

    seen: dict = {}

    def outage_then_answers(sweep_id: str, queue: object, plan: object = None) -> dict[str, int]:
        seen["grace"] = db.outage_grace_s()
        failures = iter(range(2))

        def attempt() -> str:
            if next(failures, None) is not None:
                raise db.StoreUnreachable("the database postgresql://x is unreachable", "x", "server closed")
            return "answered"

        seen["result"] = db._within_grace(attempt)
        return {"finished": 2}

    monkeypatch.setattr(sweeps, "follow_sweep", outage_then_answers)
    monkeypatch.delenv("RMCONSOLE_DB_GRACE_S", raising=False)
    done = in_process("run", "--seeds", "1,2", "--set", "epochs=1", "--set", "n_tasks=2")
    assert seen.get("result") == "answered", done.stderr
    assert seen["grace"] == db.OUTAGE_GRACE_S  # a worker's default
    assert "the database x is unreachable" in done.stderr and "answers again" in done.stderr
    assert db._outage_hold["s"] is None  # (held only while it drives)
    claim(
        "a database outage during a foreground sweep",
        HERE + "test_a_foreground_sweep_waits_out_a_database_outage_as_its_workers_do",
    ).check(None, done.stderr)


# ---------------------------------------------------------------------- a read-only store


@pytest.mark.parametrize("how", ["immutable", "ro"])
def test_a_store_on_a_read_only_mount_can_be_read(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The reproduction: a store on a read-only mount could not be read at all ("unable to open
    database file"). Now reads open it read-only (immutable when its folder cannot be written
    either); a write is one line. (As root, a mount's read-only-ness is what os.access reports.)"""
    import os

    from support.cli import in_process

    _, cfg = load_config(None, {"n_tasks": 1})
    run_id = store.create_run(cfg.to_dict(), "kept")
    db.dispose_engines()
    real = os.access
    denied = {isolated_home} if how == "immutable" else {isolated_home / "rmconsole.db"}

    def access(path: object, mode: int, *args: object, **kwargs: object) -> bool:
        if mode & os.W_OK and Path(str(path)).resolve() in {p.resolve() for p in denied}:
            return False
        return real(path, mode, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(db.os, "access", access)
    assert db._read_only(isolated_home / "rmconsole.db") == how
    listed = in_process("runs", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [r["id"] for r in __import__("json").loads(listed.stdout)] == [run_id]
    shown = in_process("show", str(run_id))
    assert shown.returncode == 0 and "kept" in shown.stdout, shown.stderr
    tagged = in_process("tag", str(run_id), "+x")
    assert tagged.returncode != 0 and "Traceback" not in tagged.stderr
    assert len(tagged.stderr.strip().splitlines()) == 1 and "readonly" in tagged.stderr.replace("read-only", "readonly")
    claim(
        "a store on a read-only mount",
        HERE + "test_a_store_on_a_read_only_mount_can_be_read",
    ).check(listed.returncode, listed.stderr)


def test_the_tune_driver_waits_out_a_database_outage_as_its_trials_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """`tune` drives its trials in the foreground as `run --seeds` drives a sweep: it holds on through
    a database outage with the same grace (db.holding_as_a_run), instead of exiting at once."""
    from support.cli import in_process

    from rmconsole.runner import tune as tuning

    seen: dict = {}

    def outage_then_answers(self: object) -> dict[str, int]:
        seen["grace"] = db.outage_grace_s()
        failures = iter(range(2))

        def attempt() -> str:
            if next(failures, None) is not None:
                raise db.StoreUnreachable("the database postgresql://x is unreachable", "x", "server closed")
            return "answered"

        seen["result"] = db._within_grace(attempt)
        return {"complete": 1}

    monkeypatch.setattr(tuning.StudyDriver, "run", outage_then_answers)
    monkeypatch.setattr(tuning.StudyDriver, "settled", lambda self: 1)
    monkeypatch.delenv("RMCONSOLE_DB_GRACE_S", raising=False)
    done = in_process(
        "tune", "--study", "outage", "--param", "lr=log:1e-3..1e-1", "--metric", "val_A_last", "--trials", "1",
        "--set", "val_fraction=0.1",
    )  # fmt: skip
    assert seen.get("result") == "answered", done.stdout + done.stderr
    assert seen["grace"] == db.OUTAGE_GRACE_S  # a worker's default
    assert "the database x is unreachable" in done.stderr and "answers again" in done.stderr
    assert db._outage_hold["s"] is None  # (held only while it drives)
