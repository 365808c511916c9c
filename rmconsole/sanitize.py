"""One output sanitiser for every face: what rmconsole shows never drives the terminal.

Names, tags, notes, preset names, errors and config values can hold control characters: a file
named with ESC sequences, a row written into a shared PostgreSQL store by another writer. Printed
raw, `ESC]0;…BEL` sets the terminal's title, `ESC[2J` clears the screen, `ESC]52;…` writes the
clipboard, a bidirectional override reorders what the eye reads. Input commands refuse them;
output neutralises them everywhere: each control character is shown as a visible, single-cell
stand-in (the Unicode control pictures: ESC is ␛, BEL ␇, DEL ␡; C1 controls and bidirectional
overrides are �), so that nothing is hidden and a table keeps its columns.

`clean` is for one-line fields (a newline shows as ␊), `clean_block` for text of several lines
(a report: newlines and tabs stay). `SafeConsole` is a Rich Console that cleans every piece of
text it prints, while its own styling (colours, links) still reaches the terminal: the CLI's
consoles are SafeConsoles, so no command can print a raw control character.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.segment import Segment

REPLACEMENT = "\ufffd"
BIDI = (
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0x200E,
    0x200F,
    0x061C,
)  # embeddings, overrides, isolates, marks


def _table(keep: str) -> dict[int, str]:
    table = {code: chr(0x2400 + code) for code in range(0x20)}  # ␀ … ␟
    table[0x7F] = "\u2421"  # ␡
    table.update(dict.fromkeys(range(128, 160), REPLACEMENT))  # C1 controls (0x9b is a CSI)
    table.update(dict.fromkeys(BIDI, REPLACEMENT))
    for char in keep:
        table.pop(ord(char))
    return table


_LINE = _table("")
_BLOCK = _table("\n\t")


def clean(text: Any) -> str:
    """`text` (str() of any value) with every control character shown, not obeyed: one line."""
    return str(text).translate(_LINE)


def clean_block(text: Any) -> str:
    """As `clean`, keeping newlines and tabs: a report, a log excerpt."""
    return str(text).translate(_BLOCK)


def is_clean(text: str) -> bool:
    return text == clean_block(text)


class SafeConsole(Console):
    """A Rich Console that neutralises control characters in whatever it is given to print; the
    escape sequences Rich writes itself (styles, links, cursor control) are untouched."""

    def _render_buffer(self, buffer: Iterable[Segment]) -> str:
        return super()._render_buffer(
            segment if segment.control or is_clean(segment.text) else Segment(clean_block(segment.text), segment.style)
            for segment in buffer
        )


def _finite_only(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_only(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_only(v) for v in value]
    return value


def json_text(value: Any, **options: Any) -> str:
    """`json.dumps` as every --json and JSON report prints: strict JSON, a float that is not finite
    (a row an older version stored as Infinity or NaN) written as null, never `Infinity`/`NaN`,
    which strict parsers (json.loads with parse_constant, jq, JavaScript) refuse."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        return json.dumps(_finite_only(value), allow_nan=False, **options)
