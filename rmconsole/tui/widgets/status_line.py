"""A one-line status bar whose updates repaint only itself (a Static would re-layout the screen)."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from . import css_beside


class StatusLine(Widget):
    """Counts, the filter, the selection, or a store problem (class `problem`)."""

    DEFAULT_CSS = css_beside(__file__)

    text: reactive[Text] = reactive(Text(""), layout=False)

    def show(self, text: Text | str, problem: bool = False) -> None:
        self.text = text if isinstance(text, Text) else Text(text)
        self.set_class(problem, "problem")

    def render(self) -> Text:
        return self.text
