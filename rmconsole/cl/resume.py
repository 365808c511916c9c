"""What both protocol drivers share (loop.py: the RM paper's task-based one; online.py: the
follow-up's task-free one): the run's set-up on the device, the announcement of its stream, the
validation figures after a task, the task checkpoint and putting it back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from . import compute, metrics, streams
from .augment import Augmenter, parse_augment
from .data import Dataset
from .events import Reporter
from .inference import validation
from .learner import Setup
from .methods import Method
from .results import TaskPlan
from .settings import RunSettings


@dataclass
class Prepared:
    """A run's stream on its device: the data and remapped labels there, the augmenter, and the
    `Setup` its method is built from."""

    data: Dataset
    train_labels: Tensor
    test_labels: Tensor
    augmenter: Augmenter
    setup: Setup


def prepare(cfg: RunSettings, data: Dataset, protocol: Any, device: torch.device, reporter: Reporter) -> Prepared:
    """Move the data and the stream's labels (`protocol`: loop.Protocol or online.OnlineProtocol)
    to the device and make the augmenter and the method's Setup (after the run's seed is set)."""
    data = data.to(device)
    train_labels, test_labels = protocol.train_labels.to(device), protocol.test_labels.to(device)
    augmenter = make_augmenter(cfg, data, device)
    setup = Setup(cfg, data, train_labels, test_labels, protocol.groups, device, augmenter, reporter)
    return Prepared(data, train_labels, test_labels, augmenter, setup)


def announce(
    cfg: RunSettings, protocol: Any, data: Dataset, augmenter: Augmenter, reporter: Reporter
) -> list[TaskPlan]:
    """Tell the reporter the validation share held out (if any) and the stream's plan; returns the plan."""
    plans: list[TaskPlan] = protocol.plans(data.n_classes)
    held = protocol.held_out
    if held is not None:
        reporter.validation_held_out(
            streams.validation_info(held, cfg.val_fraction, protocol.train_labels, data.n_classes)
        )
    reporter.run_started(plans, protocol.class_order, data.class_names, augmenter.describe())
    return plans


def validation_figures(method: Method, prepared: Prepared, protocol: Any, classes: list[int]) -> dict[str, Any]:
    """The outcome's validation figures after a task (val_fraction > 0; none without a held-out
    share): a call of its own, on held-out train samples only."""
    held = protocol.held_out
    if held is None:
        return {}
    p = prepared
    val = validation(method, p.data, held.validation, p.train_labels, classes, p.augmenter)
    return {
        "val_accuracy": val.accuracy,
        "val_class_accuracy": val.class_accuracy,
        "val_accuracy_row": metrics.task_accuracy_row(val.class_accuracy, protocol.groups),
    }


def checkpoint_of(
    task: int,
    cfg: RunSettings,
    method: Method,
    augmenter: Augmenter,
    plans: list[TaskPlan],
    protocol: Any,
    device: torch.device,
    **more: Any,
) -> dict[str, Any]:
    """The checkpoint after `task`: everything `restore` puts back, and the driver's own (`more`)."""
    checkpoint = {
        "task": task,
        "method": method.state_dict(),
        "augmenter": augmenter.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "method_name": cfg.method,
        "stream_hashes": [p.stream_hash for p in plans],
        "compute": compute.ledger_of(method).state(),
        **more,
    }
    if protocol.held_out is not None:
        checkpoint["val_hash"] = streams.stream_hash(protocol.held_out.validation)
    if device.type == "cuda":
        checkpoint["cuda_rng"] = torch.cuda.get_rng_state_all()
    return checkpoint


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
