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

A package may also ship presets: an entry of the group `rmconsole.presets` names a package folder
of TOML files (one preset per file, named by its stem), found without importing anything:

    [project.entry-points."rmconsole.presets"]
    mymethod = "mymethod.presets"
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from .cl import targets

GROUPS = {
    "method": "rmconsole.methods",
    "dataset": "rmconsole.datasets",
    "metric": "rmconsole.metrics",
    "model": "rmconsole.models",
    "preset": "rmconsole.presets",  # a package folder of TOML presets (preset_files)
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


def _normalised(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503: case and runs of -_. do not matter)."""
    return re.sub(r"[-_.]+", "-", name).lower()


_unreadable: dict[str, str] = {}  # package -> why its entry points could not be read


def _read_text(dist: metadata.Distribution, name: str) -> str:
    try:
        return dist.read_text(name) or ""
    except Exception:  # noqa: BLE001 - unreadable is empty here
        return ""


IGNORE_VARIABLE = "RMCONSOLE_PLUGIN_IGNORE"


def _real(folder: str) -> str:
    return os.path.normcase(os.path.realpath(folder or "."))


def _searched_folders() -> list[str]:
    """The sys.path folders whose distributions are read: all of them, less those listed in
    RMCONSOLE_PLUGIN_IGNORE (os.pathsep-separated). The test suite lists its interpreter's
    site-packages there, so a plug-in the user installed never changes what a test sees (the
    suite's own fakes live in other folders)."""
    ignored = {_real(f) for f in os.environ.get(IGNORE_VARIABLE, "").split(os.pathsep) if f}
    return [f for f in sys.path if _real(f) not in ignored] if ignored else list(sys.path)


def _scan() -> tuple[dict[str, dict[str, Plugin]], dict[tuple[str, str], list[str]]]:
    """(kind -> name -> Plugin, (kind, name) -> the packages when two or more declare one name),
    from every installed distribution's entry points: metadata only, nothing imported."""
    found: dict[str, dict[str, Plugin]] = {kind: {} for kind in GROUPS}
    clashes: dict[tuple[str, str], list[str]] = {}
    if os.environ.get("RMCONSOLE_NO_PLUGINS", "") not in ("", "0"):  # a broken environment's escape hatch
        return found, clashes
    group_kind = {group: kind for kind, group in GROUPS.items()}
    seen: set[str] = set()
    for dist in metadata.distributions(path=_searched_folders()):
        # the name from the metadata folder's own name where it has one: parsing every package's
        # METADATA (email headers) cost each command 0.1 s of its start with 145 packages installed
        key = _normalised(getattr(dist, "_normalized_name", None) or dist.metadata["Name"] or "?")
        if key in seen:  # the same distribution on two sys.path entries: the first wins, as import does
            continue
        seen.add(key)
        declared = _read_text(dist, "entry_points.txt")
        if not any(group in declared for group in GROUPS.values()):  # no plug-in of ours
            continue
        name = dist.metadata["Name"] or "?"
        try:
            entry_points = list(dist.entry_points)
        except Exception as err:  # noqa: BLE001 - one package's malformed metadata must not stop every command
            text = _read_text(dist, "entry_points.txt")
            if "rmconsole." in text:
                detail = " ".join(str(err).split())[:200]
                _unreadable[name] = (
                    f"package {name} {dist.version or '?'}: its entry_points.txt cannot be read "
                    f"({type(err).__name__}: {detail}); its plug-ins are left out"
                )
            continue
        for ep in entry_points:
            kind = group_kind.get(ep.group)
            if kind is None:
                continue
            first = found[kind].setdefault(ep.name, Plugin(kind, ep.name, ep.value, name, dist.version or "?"))
            if first.package != name:  # two packages, one name: neither is taken for the other (load refuses)
                clashes.setdefault((kind, ep.name), [first.package]).append(name)
    return found, clashes


def problems() -> list[str]:
    """One line per installed package whose rmconsole entry points cannot be read at all (its
    plug-ins are left out of every listing; a listing may say so)."""
    _all()
    return list(_unreadable.values())


@functools.cache
def _all() -> tuple[dict[str, dict[str, Plugin]], dict[tuple[str, str], list[str]]]:
    """What _scan found, read once per process (forget() reads again)."""
    _unreadable.clear()
    return _scan()


def available(kind: str) -> dict[str, Plugin]:
    """The installed plug-ins of one kind (method, dataset, metric, model, preset), by name, none imported."""
    if kind not in GROUPS:
        raise ValueError(f"unknown plug-in kind {kind!r}; kinds: {', '.join(GROUPS)}")
    return dict(_all()[0][kind])


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
    clash = _all()[1].get(key)
    if clash:
        raise PluginError(
            f"{kind} plug-in {name!r} is declared by {len(clash)} packages ({', '.join(clash)}); "
            f"uninstall all but one, or rename it in one package's entry points"
        )
    value = import_target(plugin.target, plugin.describe())
    _loaded[key] = value
    return value


def names_with(kind: str, builtins: Iterable[str]) -> list[str]:
    """What a registry lists: its built-ins in their order, then the installed plug-ins of `kind`
    by name (none imported; one that takes a built-in's name is left out, the built-in wins)."""
    builtin = list(builtins)
    return [*builtin, *sorted(n for n in available(kind) if n not in builtin)]


def declaration(kind: str, name: str, expected: type, dotted: str) -> Any:
    """Plug-in `name`'s declaration for a registry: imported now and checked to be an `expected`
    (`dotted` names that class in the message); ValueError, one line naming the plug-in, when it
    cannot be used. None when no installed plug-in of `kind` has that name."""
    plugin = available(kind).get(name)
    if plugin is None:
        return None
    try:
        value = load(kind, name)
    except PluginError as err:
        raise ValueError(str(err)) from None
    if not isinstance(value, expected):
        raise ValueError(f"{plugin.describe()}: {plugin.target!r} is a {type(value).__name__}, not a {dotted}")
    return value


def loaded(kind: str, name: str) -> bool:
    """Whether plug-in `name` of `kind` was loaded in this process (a registry loads a plug-in only
    when a run or a listing uses that name, and never for a built-in's name)."""
    return (kind, name) in _loaded


# The config keys that name a run's plug-ins (metrics are read-side: they never train a run)
RUN_KEYS = {"method": "method", "dataset": "dataset", "model": "model"}


def used_by(config: Any) -> list[dict[str, Any]]:
    """The provenance of each plug-in a run's config names and this process loaded (so a built-in
    of the same name, which a registry never loads from a plug-in, records nothing): what the
    worker stores with the run once its method, data and model are built."""
    out = []
    for kind, key in RUN_KEYS.items():
        name = config.get(key) if isinstance(config, dict) else getattr(config, key, None)
        if isinstance(name, str) and loaded(kind, name):
            found = provenance(kind, name)
            if found is not None:
                out.append(found)
    return out


IMPORT_LIMIT_ENV = "RMCONSOLE_PLUGIN_IMPORT_S"
IMPORT_LIMIT_S = 10.0  # the default: seconds a plug-in's import may take before it is skipped


def import_limit_s() -> float:
    """How long a plug-in's import may take (RMCONSOLE_PLUGIN_IMPORT_S, default 10 s; 0: no limit)."""
    text = os.environ.get(IMPORT_LIMIT_ENV, "").strip()
    if not text:
        return IMPORT_LIMIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (math.isfinite(value) and value >= 0):
        raise PluginError(f"{IMPORT_LIMIT_ENV}={text[:40]!r}: allowed: seconds >= 0 (0: no limit; default 10)")
    return value


def import_target(target: str, what: str) -> Any:
    """`module:attribute` (dots allowed after the colon) imported, any failure one line naming `what`.
    What the import prints goes to stderr (never into a command's --json or CSV on stdout), and an
    import that takes longer than `import_limit_s()` is given up on: PluginError, one line naming it
    (a hung import would otherwise hang `runs`; its thread is left behind, a daemon)."""
    limit = import_limit_s()
    found: dict[str, Any] = {}

    def work() -> None:
        try:
            found["value"] = targets.import_target(target)
        except BaseException as err:  # noqa: BLE001 - said in one line below
            found["error"] = err

    with contextlib.redirect_stdout(sys.stderr):
        if limit == 0:
            work()
        else:
            thread = threading.Thread(target=work, name=f"rmconsole import {target}", daemon=True)
            thread.start()
            thread.join(limit)
            if thread.is_alive():
                raise PluginError(
                    f"{what}: importing {target!r} took longer than {limit:g} s; skipped "
                    f"(raise the limit with {IMPORT_LIMIT_ENV}=SECONDS, 0 for none)"
                )
    err = found.get("error")
    if err is not None:
        if not isinstance(err, Exception):  # (KeyboardInterrupt, SystemExit: not a plug-in's failure to hide)
            raise err
        raise PluginError(f"{what} failed to load {target!r}: {targets.failure(err)}") from None
    return found["value"]


def provenance(kind: str, name: str) -> dict[str, Any] | None:
    """What produced a plug-in: its package and version; installed with `pip install -e` from a
    folder, that folder, its git commit and whether the checkout had uncommitted changes to
    tracked files (`dirty`: the commit alone would not name the code); installed from a git URL,
    the URL and the commit pip recorded. None for a built-in (no installed plug-in of that name)."""
    plugin = available(kind).get(name)
    if plugin is None:
        return None
    out: dict[str, Any] = {"kind": kind, "name": name, "package": plugin.package, "version": plugin.version}
    origin = _origin(plugin.package)
    if origin.get("editable") and origin.get("path"):
        folder = Path(origin["path"])
        out["path"] = str(folder)
        git = _git_dir(folder)
        commit = _git_commit(git) if git is not None else None
        if commit:
            out["commit"] = commit
            dirty = _git_dirty(folder)
            if dirty is not None:
                out["dirty"] = dirty
    elif origin.get("path"):  # `pip install FOLDER`: a copy, so the folder's commit now need not be the copy's
        out["installed_from"] = origin["path"]
    elif origin.get("url"):
        out["url"] = origin["url"]
        if origin.get("commit"):
            out["commit"] = origin["commit"]
    return out


def provenance_text(entry: dict[str, Any]) -> str:
    """One recorded provenance as `show` prints it: "method mymethod: package mymethod 0.1.0,
    /src/mymethod @ 1a2b3c4d5e6f (uncommitted changes)"."""
    text = (
        f"{entry.get('kind', '?')} {entry.get('name', '?')}: package {entry.get('package', '?')} "
        f"{entry.get('version', '?')}"
    )
    where = entry.get("path") or entry.get("url") or entry.get("installed_from")
    if where:
        text += f", {'installed from ' if 'installed_from' in entry else ''}{where}"
    if entry.get("commit"):
        text += f" @ {str(entry['commit'])[:12]}" + (" (uncommitted changes)" if entry.get("dirty") else "")
    return text


def _origin(package: str) -> dict[str, Any]:
    """Where a distribution was installed from (PEP 610 direct_url.json): {path, editable} for a local
    folder, {url, commit} for a VCS URL, {} for an index install or no record."""
    try:
        text = metadata.distribution(package).read_text("direct_url.json")
    except (metadata.PackageNotFoundError, OSError):
        return {}
    if not text:
        return {}
    try:
        record = json.loads(text)
        url = str(record.get("url", ""))
    except (ValueError, AttributeError):
        return {}
    if url.startswith("file:"):
        out: dict[str, Any] = {
            "path": unquote(urlparse(url).path),
            "editable": bool((record.get("dir_info") or {}).get("editable")),
        }
        return out
    vcs = record.get("vcs_info") or {}
    return {"url": url, "commit": vcs.get("commit_id")} if url else {}


def _local_folder(package: str) -> Path | None:
    """The folder an editable install (`pip install -e FOLDER`) runs its code from, else None."""
    origin = _origin(package)
    return Path(origin["path"]) if origin.get("editable") and origin.get("path") else None


def _git_dir(folder: Path) -> Path | None:
    """The git directory of the checkout holding `folder` (a worktree's `.git` file followed)."""
    for base in (folder, *folder.parents):
        git = base / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: PATH", PATH relative to the checkout
            try:
                text = git.read_text().strip()
            except OSError:
                return None
            if not text.startswith("gitdir:"):
                return None
            git = (base / text.split(":", 1)[1].strip()).resolve()
        if git.is_dir():
            return git
    return None


def _git_commit(git: Path) -> str | None:
    """HEAD's commit in git directory `git`, read from its files (no git process): loose ref,
    the common dir's ref of a worktree, or packed-refs; a detached HEAD is the commit itself."""
    try:
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref: "):
            return head or None
        ref = head[5:].strip()
        common = git / "commondir"
        roots = [git] + ([(git / common.read_text().strip()).resolve()] if common.exists() else [])
        for root in roots:
            ref_file = root / ref
            if ref_file.is_file():
                return ref_file.read_text().strip() or None
        for root in roots:
            packed = root / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if not line.startswith(("#", "^")) and line.endswith(" " + ref):
                        return line.split()[0]
        return None  # a branch with no commit yet
    except OSError:
        return None


def _git_dirty(folder: Path) -> bool | None:
    """Whether tracked files under `folder` differ from HEAD (None when git cannot say)."""
    try:
        out = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", "."],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return bool(out.stdout.strip()) if out.returncode == 0 else None


_SKIPPED_DIRS = {"__pycache__", "build", "dist", "node_modules", "site-packages"}


def _python_files(folder: Path) -> list[Path]:
    """The .py files of an editable checkout, not descending into hidden folders, build outputs
    or virtual environments (a checkout's own .venv would cost seconds and say nothing)."""
    found: list[Path] = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(
            d
            for d in dirs
            if not d.startswith(".")
            and d not in _SKIPPED_DIRS
            and not d.endswith(".egg-info")
            and not (Path(root, d) / "pyvenv.cfg").exists()
        )
        found.extend(Path(root, f) for f in sorted(files) if f.endswith(".py"))
    return found


def _import_roots(modules: set[str]) -> list[Path]:
    """Where the top-level `modules` are imported from (package folders, or a module's file),
    found without importing them: an editable checkout's code, not its data or outputs."""
    from importlib.util import find_spec

    roots: list[Path] = []
    for top in sorted(m for m in modules if m.isidentifier()):
        try:
            spec = find_spec(top)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            roots.extend(Path(location) for location in spec.submodule_search_locations)
        elif spec.origin and spec.has_location:
            roots.append(Path(spec.origin))
    return roots


def sources_digest() -> str:
    """A digest of every installed plug-in: its package, version, entry points and its files
    (path, size, mtime; an editable install's: the .py files of the top-level modules it
    declares and its entry points name, wherever they are imported from), read afresh (not from this process's cache), so a warm server started
    before a plug-in was installed, upgraded, declared a new entry or was edited (an editable
    install) is never reused."""
    h = hashlib.sha256()
    found, _ = _scan()
    plugins = sorted((p.package, p.kind, p.name, p.target) for kind in GROUPS for p in found[kind].values())
    h.update(repr(plugins).encode())
    for package in sorted({p[0] for p in plugins}):
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            continue
        h.update(f"{package}={dist.version};".encode())
        folder = _local_folder(package)
        if folder is not None and folder.is_dir():
            tops = {p[3].partition(":")[0].strip().partition(".")[0] for p in plugins if p[0] == package}
            tops |= set(_read_text(dist, "top_level.txt").split())
            roots = _import_roots(tops)
            files = (
                [f for root in roots for f in (_python_files(root) if root.is_dir() else [root])]
                if roots
                else _python_files(folder)
            )  # (modules not found on the path: the whole checkout)
        else:
            files = [Path(str(dist.locate_file(f))) for f in (dist.files or []) if str(f).endswith(".py")]
        for path in files:
            try:
                st = path.stat()
            except OSError:
                continue
            h.update(f"{path}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def preset_files() -> tuple[dict[str, tuple[Path, Plugin]], list[str]]:
    """The presets installed plug-in packages ship ({name: (TOML file, its entry)}) and one line
    for each that cannot be used (a folder not found, one name in two packages). Found from the
    packages' import paths without importing them; clashes with built-in presets are the caller's
    to refuse (config.py knows them)."""
    from importlib.util import find_spec

    found: dict[str, tuple[Path, Plugin]] = {}
    problems: list[str] = []
    clashing: set[str] = set()
    for entry in sorted(available("preset").values(), key=lambda p: (p.package, p.name)):
        dotted = entry.target.partition(":")[0].strip()
        top, _, rest = dotted.partition(".")
        try:
            spec = find_spec(top)  # a top-level name: found, not imported
        except (ImportError, ValueError):
            spec = None
        folders = (
            [Path(loc, *filter(None, rest.split("."))) for loc in (spec.submodule_search_locations or [])]
            if spec is not None
            else []
        )
        folder = next((f for f in folders if f.is_dir()), None)
        if folder is None:
            problems.append(f"{entry.describe()}: no package folder {dotted!r} to read presets from")
            continue
        for path in sorted(folder.glob("*.toml")):
            other = found.get(path.stem)
            if other is not None and other[1].package != entry.package:
                problems.append(
                    f"preset {path.stem!r} is shipped by two packages ({other[1].package}, "
                    f"{entry.package}): neither is used; rename one"
                )
                clashing.add(path.stem)
                continue
            found.setdefault(path.stem, (path, entry))
    for name in clashing:
        found.pop(name, None)
    return found, problems


def check_name(kind: str, name: str, builtins: Any) -> None:
    """A plug-in may not shadow a built-in of the same kind (its runs would be mistaken for ours)."""
    if name in builtins:
        raise PluginError(f"{kind} plug-in {name!r} has a built-in's name; rename it in its package's entry points")


__all__ = [
    "GROUPS",
    "Plugin",
    "PluginError",
    "available",
    "check_name",
    "forget",
    "import_target",
    "load",
    "loaded",
    "preset_files",
    "problems",
    "provenance",
    "provenance_text",
    "sources_digest",
    "used_by",
]
