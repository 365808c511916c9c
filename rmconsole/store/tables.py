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


class StoreIdentity(SQLModel, table=True):
    """The store's identity: one row (id 1) with a random id, written when the store is created.
    Every process that writes a run carries it (transitions.Lease) and every guarded transition
    checks it, so a store deleted and created anew (its run ids start at 1 again) is never
    written by a process of the old one."""

    __tablename__ = "store_identity"

    id: Optional[int] = Field(default=None, primary_key=True)
    store_id: str
    created_at: datetime = Field(default_factory=utcnow)


class Run(SQLModel, table=True):
    """One training run: its config, its lifecycle, its live progress and its summary."""

    __table_args__ = (Index("ix_run_status_created", "status", "created_at"),)

    # None only until the row is inserted, and the code reads only stored rows' ids: typed as such
    # (the DDL is the same, a primary key is NOT NULL either way)
    id: int = Field(default=None, primary_key=True)
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
    # the run's current attempt: a random token, new at every requeue, that its worker,
    # supervisor and launcher present in every transition (transitions.Lease)
    token: Optional[str] = None
    # where it was submitted (runner/executors.py): None = a local process; else the executor's
    # spec (e.g. "slurm:partition=gpu,time=240"), the scheduler's job id and its last word on it
    executor: Optional[str] = None
    job_id: Optional[str] = Field(default=None, index=True)
    job_state: Optional[str] = None
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
    # what the user calls it (all optional; a store written before them reads them as unset)
    name: Optional[str] = None
    tags: Optional[list[str]] = Field(default=None, sa_column=Column(JSON))
    note: Optional[str] = None
    overrides: Optional[dict[str, Any]] = Field(default=None, sa_column=Column(JSON))  # keys that differ from the preset
    archived_at: Optional[datetime] = None  # archived: hidden from runs, report and the TUI unless asked
    # the validation split the run held out (val_fraction > 0): fraction, samples, per_class, hash
    # (cl/streams.validation_info); None: none held out, or a store written before validation
    validation: Optional[dict[str, Any]] = Field(default=None, sa_column=Column(JSON))


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
    # the TEST figures; None / JSON null: the run did not evaluate on the test set
    # (evaluate_test=false; the column was NOT NULL before, relaxed by db._relax_not_null)
    accuracy: Optional[float] = None
    accuracy_row: Optional[list[Optional[float]]] = Field(sa_column=Column(JSON, nullable=False))
    class_accuracy: Optional[list[Optional[float]]] = Field(sa_column=Column(JSON, nullable=False))
    eval_classes: list[int] = Field(sa_column=Column(JSON, nullable=False))
    best_epoch_accuracy: Optional[float] = None
    # top-k (the run's `topk` > 1): `accuracy` and `accuracy_row` stay top-1 for every run, so the
    # top-k figures are columns of their own (nullable: rows of top-1 runs and older stores read
    # as "not measured"), typed and filterable, not folded into the JSON rows other readers parse
    topk: Optional[int] = None
    topk_accuracy: Optional[float] = None
    topk_accuracy_row: Optional[list[Optional[float]]] = Field(default=None, sa_column=Column(JSON))
    # validation (the run's val_fraction > 0): the same evaluation on the held-out train samples;
    # nullable columns (runs without validation and older stores read as "not measured")
    val_accuracy: Optional[float] = None
    val_accuracy_row: Optional[list[Optional[float]]] = Field(default=None, sa_column=Column(JSON))
    val_class_accuracy: Optional[list[Optional[float]]] = Field(default=None, sa_column=Column(JSON))
    seconds: float
    # sha256 of the checkpoint written after this task (verified before a resume loads it)
    checkpoint_sha256: Optional[str] = None
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


class EpochMetric(SQLModel, table=True):
    """One training epoch of one task (online: the stream pass and each memory epoch; offline:
    each epoch): what the loss and learning-rate curves draw. One row per epoch, never per step."""

    __table_args__ = (Index("ix_epochmetric_run_task", "run_id", "task"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    task: int
    phase: str  # stream | memory | offline
    epoch: int  # 0-based within the phase
    epochs: int  # epochs in the phase
    loss: Optional[float] = None  # mean training loss over the epoch's samples (None: not finite)
    lr: float
    samples: int
    seconds: float
    samples_per_s: Optional[float] = None
    test_accuracy: Optional[float] = None  # percent, only when the run asks for it (eval_every_epoch)


class AnytimeEval(SQLModel, table=True):
    """One anytime evaluation of a task-free run (every `eval_period` streamed samples): the
    accuracy on the classes exposed so far. A_auc is the mean of a run's rows."""

    __table_args__ = (UniqueConstraint("run_id", "samples"),)

    id: Optional[int] = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    task: int
    samples: int  # streamed samples so far
    accuracy: Optional[float] = None  # None: evaluate_test=false (nullable since; db._relax_not_null)
    n_classes: int  # classes exposed so far
    class_accuracy: Optional[list[Optional[float]]] = Field(default=None, sa_column=Column(JSON))
    seconds: float = 0.0
    val_accuracy: Optional[float] = None  # on the held-out samples of the same classes (val_fraction > 0)


def table_names() -> frozenset[str]:
    """The tables this store owns (created and checked by db.py): another library keeping its
    own tables in the same database (Optuna's studies, runner/tune.py) must use other names."""
    return frozenset(SQLModel.metadata.tables)
