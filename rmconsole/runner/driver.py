"""Who drives a sweep's queue: the driver lock file RMCONSOLE_HOME/sweeps/ID.lock (the queue
runner, or a `rmconsole run` driving it, holds an exclusive flock on it with its pid inside).
A leaf beside `processes`, so the launcher can ask without importing the queue."""

from __future__ import annotations

import fcntl
from pathlib import Path

from .. import store


def lock_path(sweep_id: str) -> Path:
    return store.home() / "sweeps" / f"{sweep_id}.lock"


def driver_pid(sweep_id: str) -> int | None:
    """The pid of the live process driving this sweep, or None when nobody drives it."""
    path = lock_path(sweep_id)
    if not path.exists():
        return None
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            text = handle.read().strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(handle, fcntl.LOCK_UN)
    return None
