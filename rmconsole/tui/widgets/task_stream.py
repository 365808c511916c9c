"""Task-stream panel: every task as its class composition, the current one highlighted."""

from __future__ import annotations

from typing import Optional

from rich.text import Text
from textual.widget import Widget

from ..data import RunView
from ..render import fmt, stream_bar, stream_counts
from . import css_beside

CURRENT_ROW = "on #1d3557"


class TaskStreamPanel(Widget):
    """Tasks in order; each bar is its samples split into major classes (coloured, with counts)
    and the blurry minor samples (grey). Done tasks show their accuracy; the current task is
    highlighted, its bar filled as far as the stream pass has gone, its phase named."""

    DEFAULT_CSS = css_beside(__file__)
    can_focus = True

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.view: Optional[RunView] = None
        self.border_title = "task stream"

    def show(self, view: RunView) -> None:
        if view != self.view:
            self.view = view
            self.refresh()

    def render(self) -> Text:
        view = self.view
        if view is None or not view.streams:
            return Text("the stream is planned when the worker starts…", style="grey62")
        row = view.row
        done = {r.task: r for r in view.results}
        scale = max(s.n_samples for s in view.streams)
        width = self.size.width
        current = row.task if row.active else None
        states = ["done" if s.task in done else "current" if s.task == current else "planned" for s in view.streams]
        tails = []
        for s, state in zip(view.streams, states):
            tail = Text()
            if state == "done":
                tail.append(f"{fmt(done[s.task].accuracy, 1):>5}%", style="bold green")
            elif state == "current":
                tail.append(f"{row.phase or ''}", style="bold cyan")
                if row.phase_fraction is not None:
                    tail.append(f" {row.phase_fraction:.0%}", style="cyan")
            tails.append(tail)
        tail_width = max(len(t) for t in tails)
        prefix_width = 15  # "▶ T1  ✓    288 "
        wide = True
        counts = [stream_counts(s, view.class_labels, wide) for s in view.streams]
        count_width = max(len(c) for c in counts)
        if width - prefix_width - count_width - tail_width - 3 < 12:
            wide = False
            counts = [stream_counts(s, view.class_labels, wide) for s in view.streams]
            count_width = max(len(c) for c in counts)
        bar_width = max(6, min(40, width - prefix_width - count_width - tail_width - 3))
        text = Text()
        for s, state, count, tail in zip(view.streams, states, counts, tails):
            line = Text("▶ " if state == "current" else "  ", style="bold cyan")
            line.append(f"T{s.task + 1:<2} ", style="bold" if state != "planned" else "grey50")
            line.append("✓ " if state == "done" else "● " if state == "current" else "  ",
                        style="green" if state == "done" else "cyan")
            line.append(f"{s.n_samples:>6,} ", style="grey70")
            position = row.phase_fraction if state == "current" and row.phase == "stream" else None
            line.append_text(stream_bar(s, bar_width, scale, state, position))
            line.append(" ")
            line.append_text(count)
            line.append(" " * (count_width - len(count) + 1))
            line.append_text(tail)
            if state == "current":
                line.stylize(CURRENT_ROW)
            text.append_text(line)
            text.append("\n")
        text.append("\nbars: major classes (colour, name:count) · ", style="grey50")
        text.append("█", style="grey50")
        text.append(" blurry minor samples · ░ not yet streamed", style="grey50")
        if row.active and row.samples_per_s:
            text.append(f"\n{row.samples_per_s:,.0f} samples/s", style="bold")
            text.append(f" in {row.phase}", style="grey62")
        return text
