"""One resolver for the "module:attribute" strings declarations name (a dataset's loader, a
model's builder, a method's class, a plug-in's entry point), so every caller imports them the same
way and says a failure the same way. Torch-free; inside cl/ so the science can use it, and the
top level (rmconsole.plugins) imports it from here.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any


def import_target(target: str) -> Any:
    """`module:attribute` (dots allowed after the colon) imported; whatever the import raises propagates."""
    module_name, _, attribute = target.partition(":")
    value: Any = import_module(module_name.strip())
    for part in filter(None, attribute.strip().split(".")):
        value = getattr(value, part)
    return value


def failure(err: BaseException) -> str:
    """An import's error as one short line: its type and its message, white space folded."""
    detail = " ".join(str(err).split())[:200]
    return f"{type(err).__name__}: {detail}"


__all__ = ["failure", "import_target"]
