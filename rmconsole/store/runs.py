"""Reading and writing runs: the one API the worker, the CLI, the TUI and reports share."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Iterable, Optional

from sqlmodel import Session, col, select

from ..cl import metrics as M
from .db import reading, write
from .tables import ACTIVE, MemorySnapshot, Run, TaskResult, TaskStream, utcnow


class UnknownRun(Exception):
    """No run has this id."""

    def __init__(self, run_id: int) -> None:
        super().__init__(f"no run with id {run_id} (see `rmconsole runs`)")
        self.run_id = run_id


def create_run(config: dict[str, Any], preset: str | None, sweep_id: str | None = None) -> int:
    """Store a queued run and return its id."""

    def add(session: Session) -> int:
        run = Run(preset=preset, method=config["method"], dataset=config["dataset"], seed=config["seed"],
                  config=config, sweep_id=sweep_id, n_tasks=config.get("n_tasks", 0))
        session.add(run)
        session.flush()
        assert run.id is not None
        return run.id

    return write(add)


def get_run(run_id: int) -> Run:
    with reading() as session:
        run = session.get(Run, run_id)
    if run is None:
        raise UnknownRun(run_id)
    return run


def update_run(run_id: int, **fields: Any) -> None:
    def apply(session: Session) -> None:
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        for key, value in fields.items():
            setattr(run, key, value)
        session.add(run)

    write(apply)


def finish_run(run_id: int, status: str, *, only_from: Iterable[str] = ACTIVE, **fields: Any) -> bool:
    """Move a run to `status` only if it is still in `only_from` (default: queued or running),
    in one write transaction; returns whether it moved. Everyone who ends a run (the worker,
    its supervisor, a stop, dead-run detection) goes through here, so the first to decide
    wins and no later writer turns a failed run back into a stopped one or the reverse."""
    allowed = tuple(only_from)

    def apply(session: Session) -> bool:
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        if run.status not in allowed:
            return False
        run.status = status
        run.finished_at = fields.pop("finished_at", utcnow())
        for key, value in fields.items():
            setattr(run, key, value)
        session.add(run)
        return True

    return write(apply)


def requeue_run(run_id: int, only_from: Iterable[str] = ("failed", "stopped")) -> bool:
    """failed/stopped -> queued for a resume, atomically (two resumes cannot both win); the old
    pid, heartbeat and error are cleared so nothing mistakes the dead worker for the new one."""
    return finish_run(run_id, "queued", only_from=only_from, finished_at=None, error=None, pid=None,
                      heartbeat_at=None)


def heartbeat(run_id: int, **progress: Any) -> str:
    """Write a running worker's progress and return the run's status. The progress is written
    only while the run is `running`; any other status means someone else ended the run (a
    stop from another host, dead-run detection) and the worker must exit without writing."""

    def apply(session: Session) -> str:
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        if run.status == "running":
            for key, value in progress.items():
                setattr(run, key, value)
            session.add(run)
        return run.status

    return write(apply)


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


def record_start(run_id: int, plans: list[Any], class_order: list[int], class_names: list[str],
                 pipeline: list[str]) -> None:
    """The stream plan of every task (replacing any from an earlier attempt) and run facts."""

    def apply(session: Session) -> None:
        for old in session.exec(select(TaskStream).where(TaskStream.run_id == run_id)).all():
            session.delete(old)
        session.flush()
        for p in plans:
            session.add(TaskStream(run_id=run_id, task=p.task, n_samples=p.n_samples,
                                   major_classes=p.major_classes, composition=p.composition,
                                   stream_hash=p.stream_hash))
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
        results = _results(session, run_id)
        summary = summarize_results(results)
        run = session.get(Run, run_id)
        assert run is not None
        run.metrics = summary
        session.add(run)
        return summary

    return write(apply)


def summarize_results(results: list[TaskResult]) -> dict[str, Any]:
    """A_last, A_avg, F_last (and the best-over-epochs A_last when recorded) from task rows."""
    summary: dict[str, Any] = M.summarize([r.accuracy for r in results], [r.accuracy_row for r in results])
    summary["tasks_done"] = len(results)
    best = [r.best_epoch_accuracy for r in results]
    if results and all(b is not None for b in best):
        summary["A_last_best_epoch"] = best[-1]
    return summary


def record_memory(run_id: int, task: int, histogram: list[int], slots_per_class: int,
                  info: dict[str, Any]) -> None:
    write(lambda s: s.add(MemorySnapshot(run_id=run_id, task=task, histogram=histogram,
                                         slots_per_class=slots_per_class, info=info)))


def _results(session: Session, run_id: int) -> list[TaskResult]:
    return list(session.exec(select(TaskResult).where(TaskResult.run_id == run_id).order_by(col(TaskResult.task))).all())


def task_results(run_id: int) -> list[TaskResult]:
    with reading() as session:
        return _results(session, run_id)


def task_streams(run_id: int) -> list[TaskStream]:
    with reading() as session:
        return list(session.exec(select(TaskStream).where(TaskStream.run_id == run_id)
                                 .order_by(col(TaskStream.task))).all())


def memory_snapshots(run_id: int) -> list[MemorySnapshot]:
    with reading() as session:
        return list(session.exec(select(MemorySnapshot).where(MemorySnapshot.run_id == run_id)
                                 .order_by(col(MemorySnapshot.id))).all())


def delete_results_from(run_id: int, first_task: int) -> None:
    """Drop task rows and memory snapshots from `first_task` on (before resuming there)."""

    def apply(session: Session) -> None:
        for row in session.exec(select(TaskResult).where(TaskResult.run_id == run_id,
                                                         TaskResult.task >= first_task)).all():
            session.delete(row)
        for row in session.exec(select(MemorySnapshot).where(MemorySnapshot.run_id == run_id,
                                                             MemorySnapshot.task >= first_task)).all():
            session.delete(row)
        session.flush()
        run = session.get(Run, run_id)
        if run is not None:  # the summary must not keep metrics of the dropped tasks
            results = _results(session, run_id)
            run.metrics = summarize_results(results) if results else None
            session.add(run)

    write(apply)


# ---------------------------------------------------------------------- JSON shapes

# What a joint run must share with a run to be its upper bound: the problem (dataset, image
# size), the network (model) and the seed. Not the training budget: joint training sees the whole
# training set as one task, so its epochs, batch and schedule are its own recipe for reaching the
# upper bound (the paper likewise types one joint accuracy per dataset for every method). Not the
# stream keys either (tasks, blurry, memory): joint training has no stream.
JOINT_KEYS = ("dataset", "model", "seed", "image_size")
BUDGET_KEYS = JOINT_KEYS  # the spine's name for the matching keys, kept for existing callers


def joint_run(run: Run, session: Session | None = None) -> Optional[Run]:
    """The finished joint run that is `run`'s upper bound, or None.

    Among finished joint runs that match on JOINT_KEYS and have an A_last, one with the same
    augmentation is preferred; otherwise the newest. (Never the best one: that would be
    selecting on the test set.)"""
    if run.method == "joint":
        return None

    def find(s: Session) -> Optional[Run]:
        candidates = s.exec(select(Run).where(Run.method == "joint", Run.status == "finished",
                                              Run.dataset == run.dataset, Run.seed == run.seed)
                            .order_by(col(Run.id).desc())).all()
        matching = [j for j in candidates
                    if all(j.config.get(k) == run.config.get(k) for k in JOINT_KEYS)
                    and (j.metrics or {}).get("A_last") is not None]
        same_augment = [j for j in matching if list(j.config.get("augment") or []) == list(run.config.get("augment") or [])]
        return (same_augment or matching or [None])[0]

    if session is not None:
        return find(session)
    with reading() as s:
        return find(s)


def joint_accuracy(run: Run, session: Session | None = None) -> Optional[float]:
    """A_last of `run`'s joint upper bound (see joint_run), or None when there is none."""
    joint = joint_run(run, session)
    return joint.metrics.get("A_last") if joint is not None and joint.metrics else None


def _iso(value: datetime | None) -> str | None:
    return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ") if value else None


def run_summary(run: Run, session: Session | None = None) -> dict[str, Any]:
    """`runs --json` shape: identity, config, lifecycle, progress and metrics."""
    found = dict(run.metrics or {})
    summary = {k: found.get(k) for k in ("A_last", "A_avg", "F_last")}
    joint = joint_run(run, session)
    summary["I_last"] = M.intransigence(joint.metrics.get("A_last") if joint else None, summary["A_last"])
    summary["I_last_joint_run"] = joint.id if joint is not None and summary["I_last"] is not None else None
    for key in ("A_last_best_epoch", "tasks_done"):
        if key in found:
            summary[key] = found[key]
    return {
        "id": run.id,
        "status": run.status,
        "preset": run.preset,
        "method": run.method,
        "dataset": run.dataset,
        "seed": run.seed,
        "sweep_id": run.sweep_id,
        "config": run.config,
        "metrics": summary,
        "progress": {
            "task": run.task, "n_tasks": run.n_tasks, "phase": run.phase, "done": run.phase_done,
            "total": run.phase_total, "samples_per_s": run.samples_per_s, "eta_s": run.eta_s,
        },
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "heartbeat_at": _iso(run.heartbeat_at),
        "device": run.device,
        "error": run.error,
    }


def run_detail(run_id: int) -> dict[str, Any]:
    """`show --json` shape: the summary plus one entry per task and per memory update."""
    with reading() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        detail = run_summary(run, session)
        results = {r.task: r for r in _results(session, run_id)}
        streams = session.exec(select(TaskStream).where(TaskStream.run_id == run_id)
                               .order_by(col(TaskStream.task))).all()
        snapshots = session.exec(select(MemorySnapshot).where(MemorySnapshot.run_id == run_id)
                                 .order_by(col(MemorySnapshot.id))).all()
    tasks = []
    for stream in streams:
        result = results.get(stream.task)
        tasks.append({
            "task": stream.task,
            "n_samples": stream.n_samples,
            "major_classes": stream.major_classes,
            "composition": stream.composition,
            "stream_hash": stream.stream_hash,
            "accuracy": result.accuracy if result else None,
            "accuracy_row": result.accuracy_row if result else None,
            "class_accuracy": result.class_accuracy if result else None,
            "best_epoch_accuracy": result.best_epoch_accuracy if result else None,
            "seconds": result.seconds if result else None,
        })
    detail.update({
        "tasks": tasks,
        "memory": [{"task": m.task, "histogram": m.histogram, "slots_per_class": m.slots_per_class,
                    "size": sum(m.histogram), "info": m.info, "at": _iso(m.created_at)} for m in snapshots],
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
