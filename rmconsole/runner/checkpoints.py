"""Task checkpoints: what `rmconsole resume` continues from.

The loop hands the worker a checkpoint as each task ends (method state: model, optimiser,
memory, seen classes and generator; the augmenter's generators; the torch RNG). The worker
adds what ties it to its run (run id, config, thread count) and writes it here atomically:
a temporary file, fsync, rename, so a kill at any instant leaves either the previous
checkpoint or the new one, never half of one. Loading uses `weights_only=True` (tensors and
plain containers only, no code), and a checkpoint that cannot be read or that belongs to
another run is refused with one line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .. import store

FORMAT = 1


def _torch():  # type: ignore[no-untyped-def]
    """torch, imported when a checkpoint is written or read (a resume or a delete that only
    checks paths does not pay for it)."""
    import torch

    return torch


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: the message is one line that says what to do."""


def checkpoint_path(run_id: int) -> Path:
    return store.home() / "checkpoints" / f"run-{run_id}.pt"


def save_checkpoint(run_id: int, state: dict[str, Any], config: dict[str, Any]) -> Path:
    """Write the checkpoint of `run_id` atomically (and durably) and return its path."""
    path = checkpoint_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {**state, "format": FORMAT, "run_id": run_id, "config": config,
               "threads": _torch().get_num_threads()}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            _torch().save(payload, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    try:  # make the rename itself durable
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass
    return path


def load_checkpoint(run_id: int) -> dict[str, Any] | None:
    """The last task checkpoint of a run, or None when it has none."""
    path = checkpoint_path(run_id)
    if not path.exists():
        return None
    try:
        state = _torch().load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same to the user
        raise CheckpointError(f"checkpoint {path} cannot be loaded: corrupt, or not a weights-only file "
                              f"({_load_failure(err)}); delete it to restart run {run_id} from its "
                              f"first task") from None
    if not isinstance(state, dict) or "task" not in state or "method" not in state:
        raise CheckpointError(f"checkpoint {path} is not an rmconsole task checkpoint; "
                              f"delete it to restart run {run_id} from its first task")
    return state


def _load_failure(err: Exception) -> str:
    """The useful part of torch.load's long error messages."""
    text = " ".join(str(err).split())
    if "WeightsUnpickler error:" in text:
        detail = text.split("WeightsUnpickler error:", 1)[1].split(" Check the documentation")[0].strip()
        if "GLOBAL " in detail:
            detail = "it holds a pickled object that would run code: " + detail.split("GLOBAL ", 1)[1].split()[0]
        return detail.split(". Please use")[0][:160]
    if "zip archive" in text:
        return "not a complete checkpoint archive (truncated or overwritten)"
    if isinstance(err, EOFError):
        return "the file is empty or cut short"
    return f"{type(err).__name__}: {text[:160]}"


def check_checkpoint(state: dict[str, Any], run_id: int, config: dict[str, Any]) -> None:
    """Refuse a checkpoint written for another run, another config or another method."""
    path = checkpoint_path(run_id)
    fix = f"delete it to restart run {run_id} from its first task"
    if state.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path} has format {state.get('format')!r}, this rmconsole reads "
                              f"format {FORMAT}; {fix}")
    if state.get("run_id") != run_id:
        raise CheckpointError(f"checkpoint {path} was written by run {state.get('run_id')}, not run {run_id}; {fix}")
    saved = state.get("config") or {}
    if saved.get("method") != config.get("method"):
        raise CheckpointError(f"checkpoint {path} holds method {saved.get('method')!r} but run {run_id} is "
                              f"method {config.get('method')!r}; {fix}")
    differs = sorted(k for k in set(saved) | set(config) if saved.get(k) != config.get(k))
    if differs:
        key = differs[0]
        raise CheckpointError(f"checkpoint {path} was written for another config ({key}={saved.get(key)!r}, "
                              f"run {run_id} has {key}={config.get(key)!r}); {fix}")
    task = state.get("task")
    if not isinstance(task, int) or task < 0:
        raise CheckpointError(f"checkpoint {path} names no finished task; {fix}")


def remove_checkpoint(run_id: int) -> None:
    checkpoint_path(run_id).unlink(missing_ok=True)
