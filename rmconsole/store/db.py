"""The engine: SQLite under RMCONSOLE_HOME in WAL mode by default, any SQLAlchemy URL by
RMCONSOLE_DB (PostgreSQL through psycopg 3: `pip install 'rmconsole[postgres]'`).

Writes are short transactions that behave alike on both: on SQLite they begin IMMEDIATE, so two
writers queue on the busy timeout instead of failing with "database is locked"; on PostgreSQL
every row a write transaction reads is locked as it is read (SELECT ... FOR UPDATE), so a guarded
transition (read the status, then change it) queues behind another one on the same run and sees
its outcome, and a transaction that lost a deadlock is retried from the start. On PostgreSQL
every connection speaks UTC, and the schema is created under an advisory lock. Passwords in
URLs are masked in every message (`shown_url`, and scrubbed from the driver's own words).

Reads never need the write lock: in WAL mode readers are never blocked by a writer, and the
schema's revision is checked with a read first (brought to the head by Alembic revisions,
store/migrations, under the write lock only when it is behind; a store newer than this code is
refused, nothing written). A store operation blocked for more than WAIT_NOTICE_S says what it waits
on (`on_wait`: one line, naming the process that holds SQLite's write lock when Linux can tell).

Every error of the database is one line (`StoreError` and its kinds: locked, full, damaged,
gone), with what to do; a damaged SQLite file is named with `PRAGMA integrity_check`'s verdict.

The SQLite file's identity is part of every connection: a connection is only used while the
file at the store's path is the file it opened. When the file was replaced (a store deleted and
created anew), pooled connections are dropped and new ones open the new file; the store's own
identity row (tables.StoreIdentity, checked by transitions.py) then tells a process of the old
store that it must stop. Connections never create a missing file (SQLite URI mode=rw): only
`get_engine` creates a store, and never in a process that holds a run's lease (a worker whose
store vanished must not make an empty one). Nor does it make one of a database that is not
empty and not a store (another program's SQLite file or PostgreSQL database: `foreign_tables`),
nor of a file that is not SQLite: both are refused before anything is written to them.
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import sqlite3
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast
from urllib.parse import quote

from sqlalchemy import Select, event, func, inspect, select
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import (
    ArgumentError,
    DBAPIError,
    IntegrityError,
    InvalidatePoolError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.orm import ORMExecuteState
from sqlalchemy.pool import NullPool
from sqlmodel import Session, col, create_engine

from .. import private
from . import migrations, tables  # noqa: F401  (tables registers the tables on SQLModel.metadata)
from .tables import Run, StoreIdentity

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0
NOTICE_ENV = "RMCONSOLE_WAIT_NOTICE_S"  # overrides WAIT_NOTICE_S (a test suite on a loaded machine raises it)


def _notice_after() -> float:
    """Seconds a store operation may block before it says what it waits on: RMCONSOLE_WAIT_NOTICE_S
    if it is a positive number, else 2 s. A bad value falls back to the default: a notice's
    threshold is not worth refusing to open the store over."""
    try:
        value = float(os.environ.get(NOTICE_ENV, ""))
    except ValueError:
        return 2.0
    return value if 0 < value < float("inf") else 2.0


WAIT_NOTICE_S = _notice_after()  # a store operation blocked this long says what it waits on
SQLITE_MAX_INT = 2**63 - 1  # the largest integer a SQLite (or PostgreSQL bigint) column holds
LEASE_ENV = "RMCONSOLE_RUN_TOKEN"  # set for a run's processes (transitions.Lease): they never create a store
CONNECT_TIMEOUT_S = 10
SCHEMA_LOCK_KEY = 0x726D636F6E736F6C  # "rmconsol": the advisory lock that serialises schema creation
RETRIED_SQLSTATES = ("40001", "40P01")  # serialization failure, deadlock: retry the transaction
PASSWORD_FILE_ENV = "RMCONSOLE_DB_PASSWORD_FILE"  # a run's processes: the password of RMCONSOLE_DB, by path
GRACE_ENV = "RMCONSOLE_DB_GRACE_S"  # how long a run's processes hold on through a database outage
OUTAGE_GRACE_S = 60.0  # the default: a restart or a failover of a shared cluster takes seconds
UNREACHABLE_SQLSTATES = ("57P01", "57P02", "57P03")  # admin shutdown, crash shutdown, cannot connect now
UNREACHABLE_WORDS = (
    "connection refused",
    "server closed the connection",
    "could not connect",
    "terminating connection",
    "the database system is",
    "connection is closed",
    "connection timeout",
    "timeout expired",
    "consuming input failed",
    "ssl syscall",
    "no such file or directory",
    "connection not open",
    "connection already closed",
    "lost connection",
    "server has gone away",
)
REFUSED_WORDS = ("authentication", "does not exist", "permission denied", "no pg_hba.conf entry", "too many clients")


class StoreError(Exception):
    """The store cannot be opened or written: one line for the terminal."""


class StoreLocked(StoreError):
    """Another process holds the store's write lock longer than we waited."""


class StoreFull(StoreError):
    """No space left on the device that holds the store."""


class StoreDamaged(StoreError):
    """The store's file is not a database, or its pages are corrupt."""


class StoreGone(StoreError):
    """The SQLite file this process was using was removed (or cannot be opened any more)."""


class StoreUnreachable(StoreError):
    """The database server does not answer (stopped, restarting, failing over, out of reach)."""

    def __init__(self, message: str, where: str = "", reason: str = "") -> None:
        super().__init__(message)
        self.where, self.reason = where, reason


def home() -> Path:
    """RMCONSOLE_HOME (default ./.rmconsole): the database, worker logs and checkpoints. Set but
    empty (`RMCONSOLE_HOME= rmconsole run`, an unset shell variable) is the default too, not the
    current folder, which would take a store, logs/ and checkpoints/ among the user's files."""
    return Path(os.environ.get("RMCONSOLE_HOME") or ".rmconsole").expanduser()


# ---------------------------------------------------------------------- where the store is


def _memory_database(url: URL) -> bool:
    database = url.database or ""
    return url.get_backend_name() == "sqlite" and (
        database in ("", ":memory:")
        or database.startswith("file::memory:")
        or "mode=memory" in database
        or url.query.get("mode") == "memory"
    )


def _parse_env_url(text: str) -> URL:
    try:
        url = make_url(text)
    except (ArgumentError, ValueError) as err:
        raise StoreError(f"cannot use the database {shown_url(text)!r}: {_one_line(err, text)} ({_hint()})") from None
    url = _with_password_file(url)
    if _memory_database(url):
        raise StoreError(
            f"RMCONSOLE_DB={shown_url(text)!r} is an in-memory database, which lives and dies with one "
            f"process, and every run's worker is a process of its own: use a file "
            f"(sqlite:////path/to/rmconsole.db) or a server, or unset RMCONSOLE_DB"
        )
    return url


def _with_password_file(url: URL) -> URL:
    """A URL without a password gets the one in RMCONSOLE_DB_PASSWORD_FILE (how `worker_env`
    hands it to a run's processes: by path, never in their environment)."""
    path = os.environ.get(PASSWORD_FILE_ENV)
    if not path or url.password is not None or url.get_backend_name() == "sqlite":
        return url
    try:
        with open(path, encoding="utf-8") as f:
            password = f.read(4096).rstrip("\n")
    except OSError as err:
        raise StoreError(
            f"cannot read the database's password file {path} ({PASSWORD_FILE_ENV}): {err.strerror}"
        ) from None
    return url.set(password=password)


def password_by_file(url_text: str) -> dict[str, str]:
    """RMCONSOLE_DB for a run's processes: the URL without its password, and the password in a
    0600 file under RMCONSOLE_HOME/secrets (0700) named by RMCONSOLE_DB_PASSWORD_FILE, so that it
    is in no process's environment (/proc/PID/environ) nor its arguments."""
    url = make_url(url_text)
    if not url.password or url.get_backend_name() == "sqlite":
        return {"RMCONSOLE_DB": url_text}
    import hashlib

    folder = private.mkdir(home().resolve() / "secrets")
    path = folder / f"db-{hashlib.sha256(url_text.encode()).hexdigest()[:16]}"
    if not path.exists():
        tmp = folder / f".{path.name}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, private.FILE_MODE)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(str(url.password))
        os.replace(tmp, path)
    return {
        "RMCONSOLE_DB": url._replace(password=None).render_as_string(hide_password=False),
        PASSWORD_FILE_ENV: str(path),
    }


def database_url_object() -> URL:
    """The store's URL as SQLAlchemy's URL object: RMCONSOLE_DB, or the SQLite file in
    RMCONSOLE_HOME built with URL.create (so `?`, `#` or `%` in a path stay in the path)."""
    text = os.environ.get("RMCONSOLE_DB")
    if text:
        return _parse_env_url(text)
    return URL.create("sqlite", database=str((home() / "rmconsole.db").resolve()))


def database_url() -> str:
    """The store's URL as a string that `make_url` reads back to the same URL (paths escaped)."""
    return database_url_object().render_as_string(hide_password=False)


def sqlite_file(url: URL) -> Path | None:
    """The file of a SQLite URL (None for other databases), absolute."""
    if url.get_backend_name() != "sqlite" or _memory_database(url):
        return None
    database = url.database or ""
    if url.query.get("uri") in ("true", "1") and database.startswith("file:"):
        from urllib.parse import unquote, urlsplit

        database = unquote(urlsplit(database).path)
    return Path(database).expanduser().resolve()


def database_path() -> Path | None:
    """The SQLite file of this process's store, or None when the store is not SQLite."""
    return sqlite_file(database_url_object())


_USERINFO = re.compile(r"(://[^:/?#@\s]*):(.*)@")  # user:password@ in a URL, up to its last @


def shown_url(url: str | URL) -> str:
    """A database URL fit for a message: the password masked (as the user wrote it otherwise),
    also in a URL that does not parse (`user:...@` up to the last @ is taken as the password)."""
    try:
        parsed = make_url(url) if isinstance(url, str) else url
        if isinstance(url, str) and parsed.password is None:
            return _USERINFO.sub(r"\1:***@", url)
        return parsed.render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - an unparsable URL: mask whatever sits where a password goes
        return _USERINFO.sub(r"\1:***@", str(url))


def _where(url: URL) -> str:
    path = sqlite_file(url)
    return f"sqlite:///{path}" if path is not None else shown_url(url)


def _password(url: str | URL | None) -> str | None:
    if url is None:
        return None
    try:
        password = (make_url(url) if isinstance(url, str) else url).password
    except Exception:  # noqa: BLE001 - unparsable: what sits where a password goes
        found = _USERINFO.search(str(url))
        return found.group(2) if found and found.group(2) else None
    return str(password) if password else None


def scrub(text: str, url: str | URL | None = None) -> str:
    """`text` with the password of `url` (default: the store's, as RMCONSOLE_DB gives it) masked,
    wherever it appears."""
    password = _password(url if url is not None else os.environ.get("RMCONSOLE_DB"))
    if password is None and url is None and os.environ.get(PASSWORD_FILE_ENV):  # a run's process
        try:
            password = _password(database_url_object())
        except StoreError:
            password = None
    return text.replace(password, "***") if password and len(password) >= 3 else text


def engine_url(url: str | URL) -> URL:
    """The URL SQLAlchemy is given: `postgresql://` (and Heroku's `postgres://`) name psycopg 3,
    the driver of the `postgres` extra, unless the URL names a driver itself."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def backend(url: str | None = None) -> str:
    """ "sqlite", "postgresql", ...: the database behind `url` (default: the store's)."""
    try:
        return engine_url(url or database_url()).get_backend_name()
    except Exception:  # noqa: BLE001 - an unparsable URL is refused when it is opened
        return "unknown"


def _missing_driver(parsed: URL, err: BaseException) -> str | None:
    """The one line for a database whose driver is not installed (None if that is not the case)."""
    if not isinstance(err, ImportError) and "No module named" not in str(err):
        return None
    if parsed.get_backend_name() == "postgresql":
        return (
            "PostgreSQL needs its driver, psycopg 3, which is not installed: "
            "pip install 'rmconsole[postgres]' (or psycopg[binary])"
        )
    return None


def _hint() -> str:
    if os.environ.get("RMCONSOLE_DB"):
        return "check RMCONSOLE_DB, or unset it to use the SQLite file in RMCONSOLE_HOME"
    return "move that file away, or set RMCONSOLE_HOME to another folder"


def _one_line(err: BaseException, url: str | URL | None = None, limit: int = 300) -> str:
    """The driver's own words, without SQLAlchemy's background link, on one line, the password
    masked should the driver quote it."""
    text = str(getattr(err, "orig", None) or err)
    text = text.split("(Background on this error")[0]
    return scrub(" ".join(text.split())[:limit] or type(err).__name__, url)


# ---------------------------------------------------------------------- what a blocked store waits on


def lock_holders(path: Path) -> list[int]:
    """The pids holding SQLite's write lock on `path` (Linux /proc/locks): in WAL mode the write
    lock byte of the -shm file, in rollback mode the RESERVED/PENDING/EXCLUSIVE bytes of the file."""
    try:
        shm = os.stat(f"{path}-shm").st_ino
    except OSError:
        shm = None
    try:
        db_ino = os.stat(path).st_ino
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        parts = line.split()
        if len(parts) < 8 or parts[1] != "POSIX" or parts[3] != "WRITE" or not parts[4].lstrip("-").isdigit():
            continue
        try:
            ino = int(parts[5].rsplit(":", 1)[1])
            start = int(parts[6])
        except (ValueError, IndexError):
            continue
        writes_wal = ino == shm and start == 120  # WAL_WRITE_LOCK
        writes_db = ino == db_ino and (start in (1073741824, 1073741825) or start >= 1073741826)
        if (writes_wal or writes_db) and int(parts[4]) > 0 and int(parts[4]) != os.getpid():
            pids.append(int(parts[4]))
    return list(dict.fromkeys(pids))


def _describe_pid(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return f"pid {pid}"
    shown = " ".join(" ".join(Path(argv[0]).name if i == 0 else a for i, a in enumerate(argv)).split())[:80] or "?"
    return f"pid {pid} ({shown})"


def holders_text(path: Path | None) -> str:
    """ "held by pid N (its command)" for a SQLite store's write lock, or "" when unknown."""
    pids = lock_holders(path) if path is not None else []
    return ("held by " + ", ".join(_describe_pid(p) for p in pids[:3])) if pids else ""


def _print_wait(message: str) -> None:
    try:
        print(f"rmconsole: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


on_wait: Callable[[str], None] = _print_wait  # the TUI replaces it to show the line on screen


@dataclass
class _Wait:
    what: str
    path: Path | None
    started: float
    told: bool = False


class _Watch:
    """One thread per process that tells, once per operation, what a store operation blocked for
    more than WAIT_NOTICE_S is waiting on. Registering costs a dict insert, not a thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waits: dict[int, _Wait] = {}
        self.thread: threading.Thread | None = None
        self.next = 0

    def start(self, what: str, path: Path | None) -> int:
        with self.lock:
            self.next += 1
            self.waits[self.next] = _Wait(what, path, time.monotonic())
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._loop, name="store-wait", daemon=True)
                self.thread.start()
            return self.next

    def end(self, key: int) -> None:
        with self.lock:
            self.waits.pop(key, None)

    def _loop(self) -> None:
        while True:
            time.sleep(0.25)
            now = time.monotonic()
            with self.lock:
                due = [w for w in self.waits.values() if not w.told and now - w.started >= WAIT_NOTICE_S]
                for w in due:
                    w.told = True
            for w in due:
                holder = holders_text(w.path)
                where = f"sqlite:///{w.path}" if w.path is not None else "the database"
                if w.what == "write":
                    text = (
                        f"waiting for the write lock of the store {where}"
                        f" ({holder or 'another process is writing'}); still trying for up to "
                        f"{int(BUSY_TIMEOUT_S)} s at a time"
                    )
                else:
                    text = f"waiting for the store {where} to answer" + (
                        f" (its write lock is {holder})" if holder else ""
                    )
                try:
                    on_wait(text)
                except Exception:  # noqa: BLE001 - telling must never break the operation
                    pass


_WATCH = _Watch()


@contextmanager
def _watched(what: str, path: Path | None) -> Iterator[None]:
    key = _WATCH.start(what, path)
    try:
        yield
    finally:
        _WATCH.end(key)


# ---------------------------------------------------------------------- errors, one line each


def _free_bytes(path: Path | None) -> int | None:
    if path is None:
        return None
    try:
        return shutil.disk_usage(path.parent if not path.is_dir() else path).free
    except OSError:
        return None


def integrity_verdict(path: Path, limit: int = 3) -> str:
    """`PRAGMA integrity_check`'s first lines for a SQLite file, opened read-only, on one line."""
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True, timeout=5)
        try:
            rows = conn.execute(f"PRAGMA integrity_check({int(limit)})").fetchall()
        finally:
            conn.close()
        return "; ".join(str(r[0]) for r in rows)[:240] or "no verdict"
    except sqlite3.Error as err:
        return f"cannot run it: {err}"


def damaged_message(path: Path, error: str) -> str:
    recovered = path.with_name("recovered.db")
    if "not a database" in error:
        return f"the store {path} is not an SQLite database ({error}): {_hint()}"
    return (
        f"the store {path} is damaged ({error}; PRAGMA integrity_check: {integrity_verdict(path)}): copy out "
        f"what it still holds with `sqlite3 {path} .recover | sqlite3 {recovered}` and put that file in its "
        f"place (or restore a backup); runs still training on it stop when it is replaced"
    )


def store_error(err: BaseException, url: URL | None = None, doing: str = "use") -> StoreError:
    """Any database error as one line that says what is wrong and what to do."""
    if isinstance(err, StoreError):
        return err
    url = url if url is not None else database_url_object()
    path = sqlite_file(url)
    text = _one_line(err, url)
    low = text.lower()
    where = _where(url)
    if "locked" in low or "busy" in low:
        holder = holders_text(path)
        return StoreLocked(
            f"the store {where} stayed locked by another process{' (' + holder + ')' if holder else ''}: "
            f"{text}; wait for it to finish (or stop it), then try again"
        )
    free = _free_bytes(path)
    if "database or disk is full" in low or ("disk i/o error" in low and free is not None and free < 1 << 20):
        return StoreFull(
            f"no space left on device for the store {path or where} ({text}): free some space, then "
            f"try again; everything committed before (finished tasks included) is kept"
        )
    if path is not None and ("malformed" in low or "not a database" in low or "corrupt" in low):
        return StoreDamaged(damaged_message(path, text))
    if path is not None and "unable to open database file" in low and not path.exists() and path.parent.exists():
        return StoreGone(f"the store {path} is gone (removed while this process used it)")
    if path is None and url.get_backend_name() != "sqlite" and _unreachable(err):
        return StoreUnreachable(f"cannot {doing} the store at {where}: {text} ({_hint()})", where, text)
    return StoreError(f"cannot {doing} the store at {where}: {text} ({_hint()})")


def _unreachable(err: BaseException) -> bool:
    """Whether a server database's error means it does not answer (as opposed to refusing a
    statement): a dropped or refused connection, a server shutting down or starting up."""
    orig = getattr(err, "orig", None) or err
    state = str(getattr(orig, "sqlstate", None) or "")
    if state.startswith("08") or state in UNREACHABLE_SQLSTATES or getattr(err, "connection_invalidated", False):
        return True
    low = str(err).lower()
    if any(word in low for word in REFUSED_WORDS):  # the server answered: no (a wrong password, no such database)
        return False
    return any(word in low for word in UNREACHABLE_WORDS)


_outage_hold: dict[str, float | None] = {"s": None}


def hold_through_outages(seconds: float) -> None:
    """This process (a sweep's queue runner) waits up to `seconds` through a database outage,
    whatever RMCONSOLE_DB_GRACE_S says for the runs it starts."""
    _outage_hold["s"] = seconds


@contextmanager
def holding_as_a_run() -> Iterator[None]:
    """In this block the process holds on through a database outage as a run's own processes do
    (RMCONSOLE_DB_GRACE_S, default OUTAGE_GRACE_S): a sweep driven in the foreground (`run --seeds
    1,2,3`) waits out a database restart with its workers instead of exiting and leaving the
    other runs queued."""
    raw = os.environ.get(GRACE_ENV)
    try:
        seconds = max(0.0, float(raw)) if raw else OUTAGE_GRACE_S
    except ValueError:
        seconds = OUTAGE_GRACE_S
    before = _outage_hold["s"]
    _outage_hold["s"] = seconds if before is None else max(before, seconds)
    try:
        yield
    finally:
        _outage_hold["s"] = before


def outage_grace_s() -> float:
    """How long this process holds on through a database outage: RMCONSOLE_DB_GRACE_S, else
    OUTAGE_GRACE_S in a run's processes (they hold its lease: a worker holds its results, a
    supervisor its verdict) and 0 elsewhere (a command the user waits on says so at once)."""
    if _outage_hold["s"] is not None:
        return _outage_hold["s"]
    raw = os.environ.get(GRACE_ENV)
    if raw:
        try:
            return max(0.0, float(raw))
        except ValueError:
            return 0.0
    return OUTAGE_GRACE_S if os.environ.get(LEASE_ENV) else 0.0


_outage: dict[str, float | None] = {"since": None}  # this process's current outage (shared by threads)
_outage_lock = threading.Lock()


def _within_grace(attempt: Callable[[], T]) -> T:
    """`attempt()`, retried while the database is unreachable, for at most the grace period
    counted from the start of this process's outage; then StoreUnreachable with the true reason
    and how long it was waited for. Each outage and its end are one line on stderr (the run's log)."""
    while True:
        try:
            result = attempt()
        except StoreUnreachable as err:
            grace = outage_grace_s()
            if grace <= 0:
                raise
            now = time.monotonic()
            with _outage_lock:
                if _outage["since"] is None:
                    _outage["since"] = now
                    print(
                        f"rmconsole: the database {err.where} is unreachable ({err.reason}): holding this process's "
                        f"results and retrying for up to {grace:g} s (the grace period for a database outage, "
                        f"{GRACE_ENV})",
                        file=sys.stderr,
                        flush=True,
                    )
                since = _outage["since"]
            assert since is not None  # set above when it was not
            if now - since >= grace:
                raise StoreUnreachable(
                    f"the database {err.where} stayed unreachable for {now - since:.0f} s, longer "
                    f"than the grace period ({grace:g} s, {GRACE_ENV}): {err.reason}",
                    err.where,
                    err.reason,
                ) from None
            time.sleep(min(0.5, max(0.05, since + grace - now)))
            continue
        with _outage_lock:
            if _outage["since"] is not None:
                print(
                    f"rmconsole: the database answers again after {time.monotonic() - _outage['since']:.1f} s; "
                    f"carrying on",
                    file=sys.stderr,
                    flush=True,
                )
                _outage["since"] = None
        return result


# ---------------------------------------------------------------------- the engine


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _sqlite_events(engine: Engine, path: Path, writable: bool = True) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, record: Any) -> None:
        record.info["file_id"] = _file_id(path)
        dbapi_conn.isolation_level = None  # let the "begin" hook below issue BEGIN itself
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if writable:  # (setting WAL is a write: a read-only store is read as it is)
            _set_wal(cur)
            cur.execute("PRAGMA synchronous = NORMAL")
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        now = _file_id(path)
        if now is None:
            raise StoreGone(f"the store {path} is gone (removed while this process used it)")
        if now != record.info.get("file_id"):  # replaced: every pooled connection is to the old file
            raise InvalidatePoolError(f"the store file {path} was replaced")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        options = conn.get_execution_options()
        busy = options.get("sqlite_busy_s", BUSY_TIMEOUT_S)  # per transaction: a pooled connection keeps it
        conn.exec_driver_sql(f"PRAGMA busy_timeout = {int(busy * 1000)}")
        conn.exec_driver_sql("BEGIN " + options.get("sqlite_begin", "DEFERRED"))


def _set_wal(cur: sqlite3.Cursor) -> None:
    """Switch the file to WAL, retried while another connection holds its write lock: on a file
    not yet in WAL (a new store, whose first writer has begun) SQLite answers the switch with
    "database is locked" at once, without waiting its busy timeout (8 processes opening a new
    store together met it about once in 200)."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    pause = 0.002
    while True:
        try:
            cur.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            text = str(err).lower()
            if ("locked" not in text and "busy" not in text) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(2 * pause, 0.1)


_ENGINES: dict[str, Engine] = {}
_ENGINE_URLS: dict[int, URL] = {}


def _may_create_store() -> bool:
    """A run's own processes (they hold its lease) never create a store: theirs vanished."""
    return not os.environ.get(LEASE_ENV)


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
# the columns every rmconsole store's run table has had since the first one: how a store written
# before store identities (issue 14) is still recognised as rmconsole's
FIRST_RUN_COLUMNS = frozenset({"id", "status", "method", "dataset", "seed", "config"})


def foreign_tables(present: set[str], run_columns: set[str]) -> list[str]:
    """The tables of a database that is not an rmconsole store (empty when it is one, or holds no
    table at all). Ours: the store's identity table (tables.StoreIdentity), or, in a store from
    before identities, a `run` table with FIRST_RUN_COLUMNS. SQLite's own tables (sqlite_*) do not
    count. rmconsole adds its tables to an empty database or to its own store only: another
    program's database must not become a store, nor get tables it never asked for."""
    names = {t for t in present if not t.startswith("sqlite_")}
    if not names or StoreIdentity.__tablename__ in names:
        return []
    if "run" in names and run_columns >= FIRST_RUN_COLUMNS:
        return []
    return sorted(names)


def _foreign_error(url: URL, names: list[str]) -> StoreError:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return StoreError(
        f"cannot use the database {_where(url)} as the store: it holds another program's tables ({shown}) "
        f"and is not an rmconsole store; rmconsole adds its tables only to an empty database or its own "
        f"store ({_hint()})"
    )


def _read_only(path: Path) -> str | None:
    """How an existing store file this process may not write is opened: "ro" (the file is not
    writable; its folder is, for SQLite's -shm), "immutable" (its folder is not writable either:
    a read-only mount, a snapshot; SQLite is told nothing changes it, so no -shm is needed), or
    None (writable: opened read-write as always)."""
    try:
        if not path.is_file():
            return None
    except OSError:  # (a name too long...: said by the usual checks that follow)
        return None
    if not os.access(path.parent, os.W_OK):
        wal = path.with_name(path.name + "-wal")
        try:  # pages still in a -wal file: read through it (immutable would not see them)
            pending = wal.stat().st_size > 0
        except OSError:
            pending = False
        return "ro" if pending else "immutable"
    return None if os.access(path, os.W_OK) else "ro"


def _check_existing_file(path: Path, url: URL) -> set[str]:
    """Refuse, before any connection that could write (journal_mode=WAL is a write), an existing
    file that is not an SQLite database (SQLite would take a file shorter than a page, e.g. one
    byte, for an empty database and write a store over it) and an SQLite database of another
    program. A 0-byte file is an empty database, as SQLite defines it (also how `create_empty`
    leaves a new store before its schema, and how a WAL database may look while its pages are
    still in the -wal file): it becomes the store. The tables are read read-only (mode=ro)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as err:
        raise StoreError(f"cannot open the store at {_where(url)}: {err.strerror} ({_hint()})") from None
    if head and head != SQLITE_HEADER:
        raise StoreDamaged(damaged_message(path, "file is not a database"))
    try:
        immutable = "&immutable=1" if _read_only(path) == "immutable" else ""
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro{immutable}", uri=True, timeout=BUSY_TIMEOUT_S)
        try:
            present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            run_columns = {r[1] for r in conn.execute("PRAGMA table_info(run)")} if "run" in present else set()
        finally:
            conn.close()
    except sqlite3.Error as err:
        raise store_error(err, url, "open") from None
    foreign = foreign_tables(present, run_columns)
    if foreign:
        raise _foreign_error(url, foreign)
    return present


def _prepare_sqlite_file(path: Path, url: URL) -> None:
    try:
        private.mkdir(path.parent)  # a new home is 0700
    except OSError as err:
        raise StoreError(
            f"cannot create the store folder {path.parent}: {err.strerror} (set RMCONSOLE_HOME to a writable folder)"
        ) from None
    if path.is_dir():
        raise StoreError(f"cannot open the store at {_where(url)}: it is a directory ({_hint()})")
    if path.exists():
        _check_existing_file(path, url)
        return
    if not _may_create_store():
        raise StoreGone(f"the store {path} is gone (removed while this run's processes used it)")
    if not os.access(path.parent, os.W_OK):
        raise StoreError(f"the store folder {path.parent} is not writable (set RMCONSOLE_HOME to a writable folder)")
    try:
        private.create_empty(path)  # 0600; SQLite gives its -wal and -shm files the same mode
        sqlite3.connect(str(path)).close()  # an empty file; the schema follows
    except sqlite3.Error as err:
        raise store_error(err, url, "create") from None


def _json_safe(value: Any) -> Any:
    """`value` with every float that is not finite (inf, -inf, NaN) as None: JSON has no such
    numbers (PostgreSQL refuses the `Infinity` Python writes, every strict reader too)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def store_json(value: Any) -> str:
    """How every JSON column is written (both backends): strict JSON, a non-finite float as null,
    so no value a plug-in or a method hands over can make a row unreadable or a write fail."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        return json.dumps(_json_safe(value), allow_nan=False)


def _server_engine(url_obj: URL, **options: Any) -> Engine:
    """An engine for a database that is not a SQLite file (PostgreSQL, or any SQLAlchemy URL)."""
    if url_obj.get_backend_name() == "sqlite":
        raise StoreError(f"cannot use the database {shown_url(url_obj)!r}: not a SQLite file ({_hint()})")
    if url_obj.get_backend_name() == "postgresql":
        # every session in UTC: the store's timestamps are UTC, the server's zone may be anything
        return create_engine(
            engine_url(url_obj),
            pool_pre_ping=True,
            json_serializer=store_json,
            connect_args={
                "connect_timeout": CONNECT_TIMEOUT_S,
                "options": "-c timezone=UTC",
                "application_name": "rmconsole",
            },
            **options,
        )
    return create_engine(engine_url(url_obj), pool_pre_ping=True, json_serializer=store_json, **options)


def _unusable(url_obj: URL, err: BaseException) -> StoreError:
    missing = _missing_driver(url_obj, err)
    return StoreError(
        f"cannot use the database {shown_url(url_obj)!r}: {missing or _one_line(err, url_obj)} ({_hint()})"
    )


def existing_tables(url: str | URL | None = None) -> set[str]:
    """The tables in the store's database (default: RMCONSOLE_DB or the home's SQLite file), read
    without creating or changing anything: no file, no schema, no identity. Empty for a missing or
    empty SQLite file. For a command that must decide from what is stored before it validates all
    it was asked (runner/tune.py: is there a study?), and so must write nothing when it refuses.
    Another program's database, a file that is not SQLite: refused, as by `get_engine`."""
    url_obj = database_url_object() if url is None else (_parse_env_url(url) if isinstance(url, str) else url)
    key = url_obj.render_as_string(hide_password=False)
    path = sqlite_file(url_obj)
    engine = _ENGINES.get(key)
    if engine is None and path is not None:
        if path.is_dir():
            raise StoreError(f"cannot open the store at {_where(url_obj)}: it is a directory ({_hint()})")
        return _check_existing_file(path, url_obj) if path.exists() else set()
    try:
        probe = engine or _server_engine(url_obj, poolclass=NullPool)
    except (SQLAlchemyError, ImportError, ValueError) as err:
        raise _unusable(url_obj, err) from None
    try:
        with probe.connect() as conn:
            inspector = inspect(conn)
            present = set(inspector.get_table_names())
            run_columns = {c["name"] for c in inspector.get_columns("run")} if "run" in present else set()
    except (SQLAlchemyError, OSError, sqlite3.Error) as err:
        raise store_error(err, url_obj, "open") from None
    finally:
        if engine is None:
            probe.dispose()
    foreign = foreign_tables(present, run_columns)
    if foreign:
        raise _foreign_error(url_obj, foreign)
    return present


def get_engine(url: str | URL | None = None) -> Engine:
    """The process's engine for `url` (default: RMCONSOLE_DB or the SQLite file in
    RMCONSOLE_HOME), its schema checked (and created or extended) on first use."""
    url_obj = database_url_object() if url is None else (_parse_env_url(url) if isinstance(url, str) else url)
    key = url_obj.render_as_string(hide_password=False)
    if key in _ENGINES:
        return _ENGINES[key]
    path = sqlite_file(url_obj)
    read_only = _read_only(path) if path is not None else None
    try:
        if path is not None:
            _prepare_sqlite_file(path, url_obj)
            query = {"uri": "true", "mode": "rw"}
            if read_only is not None:  # every read works; a write is one line ("readonly database")
                query = {"uri": "true", "mode": "ro", **({"immutable": "1"} if read_only == "immutable" else {})}
            file_url = URL.create("sqlite", database=f"file:{quote(str(path))}", query=query)
            engine = create_engine(
                file_url,
                json_serializer=store_json,
                connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False},
            )
            _sqlite_events(engine, path, writable=read_only is None)
        else:
            engine = _server_engine(url_obj)
    except (SQLAlchemyError, ImportError, ValueError) as err:
        raise _unusable(url_obj, err) from None
    _ENGINE_URLS[id(engine)] = url_obj
    if read_only is not None and path is not None:
        try:
            complete = _schema_complete(engine, url_obj)
        except (SQLAlchemyError, OSError, sqlite3.Error) as err:
            raise store_error(err, url_obj, "open") from None
        if not complete:
            raise StoreError(
                f"the store {path} is read-only and older than this version (its schema needs a write): "
                f"open it once where it is writable ({_hint()})"
            )
        _ENGINES[key] = engine
        return engine
    with _watched("write", path):
        _create_schema(engine, url_obj)
    _ENGINES[key] = engine
    return engine


def _url_of(engine: Engine) -> URL:
    return _ENGINE_URLS.get(id(engine)) or engine.url


def dispose_engines() -> None:
    """Close every pooled connection of this process and forget the engines (a test that drops
    its database; a process about to fork)."""
    for engine in _ENGINES.values():
        engine.dispose()
    _ENGINES.clear()
    _ENGINE_URLS.clear()


def _schema_complete(engine: Engine, url: URL) -> bool:
    """Whether the store is at the head revision and has its identity: a read only. A store at a
    revision this code does not know (a newer rmconsole wrote it) is refused here, before anything
    is written."""
    with engine.connect() as conn:
        revision = migrations.current(conn)
        _refuse_newer(revision, url)
        if revision != migrations.head():
            return False
        return conn.execute(select(col(StoreIdentity.store_id))).first() is not None


class StoreTooNew(StoreError):
    """The store was written by a newer rmconsole: its schema revision is not one this code knows."""


def _refuse_newer(revision: str | None, url: URL) -> None:
    if revision is None or migrations.known(revision):
        return
    raise StoreTooNew(
        f"the store at {_where(url)} is at schema revision {revision}, which this rmconsole does not know "
        f"(its newest is {migrations.head()}): a newer rmconsole wrote it; upgrade rmconsole to use it "
        f"(pip install -U rmconsole), or point {'RMCONSOLE_DB' if os.environ.get('RMCONSOLE_DB') else 'RMCONSOLE_HOME'} "
        f"at another store; it was left as it is"
    )


def _create_schema(engine: Engine, url: URL) -> None:
    """Check the schema's revision with a read; only when it is behind, bring it to the head
    (store/migrations: Alembic revisions) in one write transaction (BEGIN IMMEDIATE on SQLite),
    so processes starting together queue on the lock instead of racing to create the same
    table; retried on lock errors. A store newer than this code is refused, nothing written."""
    try:
        if _schema_complete(engine, url):
            return
    except StoreError:
        raise
    except (SQLAlchemyError, OSError, sqlite3.Error) as err:
        if not isinstance(err, OperationalError) or "no such table" not in str(err):
            raise store_error(err, url, "open") from None
    bind = engine.execution_options(sqlite_begin="IMMEDIATE") if engine.dialect.name == "sqlite" else engine
    for attempt in range(10):
        try:
            with bind.begin() as conn:
                if engine.dialect.name == "postgresql":  # DDL is transactional: a waiter sees the tables
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY})")
                _refuse_foreign(conn, url)
                _refuse_newer(migrations.current(conn), url)  # (another process may have moved it on)
                if not migrations.create_at_head(conn):  # a new store: tables.py's, at the head
                    migrations.upgrade(conn)  # Alembic revisions, in this transaction
                _add_identity(conn)
            return
        except OperationalError as err:
            text = _one_line(err, url)
            if ("already exists" in text or "locked" in text or "busy" in text) and attempt < 9:
                time.sleep(0.05 * (attempt + 1))
                continue
            raise store_error(err, url, "open") from None
        except IntegrityError:  # another process wrote the identity first (PostgreSQL)
            return
        except StoreError:
            raise
        except (SQLAlchemyError, OSError) as err:
            raise store_error(err, url, "open") from None


def _refuse_foreign(conn: Connection, url: URL) -> None:
    """Inside the schema transaction, before its first write: a database holding another
    program's tables (a PostgreSQL database, or a SQLite file that got some since it was
    checked) is refused and left as it was (the transaction ends with nothing written)."""
    inspector = inspect(conn)
    present = set(inspector.get_table_names())
    run_columns = {c["name"] for c in inspector.get_columns("run")} if "run" in present else set()
    foreign = foreign_tables(present, run_columns)
    if foreign:
        raise _foreign_error(url, foreign)


def _add_identity(conn: Connection) -> None:
    """The store's identity row, written once when the store is created (or first opened by an
    rmconsole that knows identities): a random id that a recreated store never shares."""
    table = StoreIdentity.__table__  # type: ignore[attr-defined]  # set on table=True classes; sqlmodel does not declare it
    if conn.execute(select(table.c.store_id)).first() is None:  # (the largest run id given so far: runs.py)
        given = conn.execute(select(func.max(Run.__table__.c.id))).scalar()  # type: ignore[attr-defined]
        conn.execute(table.insert().values(id=1, store_id=uuid.uuid4().hex, last_run_id=given))


@contextmanager
def reading(engine: Engine | None = None) -> Iterator[Session]:
    """A read-only session (objects stay usable after it closes); a database error is one line.
    In a run's processes a database outage is waited out first (the grace period)."""
    engine = engine or _within_grace(get_engine)
    url = _url_of(engine)
    if engine.dialect.name != "sqlite" and outage_grace_s() > 0:
        _within_grace(lambda: _ping(engine, url))
    with _watched("read", sqlite_file(url)):
        try:
            with Session(engine, expire_on_commit=False) as session:
                yield session
        except (DBAPIError, sqlite3.Error) as err:
            if isinstance(err, IntegrityError):
                raise
            raise store_error(err, url, "read") from None


_patience = threading.local()


def _ping(engine: Engine, url: URL) -> None:
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql("SELECT 1")
    except (DBAPIError, OSError) as err:
        raise store_error(err, url, "read") from None


@contextmanager
def impatient(busy_s: float) -> Iterator[None]:
    """Writes in this block (this thread) wait at most `busy_s` for the write lock and are not
    retried: for writes a read-only command may skip (marking dead runs), so it never waits on
    another process's write; a busy lock is StoreLocked."""
    before = getattr(_patience, "busy_s", None)
    _patience.busy_s = busy_s
    try:
        yield
    finally:
        _patience.busy_s = before


def _retryable(err: OperationalError) -> bool:
    """A write that lost a race and may simply run again: SQLite locked past its busy timeout,
    a PostgreSQL deadlock (or serialization failure)."""
    if getattr(getattr(err, "orig", None), "sqlstate", None) in RETRIED_SQLSTATES:
        return True
    return "locked" in str(err) or "busy" in str(err)


@event.listens_for(Session, "do_orm_execute")
def _lock_rows_read_for_writing(state: ORMExecuteState) -> None:
    """In a write session on PostgreSQL, a read of whole rows (session.get, select(Table)) locks
    them until the transaction ends: what SQLite's one write lock gives, at row level."""
    if not (state.session.info.get("lock_rows") and state.is_select and not state.is_relationship_load):
        return
    statement = cast("Select[Any]", state.statement)  # is_select: a Select
    described = statement.column_descriptions
    if described and all(d.get("entity") is not None and d.get("expr") is d.get("entity") for d in described):
        state.statement = statement.with_for_update()


def write(
    fn: Callable[[Session], T], engine: Engine | None = None, retries: int = 12, busy_s: float | None = None
) -> T:
    """Run `fn(session)` in one short write transaction (BEGIN IMMEDIATE on SQLite), retried
    from the start if the database stays locked past the busy timeout (`busy_s`: a shorter
    timeout for a write that may be skipped; rows read are locked on PostgreSQL; a lost
    deadlock is retried too). Errors are one line (StoreError and its kinds). In a run's
    processes a database outage is waited out, the whole transaction retried (the grace period):
    what the run has finished is held, not lost, through a restart or a failover."""
    return _within_grace(lambda: _write_once(fn, engine or get_engine(), retries, busy_s))


def _write_once(fn: Callable[[Session], T], engine: Engine, retries: int, busy_s: float | None) -> T:
    url = _url_of(engine)
    if getattr(_patience, "busy_s", None) is not None:
        busy_s, retries = _patience.busy_s if busy_s is None else min(busy_s, _patience.busy_s), 1
    bind = engine
    if engine.dialect.name == "sqlite":
        bind = engine.execution_options(sqlite_begin="IMMEDIATE", **({"sqlite_busy_s": busy_s} if busy_s else {}))
    quick = busy_s is not None and busy_s <= WAIT_NOTICE_S  # a write that gives up rather than waits: no notice
    with nullcontext() if quick else _watched("write", sqlite_file(url)):
        for attempt in range(retries):
            try:
                with Session(
                    bind, expire_on_commit=False, info={"lock_rows": engine.dialect.name == "postgresql"}
                ) as session:
                    result = fn(session)
                    session.commit()
                    return result
            except OperationalError as err:
                if not _retryable(err) or attempt == retries - 1:
                    raise store_error(err, url, "write") from None
                time.sleep(min(0.02 * 2**attempt, 1.0) * (0.5 + random.random()))  # jittered: racers part
            except DBAPIError as err:
                if isinstance(err, IntegrityError):
                    raise
                raise store_error(err, url, "write") from None
    raise AssertionError("unreachable")
