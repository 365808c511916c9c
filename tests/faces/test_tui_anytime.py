"""The TUI on a task-free run: first appearances in the task stream, the anytime curve drawn live."""

from __future__ import annotations

import pytest
from test_tui import SIZE, cell, table_ids, until

from rmconsole import store
from rmconsole.cl.events import AnytimePoint, TaskOutcome, TaskPlan
from rmconsole.config import load_config
from rmconsole.tui import RMConsoleApp
from rmconsole.tui.screens.run import RunScreen
from rmconsole.tui.widgets.accuracy_chart import AccuracyChart
from rmconsole.tui.widgets.accuracy_panel import AccuracyPanel
from rmconsole.tui.widgets.anytime_chart import AnytimeChart
from rmconsole.tui.widgets.runs_table import RunsTable
from rmconsole.tui.widgets.task_stream import TaskStreamPanel


def stored_task_free_run() -> int:
    _, cfg = load_config(None, {"stream": "iblurry", "method": "er", "schedule": "constant", "eval_period": 50})
    run_id = store.create_run(cfg.to_dict(), "digits-iblurry50-10")
    plans = []
    for t in range(5):
        composition = [0] * 10
        composition[2 * t], composition[2 * t + 1] = 150, 140
        first = [(c, 3 * c) for c in range(6)] if t == 0 else [(5 + t, 1)]
        plans.append(TaskPlan(t, 290, [2 * t, 2 * t + 1], composition, f"h{t}", first))
    store.record_start(run_id, plans, list(range(10)), [f"digit{c}" for c in range(10)], ["normalize"])
    store.record_anytime(run_id, [AnytimePoint(0, s, 20.0 + s / 10, 6) for s in (50, 100, 150, 200, 250)])
    store.record_task(
        run_id,
        TaskOutcome(
            0,
            40.0,
            [80.0, 0.0, 0.0, 0.0, 0.0],
            [80.0] * 6 + [None] * 4,
            list(range(6)),
            3.0,
            None,
            {"online": {"train_seconds": 2.0}},
        ),
    )
    store.update_run(run_id, status="running", task=1, phase="stream", phase_done=40, phase_total=290)
    return run_id


@pytest.mark.asyncio
async def test_run_page_of_a_task_free_run_draws_the_anytime_curve_live() -> None:
    run_id = stored_task_free_run()
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: run_id in table_ids(app), what="the run's row")
        table = app.screen.query_one(RunsTable)
        await until(pilot, lambda: "A_auc" in table.columns, what="the A_auc column")
        assert cell(app, run_id, "A_auc") == "35.00"  # the mean of the five points (25 .. 45)
        table.move_cursor(row=table.get_row_index(str(run_id)))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, what="run view")
        screen = app.screen
        stream = screen.query_one(TaskStreamPanel).render().plain
        assert "★6 new" in stream and "★1 new" in stream
        from rmconsole.tui.render import stream_counts

        wide = stream_counts(screen.view.streams[0], screen.view.class_labels, True).plain
        assert "★6 new (digit0@1 digit1@4 digit2@7…)" in wide  # where each class first arrived
        chart = screen.query_one(AnytimeChart)
        await until(pilot, lambda: len(chart.points) == 5, what="the anytime points")
        assert chart.display and not screen.query_one(AccuracyChart).display
        assert chart.total == 5 * 290 and chart.boundaries[0] == 290
        assert "A_auc" in str(screen.query_one(AccuracyPanel).query_one("#metrics").render())
        store.record_anytime(run_id, [AnytimePoint(1, 300, 45.0, 7), AnytimePoint(1, 350, 47.5, 7)])
        await until(pilot, lambda: len(chart.points) == 7, what="new points, live")
        assert chart.points[-1] == (350, 47.5)
