"""`rmconsole tune` (issue 30): a study's trials are runs, a killed driver's study continues,
pruning prunes, the study lives beside the store's own tables, and the selection reads no test
figure. Digits-sized runs (2 tasks, 1 memory epoch), one trial at a time."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from typer.testing import CliRunner

from rmconsole import store
from rmconsole.cli import app
from rmconsole.runner import tune as tuning

HAS_VALIDATION = "val_A_last" in tuning.validation_metrics()
needs_validation = pytest.mark.skipif(not HAS_VALIDATION, reason="the validation rows (branch valstream) are not here")

FAST = ["epochs=1", "n_tasks=2", "val_fraction=0.2", 'augment="none"']  # the digits demo preset, cut down


def cli(*args: str) -> Any:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def spec_of(
    name: str, trials: int, params: list[str], sampler: str = "random", tasks: int = 2, epochs: int = 1, **kw: Any
) -> tuning.StudySpec:
    pairs = [p if not p.startswith("n_tasks=") else f"n_tasks={tasks}" for p in FAST]
    pairs = [p if not p.startswith("epochs=") else f"epochs={epochs}" for p in pairs]
    spec, new = tuning.prepare(
        name, pairs=pairs, params=params, metric="val_A_last", trials=trials, sampler=sampler, **kw
    )
    assert new
    return spec


# ---------------------------------------------------------------------- bad input, one line each


@pytest.mark.parametrize(
    ("param", "says"),
    [
        ("lr", "expected KEY=log:LO..HI"),
        ("lr=lg:1..2", "unknown kind 'lg'"),
        ("lr=log:0..1", "positive low bound"),
        ("lr=float:2..1", "low bound must be below"),
        ("lr=float:a..b", "two numbers"),
        ("memory_size=int:1.5..3", "whole numbers"),
        ("augment=choice:none,", "an empty choice"),
        ("augment=choice:none,none", "given twice"),
        ("nosuchkey=float:0..1", "nosuchkey"),
    ],
)
def test_a_bad_param_is_one_line(param: str, says: str) -> None:
    with pytest.raises(tuning.TuneError) as err:
        tuning.parse_param(param)
    assert says in str(err.value) and "\n" not in str(err.value)


@needs_validation
def test_bad_studies_are_refused_before_anything_is_stored(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("A_last", "F_last", "A_auc"):  # first, directly: a broken check must not start a study below
        with pytest.raises(tuning.TuneError, match="a test-set metric"):
            tuning.check_metric(name)
    cases = [
        (
            ["--study", "s", "--param", "lr=log:1e-4..1e-1", "--metric", "A_last", "--set", "val_fraction=0.2"],
            "a test-set metric",
        ),
        (
            ["--study", "s", "--param", "lr=log:1e-4..1e-1", "--metric", "val_nope", "--set", "val_fraction=0.2"],
            "not a metric",
        ),
        (["--study", "s", "--param", "lr=log:1e-4..1e-1", "--metric", "val_A_last"], "val_fraction"),
        (
            [
                "--study",
                "s",
                "--param",
                "lr=log:1e-4..1.0e3",
                "--metric",
                "val_A_last",
                "--set",
                "val_fraction=0.2",
                "--sampler",
                "grid",
            ],
            "a grid needs choice",
        ),
        (
            ["--study", "s", "--param", "memory_size=int:-5..3", "--metric", "val_A_last", "--set", "val_fraction=0.2"],
            "-5 is refused",
        ),
        (["--study", "bad/name", "--param", "lr=log:1e-4..1e-1", "--metric", "val_A_last"], "a study name is"),
        (["--study", "s", "--metric", "val_A_last", "--set", "val_fraction=0.2"], "give the search space"),
        (["--study", "s", "--show"], "no such study"),
    ]
    from rmconsole.cli import main

    for args, says in cases:
        with pytest.raises(SystemExit) as exit_, pytest.MonkeyPatch.context() as patched:
            patched.setattr(sys, "argv", ["rmconsole", "tune", *args])
            main()
        err = capsys.readouterr().err
        assert exit_.value.code == 2, (args, err)
        assert says in err and len(err.strip().splitlines()) == 1, (args, err)
    assert store.count_runs() == 0


@needs_validation
@pytest.mark.empty_database
def test_a_refused_tune_writes_nothing(store_backend: str, isolated_home: Any, tmp_path: Any, monkeypatch: Any) -> None:
    """A refused `tune` (a bad param, a test-set metric, a bad study file, no such study, a missing
    dataset) created the store and Optuna's tables before it validated what it was asked: now
    nothing is written, on SQLite (no file at all) and on PostgreSQL (no table at all)."""
    from rmconsole.cli import main

    bad_file = tmp_path / "study.toml"
    bad_file.write_text('metrc = "val_A_last"\n')
    good_file = tmp_path / "good.toml"
    good_file.write_text(
        'name = "g"\nmetric = "val_A_last"\n[set]\nval_fraction = 0.2\n[params]\nlr = "log:1e-4..1e-1"\n'
    )
    monkeypatch.setenv("RMCONSOLE_DATA", str(tmp_path / "no-data"))
    base = ["--study", "s", "--set", "val_fraction=0.2"]
    cases = [
        ([*base, "--param", "lr=lg:1..2", "--metric", "val_A_last"], "unknown kind 'lg'"),
        ([*base, "--param", "lr=log:1e-4..1e-1", "--metric", "A_last"], "a test-set metric"),
        ([*base, "--param", "memory_size=int:-5..3", "--metric", "val_A_last"], "-5 is refused"),
        (["--file", str(bad_file)], "unknown key 'metrc'"),
        (["--study", "s", "--show"], "no such study"),
        (["--study", "s"], "a new study needs --metric"),
        (["--file", str(good_file), "--show"], "has not started yet"),
        ([], "give --study NAME (stored: none yet)"),
        ([*base, "--param", "lr=log:1e-4..1e-1", "--metric", "val_A_last", "--set", "dataset=mnist"], "not found"),
        (
            [*base, "--param", "lr=log:1e-4..1e-1", "--metric", "val_A_last", "--param", "dataset=choice:digits,mnist"],
            "dataset 'mnist' not found",
        ),
    ]
    for args, says in cases:
        code, err = _tune(monkeypatch, main, args)
        assert code == 2 and says in err and err.count("\n") == 1, (args, err)
    assert store.existing_tables() == set()  # neither the store's tables nor Optuna's
    if store_backend == "sqlite":
        assert not (isolated_home / "rmconsole.db").exists()


def _tune(monkeypatch: Any, main: Any, args: list[str]) -> tuple[int, str]:
    import io

    err = io.StringIO()
    with pytest.raises(SystemExit) as exit_, monkeypatch.context() as patched:
        patched.setattr(sys, "argv", ["rmconsole", "tune", *args])
        patched.setattr(sys, "stderr", err)
        main()
    return int(exit_.value.code or 0), err.getvalue()


def test_the_study_file_reads_like_the_options(tmp_path: Any) -> None:
    path = tmp_path / "study.toml"
    path.write_text(
        'name = "f"\nmetric = "val_A_last"\ntrials = 7\nsampler = "random"\n'
        '[set]\nepochs = 1\naugment = "none"\n[params]\nlr = "log:1e-4..1e-1"\naugment2 = ["a", "b"]\n'
    )
    table = tuning.read_study_file(path)
    assert table["set"] == ["epochs=1", 'augment="none"']
    assert table["params"] == ["lr=log:1e-4..1e-1", 'augment2=choice:"a","b"']
    path.write_text('metrc = "val_A_last"\n')
    with pytest.raises(tuning.TuneError, match="unknown key 'metrc'"):
        tuning.read_study_file(path)


# ---------------------------------------------------------------------- the study's storage


def test_optuna_tables_and_the_stores_never_share_a_name(store_backend: str) -> None:
    """On SQLite and PostgreSQL: Optuna's tables join the store's own database, and the store
    still owns, checks and uses its own."""
    import optuna

    tuning.check_disjoint()  # raises on a shared name
    study = optuna.create_study(storage=tuning.storage(), study_name="side", direction="maximize")
    trial = study.ask({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)})
    study.tell(trial, 1.0)
    engine = store.get_engine()
    with engine.connect() as conn:
        names = set(engine.dialect.get_table_names(conn))
    ours = {"run", "taskresult", "store_identity", "rmconsole_schema_version"}
    assert {"studies", "trials", "alembic_version"} | ours <= names
    run_id = store.create_run({"method": "rm", "dataset": "digits", "seed": 1}, "digits-blurry10-online")
    assert store.get_run(run_id).status == "queued"
    assert optuna.load_study(study_name="side", storage=tuning.storage()).best_value == 1.0


# ---------------------------------------------------------------------- studies


@needs_validation
def test_a_small_study_finishes_and_its_trials_are_runs() -> None:
    result = cli(
        "tune",
        "--study",
        "small",
        "--param",
        "lr=log:1e-3..1e-1",
        "--param",
        "memory_size=int:50..200",
        "--metric",
        "val_A_last",
        "--trials",
        "4",
        "--sampler",
        "tpe",
        "--pruner",
        "none",
        *[arg for pair in FAST for arg in ("--set", pair)],
    )
    assert result.exit_code == 0, result.output
    runs = store.find_runs("study:small")
    assert len(runs) == 4 and {r.status for r in runs} == {"finished"}
    assert sorted(r.name for r in runs) == [f"small·t{n}" for n in range(4)]
    assert all("study:small" in r.tags for r in runs)
    summary = tuning.summarize("small")
    assert [t.state for t in summary.trials] == ["complete"] * 4
    best = max(summary.trials, key=lambda t: t.value)
    assert summary.best is not None and summary.best.number == best.number
    assert best.value == store.run_record(best.run_id).value("val_A_last")  # the run's own validation figure
    shown = cli("tune", "--study", "small", "--show")
    assert f"best so far: trial {best.number} (run {best.run_id})" in shown.output


@needs_validation
def test_a_hopeless_trial_is_pruned_after_its_first_task(capsys: pytest.CaptureFixture[str]) -> None:
    # 4 tasks of slack at 8 epochs (seconds), the driver looking every 0.1 s: it sees task 1 before the
    # run is through on a loaded machine and on a quiet one (at 1 epoch a quiet CI ran all 5 tasks, 0.09 s
    # each, between two looks)
    spec = spec_of("prune", 2, ["lr=choice:0.05,1e-7"], pruner="median", tasks=5, epochs=8)
    study = tuning.open_study(spec, create=True)
    study.enqueue_trial({"lr": 0.05})
    study.enqueue_trial({"lr": 1e-7})  # learns nothing: below the median after task 1
    counts = tuning.StudyDriver(spec, study, poll_s=0.1).run()
    assert counts == {"complete": 1, "pruned": 1}
    pruned = next(t for t in tuning.summarize("prune").trials if t.state == "pruned")
    run = store.get_run(pruned.run_id)
    assert run.status == "stopped" and "pruned" in run.tags
    assert 1 <= len(store.task_results(pruned.run_id)) < 5  # stopped before its last task
    # where it was pruned and at what validation accuracy, as `tune --show` prints it (issue 42: it showed —)
    assert pruned.last is not None and pruned.last[0] == pruned.steps - 1
    from rmconsole.cli.tune_commands import print_study

    capsys.readouterr()
    print_study("prune")
    shown = capsys.readouterr().out
    assert f"@{pruned.last[0] + 1} {pruned.last[1]:.2f}" in shown and "where the pruner stopped it" in shown


@needs_validation
def test_the_selection_reads_no_test_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver, while it reports, prunes and tells, reads validation figures only: in its
    process every reader of a test figure raises (the workers measure test accuracy as every run
    does; nothing of it reaches the study)."""
    from rmconsole.store import queries, records

    def poisoned(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the study read a test figure")

    for name in ("task_results", "run_detail", "accuracy_curves", "anytime_evals", "epoch_metrics"):
        monkeypatch.setattr(store, name, poisoned)
        monkeypatch.setattr(queries, name, poisoned)
    real_value = records.RunRecord.value
    monkeypatch.setattr(
        records.RunRecord, "value", lambda self, name: real_value(self, name) if name.startswith("val_") else poisoned()
    )
    # 8 epochs a task and a look every 0.1 s: the driver sees a task before the trial is through
    # (as test_a_hopeless_trial_is_pruned_after_its_first_task)
    spec = spec_of("blind", 2, ["lr=choice:0.05,1e-7"], pruner="median", tasks=5, epochs=8)
    study = tuning.open_study(spec, create=True)
    for lr in (0.05, 1e-7):  # one completes, one is pruned: both paths read what they select on
        study.enqueue_trial({"lr": lr})
    counts = tuning.StudyDriver(spec, study, poll_s=0.1).run()
    assert counts == {"complete": 1, "pruned": 1}
    monkeypatch.undo()  # the trials' workers read no test sample either: none was evaluated on test
    for run in store.find_runs("study:blind"):
        assert store.get_run(run.id).config["evaluate_test"] is False
        assert all(r.accuracy is None and r.val_accuracy is not None for r in store.task_results(run.id))


@needs_validation
@pytest.mark.full  # a study killed and continued, about 30 s: before every stop, not in CI
def test_a_killed_driver_continues_its_study(tmp_path) -> None:
    """SIGKILL the driver (and its trial's worker) mid-trial; `tune --study NAME` again resumes
    that trial's run from its checkpoint and finishes the study. Trial 1 (the second) is the
    victim: the study then holds a complete trial, a killed one and one never started."""
    tasks = 5  # digits' 10 classes split evenly (n_tasks=4 is refused: the driver exited at once)
    args = [
        sys.executable,
        "-m",
        "rmconsole",
        "tune",
        "--study",
        "k",
        "--param",
        "lr=log:1e-3..1e-1",
        "--metric",
        "val_A_last",
        "--trials",
        "3",
        "--sampler",
        "random",
        "--pruner",
        "none",
        *[
            arg
            for pair in ["epochs=1", f"n_tasks={tasks}", "val_fraction=0.2", 'augment="none"']
            for arg in ("--set", pair)
        ],
    ]
    errors = tmp_path / "driver.err"  # a file, not an unread pipe, which would block a chatty driver
    with errors.open("w") as err:
        driver = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, text=True)
    deadline = time.monotonic() + 300
    victim = None
    while time.monotonic() < deadline and victim is None and driver.poll() is None:
        time.sleep(0.2)
        try:
            runs = store.find_runs("study:k")
        except store.StoreError:
            continue
        # mid-run with at least a whole task left, so the kill below lands before its end
        victim = next(
            (r for r in runs if r.name == "k·t1" and 1 <= r.tasks_done < tasks - 1 and r.status == "running"), None
        )
    assert driver.poll() is None, f"the driver ended (exit {driver.returncode}) first: {errors.read_text()}"
    assert victim is not None, "trial 1 never got past its first task"
    driver.send_signal(signal.SIGKILL)
    driver.wait(timeout=30)
    pid = store.get_run(victim.id).pid
    os.killpg(pid, signal.SIGKILL)  # its worker dies too: the run is left 'running' with nobody behind it
    done = next(r.tasks_done for r in store.find_runs("study:k") if r.id == victim.id)  # its last, after the kill
    assert 1 <= done < tasks, done
    again = subprocess.run(args[:5] + ["k"], capture_output=True, text=True, timeout=400, check=False)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"run {victim.id} resumed at task {done + 1}" in again.stdout, again.stdout
    runs = store.find_runs("study:k")
    assert len(runs) == 3 and {r.status for r in runs} == {"finished"}
    assert [t.state for t in tuning.summarize("k").trials] == ["complete"] * 3


@needs_validation
def test_trials_run_as_jobs_through_the_sweeps_executor() -> None:
    """`--executor submitit-local`: each trial's run is submitted as a job (as a sweep's are)."""
    result = cli(
        "tune",
        "--study",
        "jobs",
        "--param",
        "lr=log:1e-3..1e-1",
        "--metric",
        "val_A_last",
        "--trials",
        "1",
        "--sampler",
        "random",
        "--pruner",
        "none",
        "--executor",
        "submitit-local",
        "--slurm",
        "time=10",
        *[arg for pair in FAST for arg in ("--set", pair)],
    )
    assert result.exit_code == 0, result.output
    runs = [store.get_run(r.id) for r in store.find_runs("study:jobs")]
    assert len(runs) == 1 and {r.status for r in runs} == {"finished"}
    assert all(r.executor == "submitit-local:time=10" and r.job_id for r in runs)
    assert "submitit-local job" in result.output


# ---------------------------------------------------------------------- the TUI


@needs_validation
@pytest.mark.asyncio
async def test_the_runs_page_filters_a_study_and_shows_its_best_so_far() -> None:
    from rmconsole.tui import RMConsoleApp
    from rmconsole.tui.widgets.runs_table import RunsTable
    from rmconsole.tui.widgets.status_line import StatusLine

    spec = spec_of("look", 3, ["lr=log:1e-4..1e-1"])
    study = tuning.open_study(spec, create=True)
    config = {"method": "rm", "dataset": "digits", "seed": 1}
    ids = [
        store.create_run(
            config, "digits-blurry10-online", name=tuning.trial_name("look", n), tags=[tuning.study_tag("look")]
        )
        for n in range(2)
    ]
    store.create_run(config, "digits-blurry10-online", name="other")
    for run_id, value in zip(ids, (70.0, 80.0)):
        trial = study.ask(tuning.StudyDriver(spec, study).distributions)
        trial.set_user_attr(tuning.RUN_ATTR, run_id)
        study.tell(trial, value)
    app = RMConsoleApp(refresh_s=0.2)
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause(0.5)
        await pilot.press("slash", *"study:look", "enter")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            table = app.screen.query_one(RunsTable)
            shown = sorted(int(str(row.key.value)) for row in table.ordered_rows)
            line = str(app.screen.query_one(StatusLine).text)
            if shown == ids and "best so far" in line:
                break
            await pilot.pause(0.1)
        assert shown == ids
        assert f"study look: 2/3 trials done; best so far: trial 1 (run {ids[1]}) val_A_last 80.00" in line


def test_the_median_pruner_takes_optunas_startup_and_warmup() -> None:
    """`--pruner median:startup=N,warmup=M` (issue 42: with one finished trial the median pruner cut
    3 of 4, a near-twin of the best among them); the defaults as before; bad options in one line."""
    from types import SimpleNamespace

    assert tuning.pruner_options("median", 20) == {"n_startup_trials": 5, "n_warmup_steps": 0}
    assert tuning.pruner_options("median", 4) == {"n_startup_trials": 1, "n_warmup_steps": 0}
    assert tuning.pruner_options("median:startup=3,warmup=2", 20) == {"n_startup_trials": 3, "n_warmup_steps": 2}
    assert tuning.pruner_options("none", 20) is None
    built = tuning._pruner(SimpleNamespace(pruner="median:warmup=1,startup=4", trials=6))
    assert (built._n_startup_trials, built._n_warmup_steps) == (4, 1)
    for bad, says in (
        ("mean", "allowed: median, none, or median:startup=N,warmup=M"),
        ("median:startup=-1", "'startup=-1': allowed: startup=N"),
        ("median:patience=2", "'patience=2'"),
        ("none:startup=1", "allowed: median, none"),
    ):
        with pytest.raises(tuning.TuneError, match=re.escape(says)):
            tuning.pruner_options(bad, 20)


def test_a_study_as_figures_history_importance_parallel_coordinates(tmp_path: Any) -> None:
    """`tune --show --plot DIR` (issue 42): six trials made without training, as Optuna records them."""
    import optuna

    from rmconsole.report.study import FIGURES, importance

    spec = spec_of("figs", 6, ["lr=log:1e-4..1e-1", "memory_size=int:100..500"])
    study = tuning.open_study(spec, create=True)
    dists = {p.key: p.distribution() for p in spec.params}
    for i in range(6):  # the value follows lr (log) closely, memory_size hardly at all
        lr, k = 10 ** (-4 + 0.6 * i), 100 + 37 * ((i * 5) % 6)
        study.add_trial(
            optuna.trial.create_trial(
                params={"lr": lr, "memory_size": k}, distributions=dists, value=40.0 + 8 * i + 0.01 * k
            )
        )
    found = importance(study)
    assert set(found) == {"lr", "memory_size"} and found["lr"] > found["memory_size"]
    shown = CliRunner().invoke(app, ["tune", "--study", "figs", "--show", "--plot", str(tmp_path / "figs")])
    assert shown.exit_code == 0, shown.output
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == sorted(FIGURES)
    assert all((tmp_path / "figs" / f).stat().st_size > 5000 for f in FIGURES)
    refused = CliRunner().invoke(app, ["tune", "--study", "figs", "--plot", str(tmp_path / "x")])
    assert refused.exit_code != 0 and not (tmp_path / "x").exists()
