"""Epochs panel: the training loss and the learning rate of every epoch, live (tasks end to
end; the newest task's epochs are what moves)."""

from __future__ import annotations

import math
from typing import Any

from textual.app import RenderResult
from textual.reactive import var
from textual_plotext import PlotextPlot

from ..data import EpochPoint, RunView
from . import css_beside

LOSS_COLOUR = (242, 142, 43)
LR_COLOUR = (118, 183, 178)
TEST_COLOUR = (89, 161, 79)
MAX_POINTS = 400  # longer runs are thinned evenly for the chart (the store keeps every epoch)


def subtitle(points: tuple[EpochPoint, ...]) -> str:
    """`task 3 memory 120/256 · loss 0.812 · lr 0.031 · 1,900/s`: where training is now."""
    if not points:
        return "no epoch yet"
    p = points[-1]
    parts = [f"task {p.task + 1} {p.phase} {p.epoch + 1}/{p.epochs}"]
    if p.loss is not None:
        parts.append(f"loss {p.loss:.3f}")
    parts.append(f"lr {p.lr:.3g}")
    if p.samples_per_s:
        parts.append(f"{p.samples_per_s:,.0f}/s")
    if p.test_accuracy is not None:
        parts.append(f"test {p.test_accuracy:.1f}%")
    return " · ".join(parts)


def thinned(points: tuple[EpochPoint, ...], limit: int = MAX_POINTS) -> list[tuple[int, EpochPoint]]:
    """(epoch number in the run, point), at most `limit` of them, the last one always kept."""
    if len(points) <= limit:
        return list(enumerate(points))
    step = len(points) / limit
    keep = sorted({int(i * step) for i in range(limit - 1)} | {len(points) - 1})
    return [(i, points[i]) for i in keep]


class EpochsPanel(PlotextPlot):
    """x = epochs trained so far (the stream pass and each memory epoch, tasks end to end), left
    y = mean training loss (log scale), right y = learning rate; the test accuracy per epoch too
    when the run records it. Task starts are marked T1, T2, ... on the x axis."""

    DEFAULT_CSS = css_beside(__file__)
    can_focus = True

    view: var[RunView | None] = var(None)  # bound to the run page's view

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "loss & lr per epoch"
        self.points: tuple[EpochPoint, ...] = ()

    def watch_view(self, view: RunView | None) -> None:
        """Redraw only when epochs arrived (a progress tick alone leaves the chart alone)."""
        points = view.epochs if view is not None else ()
        if points is self.points or points == self.points:
            return
        self.points = points
        self.border_subtitle = subtitle(points)
        self.refresh()

    def render(self) -> RenderResult:
        self._draw()  # anew at the current size (plotext keeps state between sizes)
        return super().render()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_figure()
        points = thinned(self.points)
        if not points:
            plt.title("no epoch yet: the curves start with the first task's stream pass")
            return
        xs = [i + 1 for i, _ in points]
        loss = [(x, p.loss) for x, (_, p) in zip(xs, points) if p.loss is not None and p.loss > 0]
        if loss:
            plt.plot(
                [x for x, _ in loss],
                [math.log10(v) for _, v in loss],
                marker="braille",
                color=LOSS_COLOUR,
                label="loss (log10)",
            )
        plt.plot(xs, [p.lr for _, p in points], marker="braille", color=LR_COLOUR, yside="right", label="lr")
        tests = [(x, p.test_accuracy) for x, (_, p) in zip(xs, points) if p.test_accuracy is not None]
        if tests:
            plt.scatter(
                [x for x, _ in tests],
                [v / 100 for _, v in tests],
                marker="•",
                color=TEST_COLOUR,
                yside="right",
                label="test acc / 100",
            )
        starts: dict[int, int] = {}
        for i, p in enumerate(self.points):
            starts.setdefault(p.task, i + 1)
        if len(starts) <= 12:
            plt.xticks(list(starts.values()), [f"T{t + 1}" for t in starts])
        plt.xlim(1, max(len(self.points), 2))
        plt.ylabel("log10 loss", yside="left")  # type: ignore[call-arg]  # the stub says xside; plotext's is yside
        plt.ylabel("lr", yside="right")  # type: ignore[call-arg]  # the stub says xside; plotext takes yside
