"""Key checks and their one-line messages: a key no run has (with a did-you-mean), a key of
another method (naming the methods that read it), a number of the wrong kind, and pydantic's first
error as `key=value: problem`."""

from __future__ import annotations

from typing import Any, get_type_hints

from pydantic import ValidationError

from ..cl.methods import MethodSpec
from ..methods import key_readers, method_spec, readers_of
from ..tomlfile import literal as toml_literal
from .errors import ConfigError, did_you_mean, shorten, show_value
from .model import COMMON_KEYS, KEYS, RunConfig, number_kind


def not_read(key: str, value: Any, methods: list[str]) -> str:
    """The one line for a method key that the run's method (or no run of a sweep) reads."""
    readers = readers_of(key)
    return f"{shorten(key)}={show_value(value)}: read by {', '.join(readers)}, not by method={', '.join(methods)}"


def unknown_key(key: str) -> str:
    """`unknown config key 'x'`, with the closest known key when one is close."""
    known = list(dict.fromkeys([*KEYS, *method_keys()]))
    return f"unknown config key {shorten(key)!r}{did_you_mean(key, known)}; `rmconsole config-keys` lists the keys"


def method_keys() -> tuple[str, ...]:
    """Every method's own keys (built-ins', then the loadable plug-ins')."""
    return tuple(key_readers())


def check_key(key: str) -> None:
    """A key some run can have (common, or some method's), else ConfigError with a did-you-mean."""
    if key not in COMMON_KEYS and not readers_of(key):
        raise ConfigError(unknown_key(key))


def check_keys(config: dict[str, Any], spec: MethodSpec) -> None:
    """Every key of `config` is common or read by its method `spec`: one line otherwise."""
    own = set(spec.keys)
    for key, value in config.items():
        if key in COMMON_KEYS or key in own:
            continue
        if readers_of(key):
            raise ConfigError(not_read(key, value, [spec.name]))
        raise ConfigError(unknown_key(key))


def key_number_kind(key: str) -> str | None:
    """'an integer' / 'a number' when `key` (a common key, or a method's own, declared alike by
    every method that reads it) holds numbers; None otherwise."""
    field = RunConfig.model_fields.get(key)
    if field is not None:
        return number_kind(field.annotation)
    for name in readers_of(key)[:1]:
        return number_kind(get_type_hints(method_spec(name).params).get(key))
    return None


def one_line(err: ValidationError) -> str:
    """The first pydantic error as `key=value: problem`."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        return unknown_key(loc)
    if first["type"] == "missing":
        return f"config key {loc!r} is required"
    if not loc:  # a model-level check already names its key
        return shorten(msg, 600)
    value = first.get("input")
    # as written (TOML): a preset's `epochs = 1979-05-27` is not echoed as datetime.date(1979, 5, 27)
    shown = repr(value) if isinstance(value, str) else toml_literal(value)
    shown = shorten(shown) if len(shown) > 80 else shown
    if first["type"] == "literal_error":
        return f"{loc}={shown}: {msg.replace('Input should be', 'allowed:')}"
    return f"{loc}={shown}: {shorten(msg, 400)}"
