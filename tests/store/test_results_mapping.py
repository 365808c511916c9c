"""The results values (cl/results.py) and their tables: one shape per fact, mapped by the fields."""

from __future__ import annotations

from dataclasses import fields
from datetime import UTC, datetime

from rmconsole.cl.results import TASK_JSON_KEYS, AnytimePoint, MemoryUpdate, TaskOutcome, TaskPlan, outcome_json
from rmconsole.store.mapping import TABLE_OF, columns, outcome_of, point_of, row_of, update_of

# the columns that are the store's own (not a fact of the run's values), and the fields that are no column
STORE_COLUMNS = {"id", "run_id", "checkpoint_sha256", "finished_at", "created_at"}
NOT_COLUMNS = {TaskOutcome: {"extra"}, MemoryUpdate: {"at"}}


def test_every_field_is_a_column_and_every_column_a_field() -> None:
    """A figure added to a results type without its column (or a column without its field) is
    caught here, not by a run that silently drops it."""
    for kind, table in TABLE_OF.items():
        names = {f.name for f in fields(kind)} - NOT_COLUMNS.get(kind, set())
        table_columns = set(table.model_fields) - STORE_COLUMNS
        assert names - {"id"} == table_columns, kind.__name__


def test_values_go_to_their_rows_and_come_back_the_same() -> None:
    outcome = TaskOutcome(
        1,
        70.0,
        [60.0, 80.0],
        [60.0, None, 80.0],
        [0, 1, 2],
        2.5,
        best_epoch_accuracy=72.0,
        extra={"online": {"A_auc": 1.0}},
        topk=3,
        topk_accuracy=90.0,
        topk_accuracy_row=[85.0, 95.0],
        val_accuracy=65.0,
        val_accuracy_row=[64.0, 66.0],
        val_class_accuracy=[64.0, None, 66.0],
    )
    row = row_of(outcome, run_id=7, checkpoint_sha256="ab")
    assert (row.run_id, row.checkpoint_sha256, row.topk_accuracy, row.val_accuracy_row) == (7, "ab", 90.0, [64.0, 66.0])
    assert outcome_of(row) == TaskOutcome(**{**outcome.__dict__, "extra": {}})  # the loop's extras are no column
    point = AnytimePoint(0, 100, 55.0, 4, [50.0, 60.0, None, 55.0], 0.5, 40.0, 1e9)
    assert point_of(row_of(point, run_id=7)) == point
    at = datetime(2026, 1, 2, tzinfo=UTC)
    update = MemoryUpdate(2, [3, 0, 5], 4, {"policy": "uncertainty", "chosen_uncertainty": [1, 2]})
    stored = row_of(update, run_id=7)
    assert stored.id is None  # the store gives a new row its id
    stored.id, stored.created_at = 9, at
    assert update_of(stored) == MemoryUpdate(2, [3, 0, 5], 4, update.info, id=9, at=at)
    assert (update_of(stored).size, update_of(stored).policy, update_of(stored).chosen_uncertainty) == (
        8,
        "uncertainty",
        (1, 2),
    )
    plan = TaskPlan(0, 10, [0, 1], [5, 5], "h", [(0, 0), (1, 3)])
    assert columns(plan)["first_appearances"] == [(0, 0), (1, 3)]


def test_show_json_writes_an_outcome_in_its_published_order() -> None:
    """`show --json` is unchanged byte for byte: its per-task keys in their order, the validation
    ones only where measured (an undone task: every other key, null)."""
    plain = TaskOutcome(0, 80.0, [80.0], [80.0, 80.0], [0, 1], 1.5)
    no_val = [k for k in TASK_JSON_KEYS if not k.startswith("val_")]
    assert list(outcome_json(plain)) == no_val
    assert outcome_json(None) == dict.fromkeys(no_val)
    validated = TaskOutcome(0, None, None, None, [0, 1], 1.5, val_accuracy=60.0, val_accuracy_row=[60.0])
    assert list(outcome_json(validated)) == list(TASK_JSON_KEYS)
    assert TASK_JSON_KEYS[-1] == "seconds" and outcome_json(validated)["val_accuracy"] == 60.0
