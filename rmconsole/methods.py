"""The methods a run can name: the built-ins' declarations (`rmconsole.cl.methods.REGISTRY`) and
the installed plug-ins' (entry points of the group `rmconsole.methods`, each naming a
`MethodSpec`, see rmconsole/cl/methods/spec.py). One registry for config.py, the CLI, the TUI
and the reports; it lives outside cl/ because plug-in discovery (plugins.py) does.

Torch-free: names are listed from the installed packages' metadata; a plug-in's spec (a
torch-free module) is imported when its name is used; its class (torch) only by `method_class`.
A built-in's name always means the built-in: a plug-in may not take it.
"""

from __future__ import annotations

import functools
from typing import Any

from . import plugins
from .cl.methods import REGISTRY, MethodSpec
from .cl.methods import method_class as _checked_class
from .cl.settings import MethodParams


class UnknownMethod(ValueError):
    """A method name that is neither built in nor an installed plug-in's."""


def method_names() -> tuple[str, ...]:
    """Every method a config may name: the built-ins in registry order, then the installed
    plug-ins by name (none imported; one that takes a built-in's name is left out)."""
    return tuple(plugins.names_with("method", REGISTRY))


def method_spec(name: str) -> MethodSpec:
    """The declaration of method `name`: a built-in's, else the plug-in's, imported now
    (`PluginError`, one line naming it, when it cannot be used; `UnknownMethod` when no one
    declares the name)."""
    if name in REGISTRY:
        return REGISTRY[name]
    found = plugins.available("method").get(name)
    if found is None:
        raise UnknownMethod(f"unknown method {name!r}; known: {', '.join(method_names())}")
    spec = plugins.load("method", name)
    if not isinstance(spec, MethodSpec):
        raise plugins.PluginError(
            f"{found.describe()}: {found.target} is a {type(spec).__name__}, not a MethodSpec "
            f"(rmconsole.cl.methods.spec)"
        )
    if spec.name != name:
        raise plugins.PluginError(
            f"{found.describe()}: its MethodSpec is named {spec.name!r}; the entry point and "
            f"the spec must give one name"
        )
    return spec


def method_class(name: str) -> Any:
    """The class of method `name`, imported now (torch with it); a plug-in whose class cannot
    be imported, or is not the `Method[P]` its spec declares, is one line naming it."""
    spec = method_spec(name)
    try:
        return _checked_class(spec)
    except Exception as err:  # noqa: BLE001 - a plug-in's import error, said in one line
        what = plugins.available("method").get(name)
        who = what.describe() if what is not None and name not in REGISTRY else f"method {name!r}"
        detail = " ".join(str(err).split())[:200]
        raise plugins.PluginError(
            f"{who} failed to load {spec.implementation!r}: {type(err).__name__}: {detail}"
        ) from None


def params_class(name: str) -> type[MethodParams]:
    return method_spec(name).params


def method_specs() -> tuple[list[MethodSpec], list[str]]:
    """Every method's spec, the plug-ins' imported; and one line per plug-in that cannot be
    used (a listing shows the others and says what is wrong with it)."""
    specs, problems = list(REGISTRY.values()), []
    for name in plugins.available("method"):
        try:
            plugins.check_name("method", name, REGISTRY)
            specs.append(method_spec(name))
        except (plugins.PluginError, ValueError) as err:
            problems.append(str(err))
    return specs, problems


@functools.cache
def _builtin_readers() -> dict[str, tuple[str, ...]]:
    readers: dict[str, list[str]] = {}
    for spec in REGISTRY.values():
        for key in spec.keys:
            readers.setdefault(key, []).append(spec.name)
    return {k: tuple(v) for k, v in readers.items()}


def key_readers(plugins_too: bool = True) -> dict[str, tuple[str, ...]]:
    """A method's own key -> the methods that read it, built-ins first (registry order), then
    the plug-ins that can be loaded."""
    readers = {k: list(v) for k, v in _builtin_readers().items()}
    if plugins_too and plugins.available("method"):
        for spec in method_specs()[0][len(REGISTRY) :]:
            for key in spec.keys:
                readers.setdefault(key, []).append(spec.name)
    return {k: tuple(v) for k, v in readers.items()}


def readers_of(key: str) -> tuple[str, ...]:
    """The methods that read `key` as their own parameter (empty for a key every run has or an
    unknown one). With plug-ins installed, their (torch-free) specs are imported once."""
    found = _builtin_readers().get(key, ())
    installed = plugins.available("method")
    if not installed:
        return found
    return found + tuple(spec.name for spec in method_specs()[0][len(REGISTRY) :] if key in spec.keys)


__all__ = [
    "MethodSpec",
    "UnknownMethod",
    "key_readers",
    "method_class",
    "method_names",
    "method_spec",
    "method_specs",
    "params_class",
    "readers_of",
]
