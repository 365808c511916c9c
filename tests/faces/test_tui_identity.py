"""Hundreds of runs, still easy to tell apart: the TUI driven by Pilot on a real store of named,
tagged, overridden, partial, archived and swept runs (tests/support/identity_store.py)."""

from __future__ import annotations

import pytest
from support import identity_store
from test_tui import cell, table_ids, until

from rmconsole import store
from rmconsole.runner.request import LaunchRequest
from rmconsole.tui import RMConsoleApp
from rmconsole.tui.screens.compare import CompareScreen
from rmconsole.tui.screens.confirm import ConfirmScreen
from rmconsole.tui.screens.launch import LaunchScreen
from rmconsole.tui.screens.run import RunScreen
from rmconsole.tui.widgets.epochs_panel import EpochsPanel
from rmconsole.tui.widgets.runs_table import RunsTable


async def on_run(pilot, app, run_id: int) -> None:
    """The runs page read, with the cursor on `run_id`."""
    await until(pilot, lambda: len(table_ids(app)) == 7, what="rows")
    table = app.screen.query_one(RunsTable)
    table.move_cursor(row=table.get_row_index(str(run_id)))


async def filtered(pilot, app, text: str, typed: bool = False) -> list[int]:
    """The runs table's ids after the filter `text`: typed key by key (`typed`; each key refilters
    the table), else pasted into the box as a whole, then Enter."""
    box = app.screen.query_one("#filter")
    box.value = ""
    if typed:
        await pilot.press("slash", *text, "enter")
    else:
        await pilot.press("slash")
        box.value = text
        await pilot.press("enter")
    await pilot.pause()
    return table_ids(app)


@pytest.mark.asyncio
async def test_filter_by_tag_override_and_metric_threshold() -> None:
    ids = identity_store.build()
    app = RMConsoleApp(refresh_s=0.2, reap_every_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 7, what="the seven runs that are not archived")
        assert ids["old"] not in table_ids(app)  # archived: hidden by default
        assert sorted(await filtered(pilot, app, "tag:base", typed=True)) == sorted([ids["base"], ids["k500"]])
        assert sorted(await filtered(pilot, app, "tag:ablation")) == sorted([ids["noaug"], ids["partial"]])
        # an override: any run that changes `augment`, or one exact override value
        assert await filtered(pilot, app, "override:augment") == [ids["noaug"]]
        assert sorted(await filtered(pilot, app, "override:epochs=64")) == sorted([ids["noaug"], ids["partial"]])
        assert sorted(await filtered(pilot, app, "epochs:16 method:rm")) == sorted([ids["base"], ids["k500"]])
        # a metric threshold: A_last 86 (baseline), 92 (K=500), 77, and partial runs' A@k/T values
        assert sorted(await filtered(pilot, app, "A_last>80 partial:false")) == sorted([ids["base"], ids["k500"]])
        assert sorted(await filtered(pilot, app, "A_last>=86")) == sorted([ids["base"], ids["k500"], ids["partial"]])
        assert cell(app, ids["partial"], "A_last") == "@3/5 86.00"  # ... shown as partial
        assert await filtered(pilot, app, "name:baseline") == [ids["base"]]
        assert sorted(await filtered(pilot, app, "baseline")) == sorted([ids["base"], ids["noaug"]])  # name, note
        assert await filtered(pilot, app, "compare with") == [ids["noaug"]]  # ... and the note
        assert await filtered(pilot, app, "archived:true") == [ids["old"]]  # asked for: shown
        app.screen.query_one("#filter").value = ""
        await pilot.press("escape", "a")  # `a` shows archived runs
        await until(pilot, lambda: ids["old"] in table_ids(app), what="the archived run")


@pytest.mark.asyncio
async def test_partial_runs_sort_after_final_ones_and_columns_fit_narrow_terminals() -> None:
    ids = identity_store.build()
    app = RMConsoleApp(refresh_s=0.2, reap_every_s=None)
    async with app.run_test(size=(100, 30)) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 7, what="rows")
        table = app.screen.query_one(RunsTable)
        columns = [str(c.value) for c in table.columns]
        assert "A_last" in columns and "id" in columns and "preset" in columns  # kept at 100 columns
        assert table.columns["preset"].width >= len("digits-blurry10-online")  # the preset name is never cut
        await pilot.press("s", "s", "s", "s")  # sort: status, preset, method, A_last (descending)
        assert app.screen.order == ("A_last", True)
        order = table_ids(app)
        assert order[:3] == [ids["k500"], ids["base"], ids["noaug"]]  # final values, best first
        assert order[3:5] == [ids["partial"], ids["stopped"]]  # then the partial ones, even the 86 of 3/5
        await pilot.resize_terminal(80, 24)
        await until(pilot, lambda: table.size.width <= 80, what="the narrow table")
        await pilot.pause()
        columns = [str(c.value) for c in table.columns]
        assert "A_last" in columns and "id" in columns and "status" in columns
        assert sum(c.get_render_width(table) for c in table.columns.values()) <= 80


@pytest.mark.asyncio
async def test_clone_a_run_into_the_launch_screen() -> None:
    ids = identity_store.build()
    app = RMConsoleApp(refresh_s=0.2, reap_every_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await on_run(pilot, app, ids["noaug"])
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen.valid, what="the launch form")
        screen = app.screen
        assert screen.query_one("#overrides").value == "augment=none epochs=64"
        assert screen.query_one("#name").value == "no augmentation" and screen.query_one("#tags").value == "ablation"
        preview = screen.query_one("#config-preview")
        assert str(preview.get_cell("augment", "value")) == "none"
        assert str(preview.get_cell("augment", "from")) == "override"
        # a comma list and seeds make the same form launch a sweep
        launched: list[tuple] = []
        app.launch = lambda request: launched.append(request)  # type: ignore[method-assign]
        screen.query_one("#overrides").value = "augment=none epochs=64 method=rm,er"
        screen.query_one("#seeds").value = "1,2,3"
        await pilot.pause()
        assert screen.what.startswith("a sweep of 6 runs")
        assert "no augmentation·rm·s1, no augmentation·er·s1, …" in screen.what  # the default run-name template
        # the sweep name and run-name template of `rmconsole run --sweep-name --name-template`
        screen.query_one("#sweep-name").value = "last"
        await pilot.pause()
        assert not screen.valid and "--sweep-name 'last'" in str(screen.query_one("#launch-error").render())
        screen.query_one("#sweep-name").value = "aug-study"
        screen.query_one("#name-template").value = "{name}-{bogus}"
        await pilot.pause()
        assert not screen.valid and "unknown field {bogus}" in str(screen.query_one("#launch-error").render())
        screen.query_one("#name-template").value = "{method}-{seed}"
        await pilot.pause()
        assert screen.valid and "named rm-1, er-1, …" in screen.what
        await pilot.press("ctrl+s")
        assert launched == [  # one request, as `rmconsole run` makes from the same options
            LaunchRequest(
                preset="digits-blurry10-online",
                overrides=("augment=none", "epochs=64", "method=rm,er"),
                seeds="1,2,3",
                name="no augmentation",
                tags=("ablation",),
                sweep_name="aug-study",
                name_template="{method}-{seed}",
            )
        ]


@pytest.mark.asyncio
async def test_stop_a_whole_sweep_from_the_runs_page() -> None:
    ids = identity_store.build()
    app = RMConsoleApp(refresh_s=0.2, reap_every_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await on_run(pilot, app, ids["sweep1"])
        await pilot.press("X")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        await pilot.press("y")
        await until(
            pilot,
            lambda: cell(app, ids["sweep1"], "status") == "stopped" and cell(app, ids["sweep2"], "status") == "stopped",
            timeout=20,
            what="the sweep stopped",
        )
        assert store.get_run(ids["base"]).status == "finished"  # other runs untouched


@pytest.mark.asyncio
async def test_run_page_draws_loss_and_lr_curves_live_and_compare_shows_the_config_diff() -> None:
    ids = identity_store.build()
    app = RMConsoleApp(refresh_s=0.1, reap_every_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 7, what="rows")
        app.open_run(ids["partial"])
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, what="run")
        panel = app.screen.query_one(EpochsPanel)
        await until(pilot, lambda: len(panel.points) == 3 * 17, what="the epochs of three tasks")
        assert panel.border_subtitle.startswith("task 3 memory 16/16")
        store.record_epochs(ids["partial"], identity_store.epoch_rows(3, 2))  # the worker's next flush
        await until(pilot, lambda: len(panel.points) == 3 * 17 + 3, what="new epochs, live")
        assert panel.border_subtitle.startswith("task 4 memory 2/2")
        assert "loss" in panel.border_subtitle and "lr" in panel.border_subtitle
        await pilot.press("escape")
        app.open_compare([ids["base"], ids["noaug"]])
        await until(
            pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.view is not None, what="compare"
        )
        differences = app.screen.view.differences
        assert differences["augment"] == ("cutmix+autoaug", "none")  # as --set writes it, never a repr
        assert differences["epochs"] == ("16", "64") and differences["name"] == ("baseline", "no augmentation")


def test_uncertainty_chart_shows_chosen_and_candidates_as_shares() -> None:
    """12,500 candidates and 500 chosen with the same shape: drawn as shares, the chosen columns
    are as tall as the candidates' (raw counts would leave them a row of nothing)."""
    from rmconsole.tui.data import MemoryUpdate
    from rmconsole.tui.render import uncertainty_chart

    shape = [1, 2, 4, 8, 4, 2, 1]
    spread = {"candidates_uncertainty": [c * 568 for c in shape], "chosen_uncertainty": [c * 23 for c in shape]}
    update = MemoryUpdate(1, (50,) * 10, 50, {"policy": "uncertainty", "views": 12, **spread})
    rows = uncertainty_chart(update, 60, height=4).plain.splitlines()[1:5]
    start = 2 + 3 * 5  # bin 3 (the tallest): 2 cells of candidates, 2 of chosen, a space
    for row in rows:  # the same share: the same height, row by row, up to the top
        assert row[start : start + 2] == row[start + 2 : start + 4] == "██"
    assert rows[0][2:4] == rows[0][4:6] == "  "  # bin 0 (1/22 of each) stays low in both


@pytest.mark.asyncio
async def test_the_log_panel_wraps_again_after_a_resize() -> None:
    from textual.app import App

    from rmconsole.tui.widgets.log_panel import LogPanel

    class One(App):
        def compose(self):  # type: ignore[no-untyped-def]
            yield LogPanel()

    app = One()
    async with app.run_test(size=(120, 20)) as pilot:
        panel = app.query_one(LogPanel)
        panel.add_lines(["word " * 40])  # 200 characters
        await pilot.pause()
        wide = len(panel.lines)
        await pilot.resize_terminal(50, 20)
        await pilot.pause()
        await pilot.pause()
        assert len(panel.lines) > wide  # the same line, wrapped again at the new width


def test_at_80_columns_the_run_column_fits_the_longest_name_and_an_ellipsis() -> None:
    """docs/tui.md: the run's name or preset is never cut at 80×24 (issue 42 saw
    `digits-blurry10-onl…`); method·K·seed and the status narrow first, then I_last, F_last leave."""
    from rmconsole.tui.widgets.runs_table import layout

    for longest in (8, 22, 30):
        widths = layout(80, longest, False, frozenset({"A_last", "F_last", "I_last"}))
        assert widths["preset"] >= longest + 1 and "A_last" in widths
        assert sum(w + 2 for w in widths.values()) + 4 <= 82  # (the scrollbar's 2 cells only with many runs)
    assert "F_last" in layout(80, 22, False, frozenset({"A_last", "F_last"}))
