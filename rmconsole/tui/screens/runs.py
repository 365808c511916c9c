"""The runs page: every run, live; `/` filters, Space selects, Enter opens, s sorts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input

from .. import data
from ..messages import RunsLoaded, StoreProblem
from ..widgets.runs_table import SORTABLE, RunsTable
from ..widgets.status_line import StatusLine

if TYPE_CHECKING:
    from ..app import RMConsoleApp

SORT_CYCLE = ("id", "status", "preset", "method", "A_last", "F_last")


class RunsScreen(Screen):
    CSS_PATH = "runs.tcss"
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("space", "toggle_select", "Select"),
        Binding("enter", "open", "Open", show=True),
        Binding("c", "compare", "Compare"),
        Binding("n", "launch", "Launch"),
        Binding("x", "stop", "Stop"),
        Binding("s", "cycle_sort", "Sort"),
        Binding("r", "reverse_sort", "Reverse", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    app: "RMConsoleApp"

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[data.RunRow] = []
        self.feed = data.RunsFeed()  # used by one read thread at a time
        self.query_text = ""
        self.sort = "id"
        self.descending = True
        self._reading = False
        self._loaded = False
        self._problem: str | None = None
        self._filter_error: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter: words, or status:running method:rm preset:digits k:200 seed:1 — Enter keeps, Esc clears",
                    id="filter")
        yield RunsTable(id="runs")
        yield StatusLine(id="status-line")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(RunsTable)
        table.border_title = "runs"
        table.focus()
        self.set_interval(self.app.refresh_s, self.read_store, name="runs refresh")
        self.read_store()

    def on_screen_resume(self) -> None:
        self.read_store()
        self.show_rows()

    # ------------------------------------------------------------------ reading (thread)

    def read_store(self) -> None:
        """Timer tick: start a read unless one is still running (a slow store never piles up reads)."""
        if self._reading or not self.is_attached:
            return
        self._reading = True
        self._read()

    @work(thread=True, group="runs-read", exit_on_error=False)
    def _read(self) -> None:
        try:
            rows, changed = self.feed.read()
        except Exception as err:  # noqa: BLE001 - a locked or missing store is shown, then retried
            self.post_message(StoreProblem(data.describe_store_error(err)))
        else:
            self.post_message(RunsLoaded(rows, changed))
        finally:
            self._reading = False

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        recovered = self._problem is not None
        self._problem = None
        if message.changed or not self._loaded:
            self.rows = message.rows
            self.app.rows = message.rows
            self._loaded = True
            self.show_rows()
        elif recovered:
            self.show_status()

    def on_store_problem(self, message: StoreProblem) -> None:
        self._problem = message.text
        self.show_status()

    # ------------------------------------------------------------------ drawing

    def show_rows(self) -> None:
        try:
            shown = data.arrange(self.rows, self.query_text, self.sort, self.descending)
            self._filter_error = None
        except data.FilterError as err:  # shown on the status line until the filter reads
            shown, self._filter_error = [], str(err)
        table = self.query_one(RunsTable)
        if table.show(shown, self.app.selected):
            self.call_after_refresh(self.show_rows)  # a big store: the rest after this frame
        subtitle = f"sort: {self.sort} {'▼' if self.descending else '▲'}"
        if table.border_subtitle != subtitle:
            table.border_subtitle = subtitle
        self.show_status(len(shown))

    def show_status(self, n_shown: int | None = None) -> None:
        line = self.query_one(StatusLine)
        if self._problem or self._filter_error:
            line.show(self._problem or f"filter: {self._filter_error}", problem=True)
            return
        if not self._loaded:
            line.show("reading the store…")
            return
        if not self.rows:
            line.show(Text.assemble("No runs yet. Press ", ("n", "bold"), " to launch one (or run ",
                                    ("rmconsole run --detach", "bold"), " in a shell)."))
            return
        counts: dict[str, int] = {}
        for r in self.rows:
            counts[r.status] = counts.get(r.status, 0) + 1
        shown = len(self.query_one(RunsTable).rows) if n_shown is None else n_shown
        parts = [f"{len(self.rows)} runs"] + [f"{n} {s}" for s, n in sorted(counts.items())]
        if self.query_text.strip():
            parts.append(f"{shown} match “{self.query_text.strip()}”")
        if self.app.selected:
            parts.append(f"{len(self.app.selected)} selected (c compares)")
        line.show(" · ".join(parts))

    # ------------------------------------------------------------------ filter

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value
        self.show_rows()

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        box = self.query_one("#filter", Input)
        if not box.value.strip():
            box.remove_class("shown")
        self.query_one(RunsTable).focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("shown")
        self.query_text = ""
        self.show_rows()
        self.query_one(RunsTable).focus()

    # ------------------------------------------------------------------ sort

    def action_cycle_sort(self) -> None:
        self.set_sort(SORT_CYCLE[(SORT_CYCLE.index(self.sort) + 1) % len(SORT_CYCLE)])

    def action_reverse_sort(self) -> None:
        self.set_sort(self.sort, not self.descending)

    def set_sort(self, column: str, descending: bool | None = None) -> None:
        self.sort = column
        self.descending = descending if descending is not None else column in ("id", "A_last", "F_last")
        self.query_one(RunsTable).mark_sort(self.sort, self.descending)
        self.show_rows()

    @on(DataTable.HeaderSelected)
    def _header_clicked(self, event: DataTable.HeaderSelected) -> None:
        column = str(event.column_key.value)
        if column in SORTABLE:
            self.set_sort(column, not self.descending if column == self.sort else None)

    # ------------------------------------------------------------------ run actions

    def _cursor_run(self) -> int | None:
        return self.query_one(RunsTable).cursor_run_id

    def action_toggle_select(self) -> None:
        run_id = self._cursor_run()
        if run_id is not None:
            self.app.toggle_selected(run_id)
            self.show_rows()

    @on(DataTable.RowSelected)
    def _row_chosen(self, event: DataTable.RowSelected) -> None:
        self.app.open_run(int(str(event.row_key.value)))

    def action_open(self) -> None:
        run_id = self._cursor_run()
        if run_id is not None:
            self.app.open_run(run_id)

    def action_compare(self) -> None:
        if not self.app.selected and self._cursor_run() is not None:
            self.notify("Tip: Space selects several runs; comparing the highlighted one.")
            self.app.open_compare([self._cursor_run()])  # type: ignore[list-item]
            return
        self.app.open_compare()

    def action_launch(self) -> None:
        self.app.open_launch()

    def action_stop(self) -> None:
        run_id = self._cursor_run()
        if run_id is not None:
            self.app.confirm_stop(run_id)
