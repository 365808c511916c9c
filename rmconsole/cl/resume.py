"""What both protocol drivers share (loop.py: the RM paper's task-based one; online.py: the
follow-up's task-free one): the run's augmenter, and putting a task checkpoint back."""

from __future__ import annotations

from typing import Any

import torch

from . import streams
from .augment import Augmenter, parse_augment
from .data import Dataset
from .methods import Method
from .settings import RunSettings


class CheckpointMismatch(ValueError):
    """A resume checkpoint that does not fit this run's method or stream (one line)."""


def make_augmenter(cfg: RunSettings, data: Dataset, device: torch.device) -> Augmenter:
    mean = torch.tensor(data.mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(data.std, device=device).view(1, -1, 1, 1)
    return Augmenter(parse_augment(cfg.augment), mean, std, data.crop_padding, cfg.seed)


def restore(
    resume: dict[str, Any], cfg: RunSettings, protocol: Any, method: Method, augmenter: Augmenter, device: torch.device
) -> int:
    """Put a checkpoint's state back (method, augmenter, RNGs) and return the task to start at.
    `protocol`: the run's stream (loop.Protocol or online.OnlineProtocol: its `tasks`).

    Everything that draws randomness or carries learning from task to task is in the
    checkpoint, so a resumed run continues exactly as the uninterrupted run would have.
    """
    name = resume.get("method_name", cfg.method)
    if name != cfg.method:
        raise CheckpointMismatch(f"checkpoint holds method {name!r}, the run is method {cfg.method!r}")
    hashes = resume.get("stream_hashes")
    if hashes is not None and hashes != [streams.stream_hash(s) for s in protocol.tasks]:
        raise CheckpointMismatch(
            "checkpoint was written for another task stream (dataset, seed, tasks or blurry differ)"
        )
    held = getattr(protocol, "held_out", None)
    if resume.get("val_hash") != (None if held is None else streams.stream_hash(held.validation)):
        raise CheckpointMismatch("checkpoint was written for another validation split (val_fraction or seed differ)")
    start = int(resume["task"]) + 1
    if start > len(protocol.tasks):
        raise CheckpointMismatch(f"checkpoint is after task {start}, the run has {len(protocol.tasks)} tasks")
    try:
        method.load_state_dict(resume["method"])
        augmenter.load_state_dict(resume["augmenter"])
        torch.set_rng_state(resume["torch_rng"])
        if device.type == "cuda" and resume.get("cuda_rng") is not None:
            torch.cuda.set_rng_state_all(resume["cuda_rng"])
    except (KeyError, RuntimeError, ValueError, TypeError, AttributeError) as err:
        detail = " ".join(str(err).split())[:200] or type(err).__name__
        raise CheckpointMismatch(
            f"checkpoint does not fit method {cfg.method!r} ({type(err).__name__}: {detail})"
        ) from None
    return start
