"""The rmconsole TUI: the App holds routing and app state (selected runs, the worker processes
it started); each page is a Screen in screens/, each panel a widget in widgets/.

Pages that show the store are `PollingScreen`s: their reads run in thread workers started by
a timer and come back as typed messages; the UI thread never waits on SQLite. Pages see the App
through `console.Console`, so nothing below imports this module. Launching, stopping, resuming
and reaping go through the runner (`runner.launch_request`, `stop_run`, `resume_run`, `reap_dead`,
`record_exit`), the same calls as the CLI.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from datetime import UTC, datetime

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.filter import LineFilter
from textual.reactive import var
from textual.screen import Screen

from .. import runner, store
from ..runner.request import LaunchRequest
from .commands import RunCommands
from .data import RunRow
from .messages import LaunchFailed, RunLaunched, RunStopped, SweepLaunched
from .safe_lines import ControlCharacters
from .screens.runs import RunsScreen

Clock = Callable[[], datetime]


def utc_clock() -> datetime:
    return datetime.now(UTC)


class RMConsoleApp(App[None]):
    """Routing and state; the screens do the drawing (it implements `console.Console`)."""

    TITLE = "rmconsole"
    SUB_TITLE = "Rainbow Memory experiment console"
    CSS_PATH = "app.tcss"
    COMMANDS = App.COMMANDS | {RunCommands}
    MODES = {"runs": RunsScreen}
    DEFAULT_MODE = "runs"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "toggle_help", "Keys"),
    ]

    selected: var[frozenset[int]] = var(frozenset())  # runs picked for Compare; the runs page watches it
    _control_characters = ControlCharacters()

    def get_line_filters(self) -> list[LineFilter]:
        """Textual's filters, then the output sanitiser: no widget draws a raw control character."""
        return [*super().get_line_filters(), self._control_characters]

    def __init__(self, refresh_s: float = 1.0, clock: Clock = utc_clock, reap_every_s: float | None = 5.0) -> None:
        """`clock` is what "heartbeat N s ago" is measured against (frozen in snapshot tests);
        `reap_every_s=None` turns off marking dead runs failed (for fixed snapshot content)."""
        super().__init__()
        self.refresh_s = refresh_s
        self.clock = clock
        self.reap_every_s = reap_every_s
        self.rows: list[RunRow] = []  # the latest read of all runs (command palette, compare)
        self.workers_started = runner.StartedWorkers()  # the worker processes this TUI started
        self._reaping = False

    def on_mount(self) -> None:
        from ..store import db

        self._told_before = db.on_wait
        db.on_wait = self._store_waiting  # a store operation blocked 2 s says what it waits on, on screen
        self.set_interval(1.0, self._poll_children, name="reap children")
        if self.reap_every_s is not None:
            self.set_interval(self.reap_every_s, self._reap_tick, name="reap dead runs")
            self._reap_tick()

    def on_unmount(self) -> None:
        from ..store import db

        db.on_wait = getattr(self, "_told_before", db.on_wait)

    def _store_waiting(self, message: str) -> None:
        """(From the store's watcher thread.)"""
        self.call_from_thread(self.notify, message, title="Waiting for the store", severity="warning", timeout=8)

    # ------------------------------------------------------------------ routing
    # The other pages are imported when first opened: the runs page starts without plotext and
    # the config machinery (about 0.1 s of start-up). No page imports this module (they see the
    # App as `console.Console`), so these imports make no cycle.

    def open_run(self, run_id: int) -> None:
        from .screens.run import RunScreen

        self.push_screen(RunScreen(run_id))

    def open_compare(self, run_ids: Iterable[int] | None = None) -> None:
        from .screens.compare import CompareScreen

        ids = sorted(run_ids if run_ids is not None else self.selected)
        if not ids:
            self.notify(
                "Select runs with Space first (or open the command palette with ctrl+p).",
                title="Nothing to compare",
                severity="warning",
            )
            return
        self.push_screen(CompareScreen(ids))

    def open_study(self, name: str) -> None:
        """The page of a `rmconsole tune` study: its trials, history, importance, parallel coordinates."""
        from .screens.study import StudyScreen

        self.push_screen(StudyScreen(name))

    def open_launch(self, clone_of: int | None = None) -> None:
        """The launch page; with `clone_of`, filled with that run's preset, overrides, name and tags."""
        from .screens.launch import LaunchScreen

        if clone_of is None:
            self.push_screen(LaunchScreen())
            return
        row = next((r for r in self.rows if r.id == clone_of), None)
        if row is None:
            try:
                row = store.run_record(clone_of)
            except store.UnknownRun as err:
                self.notify(str(err), severity="warning")
                return
        self.push_screen(LaunchScreen.cloning(row))

    def confirm_stop_sweep(self, sweep_id: str) -> None:
        from .screens.confirm import ConfirmScreen

        members = [r for r in self.rows if r.sweep_id == sweep_id]
        active = [r for r in members if r.active]
        if not active:
            self.notify(f"sweep {sweep_id}: no queued or running run to stop", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify(f"stopping sweep {sweep_id}…")
                self.stop_sweep(sweep_id)

        self.push_screen(
            ConfirmScreen(
                f"Stop sweep {sweep_id}?",
                f"{len(active)} of its {len(members)} runs are queued or running: its queue "
                f"driver and their workers get SIGTERM, queued runs are marked stopped; "
                f"finished tasks stay stored (R resumes a run).",
                confirm="Stop sweep",
            ),
            answered,
        )

    @work(thread=True, group="stop", exit_on_error=False)
    def stop_sweep(self, sweep_id: str) -> None:
        """Stop every run of a sweep, as `rmconsole stop --sweep ID` does."""
        try:
            counts = runner.stop_sweep(sweep_id)
        except Exception as err:  # noqa: BLE001 - one line
            self.call_from_thread(self.notify, f"stopping sweep {sweep_id} failed: {err}", severity="error")
            return
        self.call_from_thread(
            self.notify, ", ".join(f"{v} {k}" for k, v in counts.items()), title=f"Sweep {sweep_id} stopped"
        )

    def confirm_stop(self, run_id: int) -> None:
        from .screens.confirm import ConfirmScreen

        row = next((r for r in self.rows if r.id == run_id), None)
        if row is not None and not row.active:
            self.notify(f"run {run_id} is {row.status}: only queued or running runs can be stopped", severity="warning")
            return
        what = f"run {run_id}" + (
            f" ({row.preset}, {row.method}, task {row.task + 1}/{row.n_tasks})"
            if row is not None and row.task is not None
            else ""
        )

        def answered(yes: bool | None) -> None:
            if yes:
                self.notify(f"stopping run {run_id}…")
                self.stop_run(run_id)

        self.push_screen(
            ConfirmScreen(
                f"Stop {what}?",
                "The worker gets SIGTERM (SIGKILL after 10 s); finished tasks stay stored "
                "and `rmconsole resume` can continue it.",
                confirm="Stop run",
            ),
            answered,
        )

    def action_toggle_help(self) -> None:
        """`?` shows (and hides) rmconsole's keys for the page underneath."""
        from .screens.keys import KeysScreen

        if isinstance(self.screen, KeysScreen):
            self.screen.dismiss(None)
        else:
            self.push_screen(KeysScreen(self.screen))

    # ------------------------------------------------------------------ state

    def toggle_selected(self, run_id: int) -> None:
        self.selected = self.selected ^ {run_id}

    def clear_selection(self) -> None:
        self.selected = frozenset()

    # ------------------------------------------------------------------ dead workers (thread)

    def _reap_tick(self) -> None:
        if not self._reaping:
            self._reaping = True
            self._reap()

    @work(thread=True, group="reap", exit_on_error=False)
    def _reap(self) -> None:
        """Mark runs whose worker died (pid gone on this host, or heartbeat stale) failed, as
        `rmconsole runs` does; in its own thread so a write waiting on a lock never delays reads."""
        try:
            runner.reap_dead()
        except Exception:  # noqa: BLE001 - a busy or missing store: the next tick tries again
            pass
        finally:
            self._reaping = False

    # ------------------------------------------------------------------ launch / stop (thread workers)

    @work(thread=True, group="launch", exit_on_error=False)
    def launch(self, request: LaunchRequest) -> None:
        """Store and start what the launch form asks (one run, or a sweep's queue runner) exactly as
        `rmconsole run --detach` with the same options does: the same `runner.launch_request`."""
        try:
            launched = runner.launch_request(dataclasses.replace(request, detach=True))
        except Exception as err:  # noqa: BLE001 - every refusal is one line for the launch screen
            self.post_message(LaunchFailed(str(err).splitlines()[0] if str(err) else type(err).__name__))
            return
        if isinstance(launched, runner.LaunchedSweep):
            self.post_message(SweepLaunched(launched.sweep_id, len(launched.run_ids), launched.plan.shape()))
            return
        self.workers_started.add(launched.run_id, launched.process)
        self.post_message(RunLaunched(launched.run_id, launched.preset))

    def on_sweep_launched(self, message: SweepLaunched) -> None:
        from .screens.launch import LaunchScreen

        self.notify(
            f"sweep {message.sweep_id}: {message.n_runs} runs ({message.shape}) queued; "
            f"X on one of them stops the sweep",
            title="Sweep launched",
        )
        if isinstance(self.screen, LaunchScreen):
            self.pop_screen()

    def on_run_launched(self, message: RunLaunched) -> None:
        from .screens.launch import LaunchScreen

        self.notify(f"run {message.run_id} started ({message.preset})", title="Launched")
        if isinstance(self.screen, LaunchScreen):
            self.pop_screen()
        self.open_run(message.run_id)

    def on_launch_failed(self, message: LaunchFailed) -> None:
        from .screens.launch import LaunchScreen

        if isinstance(self.screen, LaunchScreen):
            self.screen.show_error(message.text)
        else:
            self.notify(message.text, title="Launch refused", severity="error")

    @work(thread=True, group="stop", exit_on_error=False)
    def stop_run(self, run_id: int) -> None:
        try:
            status = runner.stop_run(run_id)
        except (ValueError, store.UnknownRun) as err:
            self.call_from_thread(self.notify, str(err), severity="warning")
            return
        except Exception as err:  # noqa: BLE001
            self.call_from_thread(self.notify, f"stopping run {run_id} failed: {err}", severity="error")
            return
        self.post_message(RunStopped(run_id, status))

    @work(thread=True, group="resume", exit_on_error=False)
    def resume_run(self, run_id: int) -> None:
        """Continue a failed or stopped run from its last task checkpoint, as `rmconsole resume --detach`."""
        try:
            resumed = runner.resume_run(run_id)
        except Exception as err:  # noqa: BLE001 - every refusal is one line
            self.call_from_thread(
                self.notify,
                str(err).splitlines()[0] if str(err) else type(err).__name__,
                title="Resume refused",
                severity="warning",
            )
            return
        self.workers_started.add(run_id, resumed.process)
        self.call_from_thread(self.notify, f"run {run_id} resumed at task {resumed.first_task + 1}", title="Resumed")

    def on_run_stopped(self, message: RunStopped) -> None:
        self.notify(f"run {message.run_id} {message.status}", title="Stopped")
        self._poll_children()

    # ------------------------------------------------------------------ our worker processes

    def _poll_children(self) -> None:
        """Reap workers this TUI started; one that exited without recording an end is failed."""
        for run_id, returncode, lease in self.workers_started.exited():
            self._settle_exit(run_id, returncode, lease)

    @work(thread=True, group="reap", exit_on_error=False)
    def _settle_exit(self, run_id: int, returncode: int | None, lease: store.Lease | None = None) -> None:
        try:  # (after a pause: a worker that exited cleanly may still be committing its last write)
            runner.record_exit(run_id, returncode, wait_s=0.5, lease=lease)
        except Exception:  # noqa: BLE001 - a vanished run needs no settling; a busy store is retried by reap_dead
            pass

    # ------------------------------------------------------------------ command palette

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Launch a run", "Pick a preset, edit overrides, start a worker", lambda: self.open_launch())
        yield SystemCommand(
            "Compare selected runs", "Metrics and accuracy curves side by side", lambda: self.open_compare()
        )
        yield SystemCommand("Clear selection", "Unselect every run", self.clear_selection)
