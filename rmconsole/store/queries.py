"""Every read the CLI, the TUI and the reports make, each in one short session.

The faces get frozen values: `RunRecord`s (records.py) for runs, with I_last set by the one
joint-run rule, and plain dicts for the JSON outputs. `get_run` / `list_runs` give the ORM rows
(detached) to the process layer, which reads a run's pid, host and heartbeat.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Optional, Union

from sqlalchemy import String, func, type_coerce
from sqlmodel import Session, col, select

from .db import reading
from .filters import RunFilter, parse_run_filter
from .records import RunRecord, finite, iso, with_intransigence
from .tables import AnytimeEval, MemorySnapshot, Run, TaskResult, TaskStream

# what a task-free run's summary carries beside the accuracy metrics (runs.ONLINE_NUMBERS + counts)
ONLINE_KEYS = ("anytime_evals", "train_seconds", "eval_seconds", "wall_seconds", "train_samples_per_s", "samples_seen",
               "samples_trained", "samples_skipped", "evaluations_per_s", "image_passes")


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


def list_runs(status: str | Iterable[str] | None = None, preset: str | None = None, method: str | None = None,
              dataset: str | None = None, sweep_id: str | None = None, limit: int | None = None) -> list[Run]:
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


def sweep_ids() -> list[str]:
    """Every sweep id in the store, oldest first (by its first run)."""
    with reading() as session:
        rows = session.exec(select(Run.sweep_id, func.min(Run.id)).where(col(Run.sweep_id).is_not(None))
                            .group_by(Run.sweep_id).order_by(func.min(Run.id))).all()
    return [sweep_id for sweep_id, _ in rows]


# ---------------------------------------------------------------------- run records


# The record's columns. The config is read as its JSON text and parsed once per distinct text
# (a run's config never changes), so re-reading a live run costs no JSON parsing.
_RECORD_COLUMNS = (Run.id, Run.status, Run.preset, Run.method, Run.dataset, Run.seed,
                   type_coerce(Run.config, String).label("config_json"), Run.sweep_id, Run.n_tasks, Run.task,
                   Run.phase, Run.phase_done, Run.phase_total, Run.samples_per_s, Run.eta_s, Run.metrics, Run.error,
                   Run.created_at, Run.heartbeat_at, Run.started_at, Run.finished_at, Run.device, Run.host, Run.pid,
                   Run.log_path)


@lru_cache(maxsize=65536)
def _config_of_text(config_json: str) -> Mapping[str, Any]:
    return MappingProxyType(json.loads(config_json))


def _config_of(raw: Any) -> Mapping[str, Any]:
    return _config_of_text(raw) if isinstance(raw, str) else MappingProxyType(dict(raw or {}))


def _record(row: Any) -> RunRecord:
    r = row._mapping
    metrics = r["metrics"] or {}
    config = _config_of(r["config_json"])
    return RunRecord(
        id=r["id"], status=r["status"], preset=r["preset"], method=r["method"], dataset=r["dataset"],
        memory_size=config.get("memory_size"), seed=r["seed"], n_tasks=r["n_tasks"], task=r["task"],
        phase=r["phase"], phase_done=r["phase_done"], phase_total=r["phase_total"],
        samples_per_s=r["samples_per_s"], eta_s=r["eta_s"], a_last=finite(metrics.get("A_last")),
        a_avg=finite(metrics.get("A_avg")), f_last=finite(metrics.get("F_last")), i_last=None,
        tasks_done=int(metrics.get("tasks_done", 0)), sweep_id=r["sweep_id"], error=r["error"],
        created_at=r["created_at"], heartbeat_at=r["heartbeat_at"], started_at=r["started_at"],
        finished_at=r["finished_at"], device=r["device"], host=r["host"], pid=r["pid"], log_path=r["log_path"],
        a_last_best_epoch=finite(metrics.get("A_last_best_epoch")), a_auc=finite(metrics.get("A_auc")),
        online=MappingProxyType({k: metrics[k] for k in ONLINE_KEYS if metrics.get(k) is not None}), config=config)


def _records(session: Session, ids: Iterable[int] | None = None) -> list[RunRecord]:
    query = select(*_RECORD_COLUMNS).order_by(col(Run.id))
    if ids is not None:
        query = query.where(col(Run.id).in_(list(ids)))
    return [_record(row) for row in session.exec(query).all()]


def _finished_joints(session: Session) -> list[RunRecord]:
    query = select(*_RECORD_COLUMNS).where(Run.method == "joint", Run.status == "finished")
    return [_record(row) for row in session.exec(query).all()]


def _with_i_last(session: Session, records: list[RunRecord], complete: bool) -> list[RunRecord]:
    """I_last by the joint-run rule; `complete`: the records are every run (joints included)."""
    return with_intransigence(records, None if complete else _finished_joints(session))


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


def find_runs(run_filter: RunFilter | str | None = None) -> list[RunRecord]:
    """The runs that pass a run filter (filters.py; text is parsed, FilterError if it cannot be), by id."""
    if not isinstance(run_filter, RunFilter):
        run_filter = parse_run_filter(run_filter)
    return run_filter.select(run_records())


def joint_run(run: Union[Run, RunRecord, int]) -> Optional[RunRecord]:
    """The finished joint run that is `run`'s upper bound (records.JointRuns), or None."""
    record = run_record(run if isinstance(run, int) else int(run.id))  # type: ignore[arg-type]
    if record.i_last_joint_run is None:
        return None
    return run_record(record.i_last_joint_run)


def joint_accuracy(run: Union[Run, RunRecord, int]) -> Optional[float]:
    """A_last of `run`'s joint upper bound, or None when there is none."""
    joint = joint_run(run)
    return joint.a_last if joint is not None else None


def run_summary(run: Union[Run, RunRecord, int], session: Any = None) -> dict[str, Any]:
    """`runs --json` shape of one run (RunRecord.to_json); `session` is accepted for old callers."""
    return run_record(run if isinstance(run, int) else int(run.id)).to_json()  # type: ignore[arg-type]


# ---------------------------------------------------------------------- one run's parts


def _results(session: Session, run_id: int) -> list[TaskResult]:
    return list(session.exec(select(TaskResult).where(TaskResult.run_id == run_id).order_by(col(TaskResult.task))).all())


def _streams(session: Session, run_id: int) -> list[TaskStream]:
    return list(session.exec(select(TaskStream).where(TaskStream.run_id == run_id).order_by(col(TaskStream.task))).all())


def _snapshots(session: Session, run_id: int) -> list[MemorySnapshot]:
    return list(session.exec(select(MemorySnapshot).where(MemorySnapshot.run_id == run_id)
                             .order_by(col(MemorySnapshot.id))).all())


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
    return list(session.exec(select(AnytimeEval).where(AnytimeEval.run_id == run_id)
                             .order_by(col(AnytimeEval.samples))).all())


def anytime_evals(run_id: int) -> list[AnytimeEval]:
    """A task-free run's anytime evaluations, by samples seen."""
    with reading() as session:
        return _anytime(session, run_id)


def anytime_curves(run_ids: Iterable[int]) -> dict[int, list[tuple[int, float]]]:
    """(samples seen, accuracy) of every anytime evaluation of the given runs (empty for a run with none)."""
    run_ids = list(run_ids)
    curves: dict[int, list[tuple[int, float]]] = {i: [] for i in run_ids}
    with reading() as session:
        rows = session.exec(select(AnytimeEval.run_id, AnytimeEval.samples, AnytimeEval.accuracy)
                            .where(col(AnytimeEval.run_id).in_(run_ids))
                            .order_by(col(AnytimeEval.run_id), col(AnytimeEval.samples))).all()
    for run_id, samples, accuracy in rows:
        curves[run_id].append((samples, accuracy))
    return curves


def accuracy_curves(run_ids: Iterable[int]) -> dict[int, list[float]]:
    """The accuracy after each task of every given run (an empty list for a run with none)."""
    run_ids = list(run_ids)
    curves: dict[int, list[float]] = {i: [] for i in run_ids}
    with reading() as session:
        rows = session.exec(select(TaskResult.run_id, TaskResult.accuracy).where(col(TaskResult.run_id).in_(run_ids))
                            .order_by(col(TaskResult.run_id), col(TaskResult.task))).all()
    for run_id, accuracy in rows:
        curves[run_id].append(accuracy)
    return curves


def run_detail(run_id: int) -> dict[str, Any]:
    """`show --json` shape: the summary plus one entry per task and per memory update."""
    with reading() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        detail = _with_i_last(session, _records(session, [run_id]), False)[0].to_json()
        results = {r.task: r for r in _results(session, run_id)}
        streams = _streams(session, run_id)
        snapshots = _snapshots(session, run_id)
        anytime = _anytime(session, run_id)
    tasks = []
    for stream in streams:
        result = results.get(stream.task)
        tasks.append({
            "task": stream.task,
            "n_samples": stream.n_samples,
            "major_classes": stream.major_classes,
            "composition": stream.composition,
            "stream_hash": stream.stream_hash,
            "first_appearances": stream.first_appearances,
            "accuracy": result.accuracy if result else None,
            "accuracy_row": result.accuracy_row if result else None,
            "class_accuracy": result.class_accuracy if result else None,
            "best_epoch_accuracy": result.best_epoch_accuracy if result else None,
            "seconds": result.seconds if result else None,
        })
    detail.update({
        "tasks": tasks,
        "memory": [{"task": m.task, "histogram": m.histogram, "slots_per_class": m.slots_per_class,
                    "size": sum(m.histogram), "info": m.info, "at": iso(m.created_at)} for m in snapshots],
        "anytime": [{"task": a.task, "samples": a.samples, "accuracy": a.accuracy, "n_classes": a.n_classes,
                     **({"class_accuracy": a.class_accuracy} if a.class_accuracy is not None else {}),
                     "seconds": a.seconds} for a in anytime],
        "class_order": run.class_order,
        "class_names": run.class_names,
        "pipeline": run.pipeline,
        "versions": run.versions,
        "git_commit": run.git_commit,
        "host": run.host,
        "pid": run.pid,
        "log_path": run.log_path,
    })
    return detail


Mark = tuple[int, Optional[int]]  # (row count, newest row id) of one part of a run
PARTS: dict[str, Any] = {"streams": TaskStream, "results": TaskResult, "memory": MemorySnapshot,
                         "anytime": AnytimeEval}


@dataclass(frozen=True)
class RunParts:
    """One read of a run for a page that follows it: its record, what the page draws beside it,
    and each part (stream plan, task results, memory updates) that changed since the caller's
    marks; a part that did not change is None, so a long run costs as little as a short one."""

    record: RunRecord
    class_order: Optional[list[int]]
    class_names: Optional[list[str]]
    pipeline: tuple[str, ...]
    marks: dict[str, Mark]
    streams: Optional[list[TaskStream]]
    results: Optional[list[TaskResult]]
    memory: Optional[list[MemorySnapshot]]
    anytime: Optional[list[AnytimeEval]] = None


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
        probe = select(*[agg for t in PARTS.values() for agg in (
            select(func.count(t.id)).where(t.run_id == run_id).scalar_subquery(),
            select(func.max(t.id)).where(t.run_id == run_id).scalar_subquery())])  # one round trip
        values = session.exec(probe).one()
        now = {name: (values[2 * i], values[2 * i + 1]) for i, name in enumerate(PARTS)}
        stale = {name: now[name] != marks.get(name) for name in PARTS}
        return RunParts(
            record=record, class_order=facts[0], class_names=facts[1], pipeline=tuple(facts[2] or ()), marks=now,
            streams=_streams(session, run_id) if stale["streams"] else None,
            results=_results(session, run_id) if stale["results"] else None,
            memory=_snapshots(session, run_id) if stale["memory"] else None,
            anytime=_anytime(session, run_id) if stale["anytime"] else None)
