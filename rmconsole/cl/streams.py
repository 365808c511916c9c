"""Task streams as index tensors: class orders, disjoint and BlurryM splits (PROTOCOL §1).

All functions are pure: the same labels, seed and settings give the same tasks on every
machine. Labels are remapped so that task t owns labels t*c .. (t+1)*c-1.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .datasets import lookup


def seeded_class_order(n_classes: int, seed: int) -> list[int]:
    """A permutation of the original labels, fixed by the seed."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randperm(n_classes, generator=gen).tolist()


def class_order(dataset: str, n_classes: int, seed: int, kind: str = "seed") -> list[int]:
    """The class order of a run: `seed` (shuffled by the seed) or `paper` (the dataset's own
    orders: the authors' splits, or a folder dataset's class_orders.toml)."""
    if kind == "paper":
        try:
            return list(lookup(dataset).orders()[seed])
        except KeyError:
            raise ValueError(f"no paper class order for {dataset} seed {seed}") from None
    if kind == "identity":
        return list(range(n_classes))
    return seeded_class_order(n_classes, seed)


def remap_labels(labels: Tensor, order: list[int]) -> Tensor:
    """Label = position of the original class in the order."""
    inverse = torch.empty(len(order), dtype=torch.int64)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return inverse.to(labels.device)[labels]


def task_classes(n_classes: int, n_tasks: int) -> list[list[int]]:
    """The (remapped) major classes of each task: equal consecutive groups."""
    if n_classes % n_tasks:
        raise ValueError(f"{n_classes} classes cannot be split into {n_tasks} equal tasks")
    per = n_classes // n_tasks
    return [list(range(t * per, (t + 1) * per)) for t in range(n_tasks)]


def _shuffled(idx: Tensor, gen: torch.Generator) -> Tensor:
    return idx[torch.randperm(len(idx), generator=gen)]


def disjoint_tasks(labels: Tensor, n_tasks: int, n_classes: int, seed: int) -> list[Tensor]:
    """Blurry0: task t holds every training sample of its classes, in a seeded random order."""
    return blurry_tasks(labels, n_tasks, n_classes, 0, seed)


def pool_shares(pool_size: int, n_tasks: int) -> list[int]:
    """How many pool samples each task receives: the pool dealt evenly (the first
    `pool_size % n_tasks` tasks get one more)."""
    return [pool_size // n_tasks + (t < pool_size % n_tasks) for t in range(n_tasks)]


def blurry_tasks(labels: Tensor, n_tasks: int, n_classes: int, blurry: int, seed: int) -> list[Tensor]:
    """BlurryM: M% of every class goes to a shared pool that is dealt out evenly over all tasks.

    Each class keeps (100-M)% of its samples in its own task; the shuffled pool is cut into T
    equal shares (own task included), so no sample repeats, all are used, every task holds the
    same number of pool samples, a class keeps about (100-M) + M/T percent of its samples in its
    own task, and every class appears, as a minor class, from task 0 on. Task sizes are equal
    only when the classes are (the authors' MNIST files: unequal tasks, an even pool).
    """
    if not 0 <= blurry <= 100:
        raise ValueError(f"blurry must be in 0..100, got {blurry}")
    labels = labels.cpu()
    gen = torch.Generator().manual_seed(seed)
    groups = task_classes(n_classes, n_tasks)
    kept: list[Tensor] = []
    pool: list[Tensor] = []
    for classes in groups:
        own = []
        for c in classes:
            idx = _shuffled((labels == c).nonzero().flatten(), gen)
            n_out = int(round(len(idx) * blurry / 100))
            own.append(idx[n_out:])
            pool.append(idx[:n_out])
        kept.append(_shuffled(torch.cat(own), gen))
    if blurry == 0:
        return kept
    shared = _shuffled(torch.cat(pool), gen)
    tasks = [
        _shuffled(torch.cat([own, share]), gen)
        for own, share in zip(kept, shared.split(pool_shares(len(shared), n_tasks)))
    ]
    return tasks


def make_tasks(labels: Tensor, n_tasks: int, n_classes: int, blurry: int, seed: int) -> list[Tensor]:
    """The stream of every task as train-set indices, in the order they arrive."""
    return blurry_tasks(labels, n_tasks, n_classes, blurry, seed)


# The validation stream (issue 30). Held-out samples are drawn per class by a generator of their
# own, seeded from the run's seed through this salt, so the draws the training stream makes from
# the run's seed are the same whether a validation share is held out or not: with no share held
# out the training stream is exactly the one of a run without validation.
VALIDATION_SALT = 0x5EED_0FF1CE


def validation_seed(seed: int) -> int:
    """The seed of the validation draw: derived from the run's seed, never equal to its stream's."""
    return (seed * 1_000_003 + VALIDATION_SALT) % (2**63 - 1)


def validation_sizes(counts: list[int], fraction: float) -> list[int]:
    """Held-out samples per class: round(n_c * fraction); with fraction < 0.5 a class always
    keeps at least one training sample (round(n * f) < n for every n >= 1)."""
    if not 0 <= fraction < 0.5:
        raise ValueError(f"val_fraction must be in [0, 0.5), got {fraction}")
    return [int(round(n * fraction)) for n in counts]


@dataclass(frozen=True)
class HeldOut:
    """A run's split of the training set: the indices left for the stream (ascending) and the
    validation indices (ascending), never trained on and never offered to a memory."""

    train: Tensor
    validation: Tensor

    @property
    def empty(self) -> bool:
        return len(self.validation) == 0

    def restrict(self, tasks: list[Tensor]) -> list[Tensor]:
        """Tasks built over `labels[self.train]` (positions in `train`) as train-set indices."""
        return tasks if self.empty else [self.train[t] for t in tasks]


def validation_info(held: HeldOut, fraction: float, labels: Tensor, n_classes: int) -> dict[str, Any]:
    """What a run records of its validation split: the fraction, how many samples (in all and per
    class of `labels`, the run's remapped ones) and their fingerprint (a resume checks it)."""
    return {
        "fraction": fraction,
        "samples": len(held.validation),
        "per_class": composition(labels, held.validation, n_classes),
        "hash": stream_hash(held.validation),
    }


def hold_out(labels: Tensor, fraction: float, seed: int) -> HeldOut:
    """Hold out `fraction` of EACH class's training samples (labels: the dataset's own or the
    run's remapped ones; a class is a class either way), drawn by the validation generator.
    fraction 0: nothing held out, `train` = every index in order."""
    labels = labels.cpu()
    n_classes = int(labels.max()) + 1 if len(labels) else 0
    counts = torch.bincount(labels, minlength=n_classes).tolist()
    sizes = validation_sizes(counts, fraction)
    if not any(sizes):
        return HeldOut(torch.arange(len(labels)), torch.empty(0, dtype=torch.int64))
    gen = torch.Generator().manual_seed(validation_seed(seed))
    chosen = [_shuffled((labels == c).nonzero().flatten(), gen)[:k] for c, k in enumerate(sizes)]
    validation = torch.cat(chosen).sort().values
    mask = torch.ones(len(labels), dtype=torch.bool)
    mask[validation] = False
    return HeldOut(mask.nonzero().flatten(), validation)


def composition(labels: Tensor, stream: Tensor, n_classes: int) -> list[int]:
    """How many samples of each class a task's stream holds (the TUI's task-stream bars)."""
    return torch.bincount(labels.cpu()[stream.cpu()], minlength=n_classes).tolist()


def stream_hash(stream: Tensor) -> str:
    """A short fingerprint of a task's sample list, stored so a run can be checked for rerun."""
    return hashlib.sha1(stream.cpu().to(torch.int64).numpy().tobytes()).hexdigest()[:16]


@dataclass(frozen=True)
class EvalScope:
    """Which test classes a task is evaluated on: all (blurry) or those seen so far (disjoint)."""

    blurry: bool
    groups: list[list[int]]

    def classes_after(self, task: int) -> list[int]:
        if self.blurry:
            return [c for g in self.groups for c in g]
        return [c for g in self.groups[: task + 1] for c in g]
