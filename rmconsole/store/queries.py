"""Every read the CLI, the TUI and the reports make, each in one short session.

The faces get frozen values: `RunRecord`s (records.py) for runs, with I_last set by the one
joint-run rule, and plain dicts for the JSON outputs. `get_run` / `list_runs` give the ORM rows
(detached) to the process layer, which reads a run's pid, host and heartbeat.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from types import MappingProxyType
from typing import Any, cast

from sqlalchemy import String, func, type_coerce
from sqlmodel import Session, col, select

from .. import metric_registry
from ..cl.results import AnytimePoint, MemoryUpdate, TaskOutcome, TaskPlan, outcome_json
from .db import reading
from .filters import RunFilter, parse_run_filter
from .mapping import outcome_of, plan_of, point_of, update_of
from .records import RunRecord, candidate_filters, count, iso, stored_metrics, with_intransigence
from .tables import (
    ACTIVE,
    AnytimeEval,
    EpochMetric,
    MemorySnapshot,
    Run,
    StoreIdentity,
    SystemSample,
    TaskResult,
    TaskStream,
)


class UnknownRun(Exception):
    """No run has this id."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"no run with id {run_id} (see `rmconsole runs`)")
        self.run_id = run_id


# ---------------------------------------------------------------------- ORM rows (process layer)


def get_run(run_id: int) -> Run:
    with reading() as session:
        run = session.get(Run, run_id)
    if run is None:
        raise UnknownRun(run_id)
    return run


def store_id() -> str:
    """The store's identity (tables.StoreIdentity): a random id no other store shares."""
    with reading() as session:
        identity = session.get(StoreIdentity, 1)
    assert identity is not None, "the schema check writes the identity"
    return identity.store_id


def checkpoint_checksums(run_id: int) -> dict[str, int]:
    """sha256 -> task, of every checkpoint the run's task results recorded (empty for a run
    stored by an older rmconsole, which recorded none)."""
    with reading() as session:
        rows = session.exec(
            select(TaskResult.checkpoint_sha256, TaskResult.task).where(
                TaskResult.run_id == run_id, col(TaskResult.checkpoint_sha256).is_not(None)
            )
        ).all()
    return {sha: task for sha, task in rows if sha is not None}  # (none is: the query excludes them)


def list_runs(
    status: str | Iterable[str] | None = None,
    preset: str | None = None,
    method: str | None = None,
    dataset: str | None = None,
    sweep_id: str | None = None,
    limit: int | None = None,
) -> list[Run]:
    query = select(Run).order_by(col(Run.id))
    if status is not None:
        query = query.where(col(Run.status).in_([status] if isinstance(status, str) else list(status)))
    if preset is not None:
        query = query.where(Run.preset == preset)
    if method is not None:
        query = query.where(Run.method == method)
    if dataset is not None:
        query = query.where(Run.dataset == dataset)
    if sweep_id is not None:
        query = query.where(Run.sweep_id == sweep_id)
    if limit is not None:
        query = query.limit(limit)
    with reading() as session:
        return list(session.exec(query).all())


def count_runs() -> int:
    with reading() as session:
        return int(session.exec(select(func.count(col(Run.id)))).one())


def run_statuses() -> dict[int, str]:
    """Every run's status by id: a cheap index scan that tells a poller which runs can have changed."""
    with reading() as session:
        return dict(session.exec(select(Run.id, Run.status)).all())


@dataclass(frozen=True)
class RunsPoll:
    """What a poller needs to tell which runs can have changed, without reading every run: the
    run count, the newest id, and the ids of the queued or running runs (an index lookup)."""

    count: int
    max_id: int
    active: frozenset[int]


def poll_runs() -> RunsPoll:
    """One cheap read (two aggregates and the status index) that costs the same for 100 or
    10,000 runs: with it a poller re-reads only the active runs, the runs that were active last
    time, and everything only when the count or the newest id moved (a run added or deleted)."""
    with reading() as session:
        count, max_id = session.exec(select(func.count(col(Run.id)), func.max(Run.id))).one()
        active = session.exec(select(Run.id).where(col(Run.status).in_(ACTIVE))).all()
    return RunsPoll(int(count or 0), int(max_id or 0), frozenset(i for i in active if i is not None))


def sweep_ids() -> list[str]:
    """Every sweep id in the store, oldest first (by its first run)."""
    with reading() as session:
        rows = session.exec(
            select(Run.sweep_id, func.min(Run.id))
            .where(col(Run.sweep_id).is_not(None))
            .group_by(Run.sweep_id)
            .order_by(func.min(Run.id))
        ).all()
    return [sweep_id for sweep_id, _ in rows if sweep_id is not None]  # (none is: the query excludes them)


# ---------------------------------------------------------------------- run records


# The record's columns. The config is read as its JSON text and parsed once per distinct text
# (a run's config never changes), so re-reading a live run costs no JSON parsing.
_RECORD_COLUMNS: tuple[Any, ...] = (
    Run.id,
    Run.status,
    Run.preset,
    Run.method,
    Run.dataset,
    Run.seed,
    type_coerce(Run.config, String).label("config_json"),
    Run.sweep_id,
    Run.n_tasks,
    Run.task,
    Run.phase,
    Run.phase_done,
    Run.phase_total,
    Run.samples_per_s,
    Run.eta_s,
    Run.metrics,
    Run.error,
    Run.created_at,
    Run.heartbeat_at,
    Run.started_at,
    Run.finished_at,
    Run.device,
    Run.host,
    Run.pid,
    Run.log_path,
    Run.name,
    type_coerce(Run.tags, String).label("tags_json"),
    Run.note,
    type_coerce(Run.overrides, String).label("overrides_json"),
    Run.archived_at,
)


@lru_cache(maxsize=65536)
def _config_of_text(config_json: str) -> Mapping[str, Any]:
    return MappingProxyType(json.loads(config_json))


def _config_of(raw: Any) -> Mapping[str, Any]:
    return _config_of_text(raw) if isinstance(raw, str) else MappingProxyType(dict(raw or {}))


@lru_cache(maxsize=4096)
def _tags_of_text(tags_json: str) -> tuple[str, ...]:
    return tuple(json.loads(tags_json) or ())


@lru_cache(maxsize=4096)
def _overrides_of_text(overrides_json: str) -> Mapping[str, Any]:
    return MappingProxyType(json.loads(overrides_json) or {})


def _tags_of(raw: Any) -> tuple[str, ...]:
    """A run's tags from their JSON text (SQLite; decoded once per distinct text: a sweep's runs
    share theirs) or the list a driver already decoded (PostgreSQL)."""
    return _tags_of_text(raw) if isinstance(raw, str) else tuple(raw or ())


def _overrides_of(raw: Any) -> Mapping[str, Any]:
    """A run's overrides, as `_tags_of` reads tags (a shared read-only mapping)."""
    return _overrides_of_text(raw) if isinstance(raw, str) else MappingProxyType(dict(raw or {}))


def _record(row: Any, names: set[str]) -> RunRecord:
    """A record from the record's columns, by position (_RECORD_COLUMNS' order); `names`: the
    metric catalogue's (what `run.metrics` keys are metrics, whichever version stored them)."""
    stored = row[15] if isinstance(row[15], dict) else {}  # (a row no version of ours wrote: no metrics)
    config = _config_of(row[6])
    return RunRecord(
        id=row[0],
        status=row[1],
        preset=row[2],
        method=row[3],
        dataset=row[4],
        memory_size=config.get("memory_size"),
        seed=row[5],
        n_tasks=row[8],
        task=row[9],
        phase=row[10],
        phase_done=row[11],
        phase_total=row[12],
        samples_per_s=row[13],
        eta_s=row[14],
        metrics=MappingProxyType(stored_metrics(stored, names)),
        tasks_done=count(stored.get("tasks_done", 0)),
        sweep_id=row[7],
        error=row[16],
        created_at=row[17],
        heartbeat_at=row[18],
        started_at=row[19],
        finished_at=row[20],
        device=row[21],
        host=row[22],
        pid=row[23],
        log_path=row[24],
        config=config,
        topk=count(stored.get("topk")) or None,
        name=row[25],
        tags=_tags_of(row[26]),
        note=row[27],
        overrides=_overrides_of(row[28]),
        archived=row[29] is not None,
    )


# What changes while a run is live, plus the JSON columns as their text (compared, not parsed):
# a poller that knows a run's record re-reads only these (`live_records`).
_LIVE_COLUMNS: tuple[Any, ...] = (
    Run.id,
    Run.status,
    Run.task,
    Run.phase,
    Run.phase_done,
    Run.phase_total,
    Run.samples_per_s,
    Run.eta_s,
    Run.error,
    # (the times as stored: SQLite's text is parsed only for a row that moved, `_utc`)
    type_coerce(Run.heartbeat_at, String).label("heartbeat_raw"),
    type_coerce(Run.started_at, String).label("started_raw"),
    type_coerce(Run.finished_at, String).label("finished_raw"),
    Run.device,
    Run.host,
    Run.pid,
    Run.log_path,
    Run.name,
    Run.note,
    type_coerce(Run.archived_at, String).label("archived_raw"),
    Run.n_tasks,
    type_coerce(Run.metrics, String).label("metrics_json"),
    type_coerce(Run.tags, String).label("tags_json"),
    type_coerce(Run.overrides, String).label("overrides_json"),
)
# (live_records reads the rows by position: _LIVE_FIELDS are columns 1-17 and 19, archived_at 18)
_LIVE_FIELDS = (
    "status",
    "task",
    "phase",
    "phase_done",
    "phase_total",
    "samples_per_s",
    "eta_s",
    "error",
    "heartbeat_at",
    "started_at",
    "finished_at",
    "device",
    "host",
    "pid",
    "log_path",
    "name",
    "note",
    "n_tasks",
)


@lru_cache(maxsize=8192)
def _utc_of_text(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value.replace(tzinfo=UTC) if value.utcoffset() is None else value.astimezone(UTC)


def _utc(value: Any) -> datetime | None:
    """A stored time as the ORM gives it (aware, UTC): SQLite's text parsed (once per distinct
    text), a driver's datetime (PostgreSQL) made aware in UTC, None kept."""
    if value is None or (isinstance(value, str) and not value):
        return None
    if isinstance(value, str):
        return _utc_of_text(value)
    return value.replace(tzinfo=UTC) if value.utcoffset() is None else value.astimezone(UTC)


def live_records(
    known: Mapping[int, RunRecord],
    texts: dict[int, tuple[Any, ...]],
    ids: Iterable[int] | None,
) -> list[RunRecord]:
    """The records of `ids` (None: every run) for a poller that holds their last records
    (`known`) and the row read for each at that read (`texts`, updated here): a run whose row is
    the same gets its known record back (one tuple comparison); one whose row moved but whose
    metrics, tags and overrides (their JSON text) did not gets a copy of its known record with
    the live columns replaced, without decoding JSON; the others (and runs not known yet) are
    read whole. So a record that is not the known one has moved. Cross-run metrics are left to
    the caller (as `run_records(ids, i_last=False)`)."""
    every = ids is None  # every run (a poller's first read): no id list to bind
    ids = [] if ids is None else list(ids)
    if not ids and not every:
        return []
    out: dict[int, RunRecord] = {}
    whole: list[int] = []
    new_record = object.__new__
    fields = _LIVE_FIELDS + ("archived",)
    with reading() as session:
        # (Core, not the ORM session: no ORM row loading for 1,000 live runs a tick; rows are tuples)
        query = select(*_LIVE_COLUMNS)
        found: Any = session.connection().execute(query if every else query.where(col(Run.id).in_(ids))).all()
        for found_row in found:  # (by position, _LIVE_COLUMNS' order: a per-row mapping costs more than the rest)
            row = tuple(found_row)
            run_id = row[0]
            old = known.get(run_id)
            last = texts.get(run_id)
            texts[run_id] = row
            if old is not None and last == row:  # (C speed: the same row as last read)
                out[run_id] = old
                continue
            if old is None or last is None or last[20:23] != row[20:23]:  # new, or its JSON columns moved
                whole.append(run_id)
                continue
            # a live column moved (the row differs, its JSON does not): the known record, these replaced
            live = (*row[1:9], *map(_utc, row[9:12]), *row[12:18], row[19], row[18] is not None)  # `fields`
            values = old.__dict__
            fresh = new_record(RunRecord)  # a frozen record: a copy with its live fields set before anyone sees it
            fresh.__dict__.update(values)
            fresh.__dict__.update(zip(fields, live))
            out[run_id] = fresh
        if whole:
            every_row = every and len(whole) == len(found)
            out.update((rec.id, rec) for rec in _records(session, None if every_row else whole))
    return [out[i] for i in sorted(out)]


def _read(session: Session, query: Any) -> list[RunRecord]:
    names = set(metric_registry.metric_names())
    # (Core rows, not the ORM's: read by position, no ORM loading per row)
    return [_record(row, names) for row in session.connection().execute(query).all()]


def _records(session: Session, ids: Iterable[int] | None = None) -> list[RunRecord]:
    query = select(*_RECORD_COLUMNS).order_by(col(Run.id))
    if ids is not None:
        query = query.where(col(Run.id).in_(list(ids)))
    return _read(session, query)


def _candidates(session: Session) -> list[RunRecord]:
    """The runs the cross-run metrics measure against (I_last: the finished joint runs): each
    rule names the run columns they must have; the store only fetches them."""
    found: dict[int, RunRecord] = {}
    for columns in candidate_filters():
        query = select(*_RECORD_COLUMNS).where(*(getattr(Run, k) == v for k, v in columns.items()))
        found.update((r.id, r) for r in _read(session, query))
    return [found[i] for i in sorted(found)]


def _with_i_last(session: Session, records: list[RunRecord], complete: bool) -> list[RunRecord]:
    """The cross-run metrics (I_last by the joint-run rule); `complete`: the records are every run."""
    return with_intransigence(records, None if complete else _candidates(session))


def run_records(ids: Iterable[int] | None = None, *, i_last: bool = True) -> list[RunRecord]:
    """Every run (or the given ids) by id, in one query of the record's columns; with
    `i_last=False` I_last is left unset (a poller that matches it over all its rows itself)."""
    ids = None if ids is None else list(ids)
    with reading() as session:
        records = _records(session, ids)
        return _with_i_last(session, records, ids is None) if i_last else records


def run_record(run_id: int) -> RunRecord:
    with reading() as session:
        found = _records(session, [run_id])
        if not found:
            raise UnknownRun(run_id)
        return _with_i_last(session, found, False)[0]


def find_runs(run_filter: RunFilter | str | None = None, archived: bool | None = None) -> list[RunRecord]:
    """The runs that pass a run filter (filters.py; text is parsed, FilterError if it cannot be), by id.

    Archived runs are left out unless `archived` is True (every run) or the filter names the
    `archived` key itself (`archived:true` lists only them)."""
    if not isinstance(run_filter, RunFilter):
        run_filter = parse_run_filter(run_filter)
    records = run_filter.select(run_records())
    if archived is None and not run_filter.names("archived"):
        records = [r for r in records if not r.archived]
    return records


def newest_run_id() -> int:
    """The newest run's id (`rmconsole show last`); UnknownRun(0) when the store has none."""
    with reading() as session:
        newest = session.exec(select(func.max(Run.id))).one()
    if newest is None:
        raise UnknownRun(0)
    return int(newest)


def joint_run(run: Run | RunRecord | int) -> RunRecord | None:
    """The finished joint run that is `run`'s upper bound (the catalogue's joint-run rule), or None."""
    record = run_record(run if isinstance(run, int) else int(run.id))
    if record.i_last_joint_run is None:
        return None
    return run_record(record.i_last_joint_run)


def joint_accuracy(run: Run | RunRecord | int) -> float | None:
    """A_last of `run`'s joint upper bound, or None when there is none."""
    joint = joint_run(run)
    return joint.value("A_last") if joint is not None else None


def run_summary(run: Run | RunRecord | int, session: Any = None) -> dict[str, Any]:
    """`runs --json` shape of one run (RunRecord.to_json); `session` is accepted for old callers."""
    return run_record(run if isinstance(run, int) else int(run.id)).to_json()


# ---------------------------------------------------------------------- one run's parts


def _results(session: Session, run_id: int) -> list[TaskResult]:
    return list(
        session.exec(select(TaskResult).where(TaskResult.run_id == run_id).order_by(col(TaskResult.task))).all()
    )


def _streams(session: Session, run_id: int) -> list[TaskStream]:
    return list(
        session.exec(select(TaskStream).where(TaskStream.run_id == run_id).order_by(col(TaskStream.task))).all()
    )


def _epochs(session: Session, run_id: int) -> list[EpochMetric]:
    return list(
        session.exec(select(EpochMetric).where(EpochMetric.run_id == run_id).order_by(col(EpochMetric.id))).all()
    )


def epoch_metrics(run_id: int) -> list[EpochMetric]:
    """The run's per-epoch rows (loss, learning rate, samples/s, test accuracy when asked), in order."""
    with reading() as session:
        return _epochs(session, run_id)


def epoch_json(rows: Iterable[EpochMetric]) -> list[dict[str, Any]]:
    """`show --json`'s epochs: one entry per training epoch."""
    return [
        {
            "task": e.task,
            "phase": e.phase,
            "epoch": e.epoch,
            "epochs": e.epochs,
            "loss": e.loss,
            "lr": e.lr,
            "samples": e.samples,
            "seconds": e.seconds,
            "samples_per_s": e.samples_per_s,
            "test_accuracy": e.test_accuracy,
        }
        for e in rows
    ]


def _snapshots(session: Session, run_id: int) -> list[MemorySnapshot]:
    return list(
        session.exec(
            select(MemorySnapshot).where(MemorySnapshot.run_id == run_id).order_by(col(MemorySnapshot.id))
        ).all()
    )


def task_results(run_id: int) -> list[TaskResult]:
    with reading() as session:
        return _results(session, run_id)


def task_streams(run_id: int) -> list[TaskStream]:
    with reading() as session:
        return _streams(session, run_id)


def memory_snapshots(run_id: int) -> list[MemorySnapshot]:
    with reading() as session:
        return _snapshots(session, run_id)


def _anytime(session: Session, run_id: int) -> list[AnytimeEval]:
    return list(
        session.exec(select(AnytimeEval).where(AnytimeEval.run_id == run_id).order_by(col(AnytimeEval.samples))).all()
    )


def anytime_evals(run_id: int) -> list[AnytimeEval]:
    """A task-free run's anytime evaluations, by samples seen."""
    with reading() as session:
        return _anytime(session, run_id)


def system_samples(run_id: int) -> list[SystemSample]:
    """A run's system-load samples, oldest first (none: not sampled, or a store before revision 0003)."""
    with reading() as session:
        return list(
            session.exec(select(SystemSample).where(SystemSample.run_id == run_id).order_by(col(SystemSample.at))).all()
        )


SYSTEM_FIELDS = ("cpu_percent", "rss_bytes", "load1", "gpu_util", "gpu_mem_bytes")


def system_json(run_id: int) -> list[dict[str, Any]]:
    """A run's system-load samples as JSON rows: `at` (ISO time), `seconds` (since the first
    sample) and each measured field (a field not measured left out)."""
    rows = system_samples(run_id)
    if not rows:
        return []
    first = rows[0].at.timestamp()
    return [
        {
            "at": iso(r.at),
            "seconds": round(r.at.timestamp() - first, 3),
            **{k: getattr(r, k) for k in SYSTEM_FIELDS if getattr(r, k) is not None},
        }
        for r in rows
    ]


def _system_summary(session: Session, run_id: int) -> dict[str, Any] | None:
    s = SystemSample
    aggregates: list[Any] = [func.count(col(s.id)), func.min(s.at), func.max(s.at)]
    aggregates += [func.avg(s.cpu_percent), func.max(s.cpu_percent), func.max(s.rss_bytes)]
    aggregates += [func.avg(s.load1), func.max(s.load1)]
    aggregates += [func.avg(s.gpu_util), func.max(s.gpu_util), func.max(s.gpu_mem_bytes)]
    row = session.exec(select(*aggregates).where(s.run_id == run_id)).one()  # one round trip
    if not row[0]:
        return None
    names: tuple[str, ...] = ("cpu_mean", "cpu_peak", "rss_peak_bytes", "load1_mean", "load1_peak")
    names += ("gpu_util_mean", "gpu_util_peak", "gpu_mem_peak_bytes")
    summary: dict[str, Any] = {"samples": row[0], "first_at": iso(row[1]), "last_at": iso(row[2])}
    for name, value in zip(names, row[3:], strict=True):
        summary[name] = None if value is None else (int(value) if name.endswith("bytes") else round(float(value), 2))
    return summary


def system_summary(run_id: int) -> dict[str, Any] | None:
    """A run's system load in brief (`show`, the run page): samples, first/last time, mean and
    peak CPU % (of one core) and load, peak RSS, mean/peak GPU utilisation and peak GPU memory
    (None where not measured); None when the run has no samples."""
    with reading() as session:
        return _system_summary(session, run_id)


def _per_run_rows(
    run_ids: Iterable[int], table: type[TaskResult] | type[AnytimeEval], order: str, *values: str
) -> dict[int, list[tuple[Any, ...]]]:
    """The `values` columns of `table`'s rows for each given run (an empty list for a run with none),
    in the order the run produced them (`order`: by task, or by samples seen): the one query every
    curve reads."""
    run_ids = list(run_ids)
    rows: dict[int, list[tuple[Any, ...]]] = {i: [] for i in run_ids}
    with reading() as session:
        found = session.exec(
            select(table.run_id, *(getattr(table, v) for v in values))
            .where(col(table.run_id).in_(run_ids))
            .order_by(col(table.run_id), col(getattr(table, order)))
        ).all()
    for run_id, *rest in found:
        rows[run_id].append(tuple(rest))
    return rows


# what `rows_of_runs` reads: each per-run table and the columns that give its rows' order
RUN_TABLES: dict[str, tuple[type[Any], tuple[str, ...]]] = {
    "results": (TaskResult, ("task",)),
    "anytime": (AnytimeEval, ("samples", "id")),
    "epochs": (EpochMetric, ("task", "id")),
    "memory": (MemorySnapshot, ("id",)),
}


def rows_of_runs(table: str, run_ids: Iterable[int], chunk: int = 500) -> list[dict[str, Any]]:
    """Every stored row of one per-run table (`RUN_TABLES`: results, anytime, epochs, memory) for
    the given runs, as plain dicts of its columns, by run id and then in the order the run produced
    them: what rmconsole.api turns into DataFrames (a few queries however many runs)."""
    model, order = RUN_TABLES[table]
    ids = sorted(set(run_ids))
    names = list(model.model_fields)
    out: list[dict[str, Any]] = []
    with reading() as session:
        for start in range(0, len(ids), chunk):
            found = session.exec(
                select(model)
                .where(col(model.run_id).in_(ids[start : start + chunk]))
                .order_by(col(model.run_id), *(col(getattr(model, o)) for o in order))
            ).all()
            out += [{n: getattr(row, n) for n in names} for row in found]
    return out


def anytime_curves(run_ids: Iterable[int]) -> dict[int, list[tuple[int, float]]]:
    """(samples seen, accuracy) of every anytime evaluation of the given runs (empty for a run with none;
    a run with evaluate_test=false scores no test sample, so its points have none)."""
    rows = _per_run_rows(run_ids, AnytimeEval, "samples", "samples", "accuracy")
    return {i: [(s, a) for s, a in r if a is not None] for i, r in rows.items()}


def anytime_compute_curves(run_ids: Iterable[int]) -> dict[int, list[tuple[int, float, float]]]:
    """(samples seen, accuracy, training FLOPs by then) of every anytime evaluation of the given runs
    that has both (what `report --budget` reads; a point stored before FLOPs were counted has none)."""
    rows = _per_run_rows(run_ids, AnytimeEval, "samples", "samples", "accuracy", "train_flops")
    return {i: [(s, a, f) for s, a, f in r if a is not None and f is not None] for i, r in rows.items()}


def accuracy_curves(run_ids: Iterable[int]) -> dict[int, list[float]]:
    """The accuracy after each task of every given run (an empty list for a run with none; a run with
    evaluate_test=false has no test curve)."""
    rows = _per_run_rows(run_ids, TaskResult, "task", "accuracy")
    return {i: [a for (a,) in r if a is not None] for i, r in rows.items()}


def validation_curves(run_ids: Iterable[int]) -> dict[int, list[float | None]]:
    """The VALIDATION accuracy after each task of every given run (val_fraction > 0; None for a
    task without one, an empty list for a run with no task done): what a search prunes on, read
    without a single test figure."""
    rows = _per_run_rows(run_ids, TaskResult, "task", "val_accuracy")
    return {i: [a for (a,) in r] for i, r in rows.items()}


def anytime_validation_curves(run_ids: Iterable[int]) -> dict[int, list[tuple[int, float]]]:
    """(samples seen, validation accuracy) of every anytime evaluation that measured one (task-free
    runs with val_fraction > 0), per given run."""
    rows = _per_run_rows(run_ids, AnytimeEval, "samples", "samples", "val_accuracy")
    return {i: [(s, a) for s, a in r if a is not None] for i, r in rows.items()}


def job_states(ids: Iterable[int]) -> dict[int, tuple[str, str, str | None]]:
    """For the runs among `ids` that a scheduler holds: (executor name, job id, its last state)."""
    ids = list(ids)
    if not ids:
        return {}
    with reading() as session:
        rows = session.exec(
            select(Run.id, Run.executor, Run.job_id, Run.job_state).where(
                col(Run.id).in_(ids), col(Run.job_id).is_not(None)
            )
        ).all()
    return {r[0]: ((r[1] or "").split(":")[0], r[2] or "", r[3]) for r in rows}  # (job_id: never None here)


@dataclass(frozen=True)
class RunDetail:
    """One run whole, as the store keeps it: its record, its stream plan, the outcome of each task
    done, its memory updates, epochs and anytime evaluations (the values of cl/results.py), its
    system load in brief and its run facts. `to_json()` is `show --json`, which `show`, the
    reports and the exports read."""

    record: RunRecord
    plans: tuple[TaskPlan, ...]
    results: tuple[TaskOutcome, ...]
    memory: tuple[MemoryUpdate, ...]
    epochs: tuple[EpochMetric, ...]
    anytime: tuple[AnytimePoint, ...]
    system: dict[str, Any] | None
    facts: dict[str, Any]  # class_order, class_names, pipeline, validation, versions, where it ran

    def to_json(self) -> dict[str, Any]:
        """`show --json` shape: the summary plus one entry per task and per memory update."""
        detail = self.record.to_json()
        results = {r.task: r for r in self.results}
        order, names = self.facts["class_order"] or [], self.facts["class_names"] or []
        tasks = [
            {
                "task": plan.task,
                "n_samples": plan.n_samples,
                "major_classes": plan.major_classes,
                "major_labels": [order[c] for c in plan.major_classes] if order else None,
                "major_names": [names[order[c]] for c in plan.major_classes] if order and names else None,
                "composition": plan.composition,
                "stream_hash": plan.stream_hash,
                "first_appearances": plan.first_appearances,
                **outcome_json(results.get(plan.task)),
            }
            for plan in self.plans
        ]
        facts = dict(self.facts)
        detail.update(
            {
                "tasks": tasks,
                "memory": [
                    {
                        "task": m.task,
                        "histogram": m.histogram,
                        "slots_per_class": m.slots_per_class,
                        "size": m.size,
                        "info": m.info,
                        "at": iso(m.at),
                    }
                    for m in self.memory
                ],
                "epochs": epoch_json(self.epochs),
                "class_indexing": CLASS_INDEXING,
                "anytime": [
                    {
                        "task": a.task,
                        "samples": a.samples,
                        "accuracy": a.accuracy,
                        "n_classes": a.n_classes,
                        **({"class_accuracy": a.class_accuracy} if a.class_accuracy is not None else {}),
                        **({"val_accuracy": a.val_accuracy} if a.val_accuracy is not None else {}),
                        "seconds": a.seconds,
                    }
                    for a in self.anytime
                ],
                **{k: facts.pop(k) for k in ("class_order", "class_names", "pipeline")},
                # the system load its supervisor sampled (system_summary); absent for a run with no
                # samples (an older store's, or sampling off), so such a run's JSON is as before
                **({"system": self.system} if self.system is not None else {}),
                **facts,
            }
        )
        return detail


# the run facts a RunDetail carries beside its parts, in `show --json`'s order
DETAIL_FACTS = (
    "class_order",
    "class_names",
    "pipeline",
    "validation",
    "versions",
    "git_commit",
    "host",
    "pid",
    "log_path",
    "executor",
    "job_id",
    "job_state",
)


def run_detail_of(run_id: int) -> RunDetail:
    """The run whole, read in one session (UnknownRun when there is none)."""
    with reading() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        return RunDetail(
            record=_with_i_last(session, _records(session, [run_id]), False)[0],
            plans=tuple(plan_of(s) for s in _streams(session, run_id)),
            results=tuple(outcome_of(r) for r in _results(session, run_id)),
            memory=tuple(update_of(m) for m in _snapshots(session, run_id)),
            epochs=tuple(_epochs(session, run_id)),
            anytime=tuple(point_of(a) for a in _anytime(session, run_id)),
            system=_system_summary(session, run_id),
            facts={k: getattr(run, k) for k in DETAIL_FACTS},
        )


def run_detail(run_id: int) -> dict[str, Any]:
    """`show --json` shape: the summary plus one entry per task and per memory update."""
    return run_detail_of(run_id).to_json()


# What the class numbers in `show --json` are: the stream's classes are positions in
# `class_order` (class c of the run is the dataset's label class_order[c], named
# class_names[class_order[c]]); so are the memory histograms' and accuracy vectors' indices.
CLASS_INDEXING = {
    "major_classes": "positions in class_order (the run's class c is the dataset label class_order[c])",
    "composition": "samples per class, indexed by position in class_order",
    "memory.histogram": "samples per class in memory, indexed by position in class_order",
    "class_accuracy": "accuracy per class, indexed by position in class_order",
    "eval_classes": "the classes tested after the task (seen so far), positions in class_order",
    "class_names": "indexed by dataset label: the name of position c is class_names[class_order[c]]",
}

Mark = tuple[int, int | None]  # (row count, newest row id) of one part of a run
PARTS: dict[str, Any] = {
    "streams": TaskStream,
    "results": TaskResult,
    "memory": MemorySnapshot,
    "epochs": EpochMetric,
    "anytime": AnytimeEval,
    "system": SystemSample,
}


@dataclass(frozen=True)
class RunParts:
    """One read of a run for a page that follows it: its record, what the page draws beside it,
    and each part (stream plan, task results, memory updates) that changed since the caller's
    marks; a part that did not change is None, so a long run costs as little as a short one."""

    record: RunRecord
    class_order: list[int] | None
    class_names: list[str] | None
    pipeline: tuple[str, ...]
    marks: dict[str, Mark]
    streams: list[TaskPlan] | None
    results: list[TaskOutcome] | None
    memory: list[MemoryUpdate] | None
    epochs: list[EpochMetric] | None = None
    epochs_appended: bool = False  # True: `epochs` holds only the rows after the caller's marks
    anytime: list[AnytimePoint] | None = None
    system: dict[str, Any] | None = None  # system_summary, when samples were added since the marks


def run_parts(run_id: int, marks: Mapping[str, Mark] | None = None) -> RunParts:
    """The run and the parts that changed since `marks` (all of them without marks), in one
    session; UnknownRun when the run is gone."""
    marks = marks or {}
    with reading() as session:
        found = _records(session, [run_id])
        if not found:
            raise UnknownRun(run_id)
        record = _with_i_last(session, found, False)[0]
        facts = session.exec(select(Run.class_order, Run.class_names, Run.pipeline).where(Run.id == run_id)).one()
        probe = select(
            *[
                agg
                for t in PARTS.values()
                for agg in (
                    select(func.count(t.id)).where(t.run_id == run_id).scalar_subquery(),
                    select(func.max(t.id)).where(t.run_id == run_id).scalar_subquery(),
                )
            ]
        )  # one round trip
        values = session.exec(probe).one()
        now = {name: (values[2 * i], values[2 * i + 1]) for i, name in enumerate(PARTS)}
        stale = {name: now[name] != marks.get(name) for name in PARTS}
        epochs, appended = None, False
        if stale["epochs"]:
            old = marks.get("epochs")
            if old is not None and old[1] is not None and now["epochs"][0] > old[0]:
                # a running run only adds epoch rows: read the new ones (a resume that deleted some
                # shows as fewer new rows than the count grew by, and is read whole)
                epochs = list(
                    session.exec(
                        select(EpochMetric)
                        .where(EpochMetric.run_id == run_id, col(EpochMetric.id) > old[1])
                        .order_by(col(EpochMetric.id))
                    ).all()
                )
                appended = len(epochs) == now["epochs"][0] - old[0]
            if not appended:
                epochs = _epochs(session, run_id)
        return RunParts(
            # (sqlmodel types the JSON columns read as Sequence; they are the stored lists)
            record=record,
            class_order=cast("list[int] | None", facts[0]),
            class_names=cast("list[str] | None", facts[1]),
            pipeline=tuple(facts[2] or ()),
            marks=now,
            streams=[plan_of(s) for s in _streams(session, run_id)] if stale["streams"] else None,
            results=[outcome_of(r) for r in _results(session, run_id)] if stale["results"] else None,
            memory=[update_of(m) for m in _snapshots(session, run_id)] if stale["memory"] else None,
            epochs=epochs,
            epochs_appended=appended,
            anytime=[point_of(a) for a in _anytime(session, run_id)] if stale["anytime"] else None,
            system=_system_summary(session, run_id) if stale["system"] else None,
        )
