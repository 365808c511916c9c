"""How a number is shown, in every face (the CLI, the TUI, the reports): one rule, so that a
value that was not measured reads the same everywhere.

None and NaN (a metric not measured, a cell without runs) are "—"; an infinity is written as
Python writes it ("inf", "-inf"), so that a broken figure is seen, not hidden.
"""

from __future__ import annotations

import math

MISSING = "—"


def missing(value: float | None) -> bool:
    """Whether a value is one that is not shown as a number: None, or NaN."""
    if value is None:
        return True
    try:
        return math.isnan(value)
    except TypeError:  # not a number at all: the caller's format says what it is
        return False


def fmt(value: float | None, digits: int = 2) -> str:
    """`86.00` with `digits` decimals; "—" for None or NaN."""
    return MISSING if missing(value) else f"{value:.{digits}f}"


def duration(seconds: float | None) -> str:
    """`1:02:03` (hours:minutes:seconds, whole seconds); "—" when unknown, NaN or infinite (an ETA
    before any progress)."""
    if seconds is None or not math.isfinite(seconds):
        return MISSING
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
