"""Every change of a run's status: each one guarded transition in one write transaction.

A transition names the statuses it may start from; if the run is in another one (someone
else decided first: the worker, its supervisor, a stop from another host, dead-run detection)
nothing is written. Each returns a `Transition`, true when it applied, with the status the run
has afterwards, so the caller can say what happened without a second read.

    queued --claim_run--> running --mark_finished--> finished
    queued/running --mark_failed--> failed        queued/running --mark_stopped--> stopped
    stopped --fail_stopped_run--> failed          failed/stopped --requeue_run--> queued
    finished/failed/stopped --delete_run--> (gone, with every row of it)

Who may write. A process that writes a run (its worker, its supervisor, the launcher that
follows it) holds a `Lease`: the store's identity and the run's token (new at every requeue).
Every transition given a lease checks both inside its transaction and raises `LeaseLost`
instead of writing when either differs: the store was deleted and created anew (a new run may
have the old one's id), or the run was resumed by someone else (another attempt owns it).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session, SQLModel, delete

from .db import LEASE_ENV, write
from .queries import UnknownRun
from .tables import ACTIVE, Run, StoreIdentity, utcnow

ENDED_UNFINISHED = ("failed", "stopped")
STORE_ID_ENV = "RMCONSOLE_STORE_ID"


def new_token() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Lease:
    """What a process that writes a run proves: which run, its attempt's token, and (for the
    run's own processes) the store's identity. None fields are not checked (a run stored by an
    older rmconsole has no token; a command acting on the store it just read needs no store id)."""

    run_id: int
    token: str | None
    store_id: str | None = None

    def env(self) -> dict[str, str]:
        """How a run's processes inherit the lease."""
        env = {LEASE_ENV: self.token or ""}
        if self.store_id:
            env[STORE_ID_ENV] = self.store_id
        return env

    @classmethod
    def from_env(cls, run_id: int, environ: Mapping[str, str] | None = None) -> Lease | None:
        """The lease a run's process was started with, or None (started by hand: it reads its own)."""
        env = os.environ if environ is None else environ
        if LEASE_ENV not in env:
            return None
        return cls(run_id, env.get(LEASE_ENV) or None, env.get(STORE_ID_ENV) or None)


class LeaseLost(Exception):
    """The store or the run is not the one this process was started for: it must write nothing
    more. `store_changed`: the store itself was replaced (or removed)."""

    def __init__(self, message: str, store_changed: bool) -> None:
        super().__init__(message)
        self.store_changed = store_changed


def checked_run(session: Session, run_id: int, lease: Lease | None) -> Run:
    """The run row, after checking `lease` against the store's identity and the run's token
    (in the caller's transaction); UnknownRun when there is no such run and no lease."""
    if lease is not None and lease.store_id is not None:
        identity = session.get(StoreIdentity, 1)
        if identity is None or identity.store_id != lease.store_id:
            now = identity.store_id[:8] if identity is not None else "none"
            raise LeaseLost(
                f"the store is not the one run {run_id} was started in (store {lease.store_id[:8]}, "
                f"now {now}: it was deleted or replaced)",
                store_changed=True,
            )
    run = session.get(Run, run_id)
    if run is None:
        if lease is not None:
            raise LeaseLost(f"run {run_id} is no longer in the store", store_changed=False)
        raise UnknownRun(run_id)
    if lease is not None and lease.token is not None and run.token != lease.token:
        raise LeaseLost(
            f"run {run_id} was resumed or replaced by another process (its token changed)", store_changed=False
        )
    return run


@dataclass(frozen=True)
class Transition:
    """What a guarded transition did: `applied` (also its truth value) and the run's status now."""

    applied: bool
    status: str

    def __bool__(self) -> bool:
        return self.applied


def _transition(
    run_id: int, status: str, only_from: Iterable[str], lease: Lease | None = None, **fields: Any
) -> Transition:
    """`run_id` -> `status` with `fields`, only if it is in `only_from` (and `lease` holds), in
    one write transaction."""
    allowed = tuple(only_from)

    def apply(session: Session) -> Transition:
        run = checked_run(session, run_id, lease)
        if run.status not in allowed:
            return Transition(False, run.status)
        run.status = status
        for key, value in fields.items():
            setattr(run, key, value)
        session.add(run)
        return Transition(True, status)

    return write(apply)


def claim_run(run_id: int, lease: Lease | None = None, **facts: Any) -> Transition:
    """queued -> running, with the worker's facts (host, device, versions, start time...; a
    `status` among them is ignored: the claim sets it). Only a queued run is started, so a
    stopped or already running run never gets a second worker."""
    facts.pop("status", None)
    return _transition(run_id, "running", ("queued",), lease, **facts)


def finish_run(
    run_id: int, status: str, *, only_from: Iterable[str] = ACTIVE, lease: Lease | None = None, **fields: Any
) -> Transition:
    """End a run in `status` if it is still in `only_from` (default: queued or running), stamping
    finished_at; the named transitions below are this with their statuses spelled out."""
    return _transition(run_id, status, only_from, lease, finished_at=fields.pop("finished_at", utcnow()), **fields)


def mark_finished(run_id: int, lease: Lease | None = None, **progress: Any) -> Transition:
    """running -> finished (the worker, after its last task)."""
    return finish_run(run_id, "finished", only_from=("running",), lease=lease, **progress)


def mark_failed(
    run_id: int, error: str, *, only_from: Iterable[str] = ACTIVE, lease: Lease | None = None
) -> Transition:
    """queued/running -> failed with the reason (a crash, a dead worker, a launcher that gave up)."""
    return finish_run(run_id, "failed", only_from=only_from, lease=lease, error=error)


def mark_stopped(
    run_id: int, error: str, *, only_from: Iterable[str] = ACTIVE, lease: Lease | None = None
) -> Transition:
    """queued/running -> stopped: a stop was asked for (SIGTERM, `rmconsole stop`, a sweep stop)."""
    return finish_run(run_id, "stopped", only_from=only_from, lease=lease, error=error)


def fail_stopped_run(run_id: int, error: str, lease: Lease | None = None) -> Transition:
    """stopped -> failed, keeping its end time: a stop nobody asked for was a failure (torchrun
    stops the other ranks when one fails, and rank 0 records that as a stop)."""
    return _transition(run_id, "failed", ("stopped",), lease, error=error)


def requeue_run(
    run_id: int,
    only_from: Iterable[str] = ENDED_UNFINISHED,
    owner_pid: int | None = None,
    owner_host: str | None = None,
    forget_job: bool = False,
) -> Transition:
    """failed/stopped -> queued for a resume (two resumes cannot both win), with a new token, so
    every process of an earlier attempt is fenced off; the old heartbeat and error are cleared
    so nothing mistakes the dead worker for the new one. `owner_pid`: the process that will start
    the worker (until it does, the run is dead if that process is)."""
    owner: dict[str, Any] = {"host": owner_host} if owner_host is not None else {}
    if forget_job:  # `forget_job`: the attempt gets a job of its own (a resume submits anew), so
        # until it has one no reaper judges it by the earlier attempt's job (ended: "failed")
        owner.update(job_id=None, job_state=None)
    return finish_run(
        run_id,
        "queued",
        only_from=only_from,
        finished_at=None,
        error=None,
        pid=owner_pid,
        heartbeat_at=utcnow() if owner_pid is not None else None,
        token=new_token(),
        **owner,
    )


def ensure_token(run_id: int) -> str | None:
    """The run's token, given one first if it has none (a run stored by an older rmconsole)."""

    def apply(session: Session) -> str | None:
        run = checked_run(session, run_id, None)
        if run.token is None:
            run.token = new_token()
            session.add(run)
        return run.token

    return write(apply)


def heartbeat(run_id: int, lease: Lease | None = None, **progress: Any) -> str:
    """Write a running worker's progress and return the run's status. The progress is written
    only while the run is `running`; any other status means someone else ended the run (a
    stop from another host, dead-run detection) and the worker must exit without writing."""

    def apply(session: Session) -> str:
        run = checked_run(session, run_id, lease)
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
        for table in SQLModel.metadata.sorted_tables:  # every table with a run's rows (tables.py), none left out
            if "run_id" in table.c:
                session.exec(delete(table).where(table.c.run_id == run_id))
        session.delete(run)
        return Transition(True, "deleted")

    return write(apply)
