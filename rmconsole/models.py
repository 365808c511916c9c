"""The model registry: the built-in backbones (cl/modelspec.py) and installed plug-ins
(entry-point group `rmconsole.models`, each naming a `ModelSpec`). Torch-free: listing models
imports no plug-in and no torch; a plug-in's spec is imported when its name is first used, then
registered with the science (`cl.modelspec.register`) so `cl.models.build_model` finds it.

A plug-in that cannot be imported, or names something that is not a ModelSpec, is one line
(ValueError) naming it; every other model keeps working.
"""

from __future__ import annotations

from . import plugins
from .cl import modelspec as science
from .cl.modelspec import ModelSpec, UnknownModel


def names() -> list[str]:
    """Every model a config may name: the built-ins, then the installed plug-ins (none imported)."""
    return [*science.BUILTINS, *(n for n in sorted(plugins.available("model")) if n not in science.BUILTINS)]


def get(name: str) -> ModelSpec:
    """The spec of `name`: a built-in, or a plug-in (imported and registered on first use)."""
    if name in science.BUILTINS:
        return science.BUILTINS[name]
    plugin = plugins.available("model").get(name)
    if plugin is None:
        raise UnknownModel(f"unknown model {name!r}; registered: {', '.join(names())}")
    try:
        spec = plugins.load("model", name)
    except plugins.PluginError as err:
        raise ValueError(str(err)) from None
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"{plugin.describe()}: {plugin.target!r} is a {type(spec).__name__}, not a "
                         f"rmconsole.cl.modelspec.ModelSpec")
    if spec.name != name:  # the entry point's name is what configs and stored runs call it
        spec = ModelSpec(name, spec.description, spec.build, spec.weights)
    return science.register(spec)


__all__ = ["ModelSpec", "UnknownModel", "get", "names"]
