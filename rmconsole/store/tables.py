"""The store's tables: narrow rows, JSON for lists that are always read whole."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, UniqueConstraint
from sqlmodel import Field, SQLModel

STATUSES = ("queued", "running", "finished", "failed", "stopped")
ACTIVE = ("queued", "running")


def utcnow() -> datetime:
    return datetime.now(UTC)


class StoreIdentity(SQLModel, table=True):
    """The store's identity: one row (id 1) with a random id, written when the store is created.
    Every process that writes a run carries it (transitions.Lease) and every guarded transition
    checks it, so a store deleted and created anew (its run ids start at 1 again) is never
    written by a process of the old one."""

    __tablename__ = "store_identity"

    id: int | None = Field(default=None, primary_key=True)
    store_id: str
    created_at: datetime = Field(default_factory=utcnow)
    # the largest run id ever given: SQLite gives max(id) + 1, which after `rm` of the newest runs is
    # a deleted run's id; runs.create_runs gives ids above this one (revision 0004)
    last_run_id: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))


class Run(SQLModel, table=True):
    """One training run: its config, its lifecycle, its live progress and its summary."""

    __table_args__ = (Index("ix_run_status_created", "status", "created_at"),)

    # None only until the row is inserted, and the code reads only stored rows' ids: typed as such
    # (the DDL is the same, a primary key is NOT NULL either way)
    id: int = Field(default=None, primary_key=True)
    status: str = Field(default="queued", index=True)
    preset: str | None = Field(default=None, index=True)
    method: str = Field(index=True)
    dataset: str = Field(index=True)
    seed: int
    config: dict[str, Any] = Field(sa_column=Column(JSON, nullable=False))
    sweep_id: str | None = Field(default=None, index=True)
    created_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    finished_at: datetime | None = None
    # where it runs
    pid: int | None = None
    host: str | None = None
    device: str | None = None
    versions: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    git_commit: str | None = None
    log_path: str | None = None
    error: str | None = None
    # the run's current attempt: a random token, new at every requeue, that its worker,
    # supervisor and launcher present in every transition (transitions.Lease)
    token: str | None = None
    # where it was submitted (runner/executors.py): None = a local process; else the executor's
    # spec (e.g. "slurm:partition=gpu,time=240"), the scheduler's job id and its last word on it
    executor: str | None = None
    job_id: str | None = Field(default=None, index=True)
    job_state: str | None = None
    # live progress, written by the worker about once a second
    heartbeat_at: datetime | None = None
    n_tasks: int = 0
    task: int | None = None
    phase: str | None = None
    phase_done: int = 0
    phase_total: int = 0
    samples_per_s: float | None = None
    eta_s: float | None = None
    # what the run is, recorded when it starts
    class_order: list[int] | None = Field(default=None, sa_column=Column(JSON))
    class_names: list[str] | None = Field(default=None, sa_column=Column(JSON))
    pipeline: list[str] | None = Field(default=None, sa_column=Column(JSON))
    # summary metrics (percent), updated after every task
    metrics: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # what the user calls it (all optional; a store written before them reads them as unset)
    name: str | None = None
    tags: list[str] | None = Field(default=None, sa_column=Column(JSON))
    note: str | None = None
    overrides: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))  # keys that differ from the preset
    archived_at: datetime | None = None  # archived: hidden from runs, report and the TUI unless asked
    # the validation split the run held out (val_fraction > 0): fraction, samples, per_class, hash
    # (cl/streams.validation_info); None: none held out, or a store written before validation
    validation: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))


class TaskStream(SQLModel, table=True):
    """A task of the run's stream as planned at start: what the task-stream panel draws."""

    __table_args__ = (UniqueConstraint("run_id", "task"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    task: int
    n_samples: int
    major_classes: list[int] = Field(sa_column=Column(JSON, nullable=False))
    composition: list[int] = Field(sa_column=Column(JSON, nullable=False))
    stream_hash: str
    # task-free streams: [label, position in the task's stream] of each class first seen in it
    first_appearances: list[list[int]] | None = Field(default=None, sa_column=Column(JSON))


class TaskResult(SQLModel, table=True):
    """The evaluation after one task, committed as the task ends."""

    __table_args__ = (UniqueConstraint("run_id", "task"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    task: int
    # the TEST figures; None / JSON null: the run did not evaluate on the test set
    # (evaluate_test=false; the column was NOT NULL before, relaxed by schema revision 0001)
    accuracy: float | None = None
    accuracy_row: list[float | None] | None = Field(sa_column=Column(JSON, nullable=False))
    class_accuracy: list[float | None] | None = Field(sa_column=Column(JSON, nullable=False))
    eval_classes: list[int] = Field(sa_column=Column(JSON, nullable=False))
    best_epoch_accuracy: float | None = None
    # top-k (the run's `topk` > 1): `accuracy` and `accuracy_row` stay top-1 for every run, so the
    # top-k figures are columns of their own (nullable: rows of top-1 runs and older stores read
    # as "not measured"), typed and filterable, not folded into the JSON rows other readers parse
    topk: int | None = None
    topk_accuracy: float | None = None
    topk_accuracy_row: list[float | None] | None = Field(default=None, sa_column=Column(JSON))
    # validation (the run's val_fraction > 0): the same evaluation on the held-out train samples;
    # nullable columns (runs without validation and older stores read as "not measured")
    val_accuracy: float | None = None
    val_accuracy_row: list[float | None] | None = Field(default=None, sa_column=Column(JSON))
    val_class_accuracy: list[float | None] | None = Field(default=None, sa_column=Column(JSON))
    seconds: float
    # sha256 of the checkpoint written after this task (verified before a resume loads it)
    checkpoint_sha256: str | None = None
    finished_at: datetime = Field(default_factory=utcnow)


class MemorySnapshot(SQLModel, table=True):
    """The memory's class histogram after one memory update."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    task: int
    histogram: list[int] = Field(sa_column=Column(JSON, nullable=False))
    slots_per_class: int
    info: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    created_at: datetime = Field(default_factory=utcnow)


class EpochMetric(SQLModel, table=True):
    """One training epoch of one task (online: the stream pass and each memory epoch; offline:
    each epoch): what the loss and learning-rate curves draw. One row per epoch, never per step."""

    __table_args__ = (Index("ix_epochmetric_run_task", "run_id", "task"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    task: int
    phase: str  # stream | memory | offline
    epoch: int  # 0-based within the phase
    epochs: int  # epochs in the phase
    loss: float | None = None  # mean training loss over the epoch's samples (None: not finite)
    lr: float
    samples: int
    seconds: float
    samples_per_s: float | None = None
    test_accuracy: float | None = None  # percent, only when the run asks for it (eval_every_epoch)


class AnytimeEval(SQLModel, table=True):
    """One anytime evaluation of a task-free run (every `eval_period` streamed samples): the
    accuracy on the classes exposed so far. A_auc is the mean of a run's rows."""

    __table_args__ = (UniqueConstraint("run_id", "samples"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    task: int
    samples: int  # streamed samples so far
    accuracy: float | None = None  # None: evaluate_test=false (nullable since; revision 0001)
    n_classes: int  # classes exposed so far
    class_accuracy: list[float | None] | None = Field(default=None, sa_column=Column(JSON))
    seconds: float = 0.0
    val_accuracy: float | None = None  # on the held-out samples of the same classes (val_fraction > 0)
    train_flops: float | None = None  # training FLOPs spent by then (issue 40; None: stored before it was counted)


class SystemSample(SQLModel, table=True):
    """One sample of a run's system load, taken every few seconds by its supervisor
    (runner/sysmetrics.py): the worker's process tree (CPU %, resident memory), the machine's
    load average, and on CUDA its GPUs' utilisation and the tree's GPU memory (NVML; None where
    not measured). Revision 0003."""

    __tablename__ = "systemsample"
    __table_args__ = (Index("ix_systemsample_run_at", "run_id", "at"),)

    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id")
    at: datetime = Field(default_factory=utcnow)
    cpu_percent: float | None = None  # of one core: 250 = two and a half cores busy
    rss_bytes: int | None = Field(default=None, sa_column=Column(BigInteger))  # the process tree's resident memory
    load1: float | None = None  # the machine's 1-minute load average
    gpu_util: float | None = None  # percent, mean over the GPUs the tree uses
    gpu_mem_bytes: int | None = Field(default=None, sa_column=Column(BigInteger))  # held by the tree's processes


VERSION_TABLE = "rmconsole_schema_version"  # the schema's revision (store/migrations); not Optuna's `alembic_version`


def table_names() -> frozenset[str]:
    """The tables this store owns (created and checked by db.py, its schema revision included):
    another library keeping its own tables in the same database (Optuna's studies,
    runner/tune.py) must use other names."""
    return frozenset(SQLModel.metadata.tables) | {VERSION_TABLE}
