"""SVG snapshots of the main screens (pytest-textual-snapshot). The store's content is fixed
(tests/support/tui_store.py), the app's clock is frozen and the reaper is off, so the pictures are
stable. After an intended change of the UI: `pytest tests/faces/test_tui_screens.py --snapshot-update`,
then look at the new SVGs before committing them."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from support import tui_store

from rmconsole import store
from rmconsole.tui import RMConsoleApp
from rmconsole.tui.screens.compare import CompareScreen
from rmconsole.tui.screens.launch import LaunchScreen
from rmconsole.tui.screens.run import RunScreen
from rmconsole.tui.widgets.log_panel import LogPanel
from rmconsole.tui.widgets.runs_table import RunsTable

SIZE = (120, 40)
NOW = tui_store.T0 + timedelta(minutes=5)


def frozen_app() -> RMConsoleApp:
    return RMConsoleApp(refresh_s=0.2, clock=lambda: NOW, reap_every_s=None)


@pytest.fixture
def ids() -> dict[str, int]:
    ids = tui_store.build()
    store.update_run(ids["running"], heartbeat_at=NOW - timedelta(seconds=1))
    return ids


async def settle(pilot, condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the screen did not load in time"
        await pilot.pause(0.05)
    await pilot.pause(0.3)  # one more refresh: nothing may change any more


def test_runs_screen(snap_compare, ids) -> None:
    async def loaded(pilot) -> None:
        await settle(pilot, lambda: pilot.app.screen.query_one(RunsTable).row_count == 4)

    assert snap_compare(frozen_app(), terminal_size=SIZE, run_before=loaded)


def test_run_screen_of_a_running_rm_run(snap_compare, ids) -> None:
    async def opened(pilot) -> None:
        pilot.app.open_run(ids["running"])
        await settle(
            pilot,
            lambda: (
                isinstance(pilot.app.screen, RunScreen)
                and pilot.app.screen.view is not None
                and pilot.app.screen.query_one(LogPanel).n_lines == 6
            ),
        )

    assert snap_compare(frozen_app(), terminal_size=SIZE, run_before=opened)


def test_run_screen_of_a_failed_run(snap_compare, ids) -> None:
    async def opened(pilot) -> None:
        pilot.app.open_run(ids["failed"])
        await settle(
            pilot,
            lambda: (
                isinstance(pilot.app.screen, RunScreen)
                and pilot.app.screen.view is not None
                and pilot.app.screen.query_one(LogPanel).n_lines == 5
            ),
        )

    assert snap_compare(frozen_app(), terminal_size=SIZE, run_before=opened)


def test_compare_screen(snap_compare, ids) -> None:
    async def compared(pilot) -> None:
        pilot.app.open_compare([ids["finished"], ids["running"], ids["failed"]])
        await settle(pilot, lambda: isinstance(pilot.app.screen, CompareScreen) and pilot.app.screen.view is not None)

    assert snap_compare(frozen_app(), terminal_size=SIZE, run_before=compared)


SMALL = (80, 24)  # issue 27: what identifies a run, and each run-page panel readable, at 80×24


def test_runs_screen_at_80x24(snap_compare, ids) -> None:
    async def loaded(pilot) -> None:
        await settle(pilot, lambda: pilot.app.screen.query_one(RunsTable).row_count == 4)

    assert snap_compare(frozen_app(), terminal_size=SMALL, run_before=loaded)


def test_run_screen_of_a_running_rm_run_at_80x24(snap_compare, ids) -> None:
    async def opened(pilot) -> None:
        pilot.app.open_run(ids["running"])
        await settle(
            pilot,
            lambda: (
                isinstance(pilot.app.screen, RunScreen)
                and pilot.app.screen.view is not None
                and pilot.app.screen.query_one(LogPanel).n_lines == 6
            ),
        )

    assert snap_compare(frozen_app(), terminal_size=SMALL, run_before=opened)


def test_run_screen_of_a_finished_run_at_80x24_accuracy_tab(snap_compare, ids) -> None:
    async def opened(pilot) -> None:
        pilot.app.open_run(ids["finished"])
        await settle(pilot, lambda: isinstance(pilot.app.screen, RunScreen) and pilot.app.screen.view is not None)
        await pilot.press("3")
        await pilot.pause(0.3)

    assert snap_compare(frozen_app(), terminal_size=SMALL, run_before=opened)


def test_run_screen_of_a_finished_run(snap_compare, ids) -> None:
    async def opened(pilot) -> None:
        pilot.app.open_run(ids["finished"])
        await settle(pilot, lambda: isinstance(pilot.app.screen, RunScreen) and pilot.app.screen.view is not None)

    assert snap_compare(frozen_app(), terminal_size=SIZE, run_before=opened)


def test_compare_screen_at_80x24(snap_compare, ids) -> None:
    """The metrics lead (issue 42: at 80 columns the table showed the runs' identity and no metric)."""

    async def compared(pilot) -> None:
        pilot.app.open_compare([ids["finished"], ids["running"], ids["failed"]])
        await settle(pilot, lambda: isinstance(pilot.app.screen, CompareScreen) and pilot.app.screen.view is not None)
        table = pilot.app.screen.query_one("#metrics")
        assert [str(c.label) for c in table.ordered_columns][:3] == ["run", "A_last", "A_avg"]
        assert sum(c.get_render_width(table) for c in table.ordered_columns[:5]) < SMALL[0] - 4  # all on screen

    assert snap_compare(frozen_app(), terminal_size=SMALL, run_before=compared)


def test_launch_screen_with_overrides(snap_compare, ids) -> None:
    async def typed(pilot) -> None:
        await pilot.press("n")
        await settle(pilot, lambda: isinstance(pilot.app.screen, LaunchScreen))
        await pilot.press(*"epochs=2 seed=7")
        pilot.app.screen.query_one("#overrides").cursor_blink = False  # a blinking cursor is not stable
        await pilot.pause(0.2)

    assert snap_compare(frozen_app(), terminal_size=SIZE, run_before=typed)
