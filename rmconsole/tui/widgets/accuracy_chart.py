"""A line chart of accuracy after each task, one line per run (plotext through textual-plotext)."""

from __future__ import annotations

from textual.app import RenderResult
from textual.reactive import reactive
from textual_plotext import PlotextPlot

from . import css_beside

LINE_COLOURS = [
    (78, 121, 167),
    (242, 142, 43),
    (225, 87, 89),
    (118, 183, 178),
    (89, 161, 79),
    (237, 201, 72),
    (176, 122, 161),
    (255, 157, 167),
]


class AccuracyChart(PlotextPlot):
    """x = task 1..T (fixed, so the axes do not jump as tasks finish), y = 0..100 %."""

    DEFAULT_CSS = css_beside(__file__)

    curves: reactive[dict[str, tuple[float, ...]]] = reactive(dict)  # label -> accuracy after each task
    n_tasks: reactive[int] = reactive(0)

    def render(self) -> RenderResult:
        self._draw()  # the whole figure anew at the current size: plotext keeps state from earlier sizes
        return super().render()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_figure()
        n = max(self.n_tasks, max((len(c) for c in self.curves.values()), default=0), 2)
        plt.xlim(1, n)
        plt.ylim(0, 100)
        every = max(1, -(-n * 4 // max(self.size.width - 10, 8)))  # a label per task while they fit, else every k-th
        ticks: list[float] = list(range(1, n + 1, every))
        plt.xticks(ticks, [f"T{t}" for t in ticks])
        # ticks that get a row each (colliding labels are resolved by plotext in hash order)
        plt.yticks([0, 25, 50, 75, 100] if self.size.height >= 13 else [0, 50, 100])
        for i, (label, accs) in enumerate(self.curves.items()):
            if accs:
                xs, colour = list(range(1, len(accs) + 1)), LINE_COLOURS[i % len(LINE_COLOURS)]
                plt.plot(xs, list(accs), marker="braille", color=colour, label=label if len(self.curves) > 1 else None)
                plt.scatter(xs, list(accs), marker="●", color=colour)
        plt.ylabel("accuracy %" if self.size.width >= 40 else "acc%")
