import threading

from rmconsole import store
from rmconsole.cl.events import TaskOutcome, TaskPlan
from rmconsole.config import load_config


def _run() -> int:
    _, cfg = load_config(None)
    return store.create_run(cfg.to_dict(), "digits-blurry10-online")


def test_round_trip(isolated_home) -> None:
    run_id = _run()
    assert (isolated_home / "rmconsole.db").exists()
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
        except Exception as err:  # pragma: no cover - the assertion below reports it
            errors.append(err)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(len(store.memory_snapshots(i)) == 25 for i in ids)


def test_a_store_from_an_older_rmconsole_gets_the_new_columns(tmp_path, monkeypatch) -> None:
    """Columns added to a table since a store was written are added when it is opened (additive
    migration); its rows stay and read the new column as not recorded."""
    import sqlite3

    from rmconsole.store import db

    path = tmp_path / "old.db"
    monkeypatch.setenv("RMCONSOLE_DB", f"sqlite:///{path}")
    store.create_run({"dataset": "digits", "method": "rm", "seed": 1}, "digits-blurry10-online")
    db._ENGINES.clear()
    with sqlite3.connect(path) as conn:  # as an older rmconsole left it: no `samples_per_s`, no `eta_s`
        conn.execute("ALTER TABLE run DROP COLUMN samples_per_s")
        conn.execute("ALTER TABLE run DROP COLUMN eta_s")
    run = store.get_run(1)
    assert run.method == "rm" and run.samples_per_s is None and run.eta_s is None
    with sqlite3.connect(path) as conn:
        names = {row[1] for row in conn.execute("PRAGMA table_info(run)")}
    assert {"samples_per_s", "eta_s"} <= names
