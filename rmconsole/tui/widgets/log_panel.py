"""Log panel: the tail of the worker's output, errors in red."""

from __future__ import annotations

from rich.text import Text
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
    """Appends the lines the run screen's reader found since its last read."""

    DEFAULT_CSS = css_beside(__file__)

    def __init__(self, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(max_lines=2000, wrap=True, min_width=20, highlight=False, markup=False, auto_scroll=True, **kwargs)
        self.border_title = "log"
        self.n_lines = 0

    def add_lines(self, lines: list[str]) -> None:
        for line in lines:
            self.write(styled(line))
        self.n_lines += len(lines)
