"""A database that is not an rmconsole store is refused before anything is written to it.

RMCONSOLE_DB (or the SQLite file in RMCONSOLE_HOME) pointing at another program's database got
rmconsole's tables added to it, and SQLite took a short file that is not a database (one byte)
for an empty one and wrote a store over it. Both are one line now, and the file (or the
PostgreSQL database) is left exactly as it was. An empty (0-byte) file, or a missing one, still
becomes a new store: SQLite defines a 0-byte file as an empty database.
"""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy

from rmconsole import store
from rmconsole.store import db

# each test on SQLite and on PostgreSQL, in a database that starts empty (these create the schema)
pytestmark = [pytest.mark.usefixtures("store_backend"), pytest.mark.empty_database]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _companions(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name.startswith(path.name + "-"))


def _other_program(path: Path, wal: bool = False) -> None:
    conn = sqlite3.connect(path)
    if wal:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE contacts (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO contacts VALUES (1, 'Ada')")
    conn.commit()
    conn.close()


def test_another_programs_database_is_refused_and_left_as_it_was(isolated_home, store_backend, monkeypatch) -> None:
    """The store's own database (the home's SQLite file, or the PostgreSQL database of
    RMCONSOLE_DB) holds another program's table: refused in one line, no table added."""
    if store_backend == "sqlite":
        isolated_home.mkdir(parents=True)
        path = isolated_home / "rmconsole.db"
        _other_program(path)
        before = _digest(path)
        url = f"sqlite:///{path}"
    else:
        url = db.database_url()
        with sqlalchemy.create_engine(db.engine_url(url), poolclass=sqlalchemy.NullPool).begin() as conn:
            conn.exec_driver_sql("CREATE TABLE contacts (id INTEGER PRIMARY KEY, name TEXT)")
            conn.exec_driver_sql("INSERT INTO contacts VALUES (1, 'Ada')")
    db.dispose_engines()
    with pytest.raises(store.StoreError) as refused:
        store.count_runs()
    message = str(refused.value)
    assert "\n" not in message
    assert "holds another program's tables (contacts) and is not an rmconsole store" in message, message
    engine = sqlalchemy.create_engine(db.engine_url(url), poolclass=sqlalchemy.NullPool)
    assert sqlalchemy.inspect(engine).get_table_names() == ["contacts"]  # not one of rmconsole's tables
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT name FROM contacts").all() == [("Ada",)]
    engine.dispose()
    if store_backend == "sqlite":
        assert _digest(path) == before and _companions(path) == []  # not even turned into WAL mode


@pytest.mark.parametrize("wal", [False, True])
def test_another_programs_sqlite_file_named_by_rmconsole_db(tmp_path, monkeypatch, wal) -> None:
    path = tmp_path / "other-app.db"
    _other_program(path, wal=wal)
    before, companions = _digest(path), _companions(path)
    monkeypatch.setenv("RMCONSOLE_DB", f"sqlite:///{path}")
    db.dispose_engines()
    with pytest.raises(store.StoreError, match=r"another program's tables \(contacts\).*check RMCONSOLE_DB"):
        store.count_runs()
    assert _digest(path) == before
    if not wal:
        assert _companions(path) == companions == []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")] == ["contacts"]
    conn.close()


@pytest.mark.parametrize("content", [b"x", b"\n", b"SQLite format", b"not a database at all" * 3])
def test_a_file_that_is_not_sqlite_is_refused_unchanged(tmp_path, monkeypatch, content) -> None:
    """SQLite reads a file shorter than a page as an empty database and writes a store over it."""
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    monkeypatch.setenv("RMCONSOLE_DB", f"sqlite:///{path}")
    db.dispose_engines()
    with pytest.raises(store.StoreDamaged, match="is not an SQLite database"):
        store.count_runs()
    assert path.read_bytes() == content and _companions(path) == []


def test_an_empty_or_missing_file_becomes_a_store(tmp_path, monkeypatch) -> None:
    """0 bytes is an empty SQLite database (and how a new store's file looks before its schema)."""
    for path in (tmp_path / "empty.db", tmp_path / "missing.db"):
        if path.name == "empty.db":
            path.touch()
        monkeypatch.setenv("RMCONSOLE_DB", f"sqlite:///{path}")
        db.dispose_engines()
        assert store.count_runs() == 0 and len(store.store_id()) == 32
        db.dispose_engines()


def test_existing_tables_reads_without_creating(tmp_path, monkeypatch, store_backend) -> None:
    """What a command reads before it has validated all it was asked (runner/tune.py): nothing
    is created, not the file, not a table; another program's database is refused as on opening."""
    if store_backend == "sqlite":
        path = tmp_path / "home" / "rmconsole.db"
        assert store.existing_tables() == set() and not path.exists()
    else:
        assert store.existing_tables() == set()
    assert store.count_runs() == 0
    assert {"run", "store_identity"} <= store.existing_tables()
    if store_backend != "sqlite":  # a PostgreSQL database with another program's table
        db.dispose_engines()
        with sqlalchemy.create_engine(db.engine_url(db.database_url()), poolclass=sqlalchemy.NullPool).begin() as conn:
            conn.exec_driver_sql("DROP TABLE store_identity")
            conn.exec_driver_sql("ALTER TABLE run DROP COLUMN config")  # not rmconsole's run table any more
        with pytest.raises(store.StoreError, match="another program's tables"):
            store.existing_tables()
    other = tmp_path / "other-app.db"
    _other_program(other)
    with pytest.raises(store.StoreError, match="another program's tables"):
        store.existing_tables(f"sqlite:///{other}")


def test_what_counts_as_rmconsoles_own_database() -> None:
    assert db.foreign_tables(set(), set()) == []  # empty: becomes a store
    assert db.foreign_tables({"sqlite_sequence", "sqlite_stat1"}, set()) == []  # SQLite's own tables
    assert db.foreign_tables({"store_identity", "run", "studies", "trials"}, set()) == []  # a store with studies
    assert db.foreign_tables({"run", "taskresult"}, set(db.FIRST_RUN_COLUMNS) | {"name"}) == []  # before identities
    assert db.foreign_tables({"run"}, {"id", "name"}) == ["run"]  # another program's `run` table
    assert db.foreign_tables({"studies", "trials", "alembic_version"}, set()) == [
        "alembic_version",
        "studies",
        "trials",
    ]  # an Optuna database is not a store
