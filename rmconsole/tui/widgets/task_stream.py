"""Task-stream panel: every task as its class composition, the current one highlighted."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from ...cl.results import task_figures
from ...numbers import fmt
from ..data import RunView
from ..render import stream_bar, stream_counts
from . import css_beside

CURRENT_ROW = "on #1d3557"


class TaskStreamPanel(Widget):
    """Tasks in order; each bar is its samples split into major classes (coloured, with counts)
    and the blurry minor samples (grey). Done tasks show their accuracy; the current task is
    highlighted, its bar filled as far as the stream pass has gone, its phase named.
    Bound to the run page's `view`: every change of the run (progress included) repaints it."""

    DEFAULT_CSS = css_beside(__file__)
    can_focus = True

    view: reactive[RunView | None] = reactive(None)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "task stream"

    def render(self) -> Text:
        view = self.view
        if view is None or not view.streams:
            return Text("the stream is planned when the worker starts…", style="grey62")
        row = view.row
        done = {r.task: r for r in view.results}
        scale = max(s.n_samples for s in view.streams)
        width = self.size.width
        current = row.task if row.active else None
        ended_in = row.task if row.status in ("failed", "stopped") else None  # where a run that did not finish stopped
        states = [
            "done"
            if s.task in done
            else "current"
            if s.task == current
            else "ended"
            if s.task == ended_in
            else "planned"
            for s in view.streams
        ]
        indices = list(range(len(view.streams)))
        text = Text()
        room = max(self.size.height - 4, 3)  # the legend and the speed line take the rest
        if len(indices) > room:  # a window around the task that is running (or the last one done)
            focus = next((i for i, st in enumerate(states) if st in ("current", "ended")), len(done) - 1)
            start = min(max(focus - room // 2, 0), len(indices) - room + 1)
            shown = indices[start : start + room - 1]
            text.append(f"  … {start} earlier · {len(indices) - start - len(shown)} later tasks\n", style="grey50")
            indices = shown
        tails = {}
        for i in indices:
            s, state, tail = view.streams[i], states[i], Text()
            if state == "done" and done[s.task].accuracy is None and done[s.task].val_accuracy is not None:
                # no test set evaluated (a `tune` trial): the validation figure, labelled, not `—%`
                tail.append(f"val {fmt(done[s.task].val_accuracy, 1):>5}%", style="bold green")
            elif state == "done":
                tail.append(f"{fmt(done[s.task].accuracy, 1):>5}%", style="bold green")
            if state == "done":  # the per-task figures the task measured (cl/results.py `figure`)
                for name, figure in task_figures():
                    if (value := getattr(done[s.task], name)) is not None:
                        tail.append(f" {figure.label} {fmt(value, figure.digits)}", style="green")
            elif state == "current":
                tail.append(f"{row.phase or ''}", style="bold cyan")
                if row.phase_fraction is not None:
                    tail.append(f" {row.phase_fraction:.0%}", style="cyan")
            elif state == "ended":
                tail.append(row.status, style="bold red")
            tails[i] = tail
        tail_width = max(len(t) for t in tails.values())
        prefix_width = 15  # "▶ T1  ✓    288 "
        counts = {i: stream_counts(view.streams[i], view.class_labels, True) for i in indices}
        if width - prefix_width - max(len(c) for c in counts.values()) - tail_width - 3 < 12:
            counts = {i: stream_counts(view.streams[i], view.class_labels, False) for i in indices}
        count_width = max(len(c) for c in counts.values())
        bar_width = max(6, min(40, width - prefix_width - count_width - tail_width - 3))
        for i in indices:
            s, state, count, tail = view.streams[i], states[i], counts[i], tails[i]
            line = Text("▶ " if state == "current" else "  ", style="bold cyan")
            line.append(f"T{s.task + 1:<2} ", style="bold" if state != "planned" else "grey50")
            line.append(
                {"done": "✓ ", "current": "● ", "ended": "✗ "}.get(state, "  "),
                style={"done": "green", "current": "cyan", "ended": "bold red"}.get(state, ""),
            )
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
        if any(s.first_appearances for s in view.streams):
            text.append(" · ", style="grey50")
            text.append("★ new", style="bold yellow")
            text.append(" classes first seen in the task (class@position)", style="grey50")
        if row.active and row.samples_per_s:
            text.append(f"\n{row.samples_per_s:,.0f} samples/s", style="bold")
            text.append(f" in {row.phase}", style="grey62")
        return text
