import threading

import pytest
from support.campaign import claim

from rmconsole import store
from rmconsole.cl.events import TaskOutcome, TaskPlan
from rmconsole.config import load_config

pytestmark = pytest.mark.usefixtures("store_backend")  # each test on SQLite and on PostgreSQL


def _run() -> int:
    _, cfg = load_config(None)
    return store.create_run(cfg.to_dict(), "digits-blurry10-online")


def test_round_trip(isolated_home, store_backend) -> None:
    run_id = _run()
    assert (isolated_home / "rmconsole.db").exists() == (store_backend == "sqlite")
    run = store.get_run(run_id)
    assert run.status == "queued" and run.config["memory_size"] == 200
    plans = [TaskPlan(t, 100, [2 * t, 2 * t + 1], [10] * 10, f"h{t}") for t in range(5)]
    store.record_start(run_id, plans, list(range(10)), [str(i) for i in range(10)], ["normalize"])
    for t in range(2):
        row = [50.0 + t] * 5
        store.record_task(run_id, TaskOutcome(t, 60.0 + 10 * t, row, [55.0] * 10, list(range(10)), 1.5))
        store.record_memory(run_id, t, [20] * 10, 20, {"policy": "uncertainty"})
    detail = store.run_detail(run_id)
    assert len(detail["tasks"]) == 5 and detail["tasks"][1]["accuracy"] == 70.0
    assert detail["tasks"][4]["accuracy"] is None and detail["tasks"][0]["composition"] == [10] * 10
    assert [m["histogram"] for m in detail["memory"]] == [[20] * 10, [20] * 10]
    assert detail["metrics"]["A_last"] == 70.0 and detail["metrics"]["A_avg"] == 65.0
    assert detail["metrics"]["I_last"] is None
    store.delete_results_from(run_id, 1)
    assert [r.task for r in store.task_results(run_id)] == [0]


def test_i_last_from_a_matching_joint_run() -> None:
    run_id = _run()
    store.record_task(run_id, TaskOutcome(0, 80.0, [80.0], [80.0] * 10, list(range(10)), 1.0))
    _, cfg = load_config(None, {"method": "finetune"})
    joint_cfg = {**cfg.to_dict(), "method": "joint"}
    joint_id = store.create_run(joint_cfg, "joint")
    store.record_task(joint_id, TaskOutcome(0, 95.0, [95.0], [95.0] * 10, list(range(10)), 1.0))
    store.update_run(joint_id, status="finished", n_tasks=1)
    assert store.run_detail(run_id)["metrics"]["I_last"] is None  # 1 of 5 tasks: a partial A_last has no I_last
    assert store.run_detail(run_id)["metrics"]["partial"] is True
    store.update_run(run_id, n_tasks=1)  # (as if the run had one task)
    assert store.run_detail(run_id)["metrics"]["I_last"] == 15.0


def test_concurrent_writers_lose_nothing() -> None:
    ids = [_run() for _ in range(4)]
    errors = []

    def hammer(run_id: int) -> None:
        try:
            for i in range(25):
                store.update_run(run_id, phase_done=i)
                store.record_memory(run_id, i, [i], 1, {})
        except Exception as err:  # noqa: BLE001  # pragma: no cover - the assertion below reports it
            errors.append(err)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(len(store.memory_snapshots(i)) == 25 for i in ids)


def test_a_store_from_an_older_rmconsole_gets_the_new_columns() -> None:
    """Columns added to a table since a store was written are added when it is opened (the
    baseline revision completes an unversioned store of an older shape, store/migrations); its
    rows stay and read the new column as not recorded."""
    import sqlalchemy

    from rmconsole.store import db

    store.create_run({"dataset": "digits", "method": "rm", "seed": 1}, "digits-blurry10-online")
    with db.get_engine().begin() as conn:  # as an older rmconsole left it: no `samples_per_s`, no `eta_s`
        conn.exec_driver_sql("ALTER TABLE run DROP COLUMN samples_per_s")
        conn.exec_driver_sql("ALTER TABLE run DROP COLUMN eta_s")
        conn.exec_driver_sql("ALTER TABLE run DROP COLUMN token")  # (and before store identities and run tokens)
        conn.exec_driver_sql("DROP TABLE store_identity")
        conn.exec_driver_sql("DROP TABLE rmconsole_schema_version")  # (and before schema versions)
    db.dispose_engines()  # a new process opens the old store
    run = store.get_run(1)
    assert run.method == "rm" and run.samples_per_s is None and run.eta_s is None and run.token is None
    names = {c["name"] for c in sqlalchemy.inspect(db.get_engine()).get_columns("run")}
    assert {"samples_per_s", "eta_s", "token"} <= names
    assert len(store.store_id()) == 32  # an identity, given when the older store was opened
    token = store.ensure_token(1)  # a run of the older store gets a token when it is started
    assert token and store.get_run(1).token == token and store.ensure_token(1) == token
    claim("an older store", "test_store.py::test_a_store_from_an_older_rmconsole_gets_the_new_columns").check(None, "")


def test_an_empty_rmconsole_home_is_the_default_not_the_current_folder(isolated_home, tmp_path, monkeypatch) -> None:
    """`RMCONSOLE_HOME= rmconsole run` (a variable set but empty) put rmconsole.db, logs/ and
    checkpoints/ straight into the current folder, among the user's files."""
    from pathlib import Path

    from rmconsole.store import db

    monkeypatch.setenv("RMCONSOLE_HOME", "")
    monkeypatch.delenv("RMCONSOLE_DB", raising=False)  # (the SQLite file in the home is what this is about)
    assert store.home() == Path(".rmconsole")
    db.dispose_engines()
    assert store.count_runs() == 0
    assert (tmp_path / ".rmconsole" / "rmconsole.db").is_file() and not (tmp_path / "rmconsole.db").exists()
    db.dispose_engines()
