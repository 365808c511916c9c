"""One file per continual-learning method; METHODS maps a config name to its class.

To add a method: write `cl/methods/<name>.py` with a `Method` subclass and list it here.
"""

from __future__ import annotations

from .base import Method, Setup, Task
from .bic import BiC, BiCStar
from .ewc import EWC
from .finetune import Finetune
from .gdumb import GDumb
from .icarl import ICaRL
from .joint import Joint
from .rm import RainbowMemory
from .rwalk import Rwalk

METHODS: dict[str, type[Method]] = {
    cls.name: cls for cls in (RainbowMemory, Finetune, EWC, Rwalk, ICaRL, GDumb, BiC, BiCStar, Joint)
}
METHODS["er"] = Finetune


def method_class(name: str) -> type[Method]:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(METHODS))}") from None


__all__ = ["METHODS", "Method", "Setup", "Task", "method_class"]
