"""The presets: the bundled TOML files and the installed plug-ins' (entry-point group
`rmconsole.presets`), found by name, read into a table with one line for anything wrong."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

from .. import plugins
from ..tomlfile import TomlFileError, read_text
from ..tomlfile import loads as toml_loads
from .errors import ConfigError, did_you_mean, shorten

DEFAULT_PRESET = "digits-blurry10-online"


def preset_dir() -> Path:
    """The bundled presets: package data `rmconsole/presets` when installed from a wheel (setuptools
    maps the top-level presets/ there), else the top-level presets/ beside the package (a checkout
    on PYTHONPATH, or an editable install)."""
    installed = Path(str(resources.files("rmconsole") / "presets"))
    if any(installed.glob("*.toml")):  # a folder that holds presets (a stale empty one does not count)
        return installed
    return Path(__file__).resolve().parents[2] / "presets"


def builtin_preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.toml"))


def plugin_presets() -> tuple[dict[str, tuple[Path, str]], list[str]]:
    """The presets installed plug-in packages ship ({name: (TOML file, package)}, entry-point
    group `rmconsole.presets`, plugins.preset_files) and one line for each one refused: a name
    a built-in preset has (a `--preset` name always means the built-in), one name in two
    packages, a package folder not found."""
    found, problems = plugins.preset_files()
    builtin = set(builtin_preset_names())
    out: dict[str, tuple[Path, str]] = {}
    for name, (path, entry) in sorted(found.items()):
        if name in builtin:
            problems.append(
                f"preset {name!r} of package {entry.package} has a built-in preset's name: not used; rename its file"
            )
        else:
            out[name] = (path, entry.package)
    return out, problems


def preset_names() -> list[str]:
    """Every preset `--preset` takes: the bundled ones, then the installed plug-ins' (sorted)."""
    return builtin_preset_names() + sorted(plugin_presets()[0])


def preset_path(name: str) -> Path | None:
    """The TOML file of preset `name`: a bundled one, else a plug-in's; None when neither has it."""
    path = preset_dir() / f"{name}.toml"
    if path.exists():
        return path
    found = plugin_presets()[0].get(name)
    return found[0] if found is not None else None


def read_preset(name_or_path: str) -> tuple[str, dict[str, Any]]:
    """(preset name, its table) for a preset name (bundled or a plug-in's) or a TOML file path."""
    if not name_or_path.strip():
        raise ConfigError(
            f"--preset {name_or_path!r}: give a preset name ({', '.join(preset_names())}) or a .toml file"
        )
    try:
        path = Path(name_or_path)
        if not (path.suffix == ".toml" or path.exists()):
            found = preset_path(name_or_path)
            if found is None:
                raise ConfigError(
                    f"unknown preset {shorten(name_or_path)!r}{did_you_mean(name_or_path, preset_names())}; "
                    f"`rmconsole presets` lists them (or give a .toml file)"
                )
            path = found
        text = read_text(path)  # a regular file of at most 1 MiB, a BOM dropped (tomlfile.py)
    except TomlFileError as err:
        raise ConfigError(str(err)) from None
    except FileNotFoundError:
        raise ConfigError(f"preset file {shorten(str(path))!r} does not exist") from None
    except IsADirectoryError:
        raise ConfigError(f"preset file {shorten(str(path))!r} is a directory, not a TOML file") from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"preset file {shorten(str(path))!r} is not valid TOML: {err}") from None
    except OSError as err:
        raise ConfigError(f"preset {shorten(name_or_path)!r} cannot be read: {err.strerror}") from None
    try:
        table = toml_loads(text, f"preset file {shorten(str(path))!r}")  # nesting bounded first
    except TomlFileError as err:
        raise ConfigError(str(err)) from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"preset file {shorten(str(path))!r} is not valid TOML: {err}") from None
    table.pop("description", None)
    return path.stem, table


def preset_description(name: str) -> str:
    path = preset_path(name)
    if path is None:
        return ""
    try:
        table = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return ""
    return str(table.get("description", ""))
