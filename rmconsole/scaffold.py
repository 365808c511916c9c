"""`rmconsole new method|dataset|metric NAME`: a small pip-installable plug-in package to start from.

The package's files are templates shipped with rmconsole (package data, rmconsole/templates/KIND/,
each file ending in .tmpl; `pkg/` becomes the package's folder NAME/, `test_pkg.py` its test
file), with `{{name}}` (the plug-in's name, also its Python package and distribution name) and
`{{Name}}` (its class name) filled in. What it writes installs with `pip install -e FOLDER`,
registers under the entry points rmconsole reads (plugins.py), and runs on the embedded default
(digits) as written: the point is a working package a researcher edits, not a skeleton to fill.

Refused, in one line each: a name that is not a Python identifier, one a built-in
or an installed plug-in of that kind already has, one an importable module has (the package
would shadow it or be shadowed), and a folder that exists (nothing is ever overwritten).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import keyword
import re
import shutil
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from . import plugins
from .config import DEFAULT_PRESET, ConfigError, preset_dir, shorten

KINDS = ("method", "dataset", "metric")
NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")


def builtin_names(kind: str) -> set[str]:
    """The built-in methods, datasets or metrics a plug-in may not shadow."""
    if kind == "method":
        from .cl.methods import REGISTRY

        return set(REGISTRY)
    if kind == "dataset":
        from .cl import datasets

        return set(datasets.builtins())
    if kind == "metric":
        from .cl.metric_catalog import BUILTINS

        return set(BUILTINS)
    raise ValueError(kind)


def check_name(kind: str, name: str) -> None:
    """A plug-in's name: a Python identifier (the config's value, its package and module name),
    not a built-in's, not an installed plug-in's, not an importable module's."""
    what = f"new {kind} {shorten(name)!r}"
    if not NAME.match(name) or keyword.iskeyword(name):
        raise ConfigError(
            f"{what}: the name must be a Python identifier (letters, digits, _; starting with a letter), e.g. my_{kind}"
        )
    builtin = builtin_names(kind)
    if name in builtin:
        raise ConfigError(f"{what}: a built-in {kind} has that name; built-ins: {', '.join(sorted(builtin))}")
    installed = plugins.available(kind).get(name)
    if installed is not None:
        raise ConfigError(f"{what}: an installed plug-in has that name ({installed.describe()})")
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        found = None
    if found is not None and found.origin not in (None, "namespace"):  # (a bare folder on the path is no module)
        where = found.origin or ", ".join(found.submodule_search_locations or []) or "?"
        raise ConfigError(
            f"{what}: a module of that name is importable already ({shorten(where)}); choose another name"
        )


def class_name(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def templates(kind: str) -> list[tuple[str, str]]:
    """(relative path in the new package, template text) of each file of a `kind` plug-in."""
    root = resources.files("rmconsole") / "templates" / kind
    out: list[tuple[str, str]] = []

    def walk(folder: Any, prefix: str) -> None:  # (an importlib.resources Traversable)
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir():
                if entry.name != "__pycache__":
                    walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith(".tmpl"):
                out.append((prefix + entry.name[: -len(".tmpl")], entry.read_text()))

    walk(root, "")
    return out


def _method_keys() -> set[str]:
    """Every built-in method's own parameters (a preset for another method leaves them out)."""
    from .cl.methods import REGISTRY

    return {f.name for entry in REGISTRY.values() for f in dataclasses.fields(entry.params)}


def digits_preset(name: str, kind: str, description: str, extra: str = "") -> str:
    """The embedded default preset rewritten for the plug-in: its common keys (none of a built-in
    method's own parameters), the plug-in named where it plugs in, its own description."""
    own = _method_keys()
    lines = [f'description = "{description}"']
    for line in (preset_dir() / f"{DEFAULT_PRESET}.toml").read_text().splitlines():
        key = line.partition("=")[0].strip()
        if not key or key == "description" or key in own:
            continue
        if key == kind:
            line = f'{kind} = "{name}"'
        lines.append(line)
    return "\n".join(lines) + "\n" + extra


def render(text: str, name: str) -> str:
    return text.replace("{{name}}", name).replace("{{Name}}", class_name(name))


def new_package(kind: str, name: str, where: Path) -> Path:
    """Write plug-in package `name` of `kind` into folder where/NAME; returns that folder."""
    if kind not in KINDS:
        raise ConfigError(f"new {shorten(kind)!r}: allowed: {', '.join(KINDS)}")
    if not where.is_dir():
        raise ConfigError(f"new {kind} {shorten(name)!r}: --dir {shorten(str(where))!r} is not a folder")
    from .outputs import check_folder

    check_folder(where, "--dir")  # never into rmconsole's home: its folders are rmconsole's to name
    folder = where / name
    if NAME.match(name) and (folder.exists() or folder.is_symlink()):
        raise ConfigError(f"new {kind} {name!r}: {folder} exists; nothing was written (choose another name or --dir)")
    check_name(kind, name)
    files = {}
    for rel, text in templates(kind):
        parts = [name if p == "pkg" else p for p in rel.split("/")]
        parts[-1] = parts[-1].replace("test_pkg.py", f"test_{name}.py")
        files["/".join(parts)] = render(text, name)
    if kind in PRESETS:
        stem, preset = PRESETS[kind]
        files[f"{name}/presets/{stem.format(name=name)}.toml"] = preset(name)
    # written whole into a hidden folder beside it, then renamed into place: a full disk or any
    # failure half-way leaves nothing (a half-written package would refuse the retry: "exists")
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.new-", dir=where))
    try:
        for rel, text in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        if folder.exists() or folder.is_symlink():  # (made meanwhile: never replaced)
            raise ConfigError(
                f"new {kind} {name!r}: {folder} exists; nothing was written (choose another name or --dir)"
            )
        staging.rename(folder)
    except OSError as err:
        raise ConfigError(
            f"new {kind} {name!r}: could not write {folder} ({err.strerror or type(err).__name__}); nothing was written"
        ) from None
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return folder


# kind -> (the preset's file name, its text): each package runs as written on the embedded default
PRESETS: dict[str, tuple[str, Callable[[str], str]]] = {
    "method": (
        "{name}-digits",
        lambda name: digits_preset(
            name,
            "method",
            f"{name} on scikit-learn's 8x8 digits, Blurry10-Online, K=200 (the embedded default)",
            f"# {name}'s own parameter (rmconsole config-keys lists it; --set {name}_replay_share=0.25 changes it)\n"
            f"{name}_replay_share = 0.5\n",
        ),
    ),
    "dataset": (
        "{name}-rm",
        lambda name: digits_preset(
            name, "dataset", f"RM on {name}, Blurry10-Online, K=200 (the embedded default's setting otherwise)"
        ),
    ),
}


__all__ = ["KINDS", "builtin_names", "check_name", "new_package", "templates"]
