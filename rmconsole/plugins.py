"""Plug-ins: methods, datasets, metrics and models from other installed packages.

A package registers what it adds under one of four entry-point groups, each entry naming a
*declaration* (a torch-free object: a method's spec with its params class, a dataset's spec, a
metric's catalogue row, a model's spec), never the heavy implementation, which the declaration
names as "module:attribute" and rmconsole imports on first use:

    [project.entry-points."rmconsole.methods"]
    mymethod = "mymethod.declare:METHOD"

Names are listed from the installed packages' metadata without importing anything, so
`rmconsole presets`, `config-keys` or a filter never pay for a plug-in they do not use; a
plug-in that fails to import is one line naming it (`PluginError`), and every command that does
not need it keeps working. Built-ins are declared with the same objects, in rmconsole's own
registries; a plug-in may not take a built-in's name.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

GROUPS = {
    "method": "rmconsole.methods",
    "dataset": "rmconsole.datasets",
    "metric": "rmconsole.metrics",
    "model": "rmconsole.models",
}


class PluginError(Exception):
    """A plug-in that cannot be used: one line naming it, its package and what went wrong."""


@dataclass(frozen=True)
class Plugin:
    """One entry point of an installed package, not yet imported."""

    kind: str  # method, dataset, metric, model
    name: str  # what a config or filter calls it
    target: str  # "module:attribute" of its declaration
    package: str  # the distribution that provides it
    version: str

    def describe(self) -> str:
        return f"{self.kind} plug-in {self.name!r} (package {self.package} {self.version})"


@functools.cache
def _all() -> dict[str, dict[str, Plugin]]:
    """kind -> name -> Plugin, from every installed distribution's entry points (metadata only).

    Two packages declaring the same name: the first one found is kept (as importlib does)."""
    found: dict[str, dict[str, Plugin]] = {kind: {} for kind in GROUPS}
    if os.environ.get("RMCONSOLE_NO_PLUGINS", "") not in ("", "0"):  # a broken environment's escape hatch
        return found
    group_kind = {group: kind for kind, group in GROUPS.items()}
    seen: set[str] = set()
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or "?"
        if name.lower() in seen:  # the same distribution on two sys.path entries: the first wins
            continue
        seen.add(name.lower())
        for ep in dist.entry_points:
            kind = group_kind.get(ep.group)
            if kind is not None:
                found[kind].setdefault(ep.name, Plugin(kind, ep.name, ep.value, name, dist.version or "?"))
    return found


def available(kind: str) -> dict[str, Plugin]:
    """The installed plug-ins of one kind (method, dataset, metric, model), by name, none imported."""
    return dict(_all()[kind])


def forget() -> None:
    """Drop what was read of the installed packages (a test that installs one, a long-lived server)."""
    _all.cache_clear()
    _loaded.clear()


_loaded: dict[tuple[str, str], Any] = {}


def load(kind: str, name: str) -> Any:
    """The declaration of plug-in `name` of `kind`, imported on first use (PluginError if it cannot be)."""
    key = (kind, name)
    if key in _loaded:
        return _loaded[key]
    plugin = available(kind).get(name)
    if plugin is None:
        raise PluginError(f"no {kind} plug-in named {name!r} is installed")
    value = import_target(plugin.target, plugin.describe())
    _loaded[key] = value
    return value


def import_target(target: str, what: str) -> Any:
    """`module:attribute` (dots allowed after the colon) imported, any failure one line naming `what`."""
    from importlib import import_module

    module_name, _, attribute = target.partition(":")
    try:
        value: Any = import_module(module_name.strip())
        for part in filter(None, attribute.strip().split(".")):
            value = getattr(value, part)
    except Exception as err:  # noqa: BLE001 - whatever a plug-in raises on import is its error, said in one line
        detail = " ".join(str(err).split())[:200]
        raise PluginError(f"{what} failed to load {target!r}: {type(err).__name__}: {detail}") from None
    return value


def provenance(kind: str, name: str) -> dict[str, Any] | None:
    """What produced a plug-in: its package, version and, for a checkout installed with
    `pip install -e` (or from a local folder), the folder and its git commit. None for a built-in."""
    plugin = available(kind).get(name)
    if plugin is None:
        return None
    out: dict[str, Any] = {"kind": kind, "name": name, "package": plugin.package, "version": plugin.version}
    folder = _local_folder(plugin.package)
    if folder is not None:
        out["path"] = str(folder)
        commit = _git_commit(folder)
        if commit:
            out["commit"] = commit
    return out


def _local_folder(package: str) -> Path | None:
    """The folder a distribution was installed from (PEP 610 direct_url.json), if it was a local one."""
    try:
        text = metadata.distribution(package).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    if not text:
        return None
    try:
        url = str(json.loads(text).get("url", ""))
    except ValueError:
        return None
    return Path(url.removeprefix("file://")) if url.startswith("file://") else None


def _git_commit(folder: Path) -> str | None:
    """HEAD's commit of the git checkout holding `folder` (read from .git, no git process), with
    `+dirty` left to the caller: this names the code a run came from as far as git knows it."""
    for base in (folder, *folder.parents):
        git = base / ".git"
        if git.is_file():  # a worktree: "gitdir: PATH"
            try:
                git = Path(git.read_text().split(":", 1)[1].strip())
            except (OSError, IndexError):
                return None
        if not git.is_dir():
            continue
        try:
            head = (git / "HEAD").read_text().strip()
            if head.startswith("ref: "):
                ref = head[5:]
                ref_file = git / ref
                if not ref_file.exists():  # worktrees keep refs in the common dir
                    common = git / "commondir"
                    root = (git / common.read_text().strip()).resolve() if common.exists() else git
                    ref_file = root / ref
                    if not ref_file.exists():
                        packed = root / "packed-refs"
                        for line in packed.read_text().splitlines() if packed.exists() else []:
                            if line.endswith(" " + ref):
                                return line.split()[0]
                        return None
                return ref_file.read_text().strip()
            return head
        except OSError:
            return None
    return None


def sources_digest() -> str:
    """A digest of every installed plug-in's files (path, size, mtime), so a warm server started
    before a plug-in was installed, upgraded or edited (an editable install) is never reused."""
    h = hashlib.sha256()
    packages = sorted({p.package for kind in GROUPS for p in available(kind).values()})
    for package in packages:
        h.update(package.encode())
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            continue
        h.update((dist.version or "").encode())
        folder = _local_folder(package)
        files = sorted(folder.rglob("*.py")) if folder is not None and folder.is_dir() else [
            Path(str(dist.locate_file(f))) for f in (dist.files or []) if str(f).endswith(".py")]
        for path in files:
            try:
                st = path.stat()
            except OSError:
                continue
            h.update(f"{path}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def check_name(kind: str, name: str, builtins: Any) -> None:
    """A plug-in may not shadow a built-in of the same kind (its runs would be mistaken for ours)."""
    if name in builtins:
        raise PluginError(f"{kind} plug-in {name!r} has a built-in's name; rename it in its package's entry points")


__all__ = ["GROUPS", "Plugin", "PluginError", "available", "check_name", "forget", "import_target", "load",
           "provenance", "sources_digest"]

