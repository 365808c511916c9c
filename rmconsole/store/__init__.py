"""The store: SQLModel tables on an engine from db.py, and the only place with SQL.

    queries.py      every read the faces make (RunRecords, JSON shapes, a run's parts)
    transitions.py  every status change, each one guarded transition
    runs.py         writing what a run produces (run rows, stream plans, results, memory)
    records.py      the frozen RunRecord and the one joint-run rule (pure)
    filters.py      the run filter grammar (pure)
"""

from .db import StoreError, database_url, get_engine, home, reading, shown_url, write
from .filters import FilterError, RunFilter, parse_run_filter
from .queries import (
    RunParts, UnknownRun, accuracy_curves, anytime_curves, anytime_evals, count_runs, find_runs, get_run,
    joint_accuracy, joint_run, list_runs,
    memory_snapshots, run_detail, run_parts, run_record, run_records, run_statuses, run_summary, sweep_ids,
    task_results, task_streams,
)
from .records import JOINT_KEYS, JointRuns, RunRecord, with_intransigence
from .runs import (
    create_run, create_runs, delete_results_from, record_anytime, record_memory, record_start, record_task,
    summarize_results,
    update_run,
)
from .tables import ACTIVE, STATUSES, AnytimeEval, MemorySnapshot, Run, TaskResult, TaskStream, utcnow
from .transitions import (
    Transition, claim_run, fail_stopped_run, finish_run, heartbeat, mark_failed, mark_finished, mark_stopped,
    requeue_run,
)

__all__ = [
    "ACTIVE", "AnytimeEval", "JOINT_KEYS", "STATUSES", "FilterError", "JointRuns", "MemorySnapshot", "Run", "RunFilter", "RunParts",
    "RunRecord", "StoreError", "TaskResult", "TaskStream", "Transition", "UnknownRun", "accuracy_curves",
    "anytime_curves", "anytime_evals",
    "claim_run", "count_runs", "create_run", "create_runs", "database_url", "delete_results_from",
    "fail_stopped_run", "find_runs", "finish_run", "get_engine", "get_run", "heartbeat", "home", "joint_accuracy",
    "joint_run", "list_runs", "mark_failed", "mark_finished", "mark_stopped", "memory_snapshots",
    "parse_run_filter", "reading", "record_anytime", "record_memory", "record_start", "record_task", "requeue_run",
    "run_detail",
    "run_parts", "run_record", "run_records", "run_statuses", "run_summary", "shown_url", "summarize_results",
    "sweep_ids", "task_results", "task_streams", "update_run", "utcnow", "with_intransigence", "write",
]
