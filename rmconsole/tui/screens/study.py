"""One `rmconsole tune` study, live: its trials, the optimisation history, the parameters'
importance and the parallel coordinates (what `tune --show` prints and `--plot` draws, read
through the same calls: data.load_study_view)."""

from __future__ import annotations

import time

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.reactive import var
from textual.widgets import DataTable, Header, Static

from ...sanitize import clean
from .. import data
from ..messages import StoreProblem, StudyLoaded
from ..widgets.footer import Footer
from ..widgets.study_panels import HistoryChart, importance_text, parallel_table
from .polling import PollingScreen
from .tabbed_panels import TabbedPanels, panel_keys

MIN_READ_S = 2.0  # a study is read through Optuna: at most every 2 s, however often the pages refresh


class StudyScreen(TabbedPanels, PollingScreen):
    """Wide: the trials across the page, the history below them beside the importance and the
    parallel coordinates. Small (80×24): a tab row and one panel at a time (1-4 switch)."""

    CSS_PATH = ["tabbed_panels.tcss", "study.tcss"]
    PANELS = (
        ("trials", "1 trials"),
        ("history", "2 history"),
        ("importance", "3 importance"),
        ("parallel", "4 parallel"),
    )
    FIRST_PANEL = "history"
    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("enter", "open", "Open trial's run"),
        *panel_keys(PANELS),
    ]

    view: var[data.StudyView | None] = var(None, init=False)  # the latest read; a change redraws

    def __init__(self, name: str) -> None:
        super().__init__()
        self.study_name = name
        self._last_read = -MIN_READ_S

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text(f"study {clean(self.study_name)}: reading…"), id="study-head")
        yield self.panel_tabs()
        with Grid(id="panels"):
            table: DataTable = DataTable(id="trials", classes="panel", cursor_type="row", zebra_stripes=True)
            table.border_title = "trials"
            yield table
            chart = HistoryChart(id="history", classes="panel")
            chart.border_title = "optimisation history"
            yield chart
            with VerticalScroll(id="importance", classes="panel") as box:
                box.border_title = "parameter importance (Optuna fANOVA)"
                yield Static(id="importance-text")
            with VerticalScroll(id="parallel", classes="panel") as box:
                box.border_title = "parallel coordinates (finished trials, best first)"
                yield Static(id="parallel-text")
        yield Footer()

    def on_mount(self) -> None:
        self.sub_title = f"study {clean(self.study_name)}"
        self.query_one("#trials", DataTable).focus()

    def on_resize(self, event: events.Resize) -> None:  # (the panel layout: TabbedPanels)
        if self.view is not None:
            self._draw_text(self.view)  # (the gauges and bars take the width they get)

    # ------------------------------------------------------------------ reading (thread)

    def poll(self) -> None:
        if time.monotonic() - self._last_read < MIN_READ_S:
            return
        self._last_read = time.monotonic()
        super().poll()

    def read(self) -> StudyLoaded | StoreProblem:
        from ...config import ConfigError

        try:
            return StudyLoaded(data.load_study_view(self.study_name))
        except ConfigError as err:  # no such study (removed from the store): its one line, and Esc
            return StoreProblem(f"{str(err).splitlines()[0]}; Esc goes back")

    def on_study_loaded(self, message: StudyLoaded) -> None:
        self.view = message.view

    def on_store_problem(self, message: StoreProblem) -> None:
        self.query_one("#study-head", Static).update(Text(clean(message.text), style="bold yellow"))

    # ------------------------------------------------------------------ drawing

    def watch_view(self, view: data.StudyView | None) -> None:
        if view is None:
            return
        head = Text(clean(view.best_line), style="bold")
        head.append(
            f"\n{'maximize' if view.maximize else 'minimize'} {clean(view.metric)} · {clean(view.sampler)} "
            f"sampler · pruner {clean(view.pruner)}"
            + (f" · driven now by process {view.driver}" if view.driver else ""),
            style="grey62",
        )
        self.query_one("#study-head", Static).update(head)
        self._draw_trials(view)
        chart = self.query_one(HistoryChart)
        chart.metric, chart.n_trials, chart.points = view.metric, view.trials_asked, view.history
        self._draw_text(view)

    def _draw_trials(self, view: data.StudyView) -> None:
        table = self.query_one("#trials", DataTable)
        columns = ("trial", "state", "run", *view.keys, view.metric, "tasks")
        if tuple(str(c.value) for c in table.columns) != columns:
            table.clear(columns=True)
            for name in columns:
                table.add_column(clean(name), key=name)
        keep = {str(t.number) for t in view.trials}
        for key in [str(k.value) for k in table.rows if str(k.value) not in keep]:
            table.remove_row(key)
        for trial in view.trials:
            best = trial.number == view.best
            style = "bold" if best else ""
            cells = (
                Text(str(trial.number), style=style, justify="right"),
                Text(trial.state + (" *" if best else ""), style=style),
                Text(str(trial.run_id) if trial.run_id is not None else "—", justify="right"),
                *(Text(clean(trial.param_text(k)), justify="right") for k in view.keys),
                Text(trial.value_text(), style=style or ("grey62" if trial.state == "pruned" else ""), justify="right"),
                Text(str(trial.steps), justify="right"),
            )
            key = str(trial.number)
            if key in table.rows:
                for column, cell in zip(columns, cells):
                    table.update_cell(key, column, cell)
            else:
                table.add_row(*cells, key=key)
        pruned = any(t.state == "pruned" and t.last is not None for t in view.trials)
        table.border_subtitle = "* best" + (" · @k v: pruned after task k at v" if pruned else "") + " · Enter: its run"

    def _draw_text(self, view: data.StudyView) -> None:
        width = self.query_one("#importance").content_size.width or 40
        self.query_one("#importance-text", Static).update(importance_text(view.importance, width))
        width = self.query_one("#parallel").content_size.width or 76
        self.query_one("#parallel-text", Static).update(
            parallel_table(view.axes, view.lines, view.metric, view.maximize, width)
        )

    # ------------------------------------------------------------------ actions

    def action_back(self) -> None:
        self.app.pop_screen()

    def _open(self, key: str) -> None:
        view = self.view
        trial = next((t for t in view.trials if str(t.number) == key), None) if view is not None else None
        if trial is None or trial.run_id is None:
            self.notify("this trial has no run in the store", severity="warning")
            return
        self.app.open_run(trial.run_id)

    def action_open(self) -> None:
        table = self.query_one("#trials", DataTable)
        if table.row_count:
            self._open(str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self._open(str(event.row_key.value))
