"""rmconsole from Python: a store's runs and what they recorded, as pandas DataFrames.

    from rmconsole import api

    store = api.open_store("~/exp/.rmconsole")          # RMCONSOLE_HOME, its rmconsole.db, or a URL
    runs = store.runs("method:rm,er A_last>80")          # the filter grammar of `rmconsole runs`
    runs.groupby(["method", "seed"])["A_last"].mean()
    store.tasks("sweep:last")                             # one row per run and task
    store.anytime(sweep="last")                           # task-free runs: accuracy vs samples seen

Filters are the CLI's (rmconsole/store/filters.py, `rmconsole runs --help`): a text filter, a list
of run ids, or both; `sweep="last"` is the newest sweep, as `--sweep last`. Archived runs are left
out unless the filter names `archived`. Every frame of per-run rows carries the run's id, method,
dataset, K (`memory_size`) and seed, so it groups without a merge.

Every read goes through the store (rmconsole.store owns the SQL); the store is SQLite (a folder or
a .db file) or any URL RMCONSOLE_DB takes (`postgresql://...`, `pip install 'rmconsole[postgres]'`).
pandas is an optional dependency: `pip install 'rmconsole[pandas]'`. docs/api.md has a worked
example. A Store points the process's store at its database for each call (RMCONSOLE_DB), so use
one thread per process.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import store as _store
from .store.records import RunRecord

if TYPE_CHECKING:
    import pandas

RUN_COLUMNS = (
    "id",
    "status",
    "name",
    "preset",
    "method",
    "dataset",
    "memory_size",
    "seed",
    "n_tasks",
    "tasks_done",
    "partial",
    "sweep_id",
    "tags",
    "note",
    "archived",
    "created_at",
    "started_at",
    "finished_at",
    "device",
    "host",
)
IDENTITY = ("method", "dataset", "memory_size", "seed")  # copied onto every per-run row
Filter = str | Iterable[str] | None


class ApiError(ValueError):
    """A store that cannot be opened or a filter that cannot be read: one line saying which."""


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise ApiError("rmconsole.api needs pandas: pip install 'rmconsole[pandas]'") from None
    return pandas


def database_url(where: str | os.PathLike[str]) -> str:
    """The URL of a store given as a URL, a .db file, or a folder holding rmconsole.db (RMCONSOLE_HOME)."""
    text = os.fspath(where)
    if "://" in text:
        return text
    path = Path(text).expanduser()
    if path.is_dir():
        path = path / "rmconsole.db"
    if not path.is_file():
        raise ApiError(f"no rmconsole store at {path}: give RMCONSOLE_HOME, its rmconsole.db, or a database URL")
    return f"sqlite:///{path.resolve()}"


def open_store(where: str | os.PathLike[str]) -> Store:
    """A store to read: `where` is a folder (RMCONSOLE_HOME), its rmconsole.db, or a database URL."""
    return Store(database_url(where))


class Store:
    """One rmconsole store, read as DataFrames. Each method takes the same selection: a run
    filter (text, as `rmconsole runs` reads it), `ids` (run ids) and/or `sweep` (an id or "last")."""

    def __init__(self, url: str) -> None:
        self.url = url

    @contextlib.contextmanager
    def _pointed(self) -> Iterator[None]:
        before = os.environ.get("RMCONSOLE_DB")
        os.environ["RMCONSOLE_DB"] = self.url
        try:
            yield
        except (_store.StoreError, _store.FilterError) as err:
            raise ApiError(str(err)) from None
        finally:
            if before is None:
                os.environ.pop("RMCONSOLE_DB", None)
            else:
                os.environ["RMCONSOLE_DB"] = before

    def records(
        self, where: Filter = None, ids: Iterable[int] | None = None, sweep: str | None = None
    ) -> list[RunRecord]:
        """The runs a selection names, by id (the records the CLI's `runs` lists)."""
        terms = [where] if isinstance(where, str) else list(where or [])
        with self._pointed():
            if sweep is not None:
                if sweep == "last":
                    known = _store.sweep_ids()
                    if not known:
                        raise ApiError("sweep='last': the store has no sweep yet")
                    sweep = known[-1]
                terms.append(f"sweep:{sweep}")
            found = _store.find_runs(" ".join(terms) or None)
        if ids is not None:
            wanted = set(ids)
            found = [r for r in found if r.id in wanted]
        return found

    def runs(
        self, where: Filter = None, ids: Iterable[int] | None = None, sweep: str | None = None
    ) -> pandas.DataFrame:
        """One row per run: its identity and progress (RUN_COLUMNS), every metric it has (A_last,
        F_last, A_auc...: NaN where not measured; a partial run's are after its last task, see
        `partial`), then its config keys not already a column."""
        pd = _pandas()
        rows = []
        for r in self.records(where, ids, sweep):
            row: dict[str, Any] = {c: getattr(r, c) for c in RUN_COLUMNS}
            row["tags"] = ",".join(r.tags)
            row.update(r.metrics)
            for key, value in r.config.items():
                row.setdefault(key, "+".join(map(str, value)) if isinstance(value, (list, tuple)) else value)
            rows.append(row)
        return pd.DataFrame(rows, columns=None if rows else list(RUN_COLUMNS))

    def _rows(self, table: str, where: Filter, ids: Iterable[int] | None, sweep: str | None) -> pandas.DataFrame:
        pd = _pandas()
        records = {r.id: r for r in self.records(where, ids, sweep)}
        with self._pointed():
            rows = _store.rows_of_runs(table, records)
        for row in rows:
            row.pop("id", None)
            record = records[row["run_id"]]
            row.update({k: getattr(record, k) for k in IDENTITY})
        frame = pd.DataFrame(rows)
        if frame.empty:
            return frame
        first = ["run_id", *IDENTITY]
        return frame[first + [c for c in frame.columns if c not in first]]

    def tasks(
        self, where: Filter = None, ids: Iterable[int] | None = None, sweep: str | None = None
    ) -> pandas.DataFrame:
        """One row per run and task (0-based): `accuracy` on the test set after the task (%),
        `accuracy_row` (acc[k][j] for each task j), `class_accuracy`, the best-epoch, top-k and
        validation figures where the run measured them."""
        return self._rows("results", where, ids, sweep)

    def anytime(
        self, where: Filter = None, ids: Iterable[int] | None = None, sweep: str | None = None
    ) -> pandas.DataFrame:
        """Task-free runs: one row per anytime evaluation (`samples` streamed so far, `accuracy` on
        the classes seen, `n_classes`, `seconds`, `val_accuracy`)."""
        return self._rows("anytime", where, ids, sweep)

    def epochs(
        self, where: Filter = None, ids: Iterable[int] | None = None, sweep: str | None = None
    ) -> pandas.DataFrame:
        """One row per training epoch: task, phase (stream, memory, offline), epoch, loss, lr,
        samples, seconds, samples_per_s (and test_accuracy with eval_every_epoch)."""
        return self._rows("epochs", where, ids, sweep)

    def memory(
        self, where: Filter = None, ids: Iterable[int] | None = None, sweep: str | None = None
    ) -> pandas.DataFrame:
        """The memory after each update, long: one row per run, update, and class label (the
        position in the run's class order), with its `count`, the update's `slots_per_class`,
        `size` (samples held) and `policy`."""
        pd = _pandas()
        wide = self._rows("memory", where, ids, sweep)
        rows = []
        updates: dict[int, int] = {}
        for row in wide.to_dict("records"):
            update = updates[row["run_id"]] = updates.get(row["run_id"], -1) + 1  # the run's n-th update
            info = row.get("info") or {}
            for label, count in enumerate(row["histogram"]):
                rows.append(
                    {
                        **{k: row[k] for k in ("run_id", *IDENTITY, "task")},
                        "update": update,
                        "class_label": label,
                        "count": count,
                        "slots_per_class": row["slots_per_class"],
                        "size": sum(row["histogram"]),
                        "policy": info.get("policy"),
                    }
                )
        return pd.DataFrame(rows)
