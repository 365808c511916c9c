"""One file per continual-learning method, and REGISTRY, the one place that names them.

To add a method: write `cl/methods/<name>.py` (a `Method` subclass that overrides the hooks
that make it different: see the table in base.py) and add its line to REGISTRY. If it has
hyper-parameters of its own, declare them as a params class in params.py and name it there.

This module and params.py stay free of torch: config.py reads REGISTRY to validate a run's
method and its keys. The method classes (and torch) load on first use: `method_class(name)`,
or `METHODS` / `Method` / `Setup` / `Task` as attributes of this package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any, NamedTuple

from ..settings import MethodParams
from .params import (
    BiCParams, CLIBParams, EWCppParams, MIRParams, NewClassesParams, RegularisedParams, RMParams, RwalkParams, SCRParams,
)

if TYPE_CHECKING:
    from .base import Method, Setup, Task  # noqa: F401


class Entry(NamedTuple):
    implementation: str  # "module:Class" in this package
    params: type[MethodParams]  # its own hyper-parameters (the base class: none)
    # the protocols it runs under: "task" (the RM paper's task-based schedule), "task-free" (the
    # follow-up's i-Blurry / Si-Blurry streams, cl/online.py; the class has taskfree.TaskFree's
    # hooks) or "both"
    protocols: str = "task"


REGISTRY: dict[str, Entry] = {
    "rm": Entry("rm:RainbowMemory", RMParams, "both"),
    "finetune": Entry("finetune:Finetune", MethodParams),  # the RM authors' baseline (random memory, shuffled in)
    "er": Entry("er:ER", MethodParams, "both"),  # experience replay as the field means it (reservoir, half/half)
    "ewc": Entry("ewc:EWC", RegularisedParams),
    "rwalk": Entry("rwalk:Rwalk", RwalkParams),
    "icarl": Entry("icarl:ICaRL", NewClassesParams),
    "gdumb": Entry("gdumb:GDumb", MethodParams, "both"),
    "bic": Entry("bic:BiC", BiCParams, "both"),
    "bic_star": Entry("bic:BiCStar", BiCParams, "both"),
    "joint": Entry("joint:Joint", MethodParams),
    # the follow-up's online methods (task-free streams only)
    "ewcpp": Entry("ewcpp:EWCpp", EWCppParams, "task-free"),
    "mir": Entry("mir:MIR", MIRParams, "task-free"),
    "er_ace": Entry("er_ace:ERACE", MethodParams, "task-free"),
    "scr": Entry("scr:SCR", SCRParams, "task-free"),
    "clib": Entry("clib:CLIB", CLIBParams, "task-free"),
}


def _entry(name: str) -> Entry:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {', '.join(sorted(REGISTRY))}") from None


def method_class(name: str) -> type[Method]:
    module, cls = _entry(name).implementation.split(":")
    return getattr(import_module(f".{module}", __name__), cls)


def params_class(name: str) -> type[MethodParams]:
    return _entry(name).params


def __getattr__(name: str) -> Any:
    if name == "METHODS":  # name -> class, aliases included
        return {method: method_class(method) for method in REGISTRY}
    if name in ("Method", "Setup", "Task"):
        return getattr(import_module(".base", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["METHODS", "REGISTRY", "Method", "Setup", "Task", "method_class", "params_class"]
