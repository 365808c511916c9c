"""The store's tables: narrow rows, JSON for lists that are always read whole."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from sqlalchemy import JSON, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

STATUSES = ("queued", "running", "finished", "failed", "stopped")
ACTIVE = ("queued", "running")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Run(SQLModel, table=True):
    """One training run: its config, its lifecycle, its live progress and its summary."""

    __table_args__ = (Index("ix_run_status_created", "status", "created_at"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    status: str = Field(default="queued", index=True)
    preset: Optional[str] = Field(default=None, index=True)
    method: str = Field(index=True)
    dataset: str = Field(index=True)
    seed: int
    config: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    sweep_id: Optional[str] = Field(default=None, index=True)
    created_at: datetime = Field(default_factory=utcnow)
    started_at: Optional[datetime] = None
    finished_at: Optional[datetime] = None
    # where it runs
    pid: Optional[int] = None
    host: Optional[str] = None
    device: Optional[str] = None
    versions: Optional[dict[str, Any]] = Field(default=None, sa_column=Column(JSON))
    git_commit: Optional[str] = None
    log_path: Optional[str] = None
    error: Optional[str] = None
    # live progress, written by the worker about once a second
    heartbeat_at: Optional[datetime] = None
    n_tasks: int = 0
    task: Optional[int] = None
    phase: Optional[str] = None
    phase_done: int = 0
    phase_total: int = 0
    samples_per_s: Optional[float] = None
    eta_s: Optional[float] = None
    # what the run is, recorded when it starts
    class_order: Optional[list[int]] = Field(default=None, sa_column=Column(JSON))
    class_names: Optional[list[str]] = Field(default=None, sa_column=Column(JSON))
    pipeline: Optional[list[str]] = Field(default=None, sa_column=Column(JSON))
    # summary metrics (percent), updated after every task
    metrics: Optional[dict[str, Any]] = Field(default=None, sa_column=Column(JSON))


class TaskStream(SQLModel, table=True):
    """A task of the run's stream as planned at start: what the task-stream panel draws."""

    __table_args__ = (UniqueConstraint("run_id", "task"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    task: int
    n_samples: int
    major_classes: list[int] = Field(sa_column=Column(JSON, nullable=False))
    composition: list[int] = Field(sa_column=Column(JSON, nullable=False))
    stream_hash: str
    # task-free streams: [label, position in the task's stream] of each class first seen in it
    first_appearances: Optional[list[list[int]]] = Field(default=None, sa_column=Column(JSON))


class TaskResult(SQLModel, table=True):
    """The evaluation after one task, committed as the task ends."""

    __table_args__ = (UniqueConstraint("run_id", "task"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    task: int
    accuracy: float
    accuracy_row: list[Optional[float]] = Field(sa_column=Column(JSON, nullable=False))
    class_accuracy: list[Optional[float]] = Field(sa_column=Column(JSON, nullable=False))
    eval_classes: list[int] = Field(sa_column=Column(JSON, nullable=False))
    best_epoch_accuracy: Optional[float] = None
    seconds: float
    finished_at: datetime = Field(default_factory=utcnow)


class MemorySnapshot(SQLModel, table=True):
    """The memory's class histogram after one memory update."""

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    task: int
    histogram: list[int] = Field(sa_column=Column(JSON, nullable=False))
    slots_per_class: int
    info: Optional[dict[str, Any]] = Field(default=None, sa_column=Column(JSON))
    created_at: datetime = Field(default_factory=utcnow)


class AnytimeEval(SQLModel, table=True):
    """One anytime evaluation of a task-free run (every `eval_period` streamed samples): the
    accuracy on the classes exposed so far. A_auc is the mean of a run's rows."""

    __table_args__ = (UniqueConstraint("run_id", "samples"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    task: int
    samples: int  # streamed samples so far
    accuracy: float
    n_classes: int  # classes exposed so far
    class_accuracy: Optional[list[Optional[float]]] = Field(default=None, sa_column=Column(JSON))
    seconds: float = 0.0
