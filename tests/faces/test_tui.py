"""The real Textual app driven by Pilot on a real SQLite store (and real worker processes)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable

import pytest
from conftest import rmconsole
from sqlmodel import delete
from support import tui_store
from textual.widgets._footer import FooterKey

from rmconsole import store
from rmconsole.runner import launch
from rmconsole.store.tables import MemorySnapshot, Run, TaskResult, TaskStream
from rmconsole.tui import RMConsoleApp, data
from rmconsole.tui.screens.compare import CompareScreen
from rmconsole.tui.screens.confirm import ConfirmScreen
from rmconsole.tui.screens.launch import LaunchScreen
from rmconsole.tui.screens.run import RunScreen
from rmconsole.tui.widgets.footer import Footer
from rmconsole.tui.widgets.log_panel import LogPanel
from rmconsole.tui.widgets.memory_panel import MemoryPanel
from rmconsole.tui.widgets.run_header import RunHeader
from rmconsole.tui.widgets.runs_table import RunsTable
from rmconsole.tui.widgets.task_stream import TaskStreamPanel

SIZE = (140, 40)


async def until(pilot, condition: Callable[[], bool], timeout: float = 30.0, what: str = "condition") -> None:
    """Let the app run until `condition()` holds (a wait, not a timing: generous for loaded CI machines)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await pilot.pause(0.05)


def table_ids(app: RMConsoleApp) -> list[int]:
    table = app.screen.query_one(RunsTable)
    return [int(str(row.key.value)) for row in table.ordered_rows]


def cell(app: RMConsoleApp, run_id: int, column: str) -> str:
    value = app.screen.query_one(RunsTable).get_cell(str(run_id), column)
    return getattr(value, "plain", str(value))


@pytest.mark.asyncio
async def test_opens_on_a_store_with_finished_and_running_runs_and_updates_rows_in_place() -> None:
    ids = tui_store.build()
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 4, what="four rows")
        assert table_ids(app) == sorted(ids.values(), reverse=True)  # newest first
        assert cell(app, ids["finished"], "status") == "finished" and cell(app, ids["finished"], "A_last") == "86.00"
        assert cell(app, ids["running"], "status") == "running"
        assert cell(app, ids["running"], "progress") == "3/5 stream  40%"
        assert cell(app, ids["running"], "speed") == "1,840"
        assert cell(app, ids["failed"], "status") == "failed" and cell(app, ids["queued"], "progress") == "waiting"

        # put the cursor on the running run, then let the store change under it
        table = app.screen.query_one(RunsTable)
        table.move_cursor(row=table.get_row_index(str(ids["running"])))
        store.update_run(ids["running"], task=3, phase="memory", phase_done=300, phase_total=1000, samples_per_s=2500.0)
        newcomer = store.create_run(store.get_run(ids["finished"]).config, "digits-blurry10-online")
        await until(pilot, lambda: newcomer in table_ids(app), what="the new run's row")
        await until(pilot, lambda: cell(app, ids["running"], "progress") == "4/5 memory  30%", what="progress update")
        assert table_ids(app)[0] == newcomer  # inserted on top...
        assert table.cursor_run_id == ids["running"]  # ...and the cursor stayed on its run
        assert "5 runs" in str(app.screen.query_one("#status-line").render())


@pytest.mark.asyncio
async def test_the_footer_is_rebuilt_only_when_its_keys_change() -> None:
    """Textual's footer rebuilds every key on each bindings update (each focus move, mount,
    refresh); ours keeps its key widgets while the shown keys are the same (start-up, issue
    18) and still rebuilds when one changes (here: an action disabled by check_action)."""
    tui_store.build()
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 4, what="four rows")
        footer = app.screen.query_one(Footer)
        await pilot.pause()
        keys = list(footer.query(FooterKey))
        assert "Launch" in [k.description for k in keys]
        for _ in range(3):
            app.screen.refresh_bindings()
            await pilot.pause()
        assert list(footer.query(FooterKey)) == keys  # the same widgets: nothing rebuilt
        app.screen.check_action = lambda action, parameters: None if action == "launch" else True
        app.screen.refresh_bindings()
        await until(
            pilot,
            lambda: any(k.description == "Launch" and k.has_class("-disabled") for k in footer.query(FooterKey)),
            what="the launch key shown disabled",
        )


@pytest.mark.asyncio
async def test_filter_sort_select_and_compare() -> None:
    ids = tui_store.build()
    app = RMConsoleApp(refresh_s=0.2)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 4, what="four rows")
        await pilot.press("slash", *"status:running")
        assert table_ids(app) == [ids["running"]]
        await pilot.press("escape")
        assert len(table_ids(app)) == 4 and app.screen.query_one(RunsTable).has_focus
        await pilot.press("slash", *"finetune", "enter")
        assert table_ids(app) == [ids["failed"]]
        await pilot.pause(0.5)  # refreshes keep the filter
        assert table_ids(app) == [ids["failed"]]
        await pilot.press("escape", "s")  # sort by status (ascending)
        assert [cell(app, i, "status") for i in table_ids(app)] == ["failed", "finished", "queued", "running"]
        await pilot.press("r")
        assert cell(app, table_ids(app)[0], "status") == "running"
        await pilot.press("question_mark")  # ? lists rmconsole's own keys (Enter opens a run)
        from rmconsole.tui.screens.keys import KeysScreen

        assert isinstance(app.screen, KeysScreen)
        assert ("Enter", "open the highlighted run (its stream, memory, accuracy, log)") in app.screen.rows
        assert not any(meaning == "Select" for _, meaning in app.screen.rows)
        await pilot.press("question_mark")
        assert not isinstance(app.screen, KeysScreen)

        # Space selects the highlighted run; c compares the selection
        table = app.screen.query_one(RunsTable)
        for run_id in (ids["finished"], ids["running"]):
            table.move_cursor(row=table.get_row_index(str(run_id)))
            await pilot.press("space")
        assert app.selected == {ids["finished"], ids["running"]}
        assert cell(app, ids["finished"], "sel") == "●"
        await pilot.press("c")
        await until(
            pilot,
            lambda: isinstance(app.screen, CompareScreen) and app.screen.view is not None,
            what="the compare screen",
        )
        view = app.screen.view
        assert [r.id for r in view.rows] == [ids["finished"], ids["running"]]
        assert view.differences["seed"] == ("1", "2")  # written as --set writes them
        assert app.screen.query_one("#metrics").row_count == 2
        await pilot.press("escape")
        assert not isinstance(app.screen, CompareScreen)


@pytest.mark.asyncio
async def test_run_screen_panels_and_stepping_through_memory_updates() -> None:
    ids = tui_store.build()
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 4, what="rows")
        table = app.screen.query_one(RunsTable)
        table.move_cursor(row=table.get_row_index(str(ids["running"])))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, what="run view")
        screen = app.screen
        stream = screen.query_one(TaskStreamPanel).render().plain
        assert "▶ T3" in stream and "stream 40%" in stream and "1,840 samples/s" in stream
        assert "✓" in stream.splitlines()[0] and "53.0%" in stream.splitlines()[1]
        memory = screen.query_one(MemoryPanel)
        assert memory.index == 2 and "update 3/3" in memory.render().plain
        assert "chosen 200" in memory.render().plain  # RM's uncertainty spread
        await pilot.press("left_square_bracket", "left_square_bracket")
        assert memory.index == 0 and memory.pinned == 0 and "class-balanced random" in memory.render().plain
        store.record_memory(ids["running"], 3, tui_store.memory_histogram(3), 25, {"policy": "uncertainty"})
        await until(pilot, lambda: len(memory.updates) == 4, what="a new memory update")
        assert memory.index == 0  # pinned stays where the user put it
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        assert memory.pinned is None and memory.index == 3  # back to following the latest
        assert screen.query_one(LogPanel).n_lines == 6
        assert "ETA 0:00:12" in screen.query_one(RunHeader).render().plain
        await pilot.press("escape")
        assert not isinstance(app.screen, RunScreen)


@pytest.mark.asyncio
async def test_failed_run_shows_its_error_and_log() -> None:
    ids = tui_store.build()
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        app.open_run(ids["failed"])
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, what="run view")
        await until(pilot, lambda: app.screen.query_one(LogPanel).n_lines == 5, what="log lines")
        header = app.screen.query_one(RunHeader).render().plain
        assert "failed: RuntimeError: CUDA out of memory (simulated)" in header
        log = app.screen.query_one(LogPanel)
        assert any("Traceback" in line.text for line in log.lines)


@pytest.mark.asyncio
async def test_the_run_header_shows_the_system_load_once_sampled_and_as_it_grows() -> None:
    from datetime import UTC, datetime

    ids = tui_store.build()
    at = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        app.open_run(ids["finished"])
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, what="run view")
        header = app.screen.query_one(RunHeader)
        assert "system:" not in header.render().plain  # not sampled: no line
        store.record_system(ids["finished"], [{"at": at, "cpu_percent": 120.0, "rss_bytes": 3 * 2**29, "load1": 0.5}])
        await until(
            pilot, lambda: "system: CPU 120%/120% mean/peak · RSS 1.5G peak" in header.render().plain, what="line"
        )
        store.record_system(
            ids["finished"], [{"at": at, "cpu_percent": 80.0, "gpu_util": 60.0, "gpu_mem_bytes": 2**30}]
        )
        await until(pilot, lambda: "CPU 100%/120%" in header.render().plain, what="the line to follow")
        assert "GPU 60%/60% mem 1.0G peak · 2 samples" in header.render().plain


@pytest.mark.asyncio
async def test_a_run_that_vanishes_and_a_store_that_fails_are_shown_not_fatal(monkeypatch) -> None:
    ids = tui_store.build()
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        app.open_run(ids["finished"])
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, what="run view")

        def drop(session) -> None:
            for table in (TaskStream, TaskResult, MemorySnapshot):
                session.exec(delete(table).where(table.run_id == ids["finished"]))
            session.exec(delete(Run).where(Run.id == ids["finished"]))

        store.write(drop)
        header = app.screen.query_one(RunHeader)
        await until(pilot, lambda: "no longer exists" in header.render().plain, what="the vanished notice")
        await pilot.press("escape")
        await until(pilot, lambda: len(table_ids(app)) == 3, what="the row to go")

        real = data.RunsFeed.read
        calls = {"n": 0}

        def flaky(feed):
            calls["n"] += 1
            if calls["n"] <= 2:
                raise store.StoreError("disk I/O error (simulated)")
            return real(feed)

        monkeypatch.setattr(data.RunsFeed, "read", flaky)
        line = app.screen.query_one("#status-line")
        await until(pilot, lambda: "store unavailable" in str(line.render()), what="the store problem")
        await until(pilot, lambda: "3 runs" in str(line.render()), what="recovery")


@pytest.mark.asyncio
async def test_reads_go_on_while_a_writer_holds_the_database_lock(monkeypatch) -> None:
    """A worker holding the write lock (as during a commit) does not stop the TUI's reads (WAL)."""
    ids = tui_store.build()
    reads = {"n": 0}
    real = data.RunsFeed.read

    def counted(feed):
        reads["n"] += 1
        return real(feed)

    monkeypatch.setattr(data.RunsFeed, "read", counted)
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 4, what="rows")
        writer = sqlite3.connect(store.database_url().removeprefix("sqlite:///"), isolation_level=None, timeout=10)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("UPDATE run SET phase_done = 500 WHERE id = ?", (ids["running"],))
        try:
            before = reads["n"]
            await until(pilot, lambda: reads["n"] >= before + 3, what="reads during the lock")
            assert cell(app, ids["running"], "progress") == "3/5 stream  40%"  # uncommitted: not shown yet
        finally:
            writer.execute("COMMIT")
            writer.close()
        await until(pilot, lambda: cell(app, ids["running"], "progress") == "3/5 stream  87%", what="the commit")


@pytest.mark.asyncio
async def test_ui_answers_keys_while_a_read_is_stuck_and_reads_do_not_pile_up(monkeypatch) -> None:
    """A read stuck on a locked store (busy timeout) blocks only its thread; ticks meanwhile skip."""
    tui_store.build()
    release = threading.Event()
    reads = {"started": 0}
    real = data.RunsFeed.read

    def stuck(feed):
        reads["started"] += 1
        if reads["started"] == 2:
            release.wait(10)
        return real(feed)

    monkeypatch.setattr(data.RunsFeed, "read", stuck)
    app = RMConsoleApp(refresh_s=0.05)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: reads["started"] == 2, what="the stuck read")
        started = time.monotonic()
        await pilot.press("s")
        assert app.screen.query_one(RunsTable).border_subtitle == "sort: status ▲"
        await pilot.press("slash", *"rm", "escape")
        assert time.monotonic() - started < 2
        await pilot.pause(0.5)  # ten ticks pass...
        assert reads["started"] == 2  # ...without starting more reads behind the stuck one
        release.set()
        await until(pilot, lambda: reads["started"] >= 4, what="reads to resume")


@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_launch_the_digits_preset_and_watch_it_until_it_finishes() -> None:
    app = RMConsoleApp(refresh_s=0.1)
    seen_tasks: list[int | None] = []
    seen_memory: list[int] = []
    seen_streamed: list[str] = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        await until(pilot, lambda: isinstance(app.screen, LaunchScreen), what="the launch screen")
        await pilot.press(*"epochs=4 threads=1")  # (tasks long enough to be seen live under load)
        await until(pilot, lambda: app.screen.valid, what="a valid config")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), timeout=20, what="the run screen")
        screen = app.screen
        assert len(app.workers_started) == 1  # the TUI owns the worker's Popen
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            view = screen.view
            if view is not None:
                memory = screen.query_one(MemoryPanel)
                stream = screen.query_one(TaskStreamPanel)
                if not seen_tasks or seen_tasks[-1] != view.row.task:
                    seen_tasks.append(view.row.task)
                if not seen_memory or seen_memory[-1] != len(memory.updates):
                    seen_memory.append(len(memory.updates))
                drawn = stream.render().plain
                if not seen_streamed or seen_streamed[-1] != drawn:
                    seen_streamed.append(drawn)
                if view.row.status not in store.ACTIVE:
                    break
            await pilot.pause(0.05)
        view = screen.view
        assert view is not None and view.row.status == "finished", view.row.error if view else "no view"
        # waits, not timings: a loaded CI machine (load 14 on 2 cores) took over 10 s here
        await until(pilot, lambda: not app.workers_started, timeout=60, what="the worker to be reaped")
        await until(pilot, lambda: screen.query_one(LogPanel).n_lines >= 20, timeout=60, what="the log")
    run_id = view.row.id
    assert store.get_run(run_id).config["epochs"] == 4
    assert seen_memory == sorted(seen_memory) and seen_memory[-1] == 5 and len(seen_memory) >= 3, seen_memory
    assert len([t for t in seen_tasks if t is not None]) >= 2, seen_tasks
    assert len(seen_streamed) >= 3  # the task-stream panel changed as the run went on
    assert seen_streamed[-1].count("✓") == 5 and "▶" not in seen_streamed[-1]
    assert len(view.results) == 5 and view.row.value("A_last") is not None


@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_stop_a_running_run_after_confirming() -> None:
    ids = tui_store.build()
    launched = launch.launch_run("digits-blurry10-online", ["epochs=1000", "threads=1"])
    app = RMConsoleApp(refresh_s=0.1)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: launched.run_id in table_ids(app), what="the launched run")
            table = app.screen.query_one(RunsTable)
            table.move_cursor(row=table.get_row_index(str(ids["finished"])))
            await pilot.press("x")
            assert not isinstance(app.screen, ConfirmScreen)  # a finished run cannot be stopped
            table.move_cursor(row=table.get_row_index(str(launched.run_id)))
            await pilot.press("x")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
            await pilot.press("n")
            assert store.get_run(launched.run_id).status in store.ACTIVE
            await pilot.press("x")
            await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
            await pilot.press("y")
            await until(
                pilot, lambda: cell(app, launched.run_id, "status") == "stopped", timeout=30, what="the stopped status"
            )
    finally:
        launched.process.wait(timeout=30)
    assert store.get_run(launched.run_id).status == "stopped"
    assert not launch.pid_alive(launched.process.pid)


def test_tui_command_refuses_a_bad_refresh() -> None:
    out = rmconsole("tui", "--refresh", "0")
    assert out.returncode == 2 and "--refresh 0.0: must be a number of seconds above 0" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_resume_a_stopped_run_from_the_command_palette() -> None:
    """The TUI resumes through the same runner call as `rmconsole resume`, and owns the new worker."""
    from rmconsole.config import load_config

    _, cfg = load_config(None, {"epochs": 1000, "threads": 1})
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    store.update_run(run_id, status="stopped", error="stopped by request (SIGTERM)")
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: run_id in table_ids(app), what="the stopped run")
        await pilot.press("ctrl+p", *f"resume run {run_id}")
        await pilot.pause(0.5)
        await pilot.press("enter")
        await until(pilot, lambda: len(app.workers_started) == 1, timeout=20, what="the resumed worker")
        await until(pilot, lambda: cell(app, run_id, "status") == "running", timeout=90, what="the running status")
        assert launch.stop_run(run_id) == "stopped"
        await until(pilot, lambda: not app.workers_started, what="the worker to be reaped")
    assert store.get_run(run_id).status == "stopped" and "SIGTERM" in store.get_run(run_id).error


@pytest.mark.asyncio
async def test_a_run_without_a_test_set_shows_its_validation_per_task() -> None:
    """Issue 42: a `tune` trial (evaluate_test=false) showed `—%` for every task on its run page."""
    from sqlmodel import select

    ids = tui_store.build()

    def untested(session) -> None:
        for result in session.exec(select(TaskResult).where(TaskResult.run_id == ids["running"])).all():
            result.accuracy, result.val_accuracy = None, 61.5 + result.task
            session.add(result)

    store.write(untested)
    app = RMConsoleApp(refresh_s=0.1)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(table_ids(app)) == 4, what="rows")
        app.open_run(ids["running"])
        await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, what="run view")
        lines = app.screen.query_one(TaskStreamPanel).render().plain.splitlines()
        assert "val  61.5%" in lines[0] and "val  62.5%" in lines[1] and "—%" not in "".join(lines)
