"""The anytime accuracy of a task-free run against samples seen (the follow-up's figure), live."""

from __future__ import annotations

from textual.app import RenderResult
from textual.reactive import reactive
from textual_plotext import PlotextPlot

from . import css_beside
from .accuracy_chart import LINE_COLOURS


class AnytimeChart(PlotextPlot):
    """x = samples seen (0 .. the whole stream, fixed so the axes do not jump), y = 0..100 %;
    the task boundaries are drawn as dotted lines."""

    DEFAULT_CSS = css_beside(__file__)

    points: reactive[tuple[tuple[int, float], ...]] = reactive(tuple)  # (samples seen, accuracy)
    total: reactive[int] = reactive(0)  # samples in the whole stream
    boundaries: reactive[tuple[int, ...]] = reactive(tuple)  # samples at each task's end

    def render(self) -> RenderResult:
        self._draw()
        return super().render()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_figure()
        last = self.points[-1][0] if self.points else 0
        plt.xlim(0, max(self.total, last, 1))
        plt.ylim(0, 100)
        plt.yticks([0, 25, 50, 75, 100] if self.size.height >= 13 else [0, 50, 100])
        for boundary in self.boundaries[:-1]:
            plt.vline(boundary, color=(120, 120, 120))
        if self.points:
            xs, ys = [p[0] for p in self.points], [p[1] for p in self.points]
            plt.plot(xs, ys, marker="braille", color=LINE_COLOURS[0])
        plt.xlabel("samples seen")
        plt.ylabel("accuracy %")
