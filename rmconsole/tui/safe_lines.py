"""The TUI's end of the output sanitiser (rmconsole/sanitize.py): a Textual line filter that
cleans every segment of every widget's lines before they are drawn, so that a name, tag, note,
preset or error holding ESC sequences (a file name, another writer of a shared store) is shown
and never drives the terminal, whichever page or widget shows it, in a terminal or served to a
browser (`tui --serve`)."""

from __future__ import annotations

from rich.segment import Segment
from textual.color import Color
from textual.filter import LineFilter

from ..sanitize import clean_block, is_clean


class ControlCharacters(LineFilter):
    """Control characters in content shown as control pictures; Textual's own styling untouched."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        if all(segment.control or is_clean(segment.text) for segment in segments):
            return segments
        return [
            segment
            if segment.control or is_clean(segment.text)
            else Segment(clean_block(segment.text), segment.style, segment.control)
            for segment in segments
        ]
