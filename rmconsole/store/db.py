"""The engine: SQLite under RMCONSOLE_HOME in WAL mode by default, any SQLAlchemy URL by
RMCONSOLE_DB. Writes are short transactions; on SQLite they begin IMMEDIATE so that two
writers queue on the busy timeout instead of failing with "database is locked"."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlmodel import Session, SQLModel, create_engine

from . import tables  # noqa: F401  (registers the tables on SQLModel.metadata)

BUSY_TIMEOUT_S = 30.0


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


def _hint() -> str:
    if os.environ.get("RMCONSOLE_DB"):
        return "check RMCONSOLE_DB, or unset it to use the SQLite file in RMCONSOLE_HOME"
    return "move that file away, or set RMCONSOLE_HOME to another folder"


def _one_line(err: BaseException) -> str:
    """The driver's own words, without SQLAlchemy's background link, on one line."""
    text = str(getattr(err, "orig", None) or err)
    text = text.split("(Background on this error")[0]
    return " ".join(text.split()) or type(err).__name__


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
    try:
        if url.startswith("sqlite"):
            engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False})
            _sqlite_pragmas(engine)
        else:
            engine = create_engine(url, pool_pre_ping=True)
    except (SQLAlchemyError, ImportError, ValueError) as err:
        raise StoreError(f"cannot use the database {shown_url(url)!r}: {_one_line(err)} ({_hint()})") from None
    _create_schema(engine, url)
    _ENGINES[url] = engine
    return engine


def _create_schema(engine: Engine, url: str) -> None:
    """create_all in one write transaction (BEGIN IMMEDIATE on SQLite), so that processes
    starting together queue on the lock instead of racing to create the same table; retried
    on lock errors, and an unreachable database is one line."""
    bind = engine.execution_options(sqlite_begin="IMMEDIATE") if engine.dialect.name == "sqlite" else engine
    for attempt in range(10):
        try:
            SQLModel.metadata.create_all(bind)
            _add_missing_columns(bind)
            return
        except OperationalError as err:
            text = _one_line(err)
            if ("already exists" in text or "locked" in text or "busy" in text) and attempt < 9:
                time.sleep(0.05 * (attempt + 1))
                continue
            raise StoreError(f"cannot open the store at {shown_url(url)}: {text} ({_hint()})") from None
        except (SQLAlchemyError, OSError) as err:
            raise StoreError(f"cannot open the store at {shown_url(url)}: {_one_line(err)} ({_hint()})") from None


def _add_missing_columns(engine: Engine) -> None:
    """A store written by an older rmconsole gets the columns added since (new columns are
    nullable or have a server default, so old rows read as "not recorded"). Additive only:
    nothing is renamed or dropped, so an older rmconsole can still read the store."""
    from sqlalchemy import inspect, text
    from sqlalchemy.schema import CreateColumn

    with engine.begin() as conn:
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


def write(fn: Callable[[Session], T], engine: Engine | None = None, retries: int = 8) -> T:
    """Run `fn(session)` in one short write transaction (BEGIN IMMEDIATE on SQLite), retried
    from the start if the database stays locked past the busy timeout."""
    engine = engine or get_engine()
    bind = engine.execution_options(sqlite_begin="IMMEDIATE") if engine.dialect.name == "sqlite" else engine
    for attempt in range(retries):
        try:
            with Session(bind, expire_on_commit=False) as session:
                result = fn(session)
                session.commit()
                return result
        except OperationalError as err:
            if "locked" not in str(err) and "busy" not in str(err) or attempt == retries - 1:
                raise
            time.sleep(0.05 * 2 ** attempt)
    raise AssertionError("unreachable")
