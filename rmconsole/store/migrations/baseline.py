"""The store's tables as main left them at a168f0c, the last rmconsole without a schema version,
frozen here (tables.py moves on; this does not): what revision 0001 creates in an empty database
and completes in a store of an older shape, and what an unversioned store's columns are compared
with (migrations.shape_of_unversioned)."""

from __future__ import annotations

import sqlalchemy as sa

METADATA = sa.MetaData()


def _when(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def _text(name: str, nullable: bool = True, index: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(), nullable=nullable, index=index)


def _json(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.JSON(), nullable=nullable)


def _int(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.Integer(), nullable=nullable)


def _float(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.Float(), nullable=nullable)


def _id() -> sa.Column:
    return sa.Column("id", sa.Integer(), primary_key=True)


def _run_id(index: bool = True) -> sa.Column:
    return sa.Column("run_id", sa.Integer(), sa.ForeignKey("run.id"), nullable=False, index=index)


sa.Table(
    "store_identity",
    METADATA,
    _id(),
    _text("store_id", nullable=False),
    _when("created_at", nullable=False),
)

sa.Table(
    "run",
    METADATA,
    _id(),
    _text("status", nullable=False, index=True),
    _text("preset", index=True),
    _text("method", nullable=False, index=True),
    _text("dataset", nullable=False, index=True),
    _int("seed", nullable=False),
    _json("config", nullable=False),
    _text("sweep_id", index=True),
    _when("created_at", nullable=False),
    _when("started_at"),
    _when("finished_at"),
    _int("pid"),
    _text("host"),
    _text("device"),
    _json("versions"),
    _text("git_commit"),
    _text("log_path"),
    _text("error"),
    _text("token"),
    _text("executor"),
    _text("job_id", index=True),
    _text("job_state"),
    _when("heartbeat_at"),
    _int("n_tasks", nullable=False),
    _int("task"),
    _text("phase"),
    _int("phase_done", nullable=False),
    _int("phase_total", nullable=False),
    _float("samples_per_s"),
    _float("eta_s"),
    _json("class_order"),
    _json("class_names"),
    _json("pipeline"),
    _json("metrics"),
    _text("name"),
    _json("tags"),
    _text("note"),
    _json("overrides"),
    _when("archived_at"),
    _json("validation"),
    sa.Index("ix_run_status_created", "status", "created_at"),
)

sa.Table(
    "taskstream",
    METADATA,
    _id(),
    _run_id(),
    _int("task", nullable=False),
    _int("n_samples", nullable=False),
    _json("major_classes", nullable=False),
    _json("composition", nullable=False),
    _text("stream_hash", nullable=False),
    _json("first_appearances"),
    sa.UniqueConstraint("run_id", "task"),
)

sa.Table(
    "taskresult",
    METADATA,
    _id(),
    _run_id(),
    _int("task", nullable=False),
    _float("accuracy"),
    _json("accuracy_row", nullable=False),
    _json("class_accuracy", nullable=False),
    _json("eval_classes", nullable=False),
    _float("best_epoch_accuracy"),
    _int("topk"),
    _float("topk_accuracy"),
    _json("topk_accuracy_row"),
    _float("val_accuracy"),
    _json("val_accuracy_row"),
    _json("val_class_accuracy"),
    _float("seconds", nullable=False),
    _text("checkpoint_sha256"),
    _when("finished_at", nullable=False),
    sa.UniqueConstraint("run_id", "task"),
)

sa.Table(
    "memorysnapshot",
    METADATA,
    _id(),
    _run_id(),
    _int("task", nullable=False),
    _json("histogram", nullable=False),
    _int("slots_per_class", nullable=False),
    _json("info"),
    _when("created_at", nullable=False),
)

sa.Table(
    "epochmetric",
    METADATA,
    _id(),
    _run_id(index=False),
    _int("task", nullable=False),
    _text("phase", nullable=False),
    _int("epoch", nullable=False),
    _int("epochs", nullable=False),
    _float("loss"),
    _float("lr", nullable=False),
    _int("samples", nullable=False),
    _float("seconds", nullable=False),
    _float("samples_per_s"),
    _float("test_accuracy"),
    sa.Index("ix_epochmetric_run_task", "run_id", "task"),
)

sa.Table(
    "anytimeeval",
    METADATA,
    _id(),
    _run_id(),
    _int("task", nullable=False),
    _int("samples", nullable=False),
    _float("accuracy"),
    _int("n_classes", nullable=False),
    _json("class_accuracy"),
    _float("seconds", nullable=False),
    _float("val_accuracy"),
    sa.UniqueConstraint("run_id", "samples"),
)

# columns once NOT NULL that the baseline lets be empty: a run with evaluate_test=false stores no
# test accuracy (issue 30: a tuning trial never reads the test split)
RELAXED = (("taskresult", "accuracy"), ("anytimeeval", "accuracy"))
