"""rmconsole's own files are the user's alone: folders 0700, files 0600, whatever the umask.

The store holds every run's config, notes and results, the logs and checkpoints what the runs
computed, and RMCONSOLE_HOME may sit on a shared machine: under a default umask (022) they were
readable by every local user. Everything rmconsole creates under its home goes through here (and
the processes it starts for runs get `UMASK`), so a fresh home is 0700 and its files 0600. An
existing folder keeps the mode its owner gave it. Files the user names (`report --out`,
`export`) are the user's business: they keep the user's umask.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

UMASK = 0o077  # for the processes rmconsole starts for runs (supervisor, worker, queue runner, warm server)
FOLDER_MODE = 0o700
FILE_MODE = 0o600


def mkdir(path: Path | str) -> Path:
    """Create `path` and each missing folder above it with mode 0700 (pathlib's parents=True
    would create the parents with the umask's mode); an existing folder is left as it is."""
    path = Path(path)
    missing = []
    current = path
    while not current.exists() and current != current.parent:
        missing.append(current)
        current = current.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, FOLDER_MODE)
        except FileExistsError:
            pass
    if not path.is_dir():
        raise NotADirectoryError(20, os.strerror(20), str(path))
    return path


def open_append(path: Path | str) -> BinaryIO:
    """A log opened for appending, created 0600."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE), "ab")


def open_new(path: Path | str) -> BinaryIO:
    """A file opened for writing from the start (a checkpoint's temporary file), created 0600."""
    return os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE), "wb")


def create_empty(path: Path | str) -> None:
    """An empty file created 0600 (the SQLite store before SQLite opens it: its -wal and -shm
    files take the store file's mode)."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        pass
