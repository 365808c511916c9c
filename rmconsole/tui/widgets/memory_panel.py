"""Memory panel: the class histogram after each memory update against the per-class slot
count, with ←/→ to step back through earlier updates, and RM's uncertainty spread."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.binding import Binding
from textual.reactive import reactive, var
from textual.widget import Widget

from ...recency import ClassAccuracyByAge, class_accuracy_by_age
from ..data import MemoryUpdate, RunView
from ..render import class_accuracy_text, memory_chart, memory_summary, uncertainty_chart
from . import css_beside


class MemoryPanel(Widget):
    """Follows the latest update until you step back (← / [), then stays pinned on the
    update you chose while new ones arrive; End (or ]) at the last one follows again."""

    DEFAULT_CSS = css_beside(__file__)
    can_focus = True
    BINDINGS = [
        Binding("left", "step(-1)", "Earlier update", show=False),
        Binding("right", "step(1)", "Later update", show=False),
        Binding("home", "first", "First update", show=False),
        Binding("end", "latest", "Latest update", show=False),
    ]

    view: var[RunView | None] = var(None)  # bound to the run page's view; progress alone draws nothing
    updates: reactive[tuple[MemoryUpdate, ...]] = reactive(())  # computed from `view`
    labels: reactive[tuple[str, ...]] = reactive(())  # computed from `view`
    results: reactive[tuple] = reactive(())  # computed from `view`: the task results (per-class accuracy)
    pinned: reactive[int | None] = reactive(None)  # index of the shown update; None = latest

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.border_title = "memory"

    def compute_updates(self) -> tuple[MemoryUpdate, ...]:
        return self.view.memory if self.view is not None else ()

    def compute_labels(self) -> tuple[str, ...]:
        return self.view.class_labels if self.view is not None else ()

    def compute_results(self) -> tuple:
        return self.view.results if self.view is not None else ()

    def watch_results(self) -> None:
        self.refresh()

    def watch_updates(self) -> None:
        self.refresh()

    def watch_labels(self) -> None:
        self.refresh()

    @property
    def index(self) -> int | None:
        if not self.updates:
            return None
        return len(self.updates) - 1 if self.pinned is None else min(self.pinned, len(self.updates) - 1)

    def action_step(self, delta: int) -> None:
        if not self.updates:
            return
        target = min(max((self.index or 0) + delta, 0), len(self.updates) - 1)
        self.pinned = None if target == len(self.updates) - 1 and delta > 0 else target

    def action_first(self) -> None:
        if self.updates:
            self.pinned = 0

    def action_latest(self) -> None:
        self.pinned = None

    def watch_pinned(self) -> None:
        self.border_subtitle = "← → step · End latest" if self.pinned is None else "pinned · End = latest"
        self.refresh()

    def _class_accuracy(self, update: MemoryUpdate) -> ClassAccuracyByAge | None:
        """Per-class accuracy after the latest task up to this update's, beside the slots of the
        memory after that same task (a running run's newest update may be a task ahead)."""
        results = [r for r in self.results if r.task <= update.task]
        if not results:
            return None
        task = results[-1].task
        same = next((u for u in reversed(self.updates) if u.task == task), update)
        return class_accuracy_by_age(results, same.histogram, self.labels)

    def render(self) -> Text:
        index = self.index
        if index is None:
            return Text("no memory update yet: the memory is filled after the first task's stream pass", style="grey62")
        update = self.updates[index]
        width, height = self.size.width, self.size.height
        has_uncertainty = bool(update.candidates_uncertainty) or update.policy == "uncertainty"
        summary = memory_summary(update, index, len(self.updates), self.pinned is None)
        summary_lines = sum(max(1, -(-len(line) // max(width, 1))) for line in summary.plain.split("\n"))
        spread = uncertainty_chart(update, width, 3 if height >= 18 else 2) if has_uncertainty else Text()
        spread_lines = spread.plain.count("\n") + 1 if has_uncertainty else 0
        split = self._class_accuracy(update)
        accuracy = class_accuracy_text(split, width) if split else Text()
        accuracy_lines = (
            sum(max(1, -(-len(line) // max(width, 1))) for line in accuracy.plain.split("\n")) if split else 0
        )
        chart_height = max(3, height - summary_lines - spread_lines - accuracy_lines - 1)  # - the class labels
        text = Text()
        text.append_text(summary)
        text.append("\n")
        text.append_text(memory_chart(update, self.labels, width, chart_height))
        if split:
            text.append("\n")
            text.append_text(accuracy)
        if has_uncertainty:
            text.append("\n")
            text.append_text(spread)
        return text
