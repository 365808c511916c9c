"""How a config error is written: `ConfigError` (one line for the terminal) and the pieces every
message of the package is made of (a value shortened, as `--set` writes it, a did-you-mean, a key
given twice)."""

from __future__ import annotations

import difflib
from typing import Any


class ConfigError(Exception):
    """A user error in a preset or override: the message is one line for the terminal."""


def shorten(value: object, limit: int = 80) -> str:
    """An echoed value kept short: a long one keeps its start and end, so no error is a 100 KB line."""
    text = str(value)
    return (
        text if len(text) <= limit else f"{text[: limit // 2 - 1]}…{text[-(limit // 2 - 1) :]} ({len(text)} characters)"
    )


def show_value(value: Any) -> str:
    """A value as `--set` writes it (`bic_temperature=3`, `augment=cutmix+autoaug`)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)):
        return "+".join(map(str, value)) or "none"
    return shorten(value)


def did_you_mean(name: str, names: list[str] | tuple[str, ...]) -> str:
    """` (did you mean X?)` / ` (did you mean X or Y?)` with the registered names closest to a
    typo, or "" when none is close: a typo gets its fix, not the whole list to read."""

    def score(candidate: str) -> float:
        return difflib.SequenceMatcher(None, str(name), candidate).ratio()

    close = difflib.get_close_matches(str(name), list(names), n=2, cutoff=0.6)
    close = [c for c in close if score(c) >= score(close[0]) - 0.03]  # a second only when as close as the first
    return f" (did you mean {' or '.join(close)}?)" if close else ""


def twice(key: str, first: str, second: str) -> str:
    """The one line for a key given two different values."""
    return f"{key} is given twice: {first} and {second}; give it once"
