"""Where a command may write a file the user named: never onto rmconsole's own files.

`report --out/--plot/--memory-plot/--plot-epochs`, `export` and `new --dir` write where the user
says. A typo or a symlink must not turn that into data loss: the store (and its -wal/-shm/-journal
files), a checkpoint, a log or the warm server's files are never written, whatever name or
link leads there. Nor is anything else in RMCONSOLE_HOME, or the home folder itself: it is
rmconsole's own folder (the store, logs/, checkpoints/, warm/, secrets/, sweeps/, jobs/,
cache/, and whatever a later version keeps there), so a file or folder written into it could
collide with one rmconsole writes now or later (an MLflow store exported into the home would
also take logs/ and checkpoints/ for experiments). One rule for every output, file or folder. A path is compared with them twice: by its resolved name, and by its file
identity (st_dev, st_ino), which also catches a hard link. A path through a link loop, through
a link to a missing folder (which writing would create), a block device or a socket is refused
too. Each refusal is `OutputRefused`: one line saying what the path is and what to do.

Pure file-system checks; the store's whereabouts come from the environment (RMCONSOLE_HOME,
RMCONSOLE_DB), read through store.db without opening the store.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

STORE_SUFFIXES = ("", "-wal", "-shm", "-journal")  # SQLite's file and its companions
PROTECTED_FOLDERS = ("checkpoints", "logs", "warm")  # under RMCONSOLE_HOME: rmconsole's own files


class OutputRefused(ValueError):
    """A user-named output path that would overwrite rmconsole's own files, or that cannot be a file."""


def _shown(path: Path | str) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:59]}…{text[-59:]}"


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _store_files() -> Iterator[Path]:
    """The SQLite store this environment names (RMCONSOLE_DB's file, or the home's), and the
    home's own store file even when RMCONSOLE_DB points elsewhere: each with its companions."""
    from .store import db

    bases = [(db.home() / "rmconsole.db").resolve()]
    try:
        path = db.database_path()
    except Exception:  # noqa: BLE001 - an unusable RMCONSOLE_DB is refused where the store is opened
        path = None
    if path is not None:
        bases.append(path)
    for base in dict.fromkeys(bases):
        for suffix in STORE_SUFFIXES:
            yield base.with_name(base.name + suffix)


def _protected_folders() -> list[Path]:
    from .store import db

    return [(db.home() / name).resolve() for name in PROTECTED_FOLDERS]


def _home() -> Path:
    from .store import db

    return db.home().resolve()


def _loop(path: Path, option: str) -> OutputRefused:
    return OutputRefused(f"{option} {_shown(path)}: a symbolic link loop; give a path that leads to a file")


def _resolved(path: Path, option: str) -> Path:
    """The path with every link followed; a link loop anywhere on it, or a link to a missing
    folder, is refused."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _loop(path, option) from None
        if err.errno == errno.ENOENT:
            _missing_link(path, option)
    return Path(os.path.realpath(path))


def _missing_link(path: Path, option: str) -> None:
    """Refuse a path that passes through a link whose target is missing: writing would create a
    folder where the link points. (A dangling link to a file in an existing folder is written
    through, as any link.)"""
    parts = Path(os.path.abspath(path)).parts
    for i in range(2, len(parts) + 1):
        prefix = Path(*parts[:i])
        if not os.path.islink(prefix):
            continue
        try:
            os.stat(prefix)
            continue
        except FileNotFoundError:
            pass
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise _loop(path, option) from None
            continue
        if i == len(parts) and os.path.isdir(os.path.dirname(os.path.realpath(prefix))):
            return
        raise OutputRefused(
            f"{option} {_shown(path)}: {_shown(prefix)} is a link to {_shown(os.readlink(prefix))}, "
            f"which does not exist; create it first, or give another path"
        )


def _refuse_own(path: Path, resolved: Path, option: str) -> None:
    ident = _identity(resolved)
    for store_file in _store_files():
        if resolved == store_file or (ident is not None and ident == _identity(store_file)):
            raise OutputRefused(
                f"{option} {_shown(path)}: that is rmconsole's store ({_shown(store_file)}); "
                f"writing there would destroy every run: give another file name"
            )
    home = _home()
    linked = None  # a hard link: one of ours under another name?
    if ident is not None and stat.S_ISREG((st := os.stat(resolved)).st_mode) and st.st_nlink > 1:
        linked = next(
            (
                Path(root) / name
                for root, _, names in os.walk(home)
                for name in names
                if _identity(Path(root) / name) == ident
            ),
            None,
        )
    chain = [resolved, *resolved.parents]
    for folder in [*_protected_folders(), home]:  # the named folders first: their message is the more precise
        what = (
            f"rmconsole's {folder.name} folder ({_shown(folder)})"
            if folder != home
            else f"rmconsole's home folder (RMCONSOLE_HOME={_shown(folder)})"
        )
        if linked is not None and (folder == home or folder in linked.parents):
            raise OutputRefused(
                f"{option} {_shown(path)}: that is inside {what}, under another name "
                f"(a hard link), which only rmconsole writes: give a path elsewhere"
            )
        folder_id = _identity(folder)
        hit = next((p for p in chain if p == folder or (folder_id is not None and _identity(p) == folder_id)), None)
        if hit is not None:
            where = "" if hit == resolved else "inside "
            whose = "which only rmconsole writes" if folder != home else "which holds the store, logs and checkpoints"
            raise OutputRefused(f"{option} {_shown(path)}: that is {where}{what}, {whose}: give a path elsewhere")


def check_file(path: Path | str, option: str = "--out") -> Path:
    """Refuse (OutputRefused) a file path that is, or leads to, rmconsole's own files, a link loop,
    a link to a missing folder, a block device or a socket. Returns the path every link resolves
    to (a character device or FIFO, e.g. /dev/stdout, is allowed: it is written in place)."""
    path = Path(path)
    resolved = _resolved(path, option)
    try:
        mode = os.stat(resolved).st_mode
    except OSError:
        mode = None
    if mode is not None and (stat.S_ISBLK(mode) or stat.S_ISSOCK(mode)):
        kind = "a block device" if stat.S_ISBLK(mode) else "a socket"
        raise OutputRefused(f"{option} {_shown(path)}: is {kind}, not a file: give a file name")
    if mode is not None and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        return resolved
    _refuse_own(path, resolved, option)
    return resolved


def check_folder(path: Path | str, option: str) -> Path:
    """Refuse a folder an export would write into when it is a file, a loop, a link to a missing
    folder, or rmconsole's own (its home's checkpoints, logs, warm folders; the store's file)."""
    path = Path(path).expanduser()
    resolved = _resolved(path, option)
    if resolved.exists() and not resolved.is_dir():
        raise OutputRefused(
            f"{option} {_shown(path)}: is a file, not a folder: give a folder (it is created when missing)"
        )
    _refuse_own(path, resolved, option)
    for parent in resolved.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputRefused(f"{option} {_shown(path)}: {_shown(parent)} is a file, not a folder")
            break
    return resolved
