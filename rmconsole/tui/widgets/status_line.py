"""A one-line status bar whose updates repaint only itself (a Static would re-layout the screen)."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive, var
from textual.widget import Widget

from . import css_beside


class StatusLine(Widget):
    """Counts, the filter, the selection, or a store problem (`problem` sets the class `problem`)."""

    DEFAULT_CSS = css_beside(__file__)

    text: reactive[Text] = reactive(Text(""), layout=False)
    problem: var[bool] = var(False, toggle_class="problem")

    def render(self) -> Text:
        return self.text
