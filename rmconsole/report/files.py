"""Report files: refused before any work when they cannot be written, then written atomically
(or in place for a device such as /dev/stdout), never onto rmconsole's own files."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from .. import outputs
from .tables import ReportError


class OutputError(ReportError):
    """A report file that cannot be written where asked: one line, and nothing left behind."""


def _special(path: Path) -> bool:
    """A device, FIFO or socket (e.g. /dev/stdout): written in place, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def _shown(path: Path) -> str:
    text = str(path)
    return text if len(text) <= 120 else f"{text[:59]}…{text[-59:]}"


def _os_reason(err: OSError) -> str:
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return "no space left on device"
    return err.strerror or type(err).__name__


def check_output(path: Path, option: str) -> None:
    """Refuse, before any work, a report path that cannot be written: a folder, a path under a
    file, a read-only or unwritable place, a name too long (OutputError, one line); rmconsole's own
    files, link loops, links to missing folders, block devices (outputs.check_file)."""
    path = Path(path)
    outputs.check_file(path, option)
    try:
        if _special(path):
            return
        target = Path(os.path.realpath(path))  # a symlink is written through, to its target
        if target.is_dir():
            raise OutputError(
                f"{option} {_shown(path)}: is a directory; give a file name (e.g. {_shown(path / 'report')}"
                f"{path.suffix or '.md'})"
            )
        folder = target.parent
        while not folder.exists():
            folder = folder.parent
        if not folder.is_dir():
            raise OutputError(f"{option} {_shown(path)}: {_shown(folder)} is a file, not a folder")
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            raise OutputError(f"{option} {_shown(path)}: {_shown(folder)} is on a read-only file system")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise OutputError(f"{option} {_shown(path)}: {_shown(folder)} is not writable")
        if target.exists() and not os.access(target, os.W_OK):
            raise OutputError(f"{option} {_shown(path)}: the file is not writable")
        if len(target.name.encode()) > os.pathconf(folder, "PC_NAME_MAX"):
            raise OutputError(f"{option} {_shown(path)}: the file name is too long")
    except OSError as err:
        raise OutputError(f"cannot write {option} {_shown(path)}: {_os_reason(err)}") from None


def write_output(path: Path | str, data: bytes | Callable[[IO[bytes]], None], option: str = "--out") -> Path:
    """Write a report file. A regular file is replaced atomically (a temporary file beside it,
    fsync, rename; the temporary file removed on any failure); a symlink is written through to
    its target (the link stays a link); a device or FIFO such as /dev/stdout is written in place.
    Any failure is OutputError, one line."""
    path = Path(path)
    write = (lambda f: f.write(data)) if isinstance(data, (bytes, bytearray)) else data
    outputs.check_file(path, option)  # never the store, a checkpoint, a log: whatever the link says
    try:
        if _special(path):
            with open(path, "wb") as f:
                write(f)
            return path
        check_output(path, option)
        target = Path(os.path.realpath(path))
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = (os.stat(target).st_mode & 0o7777) if target.exists() else 0o666 & ~_umask()
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name[:100]}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise OutputError(f"cannot write {option} {_shown(path)}: {_os_reason(err)}") from None
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
