"""What the TUI reads from the store, as plain frozen values.

These functions run in worker threads, never on the UI thread. They return immutable
snapshots (so a screen can tell "nothing changed" by equality and skip a repaint) and raise
`RunGone` when a run disappears under them. Everything here is UI-free and tested directly.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Optional

from functools import lru_cache

from sqlalchemy import String, func, type_coerce
from sqlmodel import col, select

from .. import store
from ..cl import metrics as M
from ..store.runs import BUDGET_KEYS
from ..store.tables import MemorySnapshot, Run, TaskResult, TaskStream

LOG_TAIL_BYTES = 64 * 1024


class RunGone(Exception):
    """The run was deleted while a screen was showing it."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"run {run_id} no longer exists in the store")
        self.run_id = run_id


# --------------------------------------------------------------------------- runs table


@dataclass(frozen=True)
class RunRow:
    """One line of the runs table: identity, lifecycle, live progress and summary metrics."""

    id: int
    status: str
    preset: Optional[str]
    method: str
    dataset: str
    memory_size: Optional[int]
    seed: int
    n_tasks: int
    task: Optional[int]
    phase: Optional[str]
    phase_done: int
    phase_total: int
    samples_per_s: Optional[float]
    eta_s: Optional[float]
    a_last: Optional[float]
    a_avg: Optional[float]
    f_last: Optional[float]
    i_last: Optional[float]
    tasks_done: int
    sweep_id: Optional[str]
    error: Optional[str]
    created_at: Optional[datetime]  # (not read for the runs table)
    heartbeat_at: Optional[datetime]  # (not read for the runs table)
    budget: tuple[str, ...] = field(default=(), repr=False)  # for matching a joint run (I_last)

    @property
    def active(self) -> bool:
        return self.status in store.ACTIVE

    @property
    def phase_fraction(self) -> Optional[float]:
        if not self.phase_total:
            return None
        return min(self.phase_done / self.phase_total, 1.0)

    def search_text(self) -> str:
        """What the `/` filter matches against (lower case)."""
        parts = [str(self.id), self.status, self.preset or "", self.method, self.dataset,
                 f"k={self.memory_size}", f"seed={self.seed}", self.sweep_id or ""]
        return " ".join(parts).lower()


# The runs table's columns; the config is read as its JSON text (parsed once per run and
# cached: K and the budget never change) and no datetimes (the table shows none).
_ROW_COLUMNS = (Run.id, Run.status, Run.preset, Run.method, Run.dataset, Run.seed,
                type_coerce(Run.config, String).label("config_json"), Run.n_tasks, Run.task, Run.phase,
                Run.phase_done, Run.phase_total, Run.samples_per_s, Run.eta_s, Run.metrics, Run.sweep_id, Run.error)


@lru_cache(maxsize=65536)
def _config_facts(config_json: str) -> tuple[Optional[int], tuple[str, ...]]:
    """(K, budget) from a run's config JSON."""
    config = json.loads(config_json)
    return config.get("memory_size"), budget_of(config)


def _finite(value: Any) -> Optional[float]:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def budget_of(config: dict[str, Any]) -> tuple[str, ...]:
    """What a joint run must share with a run to be its upper bound (the store's BUDGET_KEYS)."""
    return tuple(repr(config.get(k)) for k in BUDGET_KEYS)


def with_intransigence(rows: Iterable[RunRow]) -> list[RunRow]:
    """I_last of every row against the newest finished joint run with the same budget, matched
    in memory (one pass) instead of one query per run."""
    rows = list(rows)
    joints: dict[tuple[str, ...], float] = {}
    for r in sorted(rows, key=lambda r: r.id):
        if r.method == "joint" and r.status == "finished" and r.a_last is not None:
            joints[r.budget] = r.a_last
    out = []
    for r in rows:
        i_last = None if r.method == "joint" else M.intransigence(joints.get(r.budget), r.a_last)
        out.append(r if i_last == r.i_last else replace(r, i_last=i_last))
    return out


def load_run_rows(ids: Iterable[int] | None = None) -> list[RunRow]:
    """Every run (or the given ids) in one query of the run table's columns (no ORM objects).
    I_last is matched among the rows read (all of them when `ids` is None)."""
    query = select(*_ROW_COLUMNS).order_by(col(Run.id))
    if ids is not None:
        query = query.where(col(Run.id).in_(list(ids)))
    with store.reading() as session:
        raw = session.exec(query).all()
    rows = [_row_from_columns(r) for r in raw]
    return with_intransigence(rows) if ids is None else rows


def _row_from_columns(raw: Any) -> RunRow:
    (run_id, status, preset, method, dataset, seed, config_json, n_tasks, task, phase, done, total, rate, eta,
     metrics, sweep_id, error) = raw
    metrics = metrics or {}
    memory_size, budget = _config_facts(config_json)
    return RunRow(
        id=run_id, status=status, preset=preset, method=method, dataset=dataset,
        memory_size=memory_size, seed=seed, n_tasks=n_tasks, task=task, phase=phase,
        phase_done=done, phase_total=total, samples_per_s=rate, eta_s=eta, a_last=_finite(metrics.get("A_last")),
        a_avg=_finite(metrics.get("A_avg")), f_last=_finite(metrics.get("F_last")), i_last=None,
        tasks_done=int(metrics.get("tasks_done", 0)), sweep_id=sweep_id, error=error, created_at=None,
        heartbeat_at=None, budget=budget)


class RunsFeed:
    """The runs page's reader. A run only changes while it is queued or running, or when its
    status changes (finish, fail, stop, resume), so each read takes every (id, status) pair —
    a cheap index scan — and re-reads whole rows only for new runs, active runs and runs
    whose status changed; deleted runs drop out. Used from one worker thread at a time."""

    def __init__(self) -> None:
        self.rows: dict[int, RunRow] = {}

    def read(self) -> tuple[list[RunRow], bool]:
        """(all rows by id, whether anything changed since the last read)."""
        with store.reading() as session:
            statuses = dict(session.exec(select(Run.id, Run.status)).all())
        stale = [i for i, status in statuses.items()
                 if i not in self.rows or self.rows[i].status != status or status in store.ACTIVE]
        gone = [i for i in self.rows if i not in statuses]
        fresh = load_run_rows(stale) if stale else []
        merged = dict(self.rows)
        for i in gone:
            del merged[i]
        merged.update((r.id, r) for r in fresh)
        rows = with_intransigence(merged[i] for i in sorted(merged))
        changed = bool(gone) or len(rows) != len(self.rows) or any(self.rows.get(r.id) != r for r in fresh) \
            or any(self.rows.get(r.id) is not None and self.rows[r.id].i_last != r.i_last for r in rows)
        self.rows = {r.id: r for r in rows}
        return rows, changed


def matches(row: RunRow, query: str) -> bool:
    """The `/` filter: every whitespace-separated term must occur in the row's text;
    `key:value` terms (status:, preset:, method:, dataset:, k:, seed:) match that field."""
    text = row.search_text()
    fields = {"status": row.status, "preset": row.preset or "", "method": row.method, "dataset": row.dataset,
              "k": str(row.memory_size), "seed": str(row.seed), "id": str(row.id), "sweep": row.sweep_id or ""}
    for term in query.lower().split():
        key, sep, value = term.partition(":")
        if sep and key in fields:
            if value not in fields[key].lower():
                return False
        elif term not in text:
            return False
    return True


SORT_KEYS = {
    "id": lambda r: r.id,
    "status": lambda r: (r.status, r.id),
    "preset": lambda r: (r.preset or "", r.id),
    "method": lambda r: (r.method, r.id),
    "A_last": lambda r: (r.a_last is not None, r.a_last or 0.0, r.id),
    "F_last": lambda r: (r.f_last is not None, r.f_last or 0.0, r.id),
}


def arrange(rows: list[RunRow], query: str, sort: str, descending: bool) -> list[RunRow]:
    """Filter then sort: the rows the table shows, in order."""
    shown = [r for r in rows if matches(r, query)] if query.strip() else list(rows)
    return sorted(shown, key=SORT_KEYS[sort], reverse=descending)


# --------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class StreamTask:
    """A planned task: its class composition (samples per class) and its major classes."""

    task: int
    n_samples: int
    major_classes: tuple[int, ...]
    composition: tuple[int, ...]


@dataclass(frozen=True)
class TaskAccuracy:
    task: int
    accuracy: float
    accuracy_row: tuple[Optional[float], ...]
    seconds: float


@dataclass(frozen=True)
class MemoryUpdate:
    """The memory after one update: per-class counts, the slot count, and RM's uncertainty
    spread (vote-bin histograms of the candidates and of the chosen samples) when recorded."""

    id: int
    task: int
    histogram: tuple[int, ...]
    slots_per_class: int
    policy: Optional[str]
    note: Optional[str]
    views: Optional[int]
    candidates_uncertainty: Optional[tuple[int, ...]]
    chosen_uncertainty: Optional[tuple[int, ...]]

    @property
    def size(self) -> int:
        return sum(self.histogram)


@dataclass(frozen=True)
class RunView:
    """Everything the run screen draws, read in one session."""

    row: RunRow
    class_labels: tuple[str, ...]
    streams: tuple[StreamTask, ...]
    results: tuple[TaskAccuracy, ...]
    memory: tuple[MemoryUpdate, ...]
    log_path: Optional[str]
    pipeline: tuple[str, ...]
    config: dict[str, Any] = field(compare=True, hash=False)

    @property
    def accuracy_matrix(self) -> list[list[Optional[float]]]:
        return [list(r.accuracy_row) for r in self.results]


def class_labels(class_order: Optional[list[int]], class_names: Optional[list[str]], n_classes: int) -> tuple[str, ...]:
    """Label of each (order-remapped) class index c: the dataset's name of class_order[c]."""
    if class_order and class_names:
        return tuple(class_names[o] if o < len(class_names) else str(o) for o in class_order)
    return tuple(str(c) for c in range(n_classes))


def _tuple(values: Any) -> Optional[tuple[int, ...]]:
    return tuple(int(v) for v in values) if values else None


def load_run_view(run_id: int) -> RunView:
    """The run, its stream plan, task results and memory updates (a one-off read)."""
    return RunFeed(run_id).read()


class RunFeed:
    """The run page's reader. The run row is read every time; its stream plan, task results
    and memory updates only when their (count, newest id) changed — a task ended, the memory
    was updated, or a resume replaced them — so a long run costs the same as a short one.
    Used from one worker thread at a time."""

    PARTS: dict[str, Any] = {"streams": TaskStream, "results": TaskResult, "memory": MemorySnapshot}

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self._marks: dict[str, tuple[int, Optional[int]]] = {}
        self._parts: dict[str, tuple[Any, ...]] = {}
        self._labels: tuple[str, ...] = ()

    def read(self) -> RunView:
        run_id = self.run_id
        with store.reading() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise RunGone(run_id)
            probe = select(*[agg for t in self.PARTS.values() for agg in (
                select(func.count(t.id)).where(t.run_id == run_id).scalar_subquery(),
                select(func.max(t.id)).where(t.run_id == run_id).scalar_subquery())])  # one round trip
            values = session.exec(probe).one()
            stale = {}
            for i, name in enumerate(self.PARTS):
                mark = (values[2 * i], values[2 * i + 1])
                stale[name] = mark != self._marks.get(name)
                self._marks[name] = mark
            if stale["streams"]:
                rows = session.exec(select(TaskStream).where(TaskStream.run_id == run_id)
                                    .order_by(col(TaskStream.task))).all()
                self._parts["streams"] = tuple(StreamTask(s.task, s.n_samples, tuple(s.major_classes),
                                                          tuple(s.composition)) for s in rows)
            if stale["results"]:
                rows = session.exec(select(TaskResult).where(TaskResult.run_id == run_id)
                                    .order_by(col(TaskResult.task))).all()
                self._parts["results"] = tuple(TaskAccuracy(r.task, r.accuracy, tuple(r.accuracy_row), r.seconds)
                                               for r in rows)
            if stale["memory"]:
                rows = session.exec(select(MemorySnapshot).where(MemorySnapshot.run_id == run_id)
                                    .order_by(col(MemorySnapshot.id))).all()
                self._parts["memory"] = tuple(_memory_update(m) for m in rows)
            row = _row_of(run, session)
        streams = self._parts["streams"]
        n_classes = len(streams[0].composition) if streams else len(run.class_order or [])
        return RunView(
            row=row,
            class_labels=class_labels(run.class_order, run.class_names, n_classes),
            streams=streams,
            results=self._parts["results"],
            memory=self._parts["memory"],
            log_path=run.log_path,
            pipeline=tuple(run.pipeline or ()),
            config=dict(run.config),
        )


def _memory_update(m: MemorySnapshot) -> MemoryUpdate:
    info = m.info or {}
    return MemoryUpdate(
        id=m.id or 0, task=m.task, histogram=tuple(m.histogram), slots_per_class=m.slots_per_class,
        policy=info.get("policy"), note=info.get("note"), views=info.get("views"),
        candidates_uncertainty=_tuple(info.get("candidates_uncertainty")),
        chosen_uncertainty=_tuple(info.get("chosen_uncertainty")))


def _row_of(run: Run, session: Any = None) -> RunRow:
    """A RunRow for one run (I_last through the store's joint-run lookup)."""
    summary = store.run_summary(run, session)
    m = summary["metrics"]
    return RunRow(
        id=run.id or 0, status=run.status, preset=run.preset, method=run.method, dataset=run.dataset,
        memory_size=run.config.get("memory_size"), seed=run.seed, n_tasks=run.n_tasks, task=run.task,
        phase=run.phase, phase_done=run.phase_done, phase_total=run.phase_total,
        samples_per_s=run.samples_per_s, eta_s=run.eta_s, a_last=_finite(m["A_last"]), a_avg=_finite(m["A_avg"]),
        f_last=_finite(m["F_last"]), i_last=_finite(m["I_last"]), tasks_done=int(m.get("tasks_done") or 0),
        sweep_id=run.sweep_id, error=run.error, created_at=run.created_at, heartbeat_at=run.heartbeat_at,
        budget=budget_of(run.config))


def load_some_rows(ids: Iterable[int]) -> list[RunRow]:
    """The rows of a few runs, with I_last matched against every finished joint run."""
    ids = list(ids)
    with store.reading() as session:
        joint_ids = list(session.exec(select(Run.id).where(Run.method == "joint", Run.status == "finished")).all())
    rows = with_intransigence(load_run_rows(set(ids) | set(joint_ids)))
    return [r for r in rows if r.id in set(ids)]


@dataclass(frozen=True)
class CompareView:
    """Selected runs side by side: their rows, accuracy after each task, and config differences."""

    rows: tuple[RunRow, ...]
    curves: dict[int, tuple[float, ...]] = field(hash=False)
    differences: dict[str, tuple[Any, ...]] = field(hash=False)
    missing: tuple[int, ...] = ()


def load_compare(run_ids: list[int]) -> CompareView:
    """Rows, accuracy curves and the config keys whose values differ, for the given runs."""
    rows = {r.id: r for r in load_some_rows(run_ids)}
    present = [i for i in run_ids if i in rows]
    with store.reading() as session:
        results = session.exec(select(TaskResult.run_id, TaskResult.accuracy)
                               .where(col(TaskResult.run_id).in_(present))
                               .order_by(col(TaskResult.run_id), col(TaskResult.task))).all()
        configs = dict(session.exec(select(Run.id, Run.config).where(col(Run.id).in_(present))).all())
    curves: dict[int, list[float]] = {i: [] for i in present}
    for run_id, accuracy in results:
        curves[run_id].append(accuracy)
    keys = sorted({k for i in present for k in configs[i]})
    differences = {k: tuple(configs[i].get(k) for i in present) for k in keys
                   if len({repr(configs[i].get(k)) for i in present}) > 1}
    return CompareView(rows=tuple(rows[i] for i in present), curves={i: tuple(c) for i, c in curves.items()},
                       differences=differences, missing=tuple(i for i in run_ids if i not in rows))


# --------------------------------------------------------------------------- the worker's log


class LogTail:
    """Follows a log file: the last LOG_TAIL_BYTES on the first read, then what was appended.
    A file that shrank (rewritten) is read again from its tail; a missing file is no lines."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path else None
        self.offset: Optional[int] = None
        self._partial = b""

    def read_new(self) -> list[str]:
        if self.path is None:
            return []
        try:
            size = self.path.stat().st_size
        except OSError:
            return []
        if self.offset is None or size < self.offset:
            self.offset = max(0, size - LOG_TAIL_BYTES)
            self._partial = b""
            skip_partial_first = self.offset > 0
        else:
            skip_partial_first = False
        if size == self.offset:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(size - self.offset)
        except OSError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()  # an unfinished last line waits for its end
        if skip_partial_first and lines:
            lines = lines[1:]
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines]


# --------------------------------------------------------------------------- errors


def describe_store_error(err: BaseException) -> str:
    """One line for the status bar: a locked or unreachable store is a condition, not a crash."""
    text = str(getattr(err, "orig", None) or err).splitlines()[0]
    if "locked" in text or "busy" in text:
        return f"store busy ({text}); retrying"
    return f"store unavailable: {text}; retrying"
