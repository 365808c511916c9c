"""What the TUI reads from the store, as plain frozen values.

These functions run in worker threads, never on the UI thread. They return immutable
snapshots (so a screen can tell "nothing changed" by equality and skip a repaint) and raise
`RunGone` when a run disappears under them. Everything here is UI-free and tested directly.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import compress
from operator import attrgetter, not_
from pathlib import Path
from typing import Any

from .. import metric_registry, store
from ..cl.protocols import is_task_free
from ..cl.results import AnytimePoint, MemoryUpdate, TaskOutcome
from ..runner import sysmetrics
from ..store import FilterError, RunRecord, with_intransigence  # noqa: F401  (re-exported for the screens)

LOG_TAIL_BYTES = 64 * 1024

RunRow = RunRecord  # a line of the runs table is the store's run record


class RunGone(Exception):
    """The run was deleted while a screen was showing it."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"run {run_id} no longer exists in the store")
        self.run_id = run_id


# --------------------------------------------------------------------------- runs table


def load_run_rows(ids: Iterable[int] | None = None) -> list[RunRow]:
    """Every run (or the given ids) in one query. I_last is matched among the rows read (all of
    them when `ids` is None; left unset for a subset, which RunsFeed matches over all its rows)."""
    return store.run_records(ids, i_last=ids is None)


@dataclass(frozen=True)
class RunsDelta:
    """What one read of the runs changed: the rows new or changed since the read before (by id)
    and the ids of the runs deleted since."""

    updated: tuple[RunRow, ...] = ()
    gone: tuple[int, ...] = ()


class RunsFeed:
    """The runs page's reader; a refresh costs what changed, not the size of the store.

    A run only changes while it is queued or running, or when its status changes (finish,
    fail, stop, resume). Each read asks the store for the run count, the newest id and the
    active ids (`store.poll_runs`, an index lookup), and re-reads whole rows only for the runs
    active now or at the last read. A moved count or newest id (a run added or deleted), and
    every FULL_EVERY-th read (tags, names or notes edited from a shell), take the full path:
    every (id, status) pair, re-reading new runs and runs whose status changed. I_last is
    recomputed for the re-read rows only, against the joint runs kept from earlier reads, and
    for every row when the set of joint runs changed. Used from one worker thread at a time.

    Each read also leaves `delta`: the rows that changed and the ids that left, so the runs page
    redraws only those rows (`RunsDelta`; None when every row must be looked at)."""

    FULL_EVERY = 30

    def __init__(self) -> None:
        self.rows: dict[int, RunRow] = {}
        self._poll: store.RunsPoll | None = None
        self._reads = 0
        self._order: list[RunRow] = []
        self._bounds: list[RunRow] = []  # the finished joint runs (what I_last is measured against)
        self._raw: dict[int, RunRow] = {}  # the records as read (before I_last), for store.live_records
        self._texts: dict[int, tuple[object, ...]] = {}  # their JSON columns' text at that read
        self._active: set[int] = set()  # the runs queued or running at the last read
        self._index: dict[int, int] = {}  # run id -> its place in _order
        self.delta: RunsDelta | None = None  # what the last read changed (None: everything, the first read)

    def _stale(self) -> tuple[list[int], list[int]]:
        """(ids to re-read, ids gone) since the last read."""
        poll = store.poll_runs()
        last, self._poll = self._poll, poll
        self._reads += 1
        was_active = self._active
        if (
            last is not None
            and (poll.count, poll.max_id) == (last.count, last.max_id) == (len(self.rows), max(self.rows, default=0))
            and self._reads % self.FULL_EVERY
        ):
            return sorted(poll.active | was_active), []
        statuses = store.run_statuses()
        stale = [
            i
            for i, status in statuses.items()
            if i not in self.rows or self.rows[i].status != status or status in store.ACTIVE
        ]
        return stale, [i for i in self.rows if i not in statuses]

    def read(self) -> tuple[list[RunRow], bool]:
        """(all rows by id, whether anything changed since the last read)."""
        stale, gone = self._stale()
        if not self.rows and stale:  # the first read: every run, without an id list
            fresh = store.live_records(self._raw, self._texts, None)
        else:
            fresh = store.live_records(self._raw, self._texts, stale) if stale else []
        raw = self._raw
        moved = {r.id for r in fresh if r is not raw.get(r.id)}  # (live_records gives back a record that did not move)
        self._active = {r.id for r in fresh if r.status in store.ACTIVE}  # (every active run is in `stale`)
        self._raw.update((r.id, r) for r in fresh)
        for i in gone:
            self._raw.pop(i, None)
        merged = dict(self.rows)
        for i in gone:
            merged.pop(i, None)
        merged.update((r.id, r) for r in fresh)
        touched: Iterable[int] = [r.id for r in fresh]
        if fresh or gone:
            bounds_before = list(self._bounds)
            if gone or any(
                r.is_upper_bound or (r.id in self.rows and self.rows[r.id].is_upper_bound)
                for r in fresh
                if r.id in moved
            ):
                self._bounds = [merged[i] for i in sorted(merged) if merged[i].is_upper_bound]
            if self._bounds != bounds_before or (self._bounds and not self.rows):  # a joint run came, went or changed
                merged = {r.id: r for r in with_intransigence((merged[i] for i in sorted(merged)), self._bounds)}
                touched = merged
            elif self._bounds:
                merged.update((r.id, r) for r in with_intransigence(fresh, self._bounds))
            # (no joint run: no row has an I_last, and a fresh read has none to clear)
        before = self.rows
        every = touched is merged  # every row re-derived (a joint run came, went or changed): no delta
        if every:
            updated = []
            changed = bool(gone) or any(before.get(i) is not r and before.get(i) != r for i, r in merged.items())
        else:
            # a row read anew without a joint run is changed for sure (no field compare: 1,000 live runs)
            sure = moved if not self._bounds else set()
            updated = [
                merged[i]
                for i in touched
                if (i in sure and before.get(i) is not None)
                or (before.get(i) is not merged[i] and before.get(i) != merged[i])
            ]
            changed = bool(gone or updated)
        if every or not self._order or gone or any(r.id not in before for r in updated):  # a run came or went
            self._order = [merged[i] for i in sorted(merged)]
            self._index = {r.id: n for n, r in enumerate(self._order)}
        else:  # the same runs: the changed rows replaced in place
            order, index = self._order, self._index
            for r in updated:
                order[index[r.id]] = r
        self.delta = RunsDelta(tuple(updated), tuple(gone)) if before and not every else None
        self.rows = merged
        return list(self._order), changed


def typed_words(query: str) -> list[str]:
    """The words of a filter typed into `/`, read as a shell would: the README's example
    `method:er,rm 'A_last>88'` (quoted for the shell) works typed literally. A quote left open
    while typing is dropped rather than refused."""
    try:
        return shlex.split(query)
    except ValueError:  # an unbalanced quote (still being typed)
        return query.replace("'", " ").replace('"', " ").split()


def parse_typed(query: str) -> store.RunFilter:
    """The `/` filter: the store's run filter grammar (store/filters.py) over `typed_words`."""
    return store.parse_run_filter(typed_words(query))


def matches(row: RunRow, query: str) -> bool:
    """The `/` filter: the store's run filter grammar (store/filters.py); FilterError if unreadable."""
    return parse_typed(query).accepts(row)


SORT_KEYS = {
    "id": attrgetter("id"),  # (the default sort, over every run each refresh: no Python frame per run)
    "status": lambda r: (r.status, r.id),
    "preset": lambda r: (r.label.lower(), r.id),
    "method": lambda r: (r.method, r.id),
}


def sort_columns() -> tuple[str, ...]:
    """What the runs page sorts by: the run columns, then the catalogue's sortable metrics."""
    return (*SORT_KEYS, *(m.name for m in metric_registry.sortable()))


def sort_key(sort: str) -> Any:
    """The key function of a sort column: a metric sorts runs with a value by it, before the rest."""
    if sort in SORT_KEYS:
        return SORT_KEYS[sort]
    return lambda r: (r.value(sort) is not None, r.value(sort) or 0.0, r.id)


def arrange(rows: list[RunRow], query: str, sort: str, descending: bool, archived: bool = False) -> list[RunRow]:
    """Filter then sort: the rows the table shows, in order (FilterError for a filter that cannot
    be read: the screen shows its one line). Archived runs are left out unless `archived` or the
    filter names them; sorted by a final metric, partial runs come after every complete one."""
    run_filter = parse_typed(query)
    shown = run_filter.select(rows)
    if not archived and not run_filter.names("archived"):
        shown = list(compress(shown, map(not_, map(attrgetter("archived"), shown))))  # (C speed: 10,000 rows)
    value = sort_key(sort)
    ordered = sorted(shown, key=value, reverse=descending)
    if sort not in SORT_KEYS and metric_registry.metric(sort).final_only:  # (a stable sort keeps each group's order)
        ordered.sort(key=lambda r: metric_group(r, value(r)))
    return ordered


def metric_group(row: RunRow, value: Any) -> int:
    """Sorted by a final metric: complete runs first (0), then partial ones (1), then runs without
    the value (2); `value` is the row's `sort_key` value (its first item: whether it has one)."""
    return (0 if not row.partial else 1) if value[0] else 2


class Arrangement:
    """The rows the runs table shows, in order (what `arrange` gives), kept across reads so that a
    read which changed a few rows costs those rows: `update` puts each changed row in its place —
    in place when it still passes the filter and its sort key did not move, else taken out and
    put back where the order wants it (a binary search) — and says whether any row moved.
    FilterError (from the constructor) for a filter that cannot be read."""

    def __init__(self, rows: Iterable[RunRow], query: str, sort: str, descending: bool, archived: bool = False):
        self.key = (query, sort, descending, archived)
        self._filter = parse_typed(query)
        self._archived = archived or self._filter.names("archived")
        self._sort_value = sort_key(sort)
        self._descending = descending
        self._grouped = sort not in SORT_KEYS and metric_registry.metric(sort).final_only
        self.rows = arrange(list(rows), query, sort, descending, archived)
        self._place = {r.id: n for n, r in enumerate(self.rows)}

    def shows(self, row: RunRow) -> bool:
        """Whether the row passes the filter (and the archived rule)."""
        return (self._archived or not row.archived) and (not self._filter.terms or self._filter.accepts(row))

    def _rank(self, row: RunRow) -> tuple[int, Any]:
        """(its group, its sort value): final metrics first, then partial ones, then none."""
        value = self._sort_value(row)
        return (metric_group(row, value) if self._grouped else 0), value

    def _before(self, a: tuple[int, Any], b: tuple[int, Any]) -> bool:
        """Whether rank `a` comes before rank `b` (groups always in order; values by direction)."""
        if a[0] != b[0]:
            return a[0] < b[0]
        return bool(a[1] > b[1]) if self._descending else bool(a[1] < b[1])

    def update(self, updated: Iterable[RunRow], gone: Iterable[int] = ()) -> bool:
        """Take a read's changed rows and deleted ids; True when the order changed (a row came,
        went or moved), False when every changed row was replaced where it stood."""
        rows, place = self.rows, self._place
        out: set[int] = {i for i in gone if i in place}
        put: list[RunRow] = []
        for row in updated:
            at = place.get(row.id)
            keep = self.shows(row)
            if at is not None and keep and self._rank(rows[at]) == self._rank(row):
                rows[at] = row
                continue
            if at is not None:
                out.add(row.id)
            if keep:
                put.append(row)
        if not out and not put:
            return False
        if out:
            rows[:] = [r for r in rows if r.id not in out]
        for row in put:
            rank = self._rank(row)
            lo, hi = 0, len(rows)
            while lo < hi:
                mid = (lo + hi) // 2
                if self._before(self._rank(rows[mid]), rank):
                    lo = mid + 1
                else:
                    hi = mid
            rows.insert(lo, row)
        self._place = {r.id: n for n, r in enumerate(rows)}
        return True


# --------------------------------------------------------------------------- one run


@dataclass(frozen=True)
class StreamTask:
    """A planned task: its class composition (samples per class) and its major classes."""

    task: int
    n_samples: int
    major_classes: tuple[int, ...]
    composition: tuple[int, ...]
    first_appearances: tuple[tuple[int, int], ...] = ()  # task-free streams: (class, position) first seen here


@dataclass(frozen=True)
class EpochPoint:
    """One training epoch: what the loss and learning-rate curves draw."""

    task: int
    phase: str
    epoch: int
    epochs: int
    loss: float | None
    lr: float
    samples_per_s: float | None
    test_accuracy: float | None


@dataclass(frozen=True)
class RunView:
    """Everything the run screen draws, read in one session."""

    row: RunRow
    class_labels: tuple[str, ...]
    streams: tuple[StreamTask, ...]
    results: tuple[TaskOutcome, ...]
    memory: tuple[MemoryUpdate, ...]
    log_path: str | None
    pipeline: tuple[str, ...]
    config: dict[str, Any] = field(compare=True, hash=False)
    epochs: tuple[EpochPoint, ...] = ()
    anytime: tuple[AnytimePoint, ...] = ()
    system: str | None = None  # the system load in one line (runner.sysmetrics.summary_text), once sampled

    @property
    def accuracy_matrix(self) -> list[list[float | None]]:
        return [list(r.accuracy_row or ()) for r in self.results]

    @property
    def task_free(self) -> bool:
        """A run of the follow-up's task-free protocol (i-Blurry / Si-Blurry): anytime evaluation."""
        return is_task_free(self.config)


def class_labels(class_order: list[int] | None, class_names: list[str] | None, n_classes: int) -> tuple[str, ...]:
    """Label of each (order-remapped) class index c: the dataset's name of class_order[c]."""
    if class_order and class_names:
        return tuple(class_names[o] if o < len(class_names) else str(o) for o in class_order)
    return tuple(str(c) for c in range(n_classes))


def load_run_view(run_id: int) -> RunView:
    """The run, its stream plan, task results and memory updates (a one-off read)."""
    return RunFeed(run_id).read()


class RunFeed:
    """The run page's reader. The run row is read every time; its stream plan, task results
    and memory updates only when their (count, newest id) changed — a task ended, the memory
    was updated, or a resume replaced them — so a long run costs the same as a short one.
    Used from one worker thread at a time."""

    def __init__(self, run_id: int) -> None:
        self.run_id = run_id
        self._marks: dict[str, store.queries.Mark] = {}
        self._parts: dict[str, tuple[Any, ...]] = {}
        self._system: str | None = None

    def read(self) -> RunView:
        try:
            parts = store.run_parts(self.run_id, self._marks)
        except store.UnknownRun:
            raise RunGone(self.run_id) from None
        self._marks = parts.marks
        if parts.streams is not None:
            self._parts["streams"] = tuple(
                StreamTask(
                    s.task,
                    s.n_samples,
                    tuple(s.major_classes),
                    tuple(s.composition),
                    tuple((int(c), int(p)) for c, p in s.first_appearances or ()),
                )
                for s in parts.streams
            )
        if parts.results is not None:
            self._parts["results"] = tuple(parts.results)
        if parts.memory is not None:
            self._parts["memory"] = tuple(parts.memory)
        if parts.epochs is not None:
            points = tuple(
                EpochPoint(e.task, e.phase, e.epoch, e.epochs, e.loss, e.lr, e.samples_per_s, e.test_accuracy)
                for e in parts.epochs
            )
            self._parts["epochs"] = self._parts.get("epochs", ()) + points if parts.epochs_appended else points
        if parts.anytime is not None:
            self._parts["anytime"] = tuple(parts.anytime)
        if parts.system is not None:
            self._system = sysmetrics.summary_text(parts.system)
        streams = self._parts["streams"]
        n_classes = len(streams[0].composition) if streams else len(parts.class_order or [])
        return RunView(
            row=parts.record,
            class_labels=class_labels(parts.class_order, parts.class_names, n_classes),
            streams=streams,
            results=self._parts["results"],
            memory=self._parts["memory"],
            log_path=parts.record.log_path,
            pipeline=parts.pipeline,
            config=dict(parts.record.config),
            epochs=self._parts.get("epochs", ()),
            anytime=self._parts.get("anytime", ()),
            system=self._system,
        )


def load_some_rows(ids: Iterable[int]) -> list[RunRow]:
    """The rows of a few runs, with I_last matched against every finished joint run."""
    return store.run_records(ids)


@dataclass(frozen=True)
class CompareView:
    """Selected runs side by side: their rows, accuracy after each task, and config differences."""

    rows: tuple[RunRow, ...]
    curves: dict[int, tuple[float, ...]] = field(hash=False)
    differences: dict[str, tuple[Any, ...]] = field(hash=False)
    missing: tuple[int, ...] = ()


def load_compare(run_ids: list[int]) -> CompareView:
    """Rows, accuracy curves and what differs between the given runs: their name and tags, then
    every config key whose values differ, written as `--set` writes them (`cutmix+autoaug`)."""
    from ..config import method_reads
    from ..store.filters import config_value, format_value

    rows = {r.id: r for r in load_some_rows(run_ids)}
    present = [i for i in run_ids if i in rows]
    curves = store.accuracy_curves(present)
    configs = {i: rows[i].config for i in present}
    differences: dict[str, tuple[Any, ...]] = {}
    for key, value_of in (
        ("name", lambda r: r.name or "—"),
        ("tags", lambda r: " ".join(r.tags) or "—"),
        ("preset", lambda r: r.preset or "—"),
    ):
        values = tuple(value_of(rows[i]) for i in present)
        if len(set(values)) > 1:
            differences[key] = values
    keys = list(dict.fromkeys(k for i in present for k in configs[i]))
    for key in keys:  # a method's own parameter differs only among the runs that read it
        values = tuple(format_value(config_value(configs[i], key)) for i in present)
        read = {v for i, v in zip(present, values) if method_reads(configs[i].get("method"), key)}
        if len(read) > 1:
            differences[key] = values
    return CompareView(
        rows=tuple(rows[i] for i in present),
        curves={i: tuple(c) for i, c in curves.items()},
        differences=differences,
        missing=tuple(i for i in run_ids if i not in rows),
    )


# --------------------------------------------------------------------------- a study


@dataclass(frozen=True)
class StudyView:
    """A `rmconsole tune` study as the study page draws it: what `tune --show` prints (the
    summary's trials and best line, runner/tune.py) and what `--plot` draws (report/study.py's
    history, importance and parallel coordinates), read through the same calls."""

    name: str
    metric: str
    maximize: bool
    sampler: str
    pruner: str
    trials_asked: int
    keys: tuple[str, ...]  # the searched config keys, in the study's order
    trials: tuple[Any, ...]  # runner/tune.TrialRow, in trial order
    best: int | None  # the best trial's number
    best_line: str
    history: tuple[Any, ...]  # report/study.HistoryPoint
    importance: tuple[tuple[str, float], ...]  # Optuna's, most important first (empty: not yet)
    axes: tuple[Any, ...]  # report/study.Axis
    lines: tuple[Any, ...]  # report/study.Line
    driver: int | None  # the pid of a live study driver


def load_study_view(name: str) -> StudyView:
    """Everything the study page shows of study `name` (a TuneError, one line, when there is none)."""
    from ..report import study as figures
    from ..runner import tune

    loaded = tune.load_study(name)
    summary = tune.summarize(name, loaded)
    maximize = summary.direction == "maximize"
    axes, lines = figures.parallel(loaded[0])
    return StudyView(
        name=name,
        metric=summary.spec.metric,
        maximize=maximize,
        sampler=summary.spec.sampler,
        pruner=summary.spec.pruner,
        trials_asked=summary.spec.trials,
        keys=tuple(p.key for p in summary.spec.params),
        trials=tuple(summary.trials),
        best=summary.best.number if summary.best is not None else None,
        best_line=tune.best_line(name, summary) or "",
        history=tuple(figures.history(loaded[0], maximize)),
        importance=tuple(figures.importance(loaded[0]).items()),
        axes=tuple(axes),
        lines=tuple(lines),
        driver=summary.driver,
    )


# --------------------------------------------------------------------------- the worker's log


class LogTail:
    """Follows a log file: the last LOG_TAIL_BYTES on the first read, then what was appended.
    A file that shrank (rewritten) is read again from its tail; a missing file is no lines."""

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = Path(path) if path else None
        self.offset: int | None = None
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
