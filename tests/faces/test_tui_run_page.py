"""Issue 27 in the TUI: what identifies a run at 80×24, the run page's tabs, per-class accuracy
beside the memory, the paper's Δ only for its protocol, the `/` filter read as a shell reads
it, the palette's run names, and keys typed right after Tab in the launch form."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from support import tui_store
from test_tui import table_ids, until
from textual import events

from rmconsole import store
from rmconsole.recency import class_accuracy_by_age
from rmconsole.tui import RMConsoleApp, data
from rmconsole.tui.commands import describe
from rmconsole.tui.render import metrics_line
from rmconsole.tui.screens.launch import LaunchScreen
from rmconsole.tui.screens.run import RunScreen
from rmconsole.tui.widgets.memory_panel import MemoryPanel
from rmconsole.tui.widgets.runs_table import RunsTable


def test_class_accuracy_by_age_splits_old_from_new_classes_with_their_slots() -> None:
    results = [
        SimpleNamespace(task=0, class_accuracy=[90.0, 80.0, None, None], eval_classes=[0, 1]),
        SimpleNamespace(task=1, class_accuracy=[40.0, 50.0, 95.0, 97.0], eval_classes=[0, 1, 2, 3]),
    ]
    split = class_accuracy_by_age(results, histogram=[5, 5, 4, 6], labels=["a", "b", "c", "d"])
    assert split is not None and split.task == 1
    assert [(c.label, c.accuracy, c.slots) for c in split.old] == [("a", 40.0, 5), ("b", 50.0, 5)]
    assert [c.label for c in split.new] == ["c", "d"]
    assert split.old_mean == 45.0 and split.new_mean == 96.0 and split.gap == 51.0
    assert class_accuracy_by_age([SimpleNamespace(task=0, class_accuracy=[], eval_classes=[])]) is None


def test_the_readme_filter_typed_literally() -> None:
    assert data.typed_words("method:er,rm 'A_last>88'") == ["method:er,rm", "A_last>88"]
    assert data.typed_words("method:er 'A_la") == ["method:er", "A_la"]  # a quote still being typed
    data.parse_typed("method:er,rm 'A_last>88'")  # reads (no FilterError)


def _row(**changes):  # type: ignore[no-untyped-def]
    base = dict(
        id=7,
        status="finished",
        preset="mnist-blurry10-online",
        method="rm",
        dataset="mnist",
        memory_size=500,
        seed=2,
        n_tasks=5,
        task=4,
        phase="done",
        phase_done=0,
        phase_total=0,
        samples_per_s=None,
        eta_s=None,
        tasks_done=5,
        sweep_id=None,
        error=None,
        metrics={"A_last": 80.0, "F_last": 3.0},
        config={
            "dataset": "mnist",
            "model": "mlp400",
            "method": "rm",
            "memory_size": 500,
            "n_tasks": 5,
            "blurry": 10,
            "stream": "online",
            "augment": ["none"],
            "epochs": 8,
            "uncertainty": "randaug",
        },
        name="study",
        tags=("base",),
        overrides={"epochs": 8},
    )
    base.update(changes)
    return store.RunRecord(**base)


def test_paper_delta_only_for_the_papers_protocol_and_never_for_a_partial_run() -> None:
    text = metrics_line(_row()).plain
    assert "paper A_last 92.65" in text and "Δ" not in text.split("no Δ")[0]
    assert "not the paper's protocol (epochs 8≠256)" in text
    matching = _row(config={**_row().config, "epochs": 256})
    assert "(Δ -12.65)" in metrics_line(matching).plain
    partial = _row(config={**_row().config, "epochs": 256}, tasks_done=3, status="stopped")
    text = metrics_line(partial).plain
    assert "A_last @3/5 80.00" in text and "(Δ" not in text and "no Δ: partial (@3/5)" in text


def test_the_palette_tells_a_sweeps_runs_apart() -> None:
    assert describe(_row()) == "run 7 “study” · rm · K=500 · seed 2 · epochs=8 · #base · finished"
    assert describe(_row(seed=3)) != describe(_row())


@pytest.mark.asyncio
async def test_runs_page_at_80_columns_shows_what_identifies_a_run_and_the_whole_footer() -> None:
    ids = tui_store.build()
    app = RMConsoleApp(refresh_s=0.2, reap_every_s=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 4, what="rows")
        table = app.screen.query_one(RunsTable)
        assert table.compact
        headers = [str(c.label.plain) for c in table.columns.values()]
        assert headers[:4] == ["id ▼", "status", "run · changes", "method·K·seed"] and "A_last" in headers
        ident = table.get_cell(str(ids["failed"]), "method").plain
        assert ident == "finetune·500·s1"
        assert table.get_cell(str(ids["running"]), "A_last").plain.startswith("@2/5")
        assert table.get_cell(str(ids["running"]), "F_last").plain.startswith("@")  # partial: never bare

        def footer() -> str:
            return app.screen._compositor.render_strips()[-1].text

        await until(pilot, lambda: "Sort" in footer(), what="the footer")
        assert "? Keys" in footer() and "q Quit" in footer()


@pytest.mark.asyncio
async def test_run_page_collapses_into_tabs_at_80x24_and_shows_the_matrix_at_120x40() -> None:
    ids = tui_store.build()
    app = RMConsoleApp(refresh_s=0.2, reap_every_s=None)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 4, what="rows")
        app.open_run(ids["finished"])
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, what="run")
        screen = app.screen
        assert screen.narrow
        memory = screen.query_one(MemoryPanel)
        assert memory.display and memory.size.width > 70 and memory.size.height >= 14
        plain = memory.render().plain
        assert "after T5" in plain and "\nold " in plain and "\nnew " in plain  # per-class accuracy by age
        await pilot.press("3")
        accuracy = screen.query_one("#accuracy")
        await pilot.pause(0.2)
        assert accuracy.display and accuracy.size.width > 70 and not memory.display
        await pilot.press("4")
        await pilot.pause(0.2)
        assert screen.query_one("#epochs").size.height >= 12
        await pilot.resize_terminal(120, 40)
        await pilot.pause(0.3)
        assert not screen.narrow and memory.display and accuracy.display
        assert accuracy.query_one("#matrix").size.height >= 6  # the whole 5×5 matrix without `m`


@pytest.mark.asyncio
async def test_keys_typed_right_after_tab_land_in_the_next_field() -> None:
    tui_store.build()
    app = RMConsoleApp(refresh_s=0.5, reap_every_s=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch form")
        await pilot.pause(0.3)
        for key in ["e", "p", "o", "c", "h", "s", "=", "2", "tab", "1", "comma", "2", "tab", "m", "y", "tab", "t", "1"]:
            char = "," if key == "comma" else key if len(key) == 1 else None
            event = events.Key(key, char)
            event.set_sender(app)
            app._driver.send_message(event)  # all at once, as a fast typist or a pasted line: no pause between keys
        await pilot.pause(1.0)
        values = {i: app.screen.query_one(f"#{i}").value for i in ("overrides", "seeds", "name", "tags")}
        assert values == {"overrides": "epochs=2", "seeds": "1,2", "name": "my", "tags": "t1"}
