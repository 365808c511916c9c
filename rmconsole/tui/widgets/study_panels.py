"""The study page's panels: the optimisation history as a chart (plotext through textual-plotext,
as the other charts), the parameter importance as bars and the parallel coordinates as a table
of gauges (Rich). They draw what data.StudyView holds (report/study.py's values, the same as
`tune --show --plot` draws): no computation of their own; the drawing functions are plain
(values in, Rich out) and tested without a terminal. Text from the store (keys, choice values)
goes through the output sanitiser."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import RenderResult
from textual.reactive import reactive
from textual_plotext import PlotextPlot

from ...numbers import fmt
from ...sanitize import clean
from . import css_beside
from .accuracy_chart import LINE_COLOURS

BEST_COLOUR = (225, 87, 89)
PRUNED_COLOUR = (140, 140, 140)


class HistoryChart(PlotextPlot):
    """x = trial number, y = the study's metric: each finished trial (●), the best so far (a
    step line), and each pruned trial at its last validation value (x)."""

    DEFAULT_CSS = css_beside(__file__)

    points: reactive[tuple[Any, ...]] = reactive(tuple)  # report/study.HistoryPoint
    metric: reactive[str] = reactive("")
    n_trials: reactive[int] = reactive(0)  # the trials the study asks for (the x axis's end)

    def render(self) -> RenderResult:
        self._draw()  # anew at the current size (plotext keeps state between sizes)
        return super().render()

    def _draw(self) -> None:
        plt = self.plt
        plt.clear_figure()
        done = [p for p in self.points if p.best is not None]
        pruned = [p for p in self.points if p.best is None]
        last = max((p.number for p in self.points), default=0)
        plt.xlim(-0.5, max(self.n_trials - 1, last, 1) + 0.5)
        every = max(1, -(-(last + 1) * 4 // max(self.size.width - 12, 8)))  # a tick per trial while they fit
        plt.xticks(list(range(0, max(self.n_trials, last + 1), every)))
        wide = self.size.width >= 50
        if done:
            xs = [p.number for p in done]
            steps_x, steps_y = [], []
            for i, p in enumerate(done):  # the best so far holds until the next finished trial
                end = done[i + 1].number if i + 1 < len(done) else p.number
                steps_x += [p.number, end]
                steps_y += [p.best, p.best]
            plt.plot(steps_x, steps_y, marker="braille", color=BEST_COLOUR, label="best so far" if wide else None)
            plt.scatter(
                xs, [p.value for p in done], marker="●", color=LINE_COLOURS[0], label="finished" if wide else None
            )
        if pruned:
            plt.scatter(
                [p.number for p in pruned],
                [p.value for p in pruned],
                marker="x",
                color=PRUNED_COLOUR,
                label="pruned (its last val)" if wide else None,
            )
        plt.xlabel("trial")
        plt.ylabel(clean(self.metric))


def importance_text(importance: Sequence[tuple[str, float]], width: int) -> Text:
    """One bar per parameter, most important first: `lr  ██████████▌   0.72` (Optuna's estimate,
    fANOVA: the shares sum to 1); a line saying why when there is none yet."""
    if not importance:
        return Text("importance needs 2 finished trials and 2 parameters", style="grey62")
    names = [clean(k) for k, _ in importance]
    name_width = max(len(n) for n in names)
    bar_width = max(4, width - name_width - 7)
    text = Text()
    for i, (name, (_, share)) in enumerate(zip(names, importance)):
        eighths = round(max(0.0, min(share, 1.0)) * bar_width * 8)
        full, part = divmod(eighths, 8)
        bar = "█" * full + ("▏▎▍▌▋▊▉"[part - 1] if part else "")
        text.append(f"{name:<{name_width}} ", style="bold cyan")
        text.append(f"{bar:<{bar_width}}", style="green")
        text.append(f" {share:4.2f}")
        if i < len(importance) - 1:
            text.append("\n")
    return text


def _bound(value: float, log: bool) -> str:
    return f"{value:.2g}" if log or abs(value) < 0.01 else f"{value:.4g}"


def _shade(share: float) -> str:
    """A line's colour by its value's place between the worst (0) and the best (1) trial."""
    return "bold green" if share >= 0.75 else "green" if share >= 0.5 else "yellow" if share >= 0.25 else "red"


def gauge(position: float | None, width: int, style: str) -> Text:
    """Where a value lies on its axis: `───●──────` (low left, high right); `·` where it has none."""
    if position is None:
        return Text("·".center(width), style="grey50")
    at = min(width - 1, max(0, round(position * (width - 1))))
    text = Text("─" * at, style="grey42")
    text.append("●", style=style)
    text.append("─" * (width - at - 1), style="grey42")
    return text


def parallel_table(axes: Sequence[Any], lines: Sequence[Any], metric: str, maximize: bool, width: int) -> Table | Text:
    """The parallel coordinates as a table: a finished trial per row (best first), its value,
    then each parameter's axis as a gauge (its range in the header; log where it spans 100x)
    and the value itself, each trial's marks coloured by its value."""
    if not lines or not axes:
        return Text("no finished trial yet", style="grey62")
    values = [line.value for line in lines]
    low, high = min(values), max(values)
    fixed = 6 + 9 + 3  # the trial and value columns with their padding
    gauge_width = max(5, min(15, (width - fixed) // max(len(axes), 1) - 10))
    table = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold", show_edge=False)
    table.add_column("trial", justify="right", no_wrap=True)
    table.add_column(clean(metric), justify="right", no_wrap=True)
    for axis in axes:
        if axis.levels:
            span = f"{clean(axis.levels[0])}…{clean(axis.levels[-1])}"
        else:
            span = f"{_bound(axis.low, axis.log)}…{_bound(axis.high, axis.log)}" + (" log" if axis.log else "")
        table.add_column(Text.assemble((clean(axis.key), "bold cyan"), "\n", (span, "grey62")), no_wrap=True)
    for line in sorted(lines, key=lambda line: (-line.value if maximize else line.value, line.number)):
        share = (line.value - low) / (high - low) if high > low else 1.0
        share = share if maximize else 1.0 - share
        style = _shade(share)
        cells: list[Any] = [str(line.number), Text(fmt(line.value), style=style)]
        for raw, position in zip(line.raw, line.positions):
            cell = gauge(position, gauge_width, style)
            shown = f"{raw:.3g}" if isinstance(raw, float) else "—" if raw is None else str(raw)
            cell.append(f" {clean(shown)}")
            cells.append(cell)
        table.add_row(*cells)
    return table
