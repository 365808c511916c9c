"""8 worker-like processes write to one store at once (SQLite, and PostgreSQL): no row lost, no
"database is locked" or serialization error, and the schema is created safely by whichever
process gets there first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.campaign import claim

from rmconsole import store

# each test on SQLite and on PostgreSQL, in a database that starts empty (these create the schema)
pytestmark = [pytest.mark.usefixtures("store_backend"), pytest.mark.empty_database]

WRITERS = 8
STEPS = 40
HELPER = Path(__file__).parents[1] / "support" / "store_writer.py"


def _schema_exists() -> bool:
    """Whether the store's tables exist, looked at without creating them."""
    import sqlalchemy

    from rmconsole.store.db import engine_url

    url = store.database_url()
    if url.startswith("sqlite:///"):
        return Path(url.removeprefix("sqlite:///")).exists()
    engine = sqlalchemy.create_engine(engine_url(url), poolclass=sqlalchemy.NullPool)
    try:
        return sqlalchemy.inspect(engine).has_table("run")
    finally:
        engine.dispose()


def run_writers(home: Path, writers: int = WRITERS, steps: int = STEPS) -> list[subprocess.CompletedProcess]:
    go = home.parent / "go"
    env = dict(os.environ, RMCONSOLE_HOME=str(home))
    procs = [
        subprocess.Popen(
            [sys.executable, str(HELPER), str(go), str(steps), str(i)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(writers)
    ]
    try:
        deadline = time.monotonic() + 120
        while sum(1 for i in range(writers) if Path(f"{go}.ready-{i}").exists()) < writers:
            assert time.monotonic() < deadline, "writers did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
            time.sleep(0.01)
        assert not _schema_exists()  # nobody has created the schema yet
        go.touch()  # all at once
        done = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            done.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
        return done
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def test_eight_writers_lose_nothing_and_never_see_locked(isolated_home) -> None:
    row = claim(
        "eight writers at once", "test_concurrent_writers.py::test_eight_writers_lose_nothing_and_never_see_locked"
    )
    done = run_writers(isolated_home)
    for d in done:
        assert d.returncode == 0 and "locked" not in d.stderr and "serializ" not in d.stderr, d.stderr
    ids = sorted(int(d.stdout) for d in done)
    assert ids == list(range(1, WRITERS + 1))
    runs = store.list_runs()
    assert len(runs) == WRITERS and all(r.status == "finished" for r in runs)
    for run in runs:
        assert run.phase_done == STEPS - 1
        snapshots = store.memory_snapshots(run.id)
        assert [m.task for m in snapshots] == list(range(STEPS))
        assert all(m.info == {"writer": run.preset.removeprefix("writer-")} for m in snapshots)
        assert [r.task for r in store.task_results(run.id)] == list(range(STEPS // 5))
        assert run.metrics["tasks_done"] == STEPS // 5
        assert len(store.task_streams(run.id)) == STEPS // 5
    row.check(None, "")


def test_a_write_held_up_by_another_writer_says_what_it_waits_on(isolated_home, monkeypatch) -> None:
    """Past the notice threshold a blocked write names the lock it waits on, once; the threshold
    comes from RMCONSOLE_WAIT_NOTICE_S (the suite raises it so a loaded machine's slow answers do
    not print notices into the messages other tests read)."""
    import sqlite3
    import threading

    from sqlalchemy import text

    from rmconsole.store import db

    engine = db.get_engine()
    if engine.dialect.name != "sqlite":
        pytest.skip("SQLite's write lock: PostgreSQL locks rows, not the database")
    told: list[str] = []
    monkeypatch.setattr(db, "WAIT_NOTICE_S", 0.3)
    monkeypatch.setattr(db, "on_wait", told.append)
    blocker = sqlite3.connect(db.sqlite_file(db._url_of(engine)), isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")
    released = threading.Timer(1.5, blocker.rollback)
    released.start()
    try:
        assert db.write(lambda session: session.execute(text("select 1")).scalar(), engine) == 1
    finally:
        released.join()
        blocker.close()
    assert len(told) == 1 and told[0].startswith("waiting for the write lock of the store sqlite:///"), told
    monkeypatch.setenv(db.NOTICE_ENV, "7.5")
    assert db._notice_after() == 7.5
    for bad in ("soon", "-1", "inf", ""):
        monkeypatch.setenv(db.NOTICE_ENV, bad)
        assert db._notice_after() == 2.0


def test_opening_a_new_store_while_its_first_writer_holds_the_lock_waits(isolated_home) -> None:
    """A new store file is not yet in WAL mode; while another process's first write holds its lock,
    SQLite answers the switch to WAL with "database is locked" at once, busy timeout or not. The
    opener waits for the lock instead (it failed once in eight writers opening a new store)."""
    import sqlite3
    import threading

    from rmconsole.store import db

    url = store.database_url()
    if not url.startswith("sqlite:///"):
        pytest.skip("SQLite's journal mode: PostgreSQL has none")
    path = Path(url.removeprefix("sqlite:///"))
    path.parent.mkdir(parents=True, exist_ok=True)
    sqlite3.connect(path).close()  # a new store's empty file, as _prepare_sqlite_file leaves it
    blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN IMMEDIATE")  # the first writer, mid-transaction, file still not WAL
    released = threading.Timer(0.5, blocker.rollback)
    released.start()
    try:
        started = time.monotonic()
        engine = db.get_engine()
        waited = time.monotonic() - started
    finally:
        released.join()
        blocker.close()
    assert waited >= 0.4, waited  # it waited for the lock (and did not fail)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    assert store.list_runs() == []
