"""The one place the store turns a run's values (cl/results.py) into table rows and back.

Driven by the fields: a value's field that is a column of its table (same name) is written and
read as it is; a column the value has not (run_id, the row's id, checkpoint_sha256, its time) is
the store's own. So a figure added to a results type and to its table is stored and read with
no line here.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar, cast

from sqlmodel import SQLModel

from ..cl.results import AnytimePoint, MemoryUpdate, TaskOutcome, TaskPlan
from .tables import AnytimeEval, MemorySnapshot, TaskResult, TaskStream

V = TypeVar("V")

# each results type and the table that keeps it
TABLE_OF: dict[type[Any], type[SQLModel]] = {
    TaskPlan: TaskStream,
    TaskOutcome: TaskResult,
    AnytimePoint: AnytimeEval,
    MemoryUpdate: MemorySnapshot,
}


def columns(value: Any) -> dict[str, Any]:
    """The table columns of a results value: its fields that its table has (not the row's id,
    which the store gives a new row)."""
    names = TABLE_OF[type(value)].model_fields
    return {f.name: getattr(value, f.name) for f in fields(value) if f.name in names and f.name != "id"}


def row_of(value: Any, **store_columns: Any) -> Any:
    """A new table row holding `value` (with the store's own columns, e.g. run_id)."""
    return TABLE_OF[type(value)](**columns(value), **store_columns)


def value_of(kind: type[V], row: Any, **more: Any) -> V:
    """The results value a stored row holds (its fields that the table has; the rest default)."""
    names = type(row).model_fields
    # (a results dataclass: its fields are its arguments)
    known = {f.name: getattr(row, f.name) for f in fields(cast(Any, kind)) if f.init and f.name in names}
    return kind(**known, **more)


def outcome_of(row: TaskResult) -> TaskOutcome:
    return value_of(TaskOutcome, row)


def point_of(row: AnytimeEval) -> AnytimePoint:
    return value_of(AnytimePoint, row)


def plan_of(row: TaskStream) -> TaskPlan:
    return value_of(TaskPlan, row)


def update_of(row: MemorySnapshot) -> MemoryUpdate:
    return value_of(MemoryUpdate, row, at=row.created_at)
