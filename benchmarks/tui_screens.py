"""Text captures of the TUI's pages on a store of runs that differ as a researcher's do.

    python benchmarks/tui_screens.py [--out docs/screens]

Builds a throwaway store with tests/support/identity_store.py (named, tagged, overridden, partial,
archived and swept runs, with per-epoch rows), drives the real app headless with Pilot and
writes what the terminal shows, as plain text:

    runs-80x24.txt          the runs table on an 80×24 terminal
    runs-100x30.txt         ... on 100×30
    run-live-loss.txt       a running run's page; epochs are added while it is shown (live curves)
    compare-diff.txt        two runs compared: metrics, accuracy curves, config differences
    launch-cloned.txt       the launch page cloned from a run (l on the runs page)
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def screen_text(app) -> str:  # type: ignore[no-untyped-def]
    """What the terminal shows now, as text (Textual's export_screenshot, exported as text)."""
    from rich.console import Console

    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


async def settle(pilot, condition, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise SystemExit("the page did not reach the expected state")
        await pilot.pause(0.05)
    await pilot.pause(0.3)


async def capture(out: Path) -> None:
    import identity_store

    from rmconsole import store
    from rmconsole.tui import RMConsoleApp
    from rmconsole.tui.screens.compare import CompareScreen
    from rmconsole.tui.screens.launch import LaunchScreen
    from rmconsole.tui.screens.run import RunScreen
    from rmconsole.tui.widgets.epochs_panel import EpochsPanel
    from rmconsole.tui.widgets.runs_table import RunsTable

    ids = identity_store.build()
    visible = len(ids) - 1  # one is archived
    for size in ((80, 24), (100, 30)):
        app = RMConsoleApp(refresh_s=0.2, reap_every_s=None)
        async with app.run_test(size=size) as pilot:
            await settle(pilot, lambda: app.screen.query_one(RunsTable).row_count == visible)  # noqa: B023 - awaited here
            (out / f"runs-{size[0]}x{size[1]}.txt").write_text(screen_text(app))

    app = RMConsoleApp(refresh_s=0.2, reap_every_s=None)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, lambda: app.screen.query_one(RunsTable).row_count == visible)
        app.open_run(ids["partial"])
        await settle(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None)
        panel = app.screen.query_one(EpochsPanel)
        before = len(panel.points)
        store.record_epochs(ids["partial"], identity_store.epoch_rows(3, 12))  # the worker's next flushes
        store.update_run(ids["partial"], task=3, phase="memory", phase_done=2400, phase_total=3200)
        await settle(pilot, lambda: len(panel.points) == before + 13)
        (out / "run-live-loss.txt").write_text(screen_text(app))
        await pilot.press("escape")
        app.open_compare([ids["base"], ids["noaug"], ids["k500"]])
        await settle(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.view is not None)
        (out / "compare-diff.txt").write_text(screen_text(app))
        await pilot.press("escape")
        await pilot.pause(0.3)
        table = app.screen.query_one(RunsTable)
        table.move_cursor(row=table.get_row_index(str(ids["noaug"])))
        await pilot.press("l")
        await settle(pilot, lambda: isinstance(app.screen, LaunchScreen) and app.screen.valid)
        (out / "launch-cloned.txt").write_text(screen_text(app))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "screens")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rmconsole-screens-") as home:
        os.environ["RMCONSOLE_HOME"] = home
        os.environ["RMCONSOLE_WARM"] = "0"
        os.environ.pop("RMCONSOLE_DB", None)
        asyncio.run(capture(args.out))
    for path in sorted(args.out.glob("*.txt")):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
