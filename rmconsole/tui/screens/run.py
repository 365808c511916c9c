"""One run, live: task stream, memory, accuracy and the worker's log."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Footer, Header

from .. import data
from ..messages import RunLoaded, RunVanished, StoreProblem
from ..widgets.accuracy_panel import AccuracyPanel
from ..widgets.log_panel import LogPanel
from ..widgets.memory_panel import MemoryPanel
from ..widgets.run_header import RunHeader
from ..widgets.task_stream import TaskStreamPanel

if TYPE_CHECKING:
    from ..app import RMConsoleApp


class RunScreen(Screen):
    CSS_PATH = "run.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("x", "stop", "Stop"),
        Binding("left_square_bracket", "memory_step(-1)", "Earlier memory"),
        Binding("right_square_bracket", "memory_step(1)", "Later memory"),
        Binding("m", "maximize", "Maximize panel"),
        Binding("space", "toggle_select", "Select", show=False),
    ]

    app: "RMConsoleApp"

    def __init__(self, run_id: int) -> None:
        super().__init__()
        self.run_id = run_id
        self.view: Optional[data.RunView] = None
        self.feed = data.RunFeed(run_id)  # used by one read thread at a time
        self.log_tail: Optional[data.LogTail] = None
        self._reading = False
        self._gone = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield RunHeader(id="run-header")
        with Grid(id="panels"):
            yield TaskStreamPanel(id="stream", classes="panel")
            yield MemoryPanel(id="memory", classes="panel")
            yield AccuracyPanel(id="accuracy", classes="panel")
            yield LogPanel(id="log", classes="panel")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"run {self.run_id}"
        self.query_one(MemoryPanel).focus()
        self.set_interval(self.app.refresh_s, self.read_store, name=f"run {self.run_id} refresh")
        self.read_store()

    # ------------------------------------------------------------------ reading (thread)

    def read_store(self) -> None:
        if self._reading or self._gone or not self.is_attached:
            return
        self._reading = True
        self._read()

    @work(thread=True, group="run-read", exit_on_error=False)
    def _read(self) -> None:
        try:
            view = self.feed.read()
            if self.log_tail is None or (view.log_path and self.log_tail.path != Path(view.log_path)):
                self.log_tail = data.LogTail(view.log_path)
            lines = self.log_tail.read_new()
        except data.RunGone:
            self.post_message(RunVanished(self.run_id))
        except Exception as err:  # noqa: BLE001 - locked / unreachable store: keep the last view, retry
            self.post_message(StoreProblem(data.describe_store_error(err)))
        else:
            self.post_message(RunLoaded(view, lines))
        finally:
            self._reading = False

    def on_run_loaded(self, message: RunLoaded) -> None:
        view = message.view
        header = self.query_one(RunHeader)
        if header.notice is not None:
            header.show_notice(None)
        header.show(view, self.app.clock())  # every read: the heartbeat's age moves on
        if view != self.view:
            self.view = view
            self.query_one(TaskStreamPanel).show(view)
            self.query_one(MemoryPanel).show(view)
            self.query_one(AccuracyPanel).show(view)
        if message.log_lines:
            self.query_one(LogPanel).add_lines(message.log_lines)
        log = self.query_one(LogPanel)
        subtitle = Path(view.log_path).name if view.log_path else "no log yet"
        if log.border_subtitle != subtitle:
            log.border_subtitle = subtitle

    def on_run_vanished(self, message: RunVanished) -> None:
        self._gone = True
        self.query_one(RunHeader).show_notice(f"run {message.run_id} no longer exists in the store "
                                              f"(deleted while shown); Esc goes back", style="bold red")

    def on_store_problem(self, message: StoreProblem) -> None:
        self.query_one(RunHeader).show_notice(message.text)

    # ------------------------------------------------------------------ actions

    def action_back(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        self.app.pop_screen()

    def action_stop(self) -> None:
        self.app.confirm_stop(self.run_id)

    def action_memory_step(self, delta: int) -> None:
        self.query_one(MemoryPanel).action_step(delta)

    def action_maximize(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        focused = self.focused
        while focused is not None and "panel" not in focused.classes:
            focused = focused.parent  # type: ignore[assignment]
        if focused is not None:
            self.maximize(focused)

    def action_toggle_select(self) -> None:
        self.app.toggle_selected(self.run_id)
        self.notify(f"run {self.run_id} {'selected' if self.run_id in self.app.selected else 'unselected'} for Compare")
