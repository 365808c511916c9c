"""The store's schema by Alembic revisions (store/migrations): stores written before versioning
open and upgrade, a fresh store's tables are tables.py's, a store newer than the code is refused."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy
from support.cli import in_process

from rmconsole import store
from rmconsole.store import db, migrations

FIXTURES = Path(__file__).parent / "fixtures"


def _schema_sql(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL").fetchall())
    finally:
        conn.close()


def _differences() -> list:
    """What tables.py declares that the store's tables lack (or have otherwise): Alembic's compare."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlmodel import SQLModel

    with db.get_engine().connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_name": migrations.ours})
        return compare_metadata(context, SQLModel.metadata)


def _revision() -> str | None:
    with db.get_engine().connect() as conn:
        return migrations.current(conn)


def _the_runs() -> list[tuple]:
    """What `show` says of each run that a store's shape must not change."""
    runs = []
    for run_id in (1, 2):
        detail = store.run_detail(run_id)
        metrics = {k: detail["metrics"][k] for k in ("A_last", "A_avg", "F_last")}
        runs.append(
            (
                detail["id"], detail["name"], detail["tags"], detail["status"], detail["method"], detail["seed"],
                metrics, [(t["task"], t["accuracy"], t["accuracy_row"]) for t in detail["tasks"]],
                [m["histogram"] for m in detail["memory"]], len(detail["epochs"]),
            )
        )  # fmt: skip
    return runs


def test_stores_of_earlier_shapes_upgrade_and_show_the_same_runs(tmp_path: Path, monkeypatch) -> None:
    shown = {}
    for commit in ("62427d5", "a168f0c"):
        home = tmp_path / commit
        home.mkdir()
        monkeypatch.setenv("RMCONSOLE_HOME", str(home))
        path = home / "rmconsole.db"
        shutil.copy(FIXTURES / f"store-{commit}.db", path)
        before = _schema_sql(path)
        assert "rmconsole_schema_version" not in before and "alembic_version" not in before
        shown[commit] = runs = _the_runs()
        assert [r[:6] for r in runs] == [
            (1, "fixture-a", ["fx"], "finished", "er", 1),
            (2, "fixture-b", [], "finished", "finetune", 2),
        ]
        assert all(len(r[7]) == 2 and r[7][1][1] is not None for r in runs)  # two tasks each, both evaluated
        assert _revision() == migrations.head() and _differences() == []
        after = _schema_sql(path)
        if commit == "a168f0c":  # the baseline's shape: stamped by its columns, no table touched but
            # by the revisions after the baseline (0002: anytimeeval.train_flops; 0003: systemsample;
            # 0004: store_identity.last_run_id)
            later = {"anytimeeval", "systemsample", "ix_systemsample_run_at", "store_identity"}
            assert {k: v for k, v in after.items() if k not in later | {"rmconsole_schema_version"}} == {
                k: v for k, v in before.items() if k not in later
            }
            assert "train_flops" not in before["anytimeeval"] and "train_flops" in after["anytimeeval"]
            assert "systemsample" not in before and "systemsample" in after
            for run_id in (1, 2):  # and `show --json` as a168f0c printed it, byte for byte
                done = in_process("show", "--json", str(run_id))
                assert done.returncode == 0, done.stderr
                assert done.stdout == (FIXTURES / f"show-a168f0c-{run_id}.json").read_text()
        else:  # older: the baseline added its columns and let the accuracy columns be empty
            assert "val_accuracy" not in before["taskresult"] and "val_accuracy" in after["taskresult"]
            assert "accuracy FLOAT NOT NULL" in before["taskresult"]
            assert "accuracy FLOAT NOT NULL" not in after["taskresult"]
        db.dispose_engines()
    assert shown["62427d5"] == shown["a168f0c"]  # the same runs (same seeds, same training): the same figures


def test_a_deleted_run_id_is_never_given_again(tmp_path: Path, monkeypatch) -> None:
    """`rm` of the newest run, then a new run: SQLite gave the new run the deleted id (a study's
    trial, an export, a note then named another run). Revision 0004 has the store
    record the largest id ever given: in a fresh store and in a store of before versioning, upgraded."""
    for source in ("fresh", "a168f0c"):
        home = tmp_path / source
        home.mkdir()
        monkeypatch.setenv("RMCONSOLE_HOME", str(home))
        config = {"dataset": "digits", "method": "rm", "seed": 1}
        if source == "fresh":
            assert [store.create_run(config, "digits-blurry10-online") for _ in range(2)] == [1, 2]
            store.update_run(1, status="finished")
            store.update_run(2, status="finished")
        else:
            shutil.copy(FIXTURES / f"store-{source}.db", home / "rmconsole.db")  # runs 1 and 2, finished
        assert store.delete_run(2).applied
        assert store.create_run(config, "digits-blurry10-online") == 3
        store.update_run(3, status="finished")
        assert store.delete_run(3).applied and store.delete_run(1).applied  # every run gone
        assert store.create_run(config, "digits-blurry10-online") == 4
        db.dispose_engines()


@pytest.mark.usefixtures("store_backend")
def test_a_fresh_store_has_the_tables_of_tables_py() -> None:
    """A column added to tables.py without a revision fails here: write one (docs/troubleshooting.md,
    "The store's schema": python -m rmconsole.store.migrations new "..." --autogenerate)."""
    store.store_id()
    assert _revision() == migrations.head()
    assert _differences() == []


@pytest.mark.usefixtures("store_backend")
def test_the_revisions_from_nothing_give_the_tables_of_tables_py(monkeypatch) -> None:
    """A new store is created at the head from tables.py (migrations.create_at_head); the revisions
    from an empty database must give the same tables, or a store that started empty and one that
    started older would differ. A column added to tables.py without a revision fails here."""
    monkeypatch.setattr(migrations, "create_at_head", lambda conn: False)  # the revisions' way
    store.store_id()
    assert _revision() == migrations.head()
    assert _differences() == []


def test_a_new_stores_version_table_is_alembics(tmp_path: Path, monkeypatch) -> None:
    """The version table a new store gets without Alembic is the one Alembic makes (a later
    revision's upgrade reads and rewrites it)."""
    schemas = []
    for way, fresh in (("revisions", lambda conn: False), ("head", migrations.create_at_head)):
        monkeypatch.setenv("RMCONSOLE_HOME", str(tmp_path / way))
        monkeypatch.setattr(migrations, "create_at_head", fresh)
        store.store_id()
        db.dispose_engines()
        schemas.append(_schema_sql(tmp_path / way / "rmconsole.db"))
    assert schemas[0][migrations.VERSION_TABLE] == schemas[1][migrations.VERSION_TABLE]
    assert set(schemas[0]) == set(schemas[1])  # the same tables and indexes by name


@pytest.mark.usefixtures("store_backend")
def test_a_store_newer_than_the_code_is_refused_and_left_alone() -> None:
    run_id = store.create_run({"dataset": "digits", "method": "rm", "seed": 1}, "digits-blurry10-online")
    with db.get_engine().begin() as conn:  # as a newer rmconsole would leave it
        conn.exec_driver_sql(f"UPDATE {migrations.VERSION_TABLE} SET version_num = '9999'")
        conn.exec_driver_sql("ALTER TABLE run ADD COLUMN newer_column INTEGER")
    db.dispose_engines()
    done = in_process("runs")
    assert done.returncode != 0 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "schema revision 9999" in lines[0], done.stderr
    assert f"its newest is {migrations.head()}" in lines[0] and "upgrade rmconsole" in lines[0]
    with pytest.raises(db.StoreTooNew):
        db.get_engine()
    engine = sqlalchemy.create_engine(db.engine_url(db.database_url()))  # (not the store's: a plain look)
    with engine.connect() as conn:
        assert conn.exec_driver_sql(f"SELECT version_num FROM {migrations.VERSION_TABLE}").scalars().all() == ["9999"]
        assert conn.exec_driver_sql("SELECT id FROM run").scalars().all() == [run_id]
    engine.dispose()


def test_alembic_reads_one_line_of_revisions_named_as_their_files() -> None:
    """migrations.revisions() reads the chain from the file names (no Alembic import on an open):
    Alembic must read the same one, each revision after the one before."""
    scripts = migrations.scripts()
    chain = [s.revision for s in reversed(list(scripts.walk_revisions()))]
    assert chain == list(migrations.revisions()) and scripts.get_heads() == [migrations.head()]
    assert [scripts.get_revision(r).down_revision for r in chain] == [None, *chain[:-1]]
    assert migrations.VERSION_TABLE != "alembic_version"  # Optuna's storage keeps that one in the same database
