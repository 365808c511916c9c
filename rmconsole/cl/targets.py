"""What every declaration table shares: one resolver for the "module:attribute" strings
declarations name (a dataset's loader, a model's builder, a method's class, a plug-in's entry
point), so every caller imports them the same way and says a failure the same way; and one way to
register a plug-in's spec by its name. Torch-free; inside cl/ so the science can use it, and the
top level (rmconsole.plugins) imports it from here.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Protocol, TypeVar


class Named(Protocol):
    """What a spec table keys on: a declaration's name."""

    @property
    def name(self) -> str: ...


Spec = TypeVar("Spec", bound=Named)


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


def register_in(table: dict[str, Spec], spec: Spec, kind: type[Spec]) -> Spec:
    """`spec` (a plug-in's, resolved outside the science) kept in `table` under its `name`, so the
    science finds it like a built-in; TypeError for anything that is not a `kind`."""
    if not isinstance(spec, kind):
        raise TypeError(f"register(): expected a {kind.__name__}, not {type(spec).__name__}")
    table[spec.name] = spec
    return spec


__all__ = ["failure", "import_target", "register_in"]
