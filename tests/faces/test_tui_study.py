"""A `rmconsole tune` study in the faces (issue 42): its trials' validation figures in the runs
tables of both faces (one declaration, the metric catalogue), and the TUI's study page (history,
importance, parallel coordinates), reached from the runs page, at 80×24 and wide. The study is
made in-process without training (tests/support/study_store.py)."""

from __future__ import annotations

import time

from support import study_store
from typer.testing import CliRunner

from rmconsole import store
from rmconsole.cl.events import TaskOutcome
from rmconsole.cli import app as cli_app
from rmconsole.report.study import Axis, HistoryPoint, Line, history, parallel
from rmconsole.tui import RMConsoleApp
from rmconsole.tui.screens.study import StudyScreen
from rmconsole.tui.widgets.runs_table import layout
from rmconsole.tui.widgets.study_panels import importance_text, parallel_table

WIDE, SMALL = (120, 40), (80, 24)
BASE = {"method": "rm", "dataset": "digits", "seed": 1}


def _validated_run(name: str, values: list[float], tasks: int = 2) -> int:
    """A run with validation figures only (as a trial: no test set evaluated), through store calls."""
    run_id = store.create_run({**BASE, "n_tasks": tasks, "val_fraction": 0.2}, "digits-blurry10-online", name=name)
    for task, value in enumerate(values):
        store.record_task(run_id, TaskOutcome(task, None, None, None, [0, 1], 1.0, val_accuracy=value))
    store.update_run(run_id, status="finished" if len(values) == tasks else "stopped", task=len(values) - 1)
    return run_id


def test_runs_shows_a_trials_validation_figure_at_80_columns(monkeypatch) -> None:
    """`rmconsole runs` at 80 columns: A_last is — (no test set), A_last (val) is there (A_avg (val),
    the catalogue's later column, gives way); without a validated run no validation column."""
    plain = store.create_run({**BASE, "n_tasks": 1}, "digits-blurry10-online", name="plain")
    store.record_task(plain, TaskOutcome(0, 88.0, [88.0], None, [0, 1], 1.0))
    monkeypatch.setenv("COLUMNS", "80")
    shown = CliRunner().invoke(cli_app, ["runs"])
    assert shown.exit_code == 0, shown.output
    assert "(val)" not in shown.output
    _validated_run("look·t0", [35.0, 41.0])
    _validated_run("look·t1", [12.5])
    shown = CliRunner().invoke(cli_app, ["runs"])
    lines = shown.output.splitlines()
    assert "A_last (val)" in lines[0] and "A_avg (val)" not in lines[0], shown.output
    assert all(len(line) <= 80 for line in lines), shown.output
    row = next(line for line in lines if "look·t0" in line)
    assert row.rstrip().endswith("41.00") and " — " in row, row
    assert next(line for line in lines if "look·t1" in line).rstrip().endswith("@1/2 12.50")
    wide = CliRunner().invoke(cli_app, ["runs"], env={"COLUMNS": "160"})
    assert "A_last (val) A_avg (val)" in wide.output.splitlines()[0]


def test_the_tui_runs_table_has_a_validation_column_when_a_run_has_one() -> None:
    with_val = frozenset({"A_last", "val_A_last"})
    for width in (80, 120, 160):
        assert "val_A_last" in layout(width, 8, False, with_val), width
        assert "val_A_last" not in layout(width, 8, False, frozenset({"A_last", "F_last"})), width


def _points() -> tuple[list[Axis], list[Line]]:
    axes = [Axis("lr", 1e-4, 1e-1, log=True), Axis("augment", 0, 1, levels=("none", "\x1b[2Jcutmix"))]
    lines = [
        Line(0, 41.0, (1e-4, "none"), (0.0, 0.0)),
        Line(1, 73.0, (1e-1, "\x1b[2Jcutmix"), (1.0, 1.0)),
        Line(2, 57.0, (3e-3, None), (0.5, None)),
    ]
    return axes, lines


def test_the_panels_draw_importance_and_parallel_coordinates_as_text() -> None:
    bars = importance_text((("lr", 0.75), ("memory_size", 0.25)), 42).plain.splitlines()  # 24-cell bars
    assert bars[0].startswith("lr ") and bars[0].endswith("0.75") and bars[1].endswith("0.25")
    assert (bars[0].count("█"), bars[1].count("█")) == (18, 6)  # the bars' lengths are the shares
    assert "2 finished trials" in importance_text((), 40).plain
    axes, lines = _points()
    from rich.console import Console

    console = Console(width=80, record=True, color_system=None)
    console.print(parallel_table(axes, lines, "val_A_last", True, 80))
    text = console.export_text()
    rows = [line for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert [r.split()[0] for r in rows] == ["1", "2", "0"]  # best first
    assert rows[0].split()[1] == "73.00" and rows[0].split()[2].endswith("●")  # the best lr: the axis's high end
    assert rows[2].split()[2].startswith("●")  # the worst: its low end
    assert "0.0001…0.1 log" in text and "\x1b" not in text and "␛[2Jcutmix" in text  # sanitised
    console = Console(width=80, record=True, color_system=None)
    console.print(parallel_table(axes, lines, "loss", False, 80))  # minimised: the lowest first
    assert [r.split()[0] for r in console.export_text().splitlines() if r.strip()[:1].isdigit()] == ["0", "2", "1"]


def test_the_study_page_shows_history_importance_and_parallel_coordinates(snap_compare) -> None:
    """From the runs page, `t` on a trial opens its study: snapshots at 80×24 (the history tab,
    then the parallel coordinates' and importance's text) and wide (every panel)."""
    ids = study_store.build("look")
    loaded, _ = parallel_study_values()
    assert [p.best for p in loaded] == [41.0, 49.0, 57.0, 65.0, 73.0, None]  # (history: the best so far, pruned last)

    async def opened(pilot) -> None:
        app = pilot.app
        deadline = time.monotonic() + 120
        while not app.screen.query("RunsTable") or not app.screen.query_one("RunsTable").row_count:
            assert time.monotonic() < deadline
            await pilot.pause(0.05)
        await pilot.press("t")  # on the highlighted run (the newest: trial 5)
        while not (isinstance(app.screen, StudyScreen) and app.screen.view is not None):
            assert time.monotonic() < deadline, "the study page did not load"
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        view = app.screen.view
        assert [t.run_id for t in view.trials] == ids and view.best == 4
        assert [k for k, _ in view.importance] == ["lr", "memory_size"]

    async def small(pilot) -> None:
        await opened(pilot)
        screen = pilot.app.screen
        for key, panel in (("4", "#parallel-text"), ("3", "#importance-text")):
            await pilot.press(key)
            await pilot.pause(0.1)
            assert screen.query_one(panel).region.width > 0, panel  # shown
        await pilot.press("2")
        await pilot.pause(0.2)

    assert snap_compare(RMConsoleApp(refresh_s=5.0, reap_every_s=None), terminal_size=SMALL, run_before=small)
    assert snap_compare(RMConsoleApp(refresh_s=5.0, reap_every_s=None), terminal_size=WIDE, run_before=opened)


def parallel_study_values() -> tuple[list[HistoryPoint], list[Line]]:
    """The history and parallel coordinates of the stored study `look`, as report/study.py gives them."""
    from rmconsole.runner import tune as tuning

    study, _ = tuning.load_study("look")
    return history(study, maximize=True), parallel(study)[1]
