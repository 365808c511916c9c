"""Accuracy panel: accuracy after each task (a chart), the accuracy matrix, A/F/I_last."""

from __future__ import annotations

from typing import Optional

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from ..data import RunView
from ..render import accuracy_matrix, metrics_line
from . import css_beside
from .accuracy_chart import AccuracyChart


class AccuracyPanel(Vertical):
    """The metrics line on top; the chart and the matrix acc[k][j] (accuracy on task j's classes
    after task k, red→green) side by side below it."""

    DEFAULT_CSS = css_beside(__file__)
    can_focus = True

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.view: Optional[RunView] = None
        self.border_title = "accuracy"

    def compose(self) -> ComposeResult:
        yield Static(id="metrics")
        with Horizontal(id="accuracy-body"):
            yield AccuracyChart(id="accuracy-chart")
            yield Static(id="matrix")

    def on_resize(self) -> None:
        self.set_class(self.size.width < 100, "narrow")  # chart above the matrix when side by side is cramped

    def show(self, view: RunView) -> None:
        if self.view is not None and (view.results, view.row.a_last, view.row.f_last, view.row.i_last, view.row.n_tasks) == (
                self.view.results, self.view.row.a_last, self.view.row.f_last, self.view.row.i_last, self.view.row.n_tasks):
            return
        self.view = view
        accs = [r.accuracy for r in view.results]
        n_tasks = view.row.n_tasks or len(view.streams) or len(accs)
        self.query_one("#metrics", Static).update(metrics_line(view.row))
        self.query_one(AccuracyChart).plot({f"run {view.row.id}": accs}, n_tasks)
        self.query_one("#matrix", Static).update(accuracy_matrix(view.accuracy_matrix, accs, n_tasks))
