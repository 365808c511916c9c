"""The store: SQLModel tables behind one small API (runs.py) on an engine from db.py."""

from .db import StoreError, database_url, get_engine, home, reading, write
from .runs import (
    UnknownRun, create_run, delete_results_from, get_run, joint_accuracy, list_runs, memory_snapshots,
    record_memory, record_start, record_task, run_detail, run_summary, task_results, task_streams, update_run,
)
from .tables import ACTIVE, STATUSES, MemorySnapshot, Run, TaskResult, TaskStream, utcnow

__all__ = [
    "ACTIVE", "STATUSES", "MemorySnapshot", "Run", "StoreError", "TaskResult", "TaskStream", "UnknownRun",
    "create_run", "database_url", "delete_results_from", "get_engine", "get_run", "home", "joint_accuracy",
    "list_runs", "memory_snapshots", "reading", "record_memory", "record_start", "record_task", "run_detail",
    "run_summary", "task_results", "task_streams", "update_run", "utcnow", "write",
]

# run lifecycle: conditional end-of-run transitions and fenced heartbeats (faults, issue 7)
from .db import shown_url  # noqa: E402
from .runs import finish_run, heartbeat, requeue_run  # noqa: E402

__all__ += ["finish_run", "heartbeat", "requeue_run", "shown_url"]
