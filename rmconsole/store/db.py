"""The engine: SQLite under RMCONSOLE_HOME in WAL mode by default, any SQLAlchemy URL by
RMCONSOLE_DB (PostgreSQL through psycopg 3: `pip install 'rmconsole[postgres]'`).

Writes are short transactions that behave alike on both: on SQLite they begin IMMEDIATE, so two
writers queue on the busy timeout instead of failing with "database is locked"; on PostgreSQL
every row a write transaction reads is locked as it is read (SELECT ... FOR UPDATE), so a guarded
transition (read the status, then change it) queues behind another one on the same run and sees
its outcome, and a transaction that lost a deadlock is retried from the start. On
PostgreSQL every connection speaks UTC (the store's timestamps are UTC whatever the server's
time zone), and the schema is created under an advisory lock, so processes that open a new
store at the same moment queue instead of racing to create the same table. Passwords in URLs
are masked in every message (`shown_url`, and scrubbed from the driver's own words).
"""

from __future__ import annotations

import os
import random
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlmodel import Session, SQLModel, create_engine

from . import tables  # noqa: F401  (registers the tables on SQLModel.metadata)

BUSY_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10
SCHEMA_LOCK_KEY = 0x726D636F6E736F6C  # "rmconsol": the advisory lock that serialises schema creation
RETRIED_SQLSTATES = ("40001", "40P01")  # serialization failure, deadlock: retry the transaction


class StoreError(Exception):
    """The store cannot be opened or written: one line for the terminal."""


def home() -> Path:
    """RMCONSOLE_HOME (default ./.rmconsole): the database, worker logs and checkpoints."""
    return Path(os.environ.get("RMCONSOLE_HOME", ".rmconsole")).expanduser()


def database_url() -> str:
    url = os.environ.get("RMCONSOLE_DB")
    if url:
        return url
    return f"sqlite:///{(home() / 'rmconsole.db').resolve()}"


def shown_url(url: str) -> str:
    """A database URL fit for a message: the password masked."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL has no password part we can find
        return url


def _password(url: str) -> str | None:
    try:
        password = make_url(url).password
    except Exception:  # noqa: BLE001
        return None
    return str(password) if password else None


def scrub(text: str, url: str | None = None) -> str:
    """`text` with the password of `url` (default: the store's) masked, wherever it appears."""
    password = _password(url or database_url())
    return text.replace(password, "***") if password and len(password) >= 3 else text


def engine_url(url: str) -> URL:
    """The URL SQLAlchemy is given: `postgresql://` (and Heroku's `postgres://`) name psycopg 3,
    the driver of the `postgres` extra, unless the URL names a driver itself."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def backend(url: str | None = None) -> str:
    """"sqlite", "postgresql", ...: the database behind `url` (default: the store's)."""
    try:
        return engine_url(url or database_url()).get_backend_name()
    except Exception:  # noqa: BLE001 - an unparsable URL is refused when it is opened
        return "unknown"


def _missing_driver(parsed: URL, err: BaseException) -> str | None:
    """The one line for a database whose driver is not installed (None if that is not the case)."""
    if not isinstance(err, ImportError) and "No module named" not in str(err):
        return None
    if parsed.get_backend_name() == "postgresql":
        return ("PostgreSQL needs its driver, psycopg 3, which is not installed: "
                "pip install 'rmconsole[postgres]' (or psycopg[binary])")
    return None


def _hint() -> str:
    if os.environ.get("RMCONSOLE_DB"):
        return "check RMCONSOLE_DB, or unset it to use the SQLite file in RMCONSOLE_HOME"
    return "move that file away, or set RMCONSOLE_HOME to another folder"


def _one_line(err: BaseException, url: str | None = None) -> str:
    """The driver's own words, without SQLAlchemy's background link, on one line, the password
    masked should the driver quote it."""
    text = str(getattr(err, "orig", None) or err)
    text = text.split("(Background on this error")[0]
    return scrub(" ".join(text.split()) or type(err).__name__, url)


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None  # let the "begin" hook below issue BEGIN itself
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cur.execute("PRAGMA journal_mode = WAL")
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN " + conn.get_execution_options().get("sqlite_begin", "DEFERRED"))


_ENGINES: dict[str, Engine] = {}


def get_engine(url: str | None = None) -> Engine:
    """The process's engine for `url` (default: database_url()), schema created on first use."""
    url = url or database_url()
    if url in _ENGINES:
        return _ENGINES[url]
    if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
        path = Path(url.removeprefix("sqlite:///"))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise StoreError(f"cannot create the store folder {path.parent}: {err.strerror} "
                             f"(set RMCONSOLE_HOME to a writable folder)") from None
        if not os.access(path.parent, os.W_OK):
            raise StoreError(f"the store folder {path.parent} is not writable "
                             f"(set RMCONSOLE_HOME to a writable folder)")
    parsed = None
    try:
        parsed = engine_url(url)
        if parsed.get_backend_name() == "sqlite":
            engine = create_engine(parsed, connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False})
            _sqlite_pragmas(engine)
        elif parsed.get_backend_name() == "postgresql":
            # every session in UTC: the store's timestamps are UTC, the server's zone may be anything
            engine = create_engine(parsed, pool_pre_ping=True, connect_args={
                "connect_timeout": CONNECT_TIMEOUT_S, "options": "-c timezone=UTC",
                "application_name": "rmconsole"})
        else:
            engine = create_engine(parsed, pool_pre_ping=True)
    except (SQLAlchemyError, ImportError, ValueError) as err:
        missing = _missing_driver(parsed, err) if parsed is not None else None
        raise StoreError(f"cannot use the database {shown_url(url)!r}: {missing or _one_line(err, url)} "
                         f"({_hint()})") from None
    _create_schema(engine, url)
    _ENGINES[url] = engine
    return engine


def dispose_engines() -> None:
    """Close every pooled connection of this process and forget the engines (a test that drops
    its database; a process about to fork)."""
    for engine in _ENGINES.values():
        engine.dispose()
    _ENGINES.clear()


def _create_schema(engine: Engine, url: str) -> None:
    """create_all and the additive migration in one write transaction, so that processes
    starting together queue instead of racing to create the same table: BEGIN IMMEDIATE on
    SQLite, a transaction-scoped advisory lock on PostgreSQL (whose DDL is transactional, so a
    process that waited sees the tables and creates nothing). Retried on lock errors; an
    unreachable database is one line."""
    sqlite = engine.dialect.name == "sqlite"
    bind = engine.execution_options(sqlite_begin="IMMEDIATE") if sqlite else engine
    for attempt in range(10):
        try:
            with bind.begin() as conn:
                if engine.dialect.name == "postgresql":
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY})")
                SQLModel.metadata.create_all(conn)
                _add_missing_columns(conn)
            return
        except OperationalError as err:
            text = _one_line(err, url)
            if ("already exists" in text or "locked" in text or "busy" in text) and attempt < 9:
                time.sleep(0.05 * (attempt + 1))
                continue
            raise StoreError(f"cannot open the store at {shown_url(url)}: {text} ({_hint()})") from None
        except (SQLAlchemyError, OSError) as err:
            raise StoreError(f"cannot open the store at {shown_url(url)}: {_one_line(err, url)} ({_hint()})") from None


def _add_missing_columns(conn: Connection) -> None:
    """A store written by an older rmconsole gets the columns added since (new columns are
    nullable or have a server default, so old rows read as "not recorded"). Additive only:
    nothing is renamed or dropped, so an older rmconsole can still read the store."""
    from sqlalchemy import inspect, text
    from sqlalchemy.schema import CreateColumn

    inspector = inspect(conn)
    for table in SQLModel.metadata.sorted_tables:
        present = {c["name"] for c in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present:
                ddl = CreateColumn(column).compile(dialect=conn.dialect)
                conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {ddl}"))


@contextmanager
def reading(engine: Engine | None = None) -> Iterator[Session]:
    """A read-only session (objects stay usable after it closes)."""
    with Session(engine or get_engine(), expire_on_commit=False) as session:
        yield session


T = TypeVar("T")


def _retryable(err: OperationalError) -> bool:
    """A write that lost a race and may simply run again: SQLite locked past its busy timeout,
    a PostgreSQL deadlock (or serialization failure)."""
    if getattr(getattr(err, "orig", None), "sqlstate", None) in RETRIED_SQLSTATES:
        return True
    return "locked" in str(err) or "busy" in str(err)


@event.listens_for(Session, "do_orm_execute")
def _lock_rows_read_for_writing(state) -> None:  # type: ignore[no-untyped-def]
    """In a write session on PostgreSQL, a read of whole rows (session.get, select(Table)) locks
    them until the transaction ends: what SQLite's one write lock gives, at row level."""
    if not (state.session.info.get("lock_rows") and state.is_select and not state.is_relationship_load):
        return
    described = state.statement.column_descriptions
    if described and all(d.get("entity") is not None and d.get("expr") is d.get("entity") for d in described):
        state.statement = state.statement.with_for_update()


def write(fn: Callable[[Session], T], engine: Engine | None = None, retries: int = 12) -> T:
    """Run `fn(session)` in one short write transaction (BEGIN IMMEDIATE on SQLite; rows read are
    locked on PostgreSQL), retried from the start when it lost a race (`_retryable`)."""
    engine = engine or get_engine()
    bind = engine.execution_options(sqlite_begin="IMMEDIATE") if engine.dialect.name == "sqlite" else engine
    for attempt in range(retries):
        try:
            with Session(bind, expire_on_commit=False, info={"lock_rows": engine.dialect.name == "postgresql"}) as session:
                result = fn(session)
                session.commit()
                return result
        except OperationalError as err:
            if not _retryable(err) or attempt == retries - 1:
                raise
            time.sleep(min(0.02 * 2 ** attempt, 1.0) * (0.5 + random.random()))  # jittered: racers part
    raise AssertionError("unreachable")
