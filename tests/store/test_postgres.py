"""What only PostgreSQL has: a server that refuses (wrong password, unknown database, gone), a
server time zone that is not UTC, a driver that may be missing, and a password that must never
be shown. Against the real server of the suite (skipped with the reason without one); the store
tests that run on both backends are marked `store_backend` in their modules."""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta

import pytest
from conftest import drop_postgres_database, fresh_postgres_database, rmconsole
from sqlalchemy.engine import make_url

from rmconsole import store
from rmconsole.config import load_config
from rmconsole.store import db


@pytest.fixture
def database(postgres_server, monkeypatch) -> str:
    url = fresh_postgres_database(postgres_server)
    monkeypatch.setenv("RMCONSOLE_DB", url)
    yield url
    drop_postgres_database(postgres_server, url)


def password(url: str) -> str:
    secret = make_url(url).password
    assert secret and len(secret) >= 8, "the suite's server uses password authentication"
    return str(secret)


def test_timestamps_are_utc_whatever_the_servers_time_zone(database) -> None:
    """The suite's server runs in Asia/Kolkata (+05:30): a session in the server's zone would
    store a UTC heartbeat 5.5 hours off, and every running run would look dead (or immortal)."""
    import sqlalchemy

    with sqlalchemy.create_engine(db.engine_url(database), poolclass=sqlalchemy.NullPool).connect() as conn:
        server_zone = conn.exec_driver_sql("SHOW timezone").scalar()
    _, cfg = load_config(None)
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    now = store.utcnow()
    store.update_run(run_id, status="running", heartbeat_at=now)
    beat = store.get_run(run_id).heartbeat_at
    beat = beat if beat.tzinfo else beat.replace(tzinfo=now.tzinfo)
    assert abs((beat - now).total_seconds()) < 1.0, (server_zone, beat, now)
    with db.get_engine().connect() as conn:
        assert conn.exec_driver_sql("SHOW timezone").scalar() == "UTC"
    if server_zone not in ("UTC", "Etc/UTC"):  # the case this test exists for
        assert store.get_run(run_id).created_at > now - timedelta(seconds=60)


@pytest.mark.parametrize("case", ["wrong password", "unknown database", "server gone"])
def test_a_refusing_server_is_one_line_with_the_password_masked(postgres_server, case) -> None:
    url = make_url(postgres_server)
    secret = password(postgres_server)
    if case == "wrong password":
        bad = url.set(password="not-" + secret)
        says = "password authentication failed"
    elif case == "unknown database":
        bad = url.set(database="no_such_database")
        says = 'database "no_such_database" does not exist'
    else:
        bad = url.set(query={**url.query, "port": "1"})
        says = "Is the server running"
    text = bad.render_as_string(hide_password=False)
    for debug in ([], ["--debug"]):
        out = rmconsole(*debug, "runs", env={"RMCONSOLE_DB": text})
        if debug:  # a traceback, but still no password in it
            assert out.returncode != 0 and secret not in out.stdout + out.stderr
            continue
        assert out.returncode == 2 and out.stdout == "", out.stderr
        assert (
            out.stderr.startswith("error: cannot open the store at postgresql://rmconsole:***@/")
            and out.stderr.count("\n") == 1
        ), out.stderr
        assert says in out.stderr and secret not in out.stderr and "Traceback" not in out.stderr


def test_a_missing_driver_says_how_to_install_it(monkeypatch, postgres_server) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if the postgres extra were not installed
    with pytest.raises(store.StoreError) as refused:
        db.get_engine(postgres_server)
    message = str(refused.value)
    assert (
        "PostgreSQL needs its driver, psycopg 3, which is not installed: pip install 'rmconsole[postgres]'" in message
    )
    assert password(postgres_server) not in message and "rmconsole:***@" in message


def test_the_password_appears_in_no_output_log_or_file(database, isolated_home) -> None:
    """A run end to end on the password-protected store, through the scheduler path too: what
    the commands print, the worker's log, the job files submitit writes, the checkpoints, and the
    JSON shapes never hold the password (but the 0600 file that hands it to workers)."""
    secret = password(database)
    outputs = [rmconsole("run", "--set", "epochs=1", "--set", "threads=1")]
    assert outputs[0].returncode == 0, outputs[0].stdout + outputs[0].stderr
    outputs.append(rmconsole("run", "--set", "epochs=1", "--set", "threads=1", "--executor", "submitit-local"))
    assert outputs[1].returncode == 0, outputs[1].stdout + outputs[1].stderr
    for args in (
        ["runs"],
        ["runs", "--json"],
        ["show", "1"],
        ["show", "2", "--json"],
        ["report", "--format", "json"],
        ["stop", "1"],
        ["resume", "1"],
    ):
        outputs.append(rmconsole(*args))
    for out in outputs:
        assert secret not in out.stdout + out.stderr, out.args
    assert json.loads(outputs[3].stdout)[1]["status"] == "finished"
    files = [p for p in isolated_home.rglob("*") if p.is_file()]
    assert any(p.suffix == ".pkl" for p in files) and any(
        p.name.startswith("run-") and p.suffix == ".log" for p in files
    )
    assert any(p.suffix == ".pt" for p in files)
    for path in files:
        if path.parent == isolated_home / "secrets":  # how workers get it (not by environment): 0600 in 0700
            assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
            continue
        assert secret.encode() not in path.read_bytes(), path


def test_schema_creation_by_many_processes_at_once_creates_it_once(database, isolated_home) -> None:
    """Six processes open a new PostgreSQL store at the same instant (a job array starting):
    every one succeeds, and the tables exist once."""
    import subprocess

    import sqlalchemy

    go = isolated_home.parent / "go"
    probe = (
        "import os, sys, time\n"
        "from rmconsole import store\n"
        "open(sys.argv[1] + '.ready-' + sys.argv[2], 'w').close()\n"
        "while not os.path.exists(sys.argv[1]): time.sleep(0.001)\n"
        "store.get_engine(); print(store.count_runs())\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", probe, str(go), str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for i in range(6)
    ]
    deadline = time.monotonic() + 120
    while sum(1 for i in range(6) if (go.parent / f"go.ready-{i}").exists()) < 6:  # imported, waiting
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
        time.sleep(0.01)
    go.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert [o[0].strip() for o in outs] == ["0"] * 6
    with sqlalchemy.create_engine(db.engine_url(database), poolclass=sqlalchemy.NullPool).connect() as conn:
        tables = conn.exec_driver_sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").scalar()
    assert tables == len(store.table_names())  # (the tables and the schema revision, each once)
