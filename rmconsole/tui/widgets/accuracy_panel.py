"""Accuracy panel: accuracy after each task (a chart), the accuracy matrix, A/F/I_last; for a
task-free run the chart is the anytime accuracy against samples seen, drawn as it comes in."""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.reactive import reactive, var
from textual.widgets import Static

from ..data import RunView
from ..render import accuracy_matrix, metrics_line
from . import css_beside
from .accuracy_chart import AccuracyChart
from .anytime_chart import AnytimeChart


class AccuracyPanel(Vertical):
    """The metrics line on top; the chart and the matrix acc[k][j] (accuracy on task j's classes
    after task k, red→green) side by side below it."""

    DEFAULT_CSS = css_beside(__file__)
    can_focus = True

    view: var[RunView | None] = var(None)  # bound to the run page's view
    drawn: reactive[tuple[Any, ...]] = reactive(())  # computed: the part of `view` this panel draws

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "accuracy"

    def compose(self) -> ComposeResult:
        yield Static(id="metrics")
        with Horizontal(id="accuracy-body"):
            yield AccuracyChart(id="accuracy-chart")
            yield AnytimeChart(id="anytime-chart")
            yield Static(id="matrix")

    def on_resize(self) -> None:
        self.set_class(self.size.width < 64, "narrow")  # chart above the matrix when side by side is cramped

    def compute_drawn(self) -> tuple[Any, ...]:
        """Results and summary metrics only: a running task's progress leaves the panel alone."""
        if self.view is None:
            return ()
        row = self.view.row
        return (
            row.id,
            self.view.results,
            tuple(row.metrics.items()),
            tuple(row.cross.items()),
            row.topk,
            row.n_tasks,
            len(self.view.streams),
            self.view.anytime,
        )

    def watch_drawn(self) -> None:
        view = self.view
        if view is None:
            return
        accs = [r.accuracy for r in view.results]
        n_tasks = view.row.n_tasks or len(view.streams) or len(accs)
        self.query_one("#metrics", Static).update(metrics_line(view.row))
        chart = self.query_one(AccuracyChart)
        anytime = self.query_one(AnytimeChart)
        chart.display, anytime.display = not view.task_free, view.task_free
        if view.task_free:  # the follow-up's figure: accuracy on the classes seen so far, every eval_period samples
            ends, total = [], 0
            for s in view.streams:
                total += s.n_samples
                ends.append(total)
            # evaluate_test=false: no test point (val_A_auc is in the metrics line), nothing drawn as 0
            anytime.points = tuple((p.samples, p.accuracy) for p in view.anytime if p.accuracy is not None)
            anytime.total, anytime.boundaries = total, tuple(ends)
        else:
            curves: dict[str, tuple[float, ...]] = {}
            tested = [a for a in accs if a is not None]
            if len(tested) == len(accs):  # evaluate_test=false: no test curve, validation only
                curves[f"run {view.row.id}"] = tuple(tested)
            val = [r.val_accuracy for r in view.results]
            if val and all(v is not None for v in val):  # validation beside test (val_fraction > 0)
                curves[f"run {view.row.id} (val)"] = tuple(v for v in val if v is not None)
            chart.curves, chart.n_tasks = curves, n_tasks
        self.query_one("#matrix", Static).update(accuracy_matrix(view.accuracy_matrix, accs, n_tasks))
