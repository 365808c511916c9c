"""Task checkpoints: what `rmconsole resume` continues from.

The loop hands the worker a checkpoint as each task ends (method state: model, optimiser,
memory, seen classes and generator; the augmenter's generators; the torch RNG). The worker
adds what ties it to its run (run id, config, thread count) and writes it in two steps: the
bytes go to a temporary file (fsync), the task's result is committed to the store together
with the bytes' sha256, then the file is renamed into place. A kill at any instant leaves
either the previous checkpoint or the new one, never half of one, and whichever it is, its
checksum is in the store. Loading first checks the file's sha256 against the checksums the run
recorded (a flipped byte, a file from another store or another run is refused with one line),
then uses `weights_only=True` (tensors and plain containers only, no code).
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from .. import private, store

FORMAT = 1


def _torch() -> ModuleType:
    """torch, imported when a checkpoint is written or read (a resume or a delete that only
    checks paths does not pay for it)."""
    import torch

    return torch


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: the message is one line that says what to do."""


def checkpoint_path(run_id: int) -> Path:
    return store.home() / "checkpoints" / f"run-{run_id}.pt"


def sha256_of(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class PendingCheckpoint:
    """A checkpoint written to its temporary file (durably), not yet in place: `commit` renames
    it into place (after its checksum is in the store), `discard` removes it."""

    path: Path
    tmp: Path
    sha256: str

    def commit(self) -> Path:
        os.replace(self.tmp, self.path)
        _fsync_dir(self.path.parent)
        return self.path

    def discard(self) -> None:
        self.tmp.unlink(missing_ok=True)


def _fsync_dir(folder: Path) -> None:
    try:  # make the rename itself durable
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def write_checkpoint(run_id: int, state: dict[str, Any], config: dict[str, Any]) -> PendingCheckpoint:
    """Serialise the checkpoint of `run_id` to a temporary file beside its place, durably, and
    return it with its sha256 (OSError, e.g. ENOSPC, with the file named, and nothing left behind)."""
    path = checkpoint_path(run_id)
    private.mkdir(path.parent)
    payload = {**state, "format": FORMAT, "run_id": run_id, "config": config, "threads": _torch().get_num_threads()}
    buffer = io.BytesIO()
    _torch().save(payload, buffer)
    data = buffer.getbuffer()
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with private.open_new(
            tmp
        ) as f:  # our own writes (0600), so a full disk is an OSError with its errno, not torch's
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename is None:
            err.filename = str(tmp)
        raise
    return PendingCheckpoint(path, tmp, sha256_of(data))


def save_checkpoint(run_id: int, state: dict[str, Any], config: dict[str, Any]) -> Path:
    """Write and put in place at once (no checksum recorded: for tools and tests)."""
    return write_checkpoint(run_id, state, config).commit()


def set_aside(run_id: int) -> Path | None:
    """Move a checkpoint that cannot be this run's (the run never started, so it never wrote one:
    it is a leftover of a deleted store's run with this id) to checkpoints/orphaned/, keeping it."""
    path = checkpoint_path(run_id)
    if not path.exists():
        return None
    aside = path.parent / "orphaned" / f"run-{run_id}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.pt"
    private.mkdir(aside.parent)
    os.replace(path, aside)
    return aside


def verified_bytes(run_id: int, path: Path | None = None) -> tuple[bytes, int | None] | None:
    """The checkpoint's bytes and the task whose result recorded its checksum (None when the run
    recorded no checksums: a run of an older rmconsole), or None when there is no checkpoint.
    A file whose sha256 the run never recorded is refused (CheckpointError, one line)."""
    path = path or checkpoint_path(run_id)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise CheckpointError(
            f"checkpoint {path} is a directory; move it away to restart run {run_id} from its first task"
        ) from None
    except OSError as err:
        raise CheckpointError(
            f"checkpoint {path} cannot be read ({err.strerror}); restore it, or delete it to "
            f"restart run {run_id} from its first task"
        ) from None
    recorded = store.checkpoint_checksums(run_id)
    if not recorded:
        return data, None
    digest = sha256_of(data)
    if digest not in recorded:
        raise CheckpointError(
            f"checkpoint {path} does not match the checksum recorded in the store (sha256 "
            f"{digest[:12]}…, recorded for task {max(recorded.values()) + 1}: "
            f"{max(recorded, key=lambda d: recorded[d])[:12]}…): it was changed or damaged after it was "
            f"written; restore it from a backup, or delete it to restart run {run_id} from its "
            f"first task"
        )
    return data, recorded[digest]


def adopt_checkpoint(run_id: int) -> Path | None:
    """A run that trained in another home (two RMCONSOLE_HOMEs sharing one RMCONSOLE_DB: its log
    is there) and has no checkpoint here although the store records one (a task finished with its
    checksum): its checkpoint is looked for beside that log, in the home it ran in, and a copy the
    store's checksums vouch for is copied into this home (atomically) before the resume reads it;
    returns where it was found. Nowhere to be found: CheckpointError naming the paths it expected,
    so a finished task is never trained again in silence. None when nothing is missing (a run of
    this home keeps its rule: no checkpoint here, no task to continue after)."""
    path = checkpoint_path(run_id)
    if path.exists() or path.is_symlink():
        return None
    run = store.get_run(run_id)
    if not run.log_path:
        return None
    other_home = Path(run.log_path).parent.parent
    try:
        same = other_home.resolve() == store.home().resolve()
    except OSError:
        same = False
    if same:
        return None
    recorded = store.checkpoint_checksums(run_id)
    if not recorded:
        return None
    other = other_home / "checkpoints" / path.name
    try:
        data = other.read_bytes()
    except OSError:
        data = None
    if data is not None and sha256_of(data) in recorded:
        private.mkdir(path.parent)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            with private.open_new(tmp) as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            raise CheckpointError(
                f"run {run_id}'s checkpoint {other} could not be copied to {path} ({err.strerror}); "
                f"copy it there and resume again"
            ) from None
        return other
    last = max(recorded.values()) + 1
    found = "does not match the checksums the store recorded" if data is not None else "is not there either"
    raise CheckpointError(
        f"run {run_id} finished task {last} in another home (its log is {run.log_path}), but its "
        f"checkpoint is not at {path} and {other} {found}: copy the checkpoint to {path} and resume "
        f"again (a finished task is not trained again in silence)"
    )


def load_checkpoint(run_id: int) -> dict[str, Any] | None:
    """The last task checkpoint of a run, verified against the store, or None when it has none."""
    path = checkpoint_path(run_id)
    found = verified_bytes(run_id, path)
    if found is None:
        return None
    data, task = found
    try:
        state = _torch().load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same to the user
        raise CheckpointError(
            f"checkpoint {path} cannot be loaded: corrupt, or not a weights-only file "
            f"({_load_failure(err)}); delete it to restart run {run_id} from its "
            f"first task"
        ) from None
    if not isinstance(state, dict) or "task" not in state or "method" not in state:
        raise CheckpointError(
            f"checkpoint {path} is not an rmconsole task checkpoint; "
            f"delete it to restart run {run_id} from its first task"
        )
    if task is not None and state.get("task") != task:
        raise CheckpointError(
            f"checkpoint {path} says task {state.get('task')!r} but its checksum was recorded "
            f"after task {task + 1}; delete it to restart run {run_id} from its first task"
        )
    return state


def _clip(text: str, limit: int = 160) -> str:
    """`text` cut to whole sentences (or words, with …) within `limit` characters."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    end = cut.rfind(". ")
    if end > limit // 3:
        return cut[: end + 1]
    return cut[: cut.rfind(" ")].rstrip(" ,;:(") + " …" if " " in cut else cut + "…"


def _load_failure(err: Exception) -> str:
    """The useful part of torch.load's long error messages, in whole sentences: never torch's
    advice to load with weights_only=False (that would run the file's code), never its ANSI styling."""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", " ".join(str(err).split()))
    found = re.search(r"GLOBAL ([\w.]+)", text)
    if found:
        return f"it holds a pickled object that would run code: {found.group(1)}"
    if "WeightsUnpickler error:" in text:
        detail = text.split("WeightsUnpickler error:", 1)[1].split(" Check the documentation")[0].strip()
        return _clip(detail.split(". Please use")[0])
    if "zip archive" in text:
        return "not a complete checkpoint archive (truncated or overwritten)"
    if isinstance(err, EOFError):
        return "the file is empty or cut short"
    if text.startswith("Weights only load failed"):
        return "it holds something a weights-only load refuses"
    return f"{type(err).__name__}: {_clip(text)}"


def check_checkpoint(state: dict[str, Any], run_id: int, config: dict[str, Any]) -> None:
    """Refuse a checkpoint written for another run, another config or another method."""
    path = checkpoint_path(run_id)
    fix = f"delete it to restart run {run_id} from its first task"
    if state.get("format") != FORMAT:
        raise CheckpointError(
            f"checkpoint {path} has format {state.get('format')!r}, this rmconsole reads format {FORMAT}; {fix}"
        )
    if state.get("run_id") != run_id:
        raise CheckpointError(f"checkpoint {path} was written by run {state.get('run_id')}, not run {run_id}; {fix}")
    saved = state.get("config") or {}
    if saved.get("method") != config.get("method"):
        raise CheckpointError(
            f"checkpoint {path} holds method {saved.get('method')!r} but run {run_id} is "
            f"method {config.get('method')!r}; {fix}"
        )
    differs = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
    if differs:
        key = differs[0]
        raise CheckpointError(
            f"checkpoint {path} was written for another config ({key}={saved.get(key)!r}, "
            f"run {run_id} has {key}={config.get(key)!r}); {fix}"
        )
    task = state.get("task")
    if not isinstance(task, int) or task < 0:
        raise CheckpointError(f"checkpoint {path} names no finished task; {fix}")


def remove_checkpoint(run_id: int) -> None:
    checkpoint_path(run_id).unlink(missing_ok=True)
