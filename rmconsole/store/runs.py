"""Writing what a run produces: the run row, its stream plan, task results and memory
snapshots. Status changes are transitions.py's; reads are queries.py's."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func
from sqlmodel import Session, col, select

from ..cl import metrics as M
from ..cl import metrics_anytime as MA
from .db import write
from .queries import UnknownRun, _results
from .tables import AnytimeEval, MemorySnapshot, Run, TaskResult, TaskStream

TASK_FREE_STREAMS = ("iblurry", "siblurry")


def create_runs(configs: list[dict[str, Any]], preset: str | None, sweep_id: str | None = None) -> list[int]:
    """Store queued runs (a sweep's grid) in one transaction, so a refused or interrupted
    submission leaves nothing half-written; returns their ids in order."""

    def add(session: Session) -> list[int]:
        ids = []
        for config in configs:
            run = Run(preset=preset, method=config["method"], dataset=config["dataset"], seed=config["seed"],
                      config=config, sweep_id=sweep_id, n_tasks=config.get("n_tasks", 0))
            session.add(run)
            session.flush()
            assert run.id is not None
            ids.append(run.id)
        return ids

    return write(add)


def create_run(config: dict[str, Any], preset: str | None, sweep_id: str | None = None) -> int:
    """Store a queued run and return its id."""
    return create_runs([config], preset, sweep_id)[0]


def update_run(run_id: int, **fields: Any) -> None:
    """Write fields of a run as given, unguarded: for facts such as the worker's pid and log.
    The runner changes a status only through a guarded transition (transitions.py)."""

    def apply(session: Session) -> None:
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        for key, value in fields.items():
            setattr(run, key, value)
        session.add(run)

    write(apply)


def record_start(run_id: int, plans: list[Any], class_order: list[int], class_names: list[str],
                 pipeline: list[str]) -> None:
    """The stream plan of every task (replacing any from an earlier attempt) and run facts."""

    def apply(session: Session) -> None:
        for old in session.exec(select(TaskStream).where(TaskStream.run_id == run_id)).all():
            session.delete(old)
        session.flush()
        for p in plans:
            first = getattr(p, "first_appearances", None)
            session.add(TaskStream(run_id=run_id, task=p.task, n_samples=p.n_samples,
                                   major_classes=p.major_classes, composition=p.composition,
                                   stream_hash=p.stream_hash,
                                   first_appearances=[list(f) for f in first] if first is not None else None))
        run = session.get(Run, run_id)
        assert run is not None
        run.class_order, run.class_names, run.pipeline = class_order, class_names, pipeline
        run.n_tasks = len(plans)
        session.add(run)

    write(apply)


def record_task(run_id: int, outcome: Any) -> dict[str, Any]:
    """Commit a finished task and refresh the run's summary metrics; returns the metrics."""

    def apply(session: Session) -> dict[str, Any]:
        session.add(TaskResult(run_id=run_id, task=outcome.task, accuracy=outcome.accuracy,
                               accuracy_row=outcome.accuracy_row, class_accuracy=outcome.class_accuracy,
                               eval_classes=outcome.eval_classes, best_epoch_accuracy=outcome.best_epoch_accuracy,
                               seconds=outcome.seconds))
        session.flush()
        run = session.get(Run, run_id)
        assert run is not None
        summary = _summary(session, run, online=(outcome.extra or {}).get("online"))
        run.metrics = summary
        session.add(run)
        return summary

    return write(apply)


def summarize_results(results: list[TaskResult], task_free: bool = False) -> dict[str, Any]:
    """A_last, A_avg, F_last (and the best-over-epochs A_last when recorded) from task rows. A
    task-free run's F_last is the follow-up's class-wise one (cl/metrics_anytime.py)."""
    summary: dict[str, Any] = M.summarize([r.accuracy for r in results], [r.accuracy_row for r in results])
    summary["tasks_done"] = len(results)
    if task_free:
        summary["F_last"] = MA.class_forgetting([r.class_accuracy for r in results])
    best = [r.best_epoch_accuracy for r in results]
    if results and all(b is not None for b in best):
        summary["A_last_best_epoch"] = best[-1]
    return summary


# what a task-free run adds to its summary: the anytime metrics and its compute-aware numbers
ONLINE_NUMBERS = ("train_seconds", "eval_seconds", "wall_seconds", "train_samples_per_s", "samples_seen", "samples_trained",
                  "samples_skipped", "evaluations_per_s", "image_passes")


def _summary(session: Session, run: Run, online: dict[str, Any] | None = None) -> dict[str, Any]:
    """The run's summary metrics from its task rows, its anytime rows and the loop's numbers."""
    assert run.id is not None
    results = _results(session, run.id)
    task_free = (run.config or {}).get("stream") in TASK_FREE_STREAMS
    summary = summarize_results(results, task_free)
    summary.update(_anytime_summary(session, run.id))
    previous = run.metrics or {}
    for key in ONLINE_NUMBERS:  # the loop's latest figures (kept from the last report when none is given)
        value = (online or {}).get(key, previous.get(key))
        if value is not None:
            summary[key] = value
    return summary


def _anytime_summary(session: Session, run_id: int) -> dict[str, Any]:
    count, mean = session.exec(select(func.count(col(AnytimeEval.id)), func.avg(AnytimeEval.accuracy))
                               .where(AnytimeEval.run_id == run_id)).one()
    return {"A_auc": float(mean), "anytime_evals": int(count)} if count else {}


def record_anytime(run_id: int, points: list[Any]) -> dict[str, Any]:
    """Commit anytime evaluations (one row each) and refresh the run's A_auc; returns the metrics.
    A point already stored (same samples count: a resumed run re-evaluating) is replaced."""

    def apply(session: Session) -> dict[str, Any]:
        samples = [p.samples for p in points]
        for old in session.exec(select(AnytimeEval).where(AnytimeEval.run_id == run_id,
                                                          col(AnytimeEval.samples).in_(samples))).all():
            session.delete(old)
        session.flush()
        for p in points:
            session.add(AnytimeEval(run_id=run_id, task=p.task, samples=p.samples, accuracy=p.accuracy,
                                    n_classes=p.n_classes, class_accuracy=p.class_accuracy, seconds=p.seconds))
        session.flush()
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        metrics = dict(run.metrics or {})
        metrics.update(_anytime_summary(session, run_id))
        run.metrics = metrics
        session.add(run)
        return metrics

    return write(apply)


def record_memory(run_id: int, task: int, histogram: list[int], slots_per_class: int,
                  info: dict[str, Any]) -> None:
    write(lambda s: s.add(MemorySnapshot(run_id=run_id, task=task, histogram=histogram,
                                         slots_per_class=slots_per_class, info=info)))


def delete_results_from(run_id: int, first_task: int) -> None:
    """Drop task rows and memory snapshots from `first_task` on (before resuming there)."""

    def apply(session: Session) -> None:
        for row in session.exec(select(TaskResult).where(TaskResult.run_id == run_id,
                                                         TaskResult.task >= first_task)).all():
            session.delete(row)
        for row in session.exec(select(MemorySnapshot).where(MemorySnapshot.run_id == run_id,
                                                             MemorySnapshot.task >= first_task)).all():
            session.delete(row)
        for row in session.exec(select(AnytimeEval).where(AnytimeEval.run_id == run_id,
                                                          AnytimeEval.task >= first_task)).all():
            session.delete(row)
        session.flush()
        run = session.get(Run, run_id)
        if run is not None:  # the summary must not keep metrics of the dropped tasks
            results = _results(session, run_id)
            run.metrics = _summary(session, run) if results else None
            session.add(run)

    write(apply)
