"""`evaluate_test=false` (issue 30): a run that measures validation only never reads the test
split, under both protocols; its test figures are stored as absent and its test metrics are
absent (never 0); the pair with val_fraction=0 (a run that measures nothing) is refused; and
`rmconsole tune` gives it to every trial. The test split is poisoned at the data level: every
read of it (images, labels, length) is counted and raises."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rmconsole import store
from rmconsole.cl.images import Dataset
from rmconsole.config import ConfigError, load_config
from rmconsole.runner import worker

FAST = ["epochs=1", "n_tasks=2", "val_fraction=0.2", 'augment="none"', "evaluate_test=false"]
TASK_FREE = [*FAST, 'stream="iblurry"', 'method="er"', 'schedule="constant"', "eval_period=100", "memory_size=200"]


class PoisonedSplit:
    """A test split whose every read is recorded and raises: a run that reads it fails, and
    the record says what was read even if the error were swallowed."""

    def __init__(self, real: Any, reads: list[str]) -> None:
        self._real, self._reads = real, reads

    def _read(self, what: str) -> None:
        self._reads.append(what)
        raise AssertionError(f"the test split was read ({what})")

    @property
    def labels(self) -> torch.Tensor:
        self._read("labels")
        return self._real.labels

    @property
    def shape(self) -> tuple[int, int, int]:
        self._read("shape")
        return self._real.shape

    def __len__(self) -> int:
        self._read("len")
        return len(self._real)

    def take(self, idx: torch.Tensor) -> torch.Tensor:
        self._read("take")
        return self._real.take(idx)

    def to(self, device: Any) -> PoisonedSplit:  # moving it reads nothing
        return self


def run_poisoned(pairs: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """A run of `pairs` trained in this process with its test split poisoned: (run id, reads)."""
    reads: list[str] = []
    real_load = worker.load_run_dataset

    def load(cfg: Any, cache: Any) -> Dataset:
        data = real_load(cfg, cache)
        return Dataset(
            data.name,
            data.train,
            PoisonedSplit(data.test, reads),
            data.class_names,
            data.mean,
            data.std,
            data.crop_padding,
        )

    monkeypatch.setattr(worker, "load_run_dataset", load)
    preset, cfg = load_config(None, pairs)
    run_id = store.create_run(cfg.to_dict(), preset)
    threads = torch.get_num_threads()
    try:
        assert worker.train(run_id) == "finished"
    finally:
        torch.set_num_threads(threads)
    return run_id, reads


@pytest.mark.parametrize("pairs", [FAST, TASK_FREE], ids=["task", "task-free"])
def test_a_validation_only_run_reads_no_test_sample(pairs: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    run_id, reads = run_poisoned(pairs, monkeypatch)
    assert reads == []
    results = store.task_results(run_id)
    assert len(results) == 2
    assert all(r.accuracy is None and r.val_accuracy is not None for r in results)
    record = store.run_record(run_id)
    for name in ("A_last", "A_avg", "F_last", "A_auc"):
        assert record.value(name) is None, name  # absent, never 0
    assert record.value("val_A_last") is not None
    if 'stream="iblurry"' in pairs:
        points = store.anytime_evals(run_id)
        assert points and all(p.accuracy is None and p.val_accuracy is not None for p in points)
        assert record.value("val_A_auc") is not None


def test_the_poison_bites_on_an_ordinary_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run with evaluate_test left on reads the test split (and so fails here)."""
    with pytest.raises(AssertionError, match="the test split was read"):
        run_poisoned([p for p in FAST if not p.startswith("evaluate_test")], monkeypatch)


@pytest.mark.parametrize(
    ("pairs", "says"),
    [
        (["evaluate_test=false"], "evaluate_test=false: with val_fraction=0 the run would measure nothing"),
        (["evaluate_test=false", "val_fraction=0.1", "eval_every_epoch=true"], "eval_every_epoch=true evaluates on"),
    ],
)
def test_a_run_that_would_measure_nothing_is_refused_in_one_line(pairs: list[str], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, pairs)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_the_default_evaluates_on_test() -> None:
    assert load_config(None, [])[1].evaluate_test is True


def test_a_study_gives_its_trials_evaluate_test_false() -> None:
    from rmconsole.runner import tune as tuning

    assert "evaluate_test=false" in tuning.TRIAL_PAIRS
    spec, _ = tuning.prepare(
        "blindtrials",
        pairs=["val_fraction=0.2", "epochs=1"],
        params=["lr=log:1e-3..1e-1"],
        metric="val_A_last",
        trials=1,
        sampler="random",
    )
    assert tuning._config_with(spec, {"lr": 0.01}).evaluate_test is False
    with pytest.raises(tuning.TuneError, match="never evaluate on the test set"):
        tuning.prepare(
            "blindtrials2",
            pairs=["val_fraction=0.2", "evaluate_test=true"],
            params=["lr=log:1e-3..1e-1"],
            metric="val_A_last",
            trials=1,
            sampler="random",
        )


@pytest.mark.asyncio
async def test_the_run_page_shows_absent_test_figures_as_dashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TUI's runs table and run page of validation-only runs (both protocols): `—` where a
    test figure would be, the validation figures beside it, nothing drawn as 0."""
    from test_tui import SIZE, cell, table_ids, until

    from rmconsole.tui import RMConsoleApp
    from rmconsole.tui.screens.run import RunScreen
    from rmconsole.tui.widgets.accuracy_panel import AccuracyPanel
    from rmconsole.tui.widgets.runs_table import RunsTable
    from rmconsole.tui.widgets.task_stream import TaskStreamPanel

    ids = [run_poisoned(FAST, monkeypatch)[0], run_poisoned(TASK_FREE, monkeypatch)[0]]
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        for run_id in ids:
            await until(pilot, lambda run_id=run_id: run_id in table_ids(app), what="the run's row")
            assert cell(app, run_id, "A_last") == "—"
            table = app.screen.query_one(RunsTable)
            table.move_cursor(row=table.get_row_index(str(run_id)))
            await pilot.press("enter")
            await until(
                pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, what="run view"
            )
            await pilot.pause(0.3)
            panel = app.screen.query_one(AccuracyPanel)
            metrics = str(panel.query_one("#metrics").render())
            assert "A_last —" in metrics or "A_last: —" in metrics or "—" in metrics, metrics
            # (the compute line below the metrics holds small FLOP figures such as 0.0032: not test figures)
            assert "0.00" not in metrics.split("\ncompute")[0], metrics
            stream = app.screen.query_one(TaskStreamPanel).render().plain
            assert "0.0%" not in stream, stream
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, RunScreen), what="back to the runs")


def _make_strict(engine: Any) -> None:
    """Turn the store back into one written before evaluate_test: accuracy NOT NULL again."""
    from sqlalchemy import text

    with engine.begin() as conn:
        conn.execute(text("DROP TABLE rmconsole_schema_version"))  # (and before schema versions)
        if engine.dialect.name == "postgresql":
            for table in ("taskresult", "anytimeeval"):
                conn.execute(text(f"ALTER TABLE {table} ALTER COLUMN accuracy SET NOT NULL"))
            return
        for table in ("taskresult", "anytimeeval"):  # SQLite: rebuild with the old declaration
            sql = conn.execute(text("SELECT sql FROM sqlite_master WHERE name = :t"), {"t": table}).scalar_one()
            assert "accuracy FLOAT," in sql
            indexes = [
                r[0]
                for r in conn.execute(
                    text("SELECT sql FROM sqlite_master WHERE tbl_name = :t AND type = 'index' AND sql IS NOT NULL"),
                    {"t": table},
                )
            ]
            conn.execute(text(f"ALTER TABLE {table} RENAME TO old_{table}"))
            for index in (
                conn.execute(
                    text("SELECT name FROM sqlite_master WHERE tbl_name = :t AND type = 'index' AND sql IS NOT NULL"),
                    {"t": f"old_{table}"},
                )
                .scalars()
                .all()
            ):
                conn.execute(text(f"DROP INDEX {index}"))
            conn.execute(text(sql.replace("accuracy FLOAT,", "accuracy FLOAT NOT NULL,", 1)))
            for index_sql in indexes:
                conn.execute(text(index_sql))
            conn.execute(text(f"INSERT INTO {table} SELECT * FROM old_{table}"))
            conn.execute(text(f"DROP TABLE old_{table}"))


@pytest.mark.usefixtures("store_backend")
def test_a_store_written_before_lets_test_accuracy_be_absent() -> None:
    """A store whose accuracy columns are NOT NULL (written before evaluate_test) is relaxed when
    opened: its rows are kept, and a validation-only task result can then be stored."""
    from sqlalchemy import inspect

    from rmconsole.cl.events import TaskOutcome
    from rmconsole.store import db

    run_id = store.create_run({"method": "rm", "dataset": "digits", "seed": 1}, "digits-blurry10-online")
    store.record_task(run_id, TaskOutcome(0, 50.0, [50.0, None], [50.0] * 10, list(range(5)), 1.0))
    _make_strict(store.get_engine())
    db.dispose_engines()
    engine = store.get_engine()
    with engine.connect() as conn:  # opening the store relaxed the columns
        for table in ("taskresult", "anytimeeval"):
            assert next(c for c in inspect(conn).get_columns(table) if c["name"] == "accuracy")["nullable"]
    store.record_task(run_id, TaskOutcome(1, None, None, None, list(range(10)), 1.0, val_accuracy=60.0))
    results = store.task_results(run_id)
    assert [r.accuracy for r in results] == [50.0, None] and results[1].val_accuracy == 60.0
