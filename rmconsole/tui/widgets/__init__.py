"""One widget per file; each keeps its styles in a .tcss file beside it (loaded as DEFAULT_CSS,
so an app or screen stylesheet can still override them)."""

from __future__ import annotations

from pathlib import Path


def css_beside(module_file: str) -> str:
    """The .tcss file next to a widget's module."""
    return Path(module_file).with_suffix(".tcss").read_text(encoding="utf-8")
