"""The store's schema, versioned: Alembic revisions (versions/) run on the store's own connection,
inside the schema transaction db.py opens (BEGIN IMMEDIATE on SQLite, an advisory lock on
PostgreSQL), with a version table of rmconsole's own (VERSION_TABLE): Optuna's storage keeps its
`alembic_version` in the same database when `tune` runs.

- An empty database gets tables.py's tables and is stamped at the head revision, as Alembic's
  cookbook does ("building an up to date database from scratch"): without importing Alembic or
  replaying every revision, about a third of a second of a new store's first command (a test
  checks that the revisions from nothing give the same tables).
- A store written before versioning (no version table) is stamped by its columns: one that has
  the baseline's every table and column (and its nullable accuracy columns) is stamped at the
  baseline; an older shape is upgraded from nothing, the baseline adding what it lacks.
- A store at a revision this code does not know was written by a newer rmconsole: refused
  (db.py says so in one line and writes nothing).

A new revision: `python -m rmconsole.store.migrations new "what changes" [--autogenerate]`
(docs/troubleshooting.md, "The store's schema").
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.engine import Connection

from ..tables import VERSION_TABLE  # not `alembic_version`: Optuna's storage owns that one

BASELINE = "0001"  # the schema of main at a168f0c, the last store written without a version
FOLDER = Path(__file__).resolve().parent


@functools.cache
def revisions() -> tuple[str, ...]:
    """This code's revisions, oldest first: the numbers that name versions/NNNN_*.py. Read from the
    file names, so that opening a store at the head never imports Alembic (a test checks that
    Alembic reads the same chain from the files: one line of revisions, each after the last)."""
    return tuple(sorted(path.name[:4] for path in (FOLDER / "versions").glob("[0-9][0-9][0-9][0-9]_*.py")))


def head() -> str:
    """The newest revision this code knows."""
    return revisions()[-1]


def known(revision: str) -> bool:
    """Whether `revision` is one of this code's revisions."""
    return revision in revisions()


def scripts() -> Any:
    """The revisions as Alembic reads them (alembic.script.ScriptDirectory of versions/)."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(FOLDER), version_locations=[str(FOLDER / "versions")])


def config(connection: Connection | None = None) -> Any:
    """An alembic Config for this package (no alembic.ini): `connection` for env.py to run on."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(FOLDER))
    cfg.set_main_option("path_separator", "os")
    cfg.set_main_option("version_locations", str(FOLDER / "versions"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def current(conn: Connection) -> str | None:
    """The store's revision (None: no version table, a store written before versioning or an
    empty database). A read only."""
    if VERSION_TABLE not in inspect(conn).get_table_names():
        return None
    rows = conn.exec_driver_sql(f"SELECT version_num FROM {VERSION_TABLE}").scalars().all()
    return str(rows[0]) if len(rows) == 1 else (",".join(sorted(map(str, rows))) or None)


def shape_of_unversioned(conn: Connection) -> str | None:
    """The revision an unversioned store's columns say it is at: BASELINE when it has every table
    and column of the baseline with its accuracy columns nullable, else None (an empty database,
    or an older shape the baseline completes)."""
    from . import baseline as shape

    inspector = inspect(conn)
    present = set(inspector.get_table_names())
    for table in shape.METADATA.sorted_tables:
        if table.name not in present:
            return None
        columns = {c["name"]: c for c in inspector.get_columns(table.name)}
        if any(column.name not in columns for column in table.columns):
            return None
        if any(not columns[name]["nullable"] for t, name in shape.RELAXED if t == table.name):
            return None
    return BASELINE


def create_at_head(conn: Connection) -> bool:
    """An empty database (none of the store's tables): tables.py's tables and the version table
    at the head revision, in the caller's transaction; False (nothing written) when any of the
    store's tables is there already, which `upgrade` brings on instead."""
    from sqlalchemy import Column, MetaData, PrimaryKeyConstraint, String, Table
    from sqlmodel import SQLModel

    from .. import tables

    if set(inspect(conn).get_table_names()) & tables.table_names():
        return False
    SQLModel.metadata.create_all(conn)
    version = Table(  # Alembic's own shape of its version table
        VERSION_TABLE,
        MetaData(),
        Column("version_num", String(32), nullable=False),
        PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"),
    )
    version.create(conn)
    conn.execute(version.insert().values(version_num=head()))
    return True


def upgrade(conn: Connection) -> None:
    """Bring the store on `conn` (inside its schema transaction) to the head revision: an
    unversioned store stamped first by its columns. The caller has refused a newer store."""
    from alembic import command

    cfg = config(conn)
    if current(conn) is None:
        stamp = shape_of_unversioned(conn)
        if stamp is not None:
            command.stamp(cfg, stamp)
    command.upgrade(cfg, "head")


def ours(name: str | None, type_: str, parent_names: Any) -> bool:
    """Autogenerate compares the store's own tables only (not Optuna's, not the version tables)."""
    if type_ != "table":
        return True
    from sqlmodel import SQLModel

    from .. import tables  # noqa: F401  (registers the tables)

    return name in SQLModel.metadata.tables


def run_env(context: Any) -> None:
    """What env.py does: run the revisions on the connection the caller handed over, in its
    transaction (alembic adds none of its own when one is open)."""
    from sqlmodel import SQLModel

    from .. import tables  # noqa: F401  (registers the tables)

    conn = context.config.attributes.get("connection")
    if conn is None:
        raise SystemExit("rmconsole's revisions run on a connection: use rmconsole.store.migrations (see its doc)")
    context.configure(
        connection=conn,
        target_metadata=SQLModel.metadata,
        version_table=VERSION_TABLE,
        include_name=ours,
        render_as_batch=True,  # SQLite alters a column by rebuilding its table: revisions say so once
        user_module_prefix="sqlmodel.sql.sqltypes.",
    )
    with context.begin_transaction():
        context.run_migrations()
