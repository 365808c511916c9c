"""Writing what a run produces: the run row, its stream plan, task results and memory
snapshots. Status changes are transitions.py's; reads are queries.py's. The writes a run's
own processes make take their `Lease` and check it in the same transaction."""

from __future__ import annotations

import socket
from collections.abc import Iterable
from typing import Any

from sqlalchemy import func, update
from sqlmodel import Session, col, select

from .. import metric_registry
from ..cl.results import AnytimePoint, MemoryUpdate, RunRows, TaskOutcome, TaskPlan
from .db import write
from .mapping import outcome_of, point_of, row_of
from .queries import UnknownRun, _anytime, _results
from .tables import (
    AnytimeEval,
    EpochMetric,
    MemorySnapshot,
    Run,
    StoreIdentity,
    SystemSample,
    TaskResult,
    TaskStream,
    utcnow,
)
from .transitions import Lease, checked_run, new_token


def create_runs(
    configs: list[dict[str, Any]],
    preset: str | None,
    sweep_id: str | None = None,
    owner_pid: int | None = None,
    *,
    name: str | None = None,
    tags: list[str] | None = None,
    overrides: list[dict[str, Any]] | None = None,
    names: list[str | None] | None = None,
) -> list[int]:
    """Store queued runs (a sweep's grid) in one transaction, so a refused or interrupted
    submission leaves nothing half-written; returns their ids in order. `owner_pid`: the
    process (on this host) that will start the worker: until it has, the run is dead when that
    process is (a sweep's runs have none: their queue starts them). `tags` go on every run, and
    `name` too unless `names[i]` gives run i its own; `overrides[i]` is run i's keys that differ
    from the preset."""
    host = socket.gethostname() if owner_pid is not None else None

    def add(session: Session) -> list[int]:
        ids = []
        given = _last_run_id(session)
        for i, config in enumerate(configs):
            run = Run(
                preset=preset,
                method=config["method"],
                dataset=config["dataset"],
                seed=config["seed"],
                config=config,
                sweep_id=sweep_id,
                n_tasks=config.get("n_tasks", 0),
                token=new_token(),
                pid=owner_pid,
                host=host,
                heartbeat_at=utcnow() if owner_pid is not None else None,
                name=(names[i] if names is not None else name) or None,
                tags=list(tags) if tags else None,
                overrides=overrides[i] if overrides is not None else None,
            )
            if given is not None:  # SQLite: above every id ever given, not only the ids present
                given = run.id = given + 1
            session.add(run)
            session.flush()
            assert run.id is not None
            ids.append(run.id)
        if ids:
            session.exec(update(StoreIdentity).where(col(StoreIdentity.id) == 1).values(last_run_id=max(ids)))
        return ids

    return write(add)


def _last_run_id(session: Session) -> int | None:
    """On SQLite, the largest run id ever given (the store's record of it, or the largest present in
    a store older than the record); None on PostgreSQL, whose sequence never gives an id twice."""
    if session.get_bind().dialect.name != "sqlite":
        return None
    present = session.exec(select(func.max(col(Run.id)))).one() or 0
    recorded = session.exec(select(col(StoreIdentity.last_run_id)).where(col(StoreIdentity.id) == 1)).first() or 0
    return max(present, recorded)


def create_run(
    config: dict[str, Any],
    preset: str | None,
    sweep_id: str | None = None,
    owner_pid: int | None = None,
    *,
    name: str | None = None,
    tags: list[str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> int:
    """Store a queued run and return its id."""
    return create_runs(
        [config],
        preset,
        sweep_id,
        owner_pid,
        name=name,
        tags=tags,
        overrides=[overrides] if overrides is not None else None,
    )[0]


# ---------------------------------------------------------------------- what the user calls a run


def _each(run_ids: list[int], change: Any) -> list[int]:
    """Apply `change(run)` to every run in one transaction (UnknownRun, and nothing written, if one is missing)."""

    def apply(session: Session) -> list[int]:
        for run_id in run_ids:
            run = session.get(Run, run_id)
            if run is None:
                raise UnknownRun(run_id)
            change(run)
            session.add(run)
        return list(run_ids)

    return write(apply)


def tag_runs(run_ids: list[int], add: Iterable[str] = (), remove: Iterable[str] = ()) -> list[int]:
    """Add and remove tags (kept in the order first given, each once)."""

    add, remove = list(add), set(remove)

    def change(run: Run) -> None:
        tags = [t for t in (run.tags or []) if t not in remove]
        run.tags = list(dict.fromkeys([*tags, *add])) or None

    return _each(run_ids, change)


def set_note(run_ids: list[int], note: str | None) -> list[int]:
    """Replace the runs' note (None or "" clears it)."""
    return _each(run_ids, lambda run: setattr(run, "note", note or None))


def set_name(run_ids: list[int], name: str | None) -> list[int]:
    return _each(run_ids, lambda run: setattr(run, "name", name or None))


def set_archived(run_ids: list[int], archived: bool = True) -> list[int]:
    """Archive (hide from runs, report and the TUI unless asked) or restore runs; an archived run
    keeps everything. Returns the runs whose state changed."""
    changed: list[int] = []

    def change(run: Run) -> None:
        if (run.archived_at is not None) != archived:
            run.archived_at = utcnow() if archived else None
            changed.append(run.id)

    _each(run_ids, change)
    return changed


# ---------------------------------------------------------------------- per-epoch rows


def record_epochs(run_id: int, rows: list[dict[str, Any]], lease: Lease | None = None) -> None:
    """Append per-epoch rows (EpochMetric's fields less run_id) in one transaction."""
    if not rows:
        return

    def apply(session: Session) -> None:
        if lease is not None:
            checked_run(session, run_id, lease)
        session.add_all([EpochMetric(run_id=run_id, **row) for row in rows])

    write(apply)


def record_system(run_id: int, rows: list[dict[str, Any]], lease: Lease | None = None) -> None:
    """Append system-load samples (SystemSample's fields less run_id: at, cpu_percent, rss_bytes,
    load1, gpu_util, gpu_mem_bytes), written by the run's supervisor (runner/sysmetrics.py) with
    the lease it was started with (LeaseLost: the store or the run's attempt is another's)."""
    if not rows:
        return

    def apply(session: Session) -> None:
        if lease is not None:
            checked_run(session, run_id, lease)
        session.add_all([SystemSample(run_id=run_id, **row) for row in rows])

    write(apply)


def update_run(run_id: int, lease: Lease | None = None, **fields: Any) -> None:
    """Write fields of a run as given, unguarded but for `lease`: for facts such as the worker's
    pid and log. The runner changes a status only through a guarded transition (transitions.py)."""

    def apply(session: Session) -> None:
        run = checked_run(session, run_id, lease)
        for key, value in fields.items():
            setattr(run, key, value)
        session.add(run)

    write(apply)


def merged_plugins(earlier: Any, now: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every plug-in provenance that trained a run: those of its earlier attempts (a resumed run
    whose method plug-in went from 0.2 to 0.3 records both), then this attempt's new ones."""
    out = [e for e in earlier if isinstance(e, dict)] if isinstance(earlier, list) else []
    out += [e for e in now if e not in out]
    return out


def record_start(
    run_id: int,
    plans: list[TaskPlan],
    class_order: list[int],
    class_names: list[str],
    pipeline: list[str],
    lease: Lease | None = None,
    plugins: list[dict[str, Any]] | None = None,
) -> None:
    """The stream plan of every task (replacing any from an earlier attempt) and run facts; the
    plug-ins the run uses (plugins.provenance of each) join the worker's `versions`, as
    versions["plugins"] (a built-in run has none: no key), after those of its earlier attempts."""

    def apply(session: Session) -> None:
        checked_run(session, run_id, lease)
        for old in session.exec(select(TaskStream).where(TaskStream.run_id == run_id)).all():
            session.delete(old)
        session.flush()
        session.add_all([row_of(p, run_id=run_id) for p in plans])
        run = session.get(Run, run_id)
        assert run is not None
        run.class_order, run.class_names, run.pipeline = class_order, class_names, pipeline
        run.n_tasks = len(plans)
        if plugins:  # (a new dict: the JSON column is written when the attribute is assigned)
            run.versions = {
                **(run.versions or {}),
                "plugins": merged_plugins((run.versions or {}).get("plugins"), plugins),
            }
        session.add(run)

    write(apply)


def record_task(
    run_id: int, outcome: TaskOutcome, lease: Lease | None = None, checkpoint_sha256: str | None = None
) -> dict[str, Any]:
    """Commit a finished task (with the sha256 of the checkpoint about to be put in place after
    it) and refresh the run's summary metrics; returns the metrics."""

    def apply(session: Session) -> dict[str, Any]:
        checked_run(session, run_id, lease)
        session.add(row_of(outcome, run_id=run_id, checkpoint_sha256=checkpoint_sha256))
        session.flush()
        run = session.get(Run, run_id)
        assert run is not None
        summary = _summary(session, run, online=(outcome.extra or {}).get("online"))
        run.metrics = summary
        session.add(run)
        return summary

    return write(apply)


def task_rows(results: Iterable[TaskResult]) -> list[TaskOutcome]:
    """The task rows as the metric catalogue reads them (the outcomes the loop produced)."""
    return [outcome_of(r) for r in results]


def stored_summary(rows: RunRows) -> dict[str, Any]:
    """`run.metrics` as stored: every metric the catalogue measured (rmconsole/metric_registry.py,
    plug-ins included; unmeasured ones left out), with the run facts its readers need beside them:
    the tasks done, and k when the top-k figures were measured."""
    summary: dict[str, Any] = {k: v for k, v in metric_registry.summarize(rows).items() if v is not None}
    summary["tasks_done"] = len(rows.tasks)
    if rows.topk is not None:
        summary["topk"] = rows.topk
    return summary


def summarize_results(results: list[TaskResult], config: dict[str, Any] | None = None) -> dict[str, Any]:
    """The summary of task rows alone (no anytime rows, no loop figures), as the catalogue gives it."""
    return stored_summary(RunRows(config=config or {}, tasks=task_rows(results)))


def run_rows(session: Session, run: Run, online: dict[str, Any] | None = None) -> RunRows:
    """One run's stored rows as plain data for the catalogue: config, task rows, anytime rows and
    the loop's latest online figures (those given, else those of the run's last summary)."""
    assert run.id is not None
    anytime = [point_of(a) for a in _anytime(session, run.id)]
    figures = {**(run.metrics or {}), **{k: v for k, v in (online or {}).items() if v is not None}}
    return RunRows(
        config=run.config or {},
        tasks=task_rows(_results(session, run.id)),
        anytime=anytime,
        online=figures,
        n_tasks=run.n_tasks,
    )


def _summary(session: Session, run: Run, online: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's summary metrics from its task rows, its anytime rows and the loop's numbers."""
    return stored_summary(run_rows(session, run, online))


def record_anytime(run_id: int, points: list[AnytimePoint], lease: Lease | None = None) -> dict[str, Any]:
    """Commit anytime evaluations (one row each) and refresh the run's A_auc; returns the metrics.
    A point already stored (same samples count: a resumed run re-evaluating) is replaced."""

    def apply(session: Session) -> dict[str, Any]:
        if lease is not None:
            checked_run(session, run_id, lease)
        samples = [p.samples for p in points]
        for old in session.exec(
            select(AnytimeEval).where(AnytimeEval.run_id == run_id, col(AnytimeEval.samples).in_(samples))
        ).all():
            session.delete(old)
        session.flush()
        session.add_all([row_of(p, run_id=run_id) for p in points])
        session.flush()
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        metrics = _summary(session, run)
        run.metrics = metrics
        session.add(run)
        return metrics

    return write(apply)


def record_memory(
    run_id: int, task: int, histogram: list[int], slots_per_class: int, info: dict[str, Any], lease: Lease | None = None
) -> None:
    def apply(session: Session) -> None:
        if lease is not None:
            checked_run(session, run_id, lease)
        session.add(row_of(MemoryUpdate(task, histogram, slots_per_class, info), run_id=run_id))

    write(apply)


def delete_results_from(run_id: int, first_task: int, lease: Lease | None = None) -> None:
    """Drop task rows, memory snapshots and epoch rows from `first_task` on (before resuming there)."""

    def apply(session: Session) -> None:
        if lease is not None:
            checked_run(session, run_id, lease)
        for row in session.exec(
            select(TaskResult).where(TaskResult.run_id == run_id, TaskResult.task >= first_task)
        ).all():
            session.delete(row)
        for snapshot in session.exec(
            select(MemorySnapshot).where(MemorySnapshot.run_id == run_id, MemorySnapshot.task >= first_task)
        ).all():
            session.delete(snapshot)
        for epoch in session.exec(
            select(EpochMetric).where(EpochMetric.run_id == run_id, EpochMetric.task >= first_task)
        ).all():
            session.delete(epoch)
        for point in session.exec(
            select(AnytimeEval).where(AnytimeEval.run_id == run_id, AnytimeEval.task >= first_task)
        ).all():
            session.delete(point)
        session.flush()
        run = session.get(Run, run_id)
        if run is not None:  # the summary must not keep metrics of the dropped tasks
            results = _results(session, run_id)
            run.metrics = _summary(session, run) if results else None
            session.add(run)

    write(apply)
