"""`MethodSpec`: the declaration of a continual-learning method, torch-free.

A method is declared once, by a `MethodSpec`: its name (the config's `method` value), where its
class is ("package.module:Class", imported on first use, so listing and validating never pay for
torch), its parameter class (a `MethodParams` subclass in a torch-free module beside the method:
the config validates a run's own keys against it), the protocols it runs under and a one-line
summary. The built-ins' specs are `REGISTRY` in this package's `__init__`; a plug-in package
names its spec in an entry point of the group `rmconsole.methods`:

    # mymethod/declare.py (no torch here)
    from rmconsole.cl.methods.spec import MethodSpec
    from .params import MyParams

    METHOD = MethodSpec("mymethod", "mymethod.method:MyMethod", MyParams, ("task", "task-free"),
                        "one line: what it does")

    # pyproject.toml
    [project.entry-points."rmconsole.methods"]
    mymethod = "mymethod.declare:METHOD"

Its class is a `Method[MyParams]` subclass (base.py), the task-free hooks mixed in
(`TaskFree`, taskfree.py) when it declares "task-free".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..protocols import PROTOCOLS
from ..settings import MethodParams
from ..targets import import_target


@dataclass(frozen=True)
class MethodSpec:
    """One method: what a config names, what validates its keys, what trains it."""

    name: str  # the config's `method` value
    implementation: str  # "package.module:Class", an absolute module path (a plug-in names its own)
    params: type[MethodParams] = MethodParams  # its own hyper-parameters (the base class: none)
    # the protocols it runs under (rmconsole/cl/protocols.py): "task" (the RM paper's task-based
    # schedule), "task-free" (the follow-up's i-Blurry / Si-Blurry streams; the class has TaskFree's hooks)
    protocols: tuple[str, ...] = ("task",)
    summary: str = ""  # one line for listings

    def __post_init__(self) -> None:
        """A malformed declaration is refused where it is written, in one line naming it."""
        if isinstance(self.protocols, str):  # protocols="task" means ("task",)
            object.__setattr__(self, "protocols", (self.protocols,))
        else:
            object.__setattr__(self, "protocols", tuple(self.protocols))
        what = f"method spec {self.name!r}"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"{what}: its name must be an identifier (letters, digits, _)")
        module, sep, attribute = str(self.implementation).partition(":")
        if not sep or not module.strip() or not attribute.strip() or module.startswith("."):
            raise ValueError(
                f"{what}: implementation {self.implementation!r} must be 'package.module:Class' "
                f"(an absolute module path)"
            )
        if not (
            isinstance(self.params, type)
            and issubclass(self.params, MethodParams)
            and dataclasses.is_dataclass(self.params)
        ):
            raise ValueError(
                f"{what}: params must be a MethodParams dataclass (rmconsole.cl.settings), not {self.params!r}"
            )
        unknown = [p for p in self.protocols if p not in PROTOCOLS]
        if not self.protocols or unknown:
            raise ValueError(f"{what}: protocols {self.protocols!r}: allowed: a tuple of {', '.join(PROTOCOLS)}")
        if "\n" in self.summary:
            raise ValueError(f"{what}: the summary is one line")

    @property
    def keys(self) -> tuple[str, ...]:
        """Its own config keys (its params class's fields)."""
        return tuple(f.name for f in dataclasses.fields(self.params))

    def runs_under(self, protocol: str) -> bool:
        return protocol in self.protocols

    def load(self) -> Any:
        """The method's class, imported now (torch with it). Import errors propagate: the caller
        (the method registry) says them in one line naming the method."""
        return import_target(self.implementation)


__all__ = ["MethodSpec"]
