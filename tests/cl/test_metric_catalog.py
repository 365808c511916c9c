"""The metric catalogue (rmconsole/cl/metric_catalog.py): each built-in row's computation, at
values where a wrong rule shows, and the registry's plug-ins (rmconsole/metric_registry.py)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from rmconsole import metric_registry, plugins
from rmconsole.cl import metric_catalog as C
from rmconsole.cl.metric_catalog import Metric, RunRows
from rmconsole.cl.results import AnytimePoint, TaskOutcome

TASK_FREE = {"stream": "iblurry"}


def value(name: str, rows: RunRows) -> float | None:
    return C.summarize(rows).get(name)


def test_a_last_and_a_avg_are_the_last_and_the_mean_of_the_task_accuracies() -> None:
    rows = RunRows(
        tasks=[
            TaskOutcome(0, 90.0, [90.0, None, None]),
            TaskOutcome(1, 60.0, [50.0, 70.0, None]),
            TaskOutcome(2, 30.0, [10.0, 20.0, 60.0]),
        ]
    )
    assert value("A_last", rows) == 30.0  # not the best, not the first
    assert value("A_avg", rows) == 60.0  # (90 + 60 + 30) / 3, not the mean of the last row
    assert value("A_last", RunRows()) is None and value("A_avg", RunRows()) is None


def test_a_auc_is_the_unweighted_mean_of_the_anytime_points() -> None:
    """Points taken on 2, 4 and 10 classes: A_auc is the plain mean of their accuracies (a mean
    weighted by class count, or by samples seen, gives another number)."""
    points = [AnytimePoint(0, 100, 90.0, 2), AnytimePoint(0, 200, 60.0, 4), AnytimePoint(0, 1000, 30.0, 10)]
    rows = RunRows(config=TASK_FREE, anytime=points)
    assert value("A_auc", rows) == pytest.approx(60.0)
    assert value("anytime_evals", rows) == 3
    assert value("A_auc", RunRows(config=TASK_FREE)) is None
    assert "A_auc" not in C.summarize(RunRows(anytime=points))  # the RM paper's protocol has no A_auc


def test_f_last_is_per_task_for_the_task_protocol_and_class_wise_for_task_free_runs() -> None:
    """The same rows: the RM paper's F_last averages the drop of each earlier task's accuracy
    (acc[k][j]); the follow-up's averages the drop of each class with a best above 0."""
    tasks = [
        TaskOutcome(0, 80.0, [80.0, None], class_accuracy=[100.0, 60.0, 0.0, 0.0]),
        TaskOutcome(1, 50.0, [40.0, 60.0], class_accuracy=[40.0, 0.0, 70.0, 50.0]),
    ]
    assert value("F_last", RunRows(tasks=tasks)) == pytest.approx(40.0)  # task 0: 80 -> 40
    # classes 0 and 1 had a best above 0 before the last task: (100 - 40 + 60 - 0) / 2; classes 2
    # and 3 (first seen in the last task) are not forgotten
    assert value("F_last", RunRows(config=TASK_FREE, tasks=tasks)) == pytest.approx(60.0)
    assert value("F_last", RunRows(tasks=tasks[:1])) is None  # one task: nothing to forget


def test_best_over_epochs_only_when_every_task_recorded_it() -> None:
    tasks = [
        TaskOutcome(0, 80.0, [80.0, None], best_epoch_accuracy=85.0),
        TaskOutcome(1, 70.0, [70.0, 70.0], best_epoch_accuracy=75.0),
    ]
    assert value("A_last_best_epoch", RunRows(tasks=tasks)) == 75.0
    tasks[0] = TaskOutcome(0, 80.0, [80.0, None])  # a resumed run that recorded it for some tasks only
    assert value("A_last_best_epoch", RunRows(tasks=tasks)) is None


def test_top_k_figures_only_when_every_task_measured_them_with_one_k() -> None:
    tasks = [
        TaskOutcome(0, 40.0, [40.0, None], topk=5, topk_accuracy=70.0, topk_accuracy_row=[70.0, None]),
        TaskOutcome(1, 30.0, [20.0, 40.0], topk=5, topk_accuracy=60.0, topk_accuracy_row=[50.0, 70.0]),
    ]
    summary = C.summarize(RunRows(tasks=tasks))
    assert (summary["A_last_topk"], summary["A_avg_topk"], summary["F_last_topk"]) == (60.0, 65.0, 20.0)
    assert summary["A_last"] == 30.0  # top-1 stays top-1
    tasks[1] = TaskOutcome(1, 30.0, [20.0, 40.0], topk=3, topk_accuracy=60.0, topk_accuracy_row=[50.0, 70.0])
    assert C.summarize(RunRows(tasks=tasks))["A_last_topk"] is None  # resumed with another k


def test_online_figures_are_the_loops_own_and_only_of_task_free_runs() -> None:
    online = {"train_seconds": 12.5, "wall_seconds": 20.0, "samples_skipped": 0}
    summary = C.summarize(RunRows(config=TASK_FREE, online=online))
    assert summary["train_seconds"] == 12.5 and summary["samples_skipped"] == 0.0 and summary["eval_seconds"] is None
    assert "train_seconds" not in C.summarize(RunRows(online=online))


# ---------------------------------------------------------------------- I_last: the joint-run rule


@dataclass(frozen=True)
class Run:
    id: int
    method: str = "rm"
    status: str = "finished"
    config: Mapping[str, Any] = field(default_factory=lambda: {"dataset": "mnist", "model": "mlp", "seed": 1})
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    partial: bool = False


def i_last(run: Run, *candidates: Run) -> C.CrossValue:
    rule = C.JOINT_RULE
    return rule.value(run, rule.index(candidates), C.RuleContext())


def test_i_last_only_against_a_matching_finished_joint_run() -> None:
    run = Run(1, metrics={"A_last": 80.0})
    joint = Run(2, method="joint", metrics={"A_last": 95.0})
    assert i_last(run, joint) == C.CrossValue(15.0, 2, ())
    assert i_last(run, Run(3, method="joint", status="stopped", metrics={"A_last": 99.0})).value is None  # unfinished
    other_seed = Run(
        4, method="joint", config={"dataset": "mnist", "model": "mlp", "seed": 2}, metrics={"A_last": 99.0}
    )
    assert i_last(run, other_seed).value is None
    other_data = Run(
        5, method="joint", config={"dataset": "cifar10", "model": "mlp", "seed": 1}, metrics={"A_last": 99.0}
    )
    assert i_last(run, other_data).value is None
    assert i_last(run, Run(6, method="ewc", metrics={"A_last": 99.0})).value is None  # not a joint run
    assert i_last(Run(7, metrics={"A_last": 80.0}, partial=True), joint).value is None  # a partial A_last: none
    assert i_last(joint, joint).value is None  # the upper bound has no intransigence
    # the newest matching joint run, not the best one (that would select on the test set)
    older_better = Run(1, method="joint", metrics={"A_last": 99.0})
    assert i_last(Run(9, metrics={"A_last": 80.0}), older_better, joint) == C.CrossValue(15.0, 2, ())


def test_i_last_prefers_the_same_augmentation_and_names_what_differs() -> None:
    config = {"dataset": "mnist", "model": "mlp", "seed": 1, "augment": ["cutmix"], "epochs": 3}
    run = Run(1, config=config, metrics={"A_last": 80.0})
    plain = Run(5, method="joint", config={**config, "augment": [], "epochs": 50}, metrics={"A_last": 96.0})
    same = Run(3, method="joint", config={**config, "epochs": 50}, metrics={"A_last": 95.0})
    assert i_last(run, plain, same) == C.CrossValue(15.0, 3, ())  # older, but the same augmentation; epochs: its recipe
    assert i_last(run, plain) == C.CrossValue(16.0, 5, (("augment", ["cutmix"], []),))


# ---------------------------------------------------------------------- aggregation, old stores


def test_seeds_aggregate_as_mean_and_sample_std() -> None:
    assert C.mean_std([1.0, 3.0]) == (2.0, pytest.approx(2**0.5))
    assert C.mean_std([4.0]) == (4.0, None) and C.mean_std([]) == (None, None)


def test_a_run_stored_by_an_older_version_keeps_its_metrics() -> None:
    """`run.metrics` as versions before the catalogue wrote it (None for the unmeasured, NaN
    for a diverged run, run facts beside): the record keeps every number by its name."""
    from rmconsole.store.records import stored_metrics

    old = {"A_last": 86.0, "A_avg": 75.5, "F_last": None, "tasks_done": 5, "topk": 5, "A_last_topk": float("nan")}
    assert stored_metrics(old) == {"A_last": 86.0, "A_avg": 75.5}


# ---------------------------------------------------------------------- plug-ins


def _last_task_classes(rows: RunRows) -> float | None:
    return rows.tasks[-1].accuracy_row[-1] if rows.tasks else None


PLUGIN = Metric("A_latest", "A latest", "accuracy on the last task's classes", compute=_last_task_classes)


@pytest.fixture
def installed(monkeypatch):
    """Two metric plug-ins as if installed: one that loads, one whose import fails."""
    found = {
        "A_latest": plugins.Plugin("metric", "A_latest", "tests.x:PLUGIN", "latest-metric", "1.0"),
        "broken": plugins.Plugin("metric", "broken", "no_such_module:M", "broken-metric", "0.1"),
    }
    real = plugins.available
    monkeypatch.setattr(plugins, "available", lambda kind: dict(found) if kind == "metric" else real(kind))
    monkeypatch.setitem(plugins._loaded, ("metric", "A_latest"), PLUGIN)
    yield
    plugins._loaded.pop(("metric", "A_latest"), None)


def test_a_plugin_metric_is_listed_loaded_and_summarized_and_a_broken_one_is_one_line(installed) -> None:
    assert metric_registry.metric_names()[-2:] == ["A_latest", "broken"]
    assert metric_registry.metric("A_latest") is PLUGIN
    with pytest.raises(plugins.PluginError, match=r"broken-metric.*no_such_module") as err:
        metric_registry.metric("broken")
    assert "\n" not in str(err.value)
    names = [m.name for m in metric_registry.catalogue()]
    assert "A_latest" in names and "broken" not in names and "A_last" in names  # the rest keeps working
    assert any("broken" in line for line in metric_registry.problems())
    rows = RunRows(tasks=[TaskOutcome(0, 80.0, [80.0, None]), TaskOutcome(1, 70.0, [60.0, 75.0])])
    assert metric_registry.summarize(rows)["A_latest"] == 75.0
    with pytest.raises(metric_registry.UnknownMetric, match="unknown metric 'nope'; metrics: A_auc, A_last"):
        metric_registry.metric("nope")


def test_a_plugin_metric_filters_and_reports_like_a_built_in(installed) -> None:
    from rmconsole import report as R
    from rmconsole.store import RunRecord, parse_run_filter
    from rmconsole.store.filters import FilterError

    def record(run_id: int, latest: float) -> RunRecord:
        return RunRecord(
            id=run_id,
            status="finished",
            preset=None,
            method="rm",
            dataset="digits",
            memory_size=200,
            seed=run_id,
            n_tasks=2,
            task=None,
            phase=None,
            phase_done=0,
            phase_total=0,
            samples_per_s=None,
            eta_s=None,
            tasks_done=2,
            sweep_id=None,
            error=None,
            metrics={"A_last": 70.0, "A_latest": latest},
            config={"method": "rm", "seed": run_id},
        )

    runs = [record(1, 75.0), record(2, 85.0)]
    assert [r.id for r in parse_run_filter("a_latest>80").select(runs)] == [2]
    with pytest.raises(FilterError, match=r"known keys: .*A_latest"):
        parse_run_filter("A_lateest>1")
    rep = R.build_report([r.to_json() for r in runs], metrics=["A_latest"])
    assert R.cell_text(rep, rep.cell(0, 0), "A_latest") == "80.00 ± 7.07"
    assert "A latest ↑" in R.to_markdown(rep)
    with pytest.raises(R.ReportError, match="broken-metric"):
        R.build_report([r.to_json() for r in runs], metrics=["broken"])


# ---------------------------------------------------------------------- one declaration, every face


def test_f_max_is_the_worst_task_drop() -> None:
    rows = RunRows(
        tasks=[
            TaskOutcome(0, 90.0, [90.0, None, None]),
            TaskOutcome(1, 75.0, [70.0, 80.0, None]),
            TaskOutcome(2, 55.0, [30.0, 75.0, 60.0]),
        ]
    )
    assert value("F_max", rows) == 60.0  # task 0: best 90 -> 30; F_last is the mean, (60 + 5) / 2
    assert value("F_last", rows) == 32.5
    assert value("F_max", RunRows(tasks=rows.tasks[:1])) is None


def test_a_metric_declared_once_reaches_every_face(isolated_home) -> None:
    """F_max is one catalogue row: with nothing else written for it, the store computes it and
    it appears in `report --metrics`, the runs filter and the TUI's sort, `show`, the TUI's
    compare page, `diff` and the exports."""
    from typer.testing import CliRunner

    from rmconsole import cli, export, store
    from rmconsole import report as R
    from rmconsole.cl.events import TaskOutcome
    from rmconsole.config import load_config
    from rmconsole.tui import data
    from rmconsole.tui.screens.compare import metric_columns

    def stored(rows: list[list[float | None]]) -> int:
        _, cfg = load_config(None, {})
        run_id = store.create_run(cfg.to_dict(), "digits")
        for t, row in enumerate(rows):
            accuracy = sum(v for v in row if v is not None) / len([v for v in row if v is not None])
            store.record_task(run_id, TaskOutcome(t, accuracy, row, [accuracy] * 10, list(range(10)), 1.0))
        store.update_run(run_id, status="finished", n_tasks=len(rows))  # every task done: final metrics
        return run_id

    a = stored([[90.0, None, None], [70.0, 80.0, None], [30.0, 75.0, 60.0]])  # F_max 60
    b = stored([[90.0, None, None], [85.0, 80.0, None], [80.0, 70.0, 60.0]])  # F_max 10
    assert store.run_detail(a)["metrics"]["F_max"] == 60.0  # stored by the store, from the catalogue
    assert [r.id for r in store.find_runs("F_max>50")] == [a]  # runs filter
    rows = data.load_run_rows()
    assert "F_max" in data.sort_columns() and [r.id for r in data.arrange(rows, "", "F_max", True)] == [a, b]
    rep = R.build_report([r.to_json() for r in rows], rows=["seed"], metrics=["F_max"])  # report --metrics
    assert "F_max ↓" in R.to_markdown(rep)
    shown = CliRunner().invoke(cli.app, ["show", str(a)])  # show
    assert shown.exit_code == 0 and "F_max 60.00" in " ".join(shown.output.split())
    assert "F_max" in metric_columns(tuple(rows))  # the TUI's compare page
    diff = R.run_diff(store.run_detail(a), store.run_detail(b))  # diff
    assert ("F_max", "60.00", "10.00", "-50.00") in diff["metrics"]
    assert ("F_max", 60.0) in export._finals(store.run_detail(a))  # MLflow / TensorBoard


def test_a_filter_on_a_broken_plugin_metric_says_why_in_one_line(installed) -> None:
    from rmconsole.store import parse_run_filter
    from rmconsole.store.filters import FilterError

    with pytest.raises(FilterError, match=r"metric plug-in 'broken' .*broken-metric.*failed to load") as err:
        parse_run_filter("broken>1")
    assert "\n" not in str(err.value)
    assert parse_run_filter("A_last>1")  # every other metric keeps working


def test_a_run_stored_before_the_catalogue_still_shows_and_reports(isolated_home) -> None:
    """`run.metrics` exactly as the previous version wrote it (no F_max, None for what it did not
    measure): `show --json`, `runs` and `report` read it by the catalogue's names."""
    from rmconsole import report as R
    from rmconsole import store
    from rmconsole.config import load_config

    _, cfg = load_config(None, {})
    run_id = store.create_run(cfg.to_dict(), "digits")
    old = {"A_last": 86.0, "A_avg": 75.5, "F_last": None, "tasks_done": 5}
    store.update_run(run_id, status="finished", n_tasks=5, metrics=old)
    detail = store.run_detail(run_id)
    assert {k: detail["metrics"][k] for k in ("A_last", "A_avg", "F_last", "I_last")} == {
        "A_last": 86.0,
        "A_avg": 75.5,
        "F_last": None,
        "I_last": None,
    }
    assert "F_max" not in detail["metrics"] and detail["metrics"]["partial"] is False
    assert [r.id for r in store.find_runs("A_last>80")] == [run_id]
    rep = R.build_report([r.to_json() for r in store.find_runs()])
    assert rep.metrics == ["A_last", "A_avg", "F_last", "I_last"]
    assert R.cell_text(rep, rep.cell(0, 0), "A_last") == "86.00" and R.cell_text(rep, rep.cell(0, 0), "F_last") == "—"


def test_a_run_is_tested_only_when_every_task_end_and_every_anytime_point_has_its_test_figure() -> None:
    """Test metrics are absent, never 0, for a run that skipped any test evaluation: a task end or
    an anytime point without one (evaluate_test=false) is enough."""
    tasks = [TaskOutcome(0, 90.0, [90.0, None]), TaskOutcome(1, 60.0, [50.0, 70.0])]
    points = [AnytimePoint(0, 100, 80.0, 2), AnytimePoint(0, 200, 70.0, 4)]
    assert RunRows(config=TASK_FREE, tasks=tasks, anytime=points).tested
    assert not RunRows(config=TASK_FREE, tasks=tasks, anytime=[*points, AnytimePoint(0, 300, None, 4)]).tested
    assert not RunRows(config=TASK_FREE, tasks=[*tasks, TaskOutcome(2, None, None)], anytime=points).tested


def test_a_metrics_value_is_a_float_a_count_stays_an_int_and_a_flag_becomes_a_number() -> None:
    """`Metric.value` hands the faces a number: a count (int) as it is, anything else as float —
    a rule returning a bool gives 1.0 or 0.0, never True (which a report would print as 'True')."""

    def metric(result: Any) -> Metric:
        return Metric("m", "m", "m", compute=lambda rows: result)

    assert metric(3).value(RunRows()) == 3 and type(metric(3).value(RunRows())) is int
    assert type(metric(True).value(RunRows())) is float and metric(True).value(RunRows()) == 1.0
    assert type(metric(2.5).value(RunRows())) is float
