"""Tuning at its borders (issue 38): `val_fraction` and `seed` are never searched; one rule, the
catalogue's declared split, says what a validation metric is in `tune` and `report --select-by`;
the grid sampler ends without Optuna's RuntimeError; and the scopes validation is scored on are
pinned: task-based validation on the classes seen so far (never the unseen ones), anytime
validation on the classes exposed so far (the scope A_auc uses), never on all classes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import install_fake_plugins
from support.campaign import claim
from support.online_helpers import config as tf_config
from support.online_helpers import tiny_data

from rmconsole import store
from rmconsole.cl.events import Reporter
from rmconsole.report import select_by
from rmconsole.runner import tune as tuning

HERE = "test_tune_border.py::"
FAST = ["epochs=1", "n_tasks=2", "val_fraction=0.2", 'augment="none"']


def prepare(name: str, params: list[str], metric: str = "val_A_last", **kw: Any) -> tuning.StudySpec:
    spec, new = tuning.prepare(name, pairs=list(FAST), params=params, metric=metric, **kw)
    assert new
    return spec


# ---------------------------------------------------------------------- what may be searched


@pytest.mark.parametrize("param", ["val_fraction=float:0.1..0.3", "val_fraction=choice:0.1,0.2"])
def test_the_keys_that_decide_the_validation_set_are_never_searched(param: str) -> None:
    """The reproduction: `--param val_fraction=...` with a preset fixing it above 0 scored each
    trial on another validation set and ranked them against each other."""
    pairs = [p for p in FAST if not p.startswith("val_fraction")]  # (a preset may fix it above 0)
    with pytest.raises(tuning.TuneError) as err:
        tuning.prepare("vf", pairs=pairs, params=[param], metric="val_A_last")
    text = str(err.value)
    assert "decides which samples are held out for validation" in text and "\n" not in text
    assert store.count_runs() == 0 and not tuning.study_names()


def test_searching_val_fraction_is_one_line_exit_2_on_the_command_line() -> None:
    from support.cli import in_process

    done = in_process(
        "tune", "--study", "s", "--param", "val_fraction=float:0.1..0.3", "--metric", "val_A_last",
        *[a for pair in FAST if not pair.startswith("val_fraction") for a in ("--set", pair)],
    )  # fmt: skip
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    claim(
        "tune searches val_fraction", HERE + "test_searching_val_fraction_is_one_line_exit_2_on_the_command_line"
    ).check(done.returncode, done.stderr)
    assert "val_fraction decides which samples are held out" in done.stderr


# ---------------------------------------------------------------------- one rule for "validation"

METRICS_SOURCE = """
from rmconsole.cl.metric_catalog import Metric
# named like a validation metric, measured on test: the prefix must not make it one
PREFIXED = Metric("val_peek", "val peek", "test accuracy under a val_ name", compute=lambda rows: 1.0)
# a validation metric without the prefix: declared so, it is one
HELD = Metric("heldout_acc", "held out", "validation accuracy", compute=lambda rows: 1.0, split="validation")
"""


@pytest.fixture
def declared_metrics(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    install_fake_plugins(
        monkeypatch,
        tmp_path,
        "metric",
        "plugsplit",
        METRICS_SOURCE,
        "plug-split",
        {"val_peek": "plugsplit:PREFIXED", "heldout_acc": "plugsplit:HELD"},
    )


@pytest.mark.usefixtures("declared_metrics")
def test_tune_and_select_by_follow_the_declared_split_not_the_name() -> None:
    """The reproduction: `tune` took `val_*` names as validation and `report --select-by` the
    declared split, so they disagreed on plug-in metrics (a test metric named val_x was tunable)."""
    with pytest.raises(tuning.TuneError, match="a test-set metric") as err:
        tuning.check_metric("val_peek")
    claim(
        "tune --metric on a test metric named val_…",
        HERE + "test_tune_and_select_by_follow_the_declared_split_not_the_name",
    ).check(None, str(err.value))
    with pytest.raises(select_by.SelectionError, match="measured on the test set"):
        select_by.check_metric("val_peek")
    assert tuning.check_metric("heldout_acc") == ("heldout_acc", "maximize")
    assert select_by.check_metric("heldout_acc").name == "heldout_acc"
    assert "heldout_acc" in tuning.validation_metrics() and "val_peek" not in tuning.validation_metrics()
    for name in ("A_last", "val_A_last", "val_A_avg"):  # the built-ins: both say the same
        tune_says = name in tuning.validation_metrics()
        try:
            select_by.check_metric(name)
            select_says = True
        except select_by.SelectionError:
            select_says = False
        assert tune_says == select_says, name


# ---------------------------------------------------------------------- the grid's end


def test_the_grid_sampler_ends_its_grid_without_an_error() -> None:
    """The reproduction: the grid's last `tell` called Optuna's Study.stop() outside an optimize
    loop, a RuntimeError, and `tune --sampler grid` exited 1 after its last trial."""
    spec = prepare("grid", ["lr=choice:0.01,0.1", "memory_size=choice:100,200"], sampler="grid")
    assert spec.trials == 4
    study = tuning.open_study(spec, create=True)
    driver = tuning.StudyDriver(spec, study)
    told = []
    while not driver.grid_done():
        trial = study.ask(driver.distributions)
        study.tell(trial, float(len(told)))  # raised RuntimeError on the last point
        told.append(tuple(sorted(trial.params.items())))
    assert len(told) == 4 and len(set(told)) == 4
    claim(
        "tune --sampler grid reaches the grid's end", HERE + "test_the_grid_sampler_ends_its_grid_without_an_error"
    ).check(None, "")
    assert driver.counts() == {"complete": 4}


# ---------------------------------------------------------------------- validation scopes


class Calls(Reporter):
    def __init__(self) -> None:
        self.calls: list[list[int]] = []  # the classes of each validation call, in order
        self.points: list[tuple[int, list[int]]] = []  # (n_classes, the classes its validation used)
        self.outcomes: list[tuple[Any, list[int]]] = []

    def anytime_evaluated(self, point: Any) -> None:
        self.points.append((point.n_classes, self.calls[-1]))

    def task_finished(self, outcome: Any, checkpoint: Any) -> None:
        self.outcomes.append((outcome, self.calls[-1]))


def watch_validation(monkeypatch: pytest.MonkeyPatch, module: Any, calls: Calls) -> None:
    real = module.validation

    def validation(method: Any, data: Any, indices: Any, train_labels: Any, classes: list[int], *rest: Any) -> Any:
        calls.calls.append(list(classes))
        return real(method, data, indices, train_labels, classes, *rest)

    monkeypatch.setattr(module, "validation", validation)


def test_task_based_validation_is_scored_on_the_seen_classes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation pinned: the task protocol's validation on every class (unseen ones included)."""
    import rmconsole.cl.loop as loop
    from rmconsole.config import load_config

    data = tiny_data()
    _, cfg = load_config(
        None,
        {
            "method": "er",
            "epochs": 1,
            "val_fraction": 0.2,
            "n_tasks": 2,
            "threads": 1,
            "blurry": 0,
            "memory_size": 20,
            "augment": "none",
        },
    )
    calls = Calls()
    import rmconsole.cl.resume as resume  # (the task protocol's validation: resume.validation_figures)

    watch_validation(monkeypatch, resume, calls)
    loop.run_protocol(cfg, data, torch.device("cpu"), calls)
    assert len(calls.outcomes) == 2
    first, used = calls.outcomes[0]
    assert sorted(used) == sorted(first.eval_classes) and len(used) < data.n_classes  # task 1: half the classes
    for outcome, used in calls.outcomes:
        assert sorted(used) == sorted(outcome.eval_classes)  # the test evaluation's scope, the seen classes
        scored = [c for c, acc in enumerate(outcome.val_class_accuracy) if acc is not None]
        assert set(scored) <= set(used), (scored, used)


def test_anytime_validation_is_scored_on_the_exposed_classes_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutation pinned: anytime validation on all classes instead of the ones exposed so far
    (the scope A_auc's test points use)."""
    import rmconsole.cl.online as online

    data = tiny_data()
    cfg = tf_config(method="er", val_fraction=0.2, n_tasks=2)
    calls = Calls()
    watch_validation(monkeypatch, online, calls)
    online.run_online(cfg, data, torch.device("cpu"), calls)
    assert calls.points, "no anytime point"
    assert any(n < data.n_classes for n, _ in calls.points), "every point saw every class: the test cannot tell"
    for n_classes, used in calls.points:
        assert used == list(range(n_classes)), (n_classes, used)


# ---------------------------------------------------------------------- a trial's run is its own


def test_a_study_never_shows_another_run_as_its_trial_after_rm() -> None:
    """The reproduction: after `rm` of a study's trial runs, a new run reused id 1 (SQLite reuses
    the highest id) and `tune --study` reported it as its best trial."""
    from rmconsole.config import load_config
    from rmconsole.runner import launch

    spec = prepare("ids", ["lr=choice:0.01,0.1"], sampler="grid")
    study = tuning.open_study(spec, create=True)
    _, cfg = load_config(None, {"val_fraction": 0.2})
    trial = study.ask(tuning.StudyDriver(spec, study).distributions)
    run_id = store.create_run(
        cfg.to_dict(), None, name=tuning.trial_name("ids", trial.number), tags=[tuning.study_tag("ids")]
    )
    trial.set_user_attr(tuning.RUN_ATTR, run_id)
    study.tell(trial, 80.0)
    store.mark_failed(run_id, "(a trial's run, ended for the test)")
    assert tuning.summarize("ids").best.run_id == run_id
    launch.delete_run(run_id)
    assert store.create_run(cfg.to_dict(), None, name="a later run") != run_id  # ids are never given twice now
    # a store upgraded after the trial's run was deleted (revision 0004 never saw that id): it is
    # given once more, what made the study point at another run
    import sqlite3

    with sqlite3.connect(store.database_path()) as conn:
        conn.execute("DELETE FROM run WHERE id > ?", (run_id,))
        conn.execute("UPDATE store_identity SET last_run_id = ?", (run_id - 1,))
    other = store.create_run(cfg.to_dict(), None, name="someone else's")
    assert other == run_id
    summary = tuning.summarize("ids")
    assert summary.best is not None and summary.best.run_id is None
    line = tuning.best_line("ids")
    assert line is not None and "its run was removed" in line and f"run {other}" not in line
    claim(
        "a study's trial run removed, its id reused",
        HERE + "test_a_study_never_shows_another_run_as_its_trial_after_rm",
    ).check(None, line)
