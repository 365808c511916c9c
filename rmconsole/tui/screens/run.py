"""One run, live: task stream, memory, accuracy, loss and lr per epoch, and the worker's log."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid
from textual.reactive import var
from textual.widgets import Header

from .. import data
from ..messages import RunLoaded, RunVanished, StoreProblem
from ..widgets.accuracy_panel import AccuracyPanel
from ..widgets.epochs_panel import EpochsPanel
from ..widgets.footer import Footer
from ..widgets.log_panel import LogPanel
from ..widgets.memory_panel import MemoryPanel
from ..widgets.run_header import RunHeader
from ..widgets.task_stream import TaskStreamPanel
from .polling import PollingScreen
from .tabbed_panels import TabbedPanels, panel_keys


class RunScreen(TabbedPanels, PollingScreen):
    """Wide (120×40 and up): stream and memory, the accuracy panel across the page (chart and
    matrix side by side), loss and log. Smaller (80×24): a tab row and one panel at a time, each
    at the full width, so the memory histogram, the accuracy chart and the loss chart are each
    readable; 1-5 (or a click on a tab) switch."""

    CSS_PATH = ["tabbed_panels.tcss", "run.tcss"]
    PANELS = (
        ("stream", "1 stream"),
        ("memory", "2 memory"),
        ("accuracy", "3 accuracy"),
        ("epochs", "4 loss & lr"),
        ("log", "5 log"),
    )
    FIRST_PANEL = "memory"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("x", "stop", "Stop"),
        Binding("R", "resume", "Resume"),
        Binding("l", "clone", "Clone"),
        Binding("left_square_bracket", "memory_step(-1)", "Earlier memory", show=False),
        Binding("right_square_bracket", "memory_step(1)", "Later memory", show=False),
        Binding("m", "maximize", "Maximize"),
        Binding("space", "toggle_select", "Select", show=False),
        *panel_keys(PANELS),
    ]

    # the latest read; the header and the panels are bound to them and redraw what changed
    view: var[data.RunView | None] = var(None, init=False)
    now: var[datetime | None] = var(None, init=False)  # the App's clock at that read

    def __init__(self, run_id: int) -> None:
        super().__init__()
        self.run_id = run_id
        self.feed = data.RunFeed(run_id)  # used by one read thread at a time
        self.log_tail: data.LogTail | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield RunHeader(id="run-header").data_bind(RunScreen.view, RunScreen.now)
        yield self.panel_tabs()
        with Grid(id="panels"):
            yield TaskStreamPanel(id="stream", classes="panel").data_bind(RunScreen.view)
            yield MemoryPanel(id="memory", classes="panel").data_bind(RunScreen.view)
            yield AccuracyPanel(id="accuracy", classes="panel").data_bind(RunScreen.view)
            yield EpochsPanel(id="epochs", classes="panel").data_bind(RunScreen.view)
            yield LogPanel(id="log", classes="panel")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"run {self.run_id}"
        self.query_one(MemoryPanel).focus()

    # ------------------------------------------------------------------ reading (thread)

    def read(self) -> RunLoaded:
        view = self.feed.read()
        if self.log_tail is None or (view.log_path and self.log_tail.path != Path(view.log_path)):
            self.log_tail = data.LogTail(view.log_path)
        return RunLoaded(view, self.log_tail.read_new())

    def on_run_loaded(self, message: RunLoaded) -> None:
        view = message.view
        self.query_one(RunHeader).notice = None
        self.now = self.app.clock()
        self.view = view
        log = self.query_one(LogPanel)
        if message.log_lines:
            log.add_lines(message.log_lines)
        log.border_subtitle = Path(view.log_path).name if view.log_path else "no log yet"

    def on_run_vanished(self, message: RunVanished) -> None:
        self.query_one(RunHeader).notice = (
            f"run {message.run_id} no longer exists in the store (deleted while shown); Esc goes back",
            "bold red",
        )

    def on_store_problem(self, message: StoreProblem) -> None:
        self.query_one(RunHeader).notice = (message.text, "bold yellow")

    # ------------------------------------------------------------------ actions

    def action_back(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        self.app.pop_screen()

    def action_stop(self) -> None:
        self.app.confirm_stop(self.run_id)

    def action_resume(self) -> None:
        self.app.resume_run(self.run_id)

    def action_clone(self) -> None:
        self.app.open_launch(clone_of=self.run_id)

    def action_memory_step(self, delta: int) -> None:
        self.query_one(MemoryPanel).action_step(delta)

    def action_maximize(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        focused = self.focused
        while focused is not None and "panel" not in focused.classes:
            focused = focused.parent  # type: ignore[assignment]  # a DOMNode; up to the App, no "panel" above the screen
        if focused is not None:
            self.maximize(focused)

    def action_toggle_select(self) -> None:
        self.app.toggle_selected(self.run_id)
        self.notify(f"run {self.run_id} {'selected' if self.run_id in self.app.selected else 'unselected'} for Compare")
