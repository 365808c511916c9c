"""The store: SQLModel tables on an engine from db.py, and the only place with SQL.

    queries.py      every read the faces make (RunRecords, JSON shapes, a run's parts)
    transitions.py  every status change, each one guarded transition
    runs.py         writing what a run produces (run rows, stream plans, results, memory)
    records.py      the frozen RunRecord (metrics by catalogue name), cross-run metrics applied (pure)
    filters.py      the run filter grammar (pure)
"""

from .db import (
    SQLITE_MAX_INT, StoreDamaged, StoreError, StoreFull, StoreGone, StoreLocked, database_path, database_url,
    database_url_object, get_engine, home, impatient, reading, shown_url, write,
)
from .filters import FilterError, RunFilter, parse_run_filter
from .queries import (
    RunParts, UnknownRun, accuracy_curves, anytime_curves, anytime_evals, checkpoint_checksums, count_runs,
    epoch_json, epoch_metrics, find_runs, get_run, job_states, joint_accuracy, joint_run, list_runs, memory_snapshots,
    newest_run_id, live_records, poll_runs, RunsPoll, run_detail, run_parts, run_record, run_records, run_statuses, run_summary, store_id, sweep_ids,
    task_results, task_streams, validation_curves, anytime_validation_curves,
)
from .records import JOINT_KEYS, RunRecord, show_value, with_intransigence
from .runs import (
    create_run, create_runs, delete_results_from, record_anytime, record_epochs, record_memory, record_start,
    record_task, set_archived, set_name, set_note, summarize_results, tag_runs, update_run,
)
from .tables import (
    ACTIVE, STATUSES, AnytimeEval, EpochMetric, MemorySnapshot, Run, StoreIdentity, TaskResult, TaskStream, table_names,
    utcnow,
)
from .transitions import (
    Lease, LeaseLost, Transition, claim_run, delete_run, ensure_token, fail_stopped_run, finish_run, heartbeat,
    mark_failed, mark_finished, mark_stopped, requeue_run,
)

__all__ = [
    "SQLITE_MAX_INT", "impatient", "StoreDamaged", "StoreFull", "StoreGone", "StoreLocked", "database_path", "database_url_object",
    "checkpoint_checksums", "store_id", "StoreIdentity", "Lease", "LeaseLost", "ensure_token",
    "ACTIVE", "AnytimeEval", "anytime_curves", "anytime_evals", "record_anytime", "JOINT_KEYS", "STATUSES", "EpochMetric", "FilterError", "MemorySnapshot", "Run", "RunFilter",
    "RunParts", "RunRecord", "StoreError", "TaskResult", "TaskStream", "Transition", "UnknownRun", "accuracy_curves",
    "claim_run", "count_runs", "create_run", "create_runs", "database_url", "delete_results_from", "delete_run",
    "epoch_json", "epoch_metrics", "newest_run_id", "record_epochs", "set_archived", "set_name", "set_note",
    "tag_runs", "fail_stopped_run", "find_runs", "finish_run", "get_engine", "get_run", "heartbeat", "home",
    "job_states", "joint_accuracy", "joint_run", "list_runs", "mark_failed", "mark_finished",
    "mark_stopped", "memory_snapshots",
    "parse_run_filter", "reading", "record_memory", "record_start", "record_task", "requeue_run", "run_detail",
    "run_parts", "live_records", "poll_runs", "RunsPoll", "run_record", "run_records", "run_statuses", "run_summary",
    "show_value", "shown_url", "summarize_results", "sweep_ids", "table_names", "task_results", "validation_curves",
    "anytime_validation_curves", "task_streams", "update_run", "utcnow", "with_intransigence", "write",
]
