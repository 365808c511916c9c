"""The runs page: every run, live; `/` filters, Space selects, Enter opens, s sorts."""

from __future__ import annotations

from collections import Counter
from operator import attrgetter

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.reactive import var
from textual.widgets import DataTable, Header, Input

from ...sanitize import clean
from .. import data
from ..messages import RunsLoaded, StoreProblem
from ..study import study_line, study_named, study_of
from ..widgets.footer import Footer
from ..widgets.runs_table import SORT_LABELS, SORTABLE, RunsTable
from ..widgets.status_line import StatusLine
from .polling import PollingScreen

SORT_CYCLE = data.sort_columns()  # the run columns, then the catalogue's sortable metrics


class RunsScreen(PollingScreen):
    CSS_PATH = "runs.tcss"
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("space", "toggle_select", "Select"),
        Binding("enter", "open", "Open", show=True),
        Binding("c", "compare", "Compare"),
        Binding("n", "launch", "Launch"),
        Binding("x", "stop", "Stop"),
        Binding("R", "resume", "Resume", show=False),
        Binding("l", "clone", "Clone", show=False),
        Binding("X", "stop_sweep", "Stop sweep", show=False),
        Binding("a", "toggle_archived", "Archived", show=False),
        Binding("s", "cycle_sort", "Sort"),
        Binding("t", "study", "Study", show=False),
        Binding("r", "reverse_sort", "Reverse", show=False),
        Binding("escape", "clear_filter", "Clear filter", show=False),
    ]

    # the page's state: a change redraws the table and the status line (`problem`: the line only)
    rows: var[tuple[data.RunRow, ...]] = var((), init=False)  # every run, from the last read
    query_text: var[str] = var("", init=False)  # the `/` filter
    order: var[tuple[str, bool]] = var(("id", True), init=False)  # (sort column, descending)
    loaded: var[bool] = var(False, init=False)  # a first read came back
    problem: var[str | None] = var(None, init=False)  # the last read failed with this
    show_archived: var[bool] = var(False, init=False)  # `a`: archived runs too

    def __init__(self) -> None:
        super().__init__()
        self.feed = data.RunsFeed()  # used by one read thread at a time
        self.filter_error: str | None = None  # the `/` filter does not read (shown on the status line)
        self._counted: tuple | None = None  # (rows, _counts(), the rows by id) of the last read
        self._arranged: data.Arrangement | None = None  # the rows shown, kept across reads
        self._delta: data.RunsDelta | None = None  # what the read being applied changed

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(
            placeholder="filter: words, or status:running tag:base override:epochs 'A_last>80' k:200 — "
            "Enter keeps, Esc clears",
            id="filter",
        )
        yield RunsTable(id="runs")
        yield StatusLine(id="status-line")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(RunsTable)
        table.border_title = "runs"
        table.focus()
        self.watch(self.app, "selected", self._selection_changed, init=False)  # type: ignore[arg-type]  # the App (a DOMNode) typed as its Console face

    def _selection_changed(self) -> None:
        self.show_rows()

    def on_screen_resume(self) -> None:
        self.show_rows()

    # ------------------------------------------------------------------ reading (thread)

    def read(self) -> RunsLoaded:
        rows, changed = self.feed.read()
        return RunsLoaded(rows, changed, self.feed.delta)

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        self.problem = None
        if message.changed or not self.loaded:
            self._delta = message.delta if self.loaded else None  # (watch_rows applies just these rows)
            rows = tuple(message.rows)
            try:
                self._count_delta(message.delta if self.loaded else None, rows)
                self.rows = rows
            finally:
                self._delta = None
            self.app.rows = message.rows
            self.loaded = True

    def on_store_problem(self, message: StoreProblem) -> None:
        self.problem = message.text

    # ------------------------------------------------------------------ drawing

    def watch_rows(self) -> None:
        self.show_rows(self._delta)

    def watch_query_text(self) -> None:
        self.show_rows()

    def watch_order(self) -> None:
        self.show_rows()

    def watch_loaded(self) -> None:
        self.show_rows()

    def watch_show_archived(self) -> None:
        self.show_rows()

    def watch_problem(self) -> None:
        self.show_status()

    def show_rows(self, delta: data.RunsDelta | None = None) -> None:
        """Arrange the rows and hand them to the table. With `delta` (a read that changed a few
        rows, the filter and the sort as before) only those rows are placed and drawn, and the
        table re-sorts only when one of them moved; otherwise everything is arranged anew."""
        column, descending = self.order
        key = (self.query_text, column, descending, self.show_archived)
        table = self.query_one(RunsTable)
        arranged = self._arranged
        if delta is not None and arranged is not None and arranged.key == key and self.filter_error is None:
            moved = arranged.update(delta.updated, delta.gone)
            shown = arranged.rows
            table.selected_ids, table.sorted_by = frozenset(self.app.selected), self.order
            table.patch(tuple(shown), None if moved else delta.updated)
        else:
            try:
                self._arranged = arranged = data.Arrangement(self.rows, *key)
                shown = arranged.rows
                self.filter_error = None
            except data.FilterError as err:  # shown on the status line until the filter reads
                self._arranged, shown, self.filter_error = None, [], str(err)
            table.runs, table.selected_ids, table.sorted_by = tuple(shown), frozenset(self.app.selected), self.order
        table.border_subtitle = f"sort: {SORT_LABELS.get(column, column)} {'▼' if descending else '▲'}"
        self.show_status(len(shown))

    def show_status(self, n_shown: int | None = None) -> None:
        line = self.query_one(StatusLine)
        line.problem = bool(self.problem or self.filter_error)
        line.text = self.status_text(n_shown)

    def _count_delta(self, delta: data.RunsDelta | None, rows: tuple[data.RunRow, ...]) -> None:
        """Keep `_counts` current for the new `rows` from a read's delta: the changed rows' old
        counts out, their new ones in (without a delta, `_counts` counts every row again)."""
        counted = self._counted
        if delta is None or counted is None or counted[0] is not self.rows:
            self._counted = None
            return
        _, statuses, archived, partial, by_id = counted
        for run_id in delta.gone:
            old = by_id.pop(run_id, None)
            if old is not None:
                statuses[old.status] -= 1
                archived, partial = archived - old.archived, partial - old.partial
        for row in delta.updated:
            old = by_id.get(row.id)
            if old is not None:
                statuses[old.status] -= 1
                archived, partial = archived - old.archived, partial - old.partial
            statuses[row.status] += 1
            archived, partial = archived + row.archived, partial + row.partial
            by_id[row.id] = row
        self._counted = (rows, +statuses, archived, partial, by_id)  # (+: drops a status counted down to 0)

    def _counts(self) -> tuple[Counter[str], int, bool]:
        """(runs per status, archived runs, whether any run is partial), once per read (after a
        read with a delta, already updated from its changed rows by `_count_delta`)."""
        if self._counted is None or self._counted[0] is not self.rows:
            rows = self.rows
            self._counted = (
                rows,
                Counter(map(attrgetter("status"), rows)),
                sum(map(attrgetter("archived"), rows)),
                sum(map(attrgetter("partial"), rows)),
                {r.id: r for r in rows},
            )  # (attrgetter: no Python frame per run)
        return self._counted[1], self._counted[2], self._counted[3] > 0

    def status_text(self, n_shown: int | None = None) -> Text:
        if self.problem:
            return Text(self.problem)
        if self.filter_error:
            return Text(f"filter: {self.filter_error}")
        if not self.loaded:
            return Text("reading the store…")
        if not self.rows:
            return Text.assemble(
                "No runs yet. Press ",
                ("n", "bold"),
                " to launch one (or run ",
                ("rmconsole run --detach", "bold"),
                " in a shell).",
            )
        counts, archived, partial = self._counts()
        shown = len(self.query_one(RunsTable).rows) if n_shown is None else n_shown
        parts = [f"{len(self.rows)} runs: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))]
        if archived:
            parts.append(f"{archived} archived" + (" shown (a)" if self.show_archived else " (a)"))
        if partial:
            parts.append("@k/T, @: partial")
        if self.query_text.strip():
            parts.append(f"{shown} match “{self.query_text.strip()}”")
            best = study_line(self.query_text)  # `study:NAME`: the study's best trial so far
            if best:
                parts.append(best + " (t: its page)")
        if self.app.selected:
            parts.append(f"{len(self.app.selected)} selected (c compares)")
        return Text(clean(" · ".join(parts)))  # the filter as typed or pasted, a study's values: shown, not obeyed

    # ------------------------------------------------------------------ filter

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("shown")
        box.focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_text = event.value

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
        self.query_one(RunsTable).focus()

    # ------------------------------------------------------------------ sort

    def action_cycle_sort(self) -> None:
        column = self.order[0]
        self.set_sort(SORT_CYCLE[(SORT_CYCLE.index(column) + 1) % len(SORT_CYCLE)])

    def action_reverse_sort(self) -> None:
        self.set_sort(self.order[0], not self.order[1])

    def set_sort(self, column: str, descending: bool | None = None) -> None:
        """Sort by `column`; numbers and ids newest/highest first unless told otherwise."""
        self.order = (column, descending if descending is not None else column not in ("status", "preset", "method"))

    @on(DataTable.HeaderSelected)
    def _header_clicked(self, event: DataTable.HeaderSelected) -> None:
        column = str(event.column_key.value)
        if column in SORTABLE:
            self.set_sort(column, not self.order[1] if column == self.order[0] else None)

    # ------------------------------------------------------------------ run actions

    def _cursor_run(self) -> int | None:
        return self.query_one(RunsTable).cursor_run_id

    def action_toggle_select(self) -> None:
        run_id = self._cursor_run()
        if run_id is not None:
            self.app.toggle_selected(run_id)  # the page watches the App's selection

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
            self.app.open_compare([self._cursor_run()])  # type: ignore[list-item]  # not None: checked just above
            return
        self.app.open_compare()

    def action_launch(self) -> None:
        self.app.open_launch()

    def action_stop(self) -> None:
        run_id = self._cursor_run()
        if run_id is not None:
            self.app.confirm_stop(run_id)

    def action_resume(self) -> None:
        run_id = self._cursor_run()
        if run_id is not None:
            self.app.resume_run(run_id)

    def action_clone(self) -> None:
        run_id = self._cursor_run()
        if run_id is not None:
            self.app.open_launch(clone_of=run_id)

    def action_stop_sweep(self) -> None:
        run_id = self._cursor_run()
        row = next((r for r in self.rows if r.id == run_id), None)
        if row is None:
            return
        if not row.sweep_id:
            self.notify(f"run {row.id} is not part of a sweep (x stops one run)", severity="warning")
            return
        self.app.confirm_stop_sweep(row.sweep_id)

    def action_study(self) -> None:
        """The study page of the study the filter names (`study:NAME`), else of the highlighted trial."""
        run_id = self._cursor_run()
        row = next((r for r in self.rows if r.id == run_id), None)
        name = study_named(self.query_text) or (study_of(row.tags) if row is not None else None)
        if name is None:
            self.notify(
                "not a study's trial: filter study:NAME, or press t on a run `rmconsole tune` started",
                severity="warning",
            )
            return
        self.app.open_study(name)

    def action_toggle_archived(self) -> None:
        self.show_archived = not self.show_archived
