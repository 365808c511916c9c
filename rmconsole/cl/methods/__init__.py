"""One file per continual-learning method; METHODS maps a config name to its class.

To add a method: write `cl/methods/<name>.py` with a `Method` subclass and list it here.
"""

from __future__ import annotations

from .base import Method, Setup, Task
from .finetune import Finetune
from .rm import RainbowMemory

METHODS: dict[str, type[Method]] = {cls.name: cls for cls in (RainbowMemory, Finetune)}
METHODS["er"] = Finetune


def method_class(name: str) -> type[Method]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(METHODS))}") from None


__all__ = ["METHODS", "Method", "Setup", "Task", "method_class"]
