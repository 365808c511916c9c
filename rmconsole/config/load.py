"""A run's config from a preset, `--set` overrides and explicit options: the values parsed, the
preset's keys for the run's method merged with them, validated by the model of its method's runs;
each key's default; what tells a run apart from its preset."""

from __future__ import annotations

import dataclasses
import tomllib
from typing import Any

from pydantic import ValidationError

from ..cl.catalog import parse_augment
from ..cl.settings import MAX_INT
from ..methods import method_names, method_specs, readers_of
from ..tomlfile import TomlFileError
from ..tomlfile import loads as toml_loads
from .checks import check_key, check_keys, key_number_kind, one_line
from .errors import ConfigError, shorten, show_value, twice
from .model import COMMON_KEYS, RunConfig, config_model, spec_of
from .presets import DEFAULT_PRESET, read_preset


def parse_value(raw: str) -> Any:
    """A --set value: a TOML literal (number, bool, list, quoted string) or else the raw string."""
    try:
        return toml_loads(f"v = {raw}", "the value")["v"]  # nesting bounded first
    except TomlFileError as err:
        raise ConfigError(f"{shorten(raw)!r}: {err}") from None
    except tomllib.TOMLDecodeError:
        for number in (int, float):  # `.05`, `007`: numbers TOML spells otherwise, never a quoted string
            try:
                return number(raw)
            except ValueError:
                continue
        return raw


def checked_value(key: str, raw: str) -> Any:
    """A `--set` value parsed (`parse_value`), a float for an integer key refused naming what was
    typed and how it was read (`epochs=1e3` is not quietly 1000)."""
    value = parse_value(raw)
    if isinstance(value, float) and key_number_kind(key) == "an integer":
        whole = (
            f"; write {key}={int(value)}"
            if value.is_integer() and abs(value) <= MAX_INT
            else "; allowed: whole numbers"
        )
        raise ConfigError(f"{key}={shorten(raw)}: a float ({value!r}) for an integer key{whole}")
    return value


def split_override(pair: str, expected: str = "KEY=VALUE") -> tuple[str, str]:
    """`--set KEY=RAW` -> (key, raw), the key checked against the config's keys."""
    key, sep, raw = pair.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {shorten(pair)!r}: expected {expected}")
    check_key(key)
    return key, raw.strip()


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`--set` pairs as a dict; a key given twice is refused naming both values (the last one
    silently winning hid a slip such as `--set epochs=1 ... --set epochs=2`)."""
    out: dict[str, Any] = {}
    raws: dict[str, str] = {}
    for pair in pairs:
        key, raw = split_override(pair)
        value = checked_value(key, raw)
        if key in out and out[key] != value:
            raise ConfigError(twice(key, f"--set {key}={shorten(raws[key])}", f"--set {key}={shorten(raw)}"))
        out[key], raws[key] = value, raw
    return out


def method_of(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> Any:
    """The method a preset table and overrides give (the override's, else the preset's, else rm)."""
    return (overrides or {}).get("method", table.get("method", "rm"))


def for_method(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A preset's keys for the run's method: its top-level keys, less the parameters of other
    methods (a BiC preset's `bic_temperature` is dropped from a run with `--set method=rm`), then
    its `[methods.<method>]` table (a preset of the follow-up's settings gives each method its
    own optimiser, lr, schedule...), then the overrides (never dropped: a key of another method
    there is refused by `build_config`). The method is the override's, else the preset's.

    A stored config goes through here as a table, so a run stored by an earlier version (every
    method's keys in its config) rebuilds with its own method's keys only."""
    overrides = overrides or {}
    sections = table.get("methods") or {}
    if not isinstance(sections, dict) or not all(isinstance(v, dict) for v in sections.values()):
        raise ConfigError("preset key 'methods' must hold one table per method ([methods.NAME])")
    known = method_names()
    unknown = sorted(set(sections) - set(known))
    if unknown:
        raise ConfigError(f"preset table [methods.{unknown[0]}]: unknown method; known: {', '.join(known)}")
    method = method_of(table, overrides)
    spec = spec_of(method)
    own = set(spec.keys) if spec is not None else None
    common = {
        k: v
        for k, v in table.items()
        if k != "methods" and (own is None or k in COMMON_KEYS or k in own or not readers_of(k))
    }
    return {**common, **(sections.get(method, {}) if isinstance(method, str) else {}), **overrides}


def build_config(table: dict[str, Any], overrides: dict[str, Any] | None = None) -> RunConfig:
    """The validated config of a preset table (or a stored config) plus overrides, as the model
    of its method's runs (`config_model`); ConfigError, one line, for anything wrong."""
    merged = for_method(table, overrides)
    spec = spec_of(merged.get("method", "rm"))
    if spec is not None:
        check_keys(merged, spec)
    try:
        return (config_model(spec) if spec is not None else RunConfig)(**merged)
    except ValidationError as err:
        raise ConfigError(one_line(err)) from None
    except TypeError as err:
        raise ConfigError(str(err)) from None


def load_config(
    preset: str | None = None, overrides: list[str] | dict[str, Any] | None = None, **explicit: Any
) -> tuple[str, RunConfig]:
    """(preset name, config) from a preset name/file, `--set` pairs and explicit options."""
    name, table = read_preset(DEFAULT_PRESET if preset is None else preset)
    extra = parse_overrides(overrides) if isinstance(overrides, list) else dict(overrides or {})
    for key, value in explicit.items():
        if value is None:
            continue
        if key in extra and extra[key] != value:  # `--set seed=2 --seed 3`: refused, not the last one winning
            raise ConfigError(twice(key, f"--set {key}={show_value(extra[key])}", f"--{key.replace('_', '-')} {value}"))
        extra[key] = value
    return name, build_config(table, extra)


def config_defaults(method: Any = None) -> dict[str, Any]:
    """Each key's default for runs of `method` (every method's keys when None or unknown); a key
    with none (dataset, model, memory_size: a preset gives them) is None, as in a run without it."""
    spec = spec_of(method) if method is not None else None
    model = config_model(spec) if spec is not None else RunConfig
    out = {k: None if f.is_required() else f.default for k, f in model.model_fields.items()}
    if spec is None:
        out.update(method_key_defaults())
    return out


def method_key_defaults() -> dict[str, Any]:
    """Every method's own key with its declared default (built-ins', then loadable plug-ins')."""
    out: dict[str, Any] = {}
    for spec in method_specs()[0]:
        for f in dataclasses.fields(spec.params):
            out.setdefault(f.name, f.default)
    return out


def overrides_of(preset: str | None, config: dict[str, Any]) -> dict[str, Any]:
    """The keys of `config` whose value differs from what the preset alone gives for the config's
    method (its table over the defaults, its `[methods.X]` table included), as `--set` would write
    them back: what tells two runs of a preset apart. `method` differs when it is not the
    preset's. The seed is left out (every runs table has it as a column). A config of an earlier
    version (every method's keys) compares only its method's keys."""
    _, table = read_preset(preset or DEFAULT_PRESET)
    method = config.get("method", method_of(table))
    try:
        base = build_config(table, {"method": method}).to_dict()
    except ConfigError:  # a preset that is not valid alone (a partial TOML file): its table and the defaults
        try:
            from_table = for_method(table, {"method": method})
        except ConfigError:
            from_table = {k: v for k, v in table.items() if k != "methods"}
        base = config_defaults(method) | from_table
        base["augment"] = list(parse_augment(base["augment"])) if base.get("augment") is not None else []
    base["method"] = method_of(table)
    return {k: v for k, v in config.items() if k != "seed" and k in base and v != base[k]}
