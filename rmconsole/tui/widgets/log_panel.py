"""Log panel: the tail of the worker's output, errors in red."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import events
from textual.widgets import RichLog

from . import css_beside

ERROR_MARKS = ("Traceback", "Error", "error:", "failed", "Killed")


def styled(line: str) -> Text:
    if any(mark in line for mark in ERROR_MARKS) or line.startswith("  File "):
        return Text(line, style="red")
    if "accuracy" in line:
        return Text(line, style="green")
    if line.startswith("task "):
        return Text(line, style="grey70")
    return Text(line)


class LogPanel(RichLog):
    """Appends the lines the run screen's reader found since its last read, and wraps them
    again when its width changes (RichLog wraps a line once, at the width it had when written)."""

    DEFAULT_CSS = css_beside(__file__)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            max_lines=2000, wrap=True, min_width=20, highlight=False, markup=False, auto_scroll=True, **kwargs
        )
        self.border_title = "log"
        self.n_lines = 0
        self.kept: list[str] = []  # the lines as read, to wrap again at a new width
        self._wrapped_at = 0

    def add_lines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(styled(line))
        self.kept = (self.kept + lines)[-2000:]
        self.n_lines += len(lines)

    def on_resize(self, event: events.Resize | None = None) -> None:
        width = self.scrollable_content_region.width
        if width != self._wrapped_at and self.kept:
            self._wrapped_at = width
            self.clear()
            for line in self.kept:
                self.write(styled(line))
        self._wrapped_at = width
