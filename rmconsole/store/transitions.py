"""Every change of a run's status: each one guarded transition in one write transaction.

A transition names the statuses it may start from; if the run is in another one (someone
else decided first: the worker, its supervisor, a stop from another host, dead-run detection)
nothing is written. Each returns a `Transition`, true when it applied, with the status the run
has afterwards, so the caller can say what happened without a second read.

    queued --claim_run--> running --mark_finished--> finished
    queued/running --mark_failed--> failed        queued/running --mark_stopped--> stopped
    stopped --fail_stopped_run--> failed          failed/stopped --requeue_run--> queued
    finished/failed/stopped --delete_run--> (gone, with every row of it)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from sqlmodel import Session, delete

from .db import write
from .queries import UnknownRun
from .tables import ACTIVE, EpochMetric, MemorySnapshot, Run, TaskResult, TaskStream, utcnow

ENDED_UNFINISHED = ("failed", "stopped")


@dataclass(frozen=True)
class Transition:
    """What a guarded transition did: `applied` (also its truth value) and the run's status now."""

    applied: bool
    status: str

    def __bool__(self) -> bool:
        return self.applied


def _transition(run_id: int, status: str, only_from: Iterable[str], **fields: Any) -> Transition:
    """`run_id` -> `status` with `fields`, only if it is in `only_from`, in one write transaction."""
    allowed = tuple(only_from)

    def apply(session: Session) -> Transition:
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        if run.status not in allowed:
            return Transition(False, run.status)
        run.status = status
        for key, value in fields.items():
            setattr(run, key, value)
        session.add(run)
        return Transition(True, status)

    return write(apply)


def claim_run(run_id: int, **facts: Any) -> Transition:
    """queued -> running, with the worker's facts (host, device, versions, start time...; a
    `status` among them is ignored: the claim sets it). Only a queued run is started, so a
    stopped or already running run never gets a second worker."""
    facts.pop("status", None)
    return _transition(run_id, "running", ("queued",), **facts)


def finish_run(run_id: int, status: str, *, only_from: Iterable[str] = ACTIVE, **fields: Any) -> Transition:
    """End a run in `status` if it is still in `only_from` (default: queued or running), stamping
    finished_at; the named transitions below are this with their statuses spelled out."""
    return _transition(run_id, status, only_from, finished_at=fields.pop("finished_at", utcnow()), **fields)


def mark_finished(run_id: int, **progress: Any) -> Transition:
    """running -> finished (the worker, after its last task)."""
    return finish_run(run_id, "finished", only_from=("running",), **progress)


def mark_failed(run_id: int, error: str, *, only_from: Iterable[str] = ACTIVE) -> Transition:
    """queued/running -> failed with the reason (a crash, a dead worker, a launcher that gave up)."""
    return finish_run(run_id, "failed", only_from=only_from, error=error)


def mark_stopped(run_id: int, error: str, *, only_from: Iterable[str] = ACTIVE) -> Transition:
    """queued/running -> stopped: a stop was asked for (SIGTERM, `rmconsole stop`, a sweep stop)."""
    return finish_run(run_id, "stopped", only_from=only_from, error=error)


def fail_stopped_run(run_id: int, error: str) -> Transition:
    """stopped -> failed, keeping its end time: a stop nobody asked for was a failure (torchrun
    stops the other ranks when one fails, and rank 0 records that as a stop)."""
    return _transition(run_id, "failed", ("stopped",), error=error)


def requeue_run(run_id: int, only_from: Iterable[str] = ENDED_UNFINISHED) -> Transition:
    """failed/stopped -> queued for a resume (two resumes cannot both win); the old pid,
    heartbeat and error are cleared so nothing mistakes the dead worker for the new one."""
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


def delete_run(run_id: int) -> Transition:
    """Delete an ended run (finished, failed or stopped) with every row that belongs to it, in
    one transaction; a queued or running run is not deleted (applied false, its status given):
    its worker or its sweep's queue still counts on the row. Files (log, checkpoint) are the
    runner's to remove."""

    def apply(session: Session) -> Transition:
        run = session.get(Run, run_id)
        if run is None:
            raise UnknownRun(run_id)
        if run.status in ACTIVE:
            return Transition(False, run.status)
        for table in (EpochMetric, MemorySnapshot, TaskResult, TaskStream):
            session.exec(delete(table).where(table.run_id == run_id))  # type: ignore[call-overload]
        session.delete(run)
        return Transition(True, "deleted")

    return write(apply)
