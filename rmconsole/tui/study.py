"""The runs page's study line: with a `study:NAME` filter, the study's progress and its best
trial so far (runner/tune.py's `best_line`), read at most every few seconds (a study is kept
through Optuna in the store's database; the page redraws far more often than trials end)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

STUDY_TERM = re.compile(r"(?:^|\s)study[:=]([^\s,]+)", re.IGNORECASE)
MAX_AGE_S = 5.0
_cache: dict[str, tuple[float, str | None]] = {}


def study_named(query: str) -> str | None:
    """The study a runs filter names (`study:NAME`), if any."""
    found = STUDY_TERM.search(query or "")
    return found.group(1).strip("'\"") if found else None


def study_of(tags: Iterable[str]) -> str | None:
    """The study a run is a trial of (its `study:NAME` tag), if any."""
    from ..store.filters import STUDY_TAG

    return next((t[len(STUDY_TAG) :] for t in tags if t.startswith(STUDY_TAG) and len(t) > len(STUDY_TAG)), None)


def study_line(query: str, now: float | None = None) -> str | None:
    """`study NAME: 7/20 trials done; best so far: trial 3 (run 12) val_A_last 81.20 — lr=...`, or
    None when the filter names no study or no such study is stored."""
    name = study_named(query)
    if name is None:
        return None
    now = time.monotonic() if now is None else now
    cached = _cache.get(name)
    if cached is not None and now - cached[0] < MAX_AGE_S:
        return cached[1]
    from .. import store
    from ..config import ConfigError
    from ..runner import tune

    try:
        line = tune.best_line(name) if name in tune.study_names() else None
    except (ConfigError, store.StoreError):
        line = None
    _cache[name] = (now, line)
    return line
