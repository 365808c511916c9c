"""Selected runs side by side: metrics, accuracy curves, and the config keys that differ."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.reactive import var
from textual.widgets import DataTable, Header, Static

from ... import metric_registry
from ...cl.protocols import protocol_of
from .. import data
from ..messages import CompareLoaded
from ..render import progress_text, status_text
from ..widgets.accuracy_chart import LINE_COLOURS, AccuracyChart
from ..widgets.footer import Footer
from .polling import PollingScreen


def _greyed(name: str) -> bool:
    """A partial run's value of this metric is grey: a per-run metric that is final only (a
    cross-run one, I_last, has no value at all for a partial run)."""
    m = metric_registry.metric(name)
    return m.final_only and m.across is None


# the run's id first, then its metrics (what a comparison is for: on an 80-column terminal they
# are what shows), then what identifies the run, which the table scrolls to
AFTER_METRICS = ("name/preset", "status", "progress", "method", "K", "seed")


def metric_columns(rows: tuple[data.RunRow, ...]) -> tuple[str, ...]:
    """The metrics the catalogue lists for these runs' protocols, and any other one of them measured."""
    protocols = {protocol_of(r.config) for r in rows} or {"task"}
    return tuple(m.name for m in metric_registry.listed(protocols, {k for r in rows for k in r.metrics}, family=""))


class CompareScreen(PollingScreen):
    CSS_PATH = "compare.tcss"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("enter", "open", "Open run"),
    ]

    view: var[data.CompareView | None] = var(None, init=False)  # the latest read; a change redraws

    def __init__(self, run_ids: list[int]) -> None:
        super().__init__()
        self.run_ids = list(run_ids)

    def compose(self) -> ComposeResult:
        yield Header()
        table: DataTable = DataTable(id="metrics", cursor_type="row", classes="panel")
        table.border_title = "metrics (percent; A/F/I from the last epoch)"
        yield table
        with Horizontal(id="compare-body"):
            chart = AccuracyChart(id="curves", classes="panel")
            chart.border_title = "accuracy after each task"
            yield chart
            with VerticalScroll(id="differences", classes="panel") as box:
                box.border_title = "config differences"
                yield Static(id="differences-text")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = "compare " + ", ".join(f"#{i}" for i in self.run_ids)
        self.query_one("#metrics", DataTable).focus()

    def read(self) -> CompareLoaded:
        return CompareLoaded(data.load_compare(self.run_ids))

    def on_compare_loaded(self, message: CompareLoaded) -> None:
        self.view = message.view

    def watch_view(self, view: data.CompareView | None) -> None:
        if view is None:
            return
        table = self.query_one("#metrics", DataTable)
        metrics_shown = metric_columns(view.rows)
        columns = ("run", *metrics_shown, *AFTER_METRICS)
        if tuple(str(c.value) for c in table.columns) != columns:  # (a run measured another metric)
            table.clear(columns=True)
            for name in columns:
                table.add_column(name, key=name)
        for i, row in enumerate(view.rows):
            r, g, b = LINE_COLOURS[i % len(LINE_COLOURS)]
            partial = "grey50" if row.partial else ""
            metrics = [Text(row.metric_text(name), style=partial if _greyed(name) else "") for name in metrics_shown]
            identity = {
                "name/preset": row.label,
                "status": status_text(row.status),
                "progress": progress_text(row),
                "method": row.method,
                "K": str(row.memory_size),
                "seed": str(row.seed),
            }
            cells = (
                Text(f"● #{row.id}", style=f"bold rgb({r},{g},{b})"),
                *metrics,
                *(identity[c] for c in AFTER_METRICS),
            )
            key = str(row.id)
            if key in table.rows:
                for column, cell in zip(columns, cells):
                    table.update_cell(key, column, cell)
            else:
                table.add_row(*cells, key=key)
        for gone in view.missing:
            if str(gone) in table.rows:
                table.remove_row(str(gone))
        n_tasks = max((r.n_tasks for r in view.rows), default=0)
        chart = self.query_one(AccuracyChart)
        chart.curves = {f"#{r.id} {r.name or r.method}": tuple(view.curves.get(r.id, ())) for r in view.rows}
        chart.n_tasks = n_tasks
        self.query_one("#differences-text", Static).update(self._differences(view))

    def _differences(self, view: data.CompareView) -> Table | Text:
        notes = Text()
        if view.missing:
            notes.append(f"no longer in the store: {', '.join(f'#{i}' for i in view.missing)}\n", style="red")
        if len(view.rows) < 2:
            notes.append("Select two or more runs (Space on the runs page) to see what differs.", style="grey62")
            return notes
        if not view.differences:
            notes.append("Same config (only the run differs).", style="grey62")
            return notes
        table = Table(box=None, padding=(0, 1), show_edge=False, header_style="bold")
        table.add_column(
            "key", style="cyan", no_wrap=True, min_width=max((len(k) for k in view.differences), default=3)
        )  # never cut a key
        for i, row in enumerate(view.rows):
            r, g, b = LINE_COLOURS[i % len(LINE_COLOURS)]
            table.add_column(f"#{row.id}", header_style=f"bold rgb({r},{g},{b})", overflow="fold")  # values wrap
        for key, values in view.differences.items():
            table.add_row(key, *[str(v) for v in values])
        if any(r.partial for r in view.rows):
            notes.append("grey @k/T: partial metrics (after task k of T), not final", style="grey62")
            from rich.console import Group

            return Group(table, notes)  # type: ignore[return-value]  # a renderable like the others (rich.console imported lazily)
        return table

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_open(self) -> None:
        table = self.query_one("#metrics", DataTable)
        if table.row_count:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
            self.app.open_run(int(str(key)))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.app.open_run(int(str(event.row_key.value)))
