"""The follow-up's streams: i-Blurry-N-M (Koh et al., ICLR 2022) and Si-Blurry (Moon et al.,
ICCV 2023), as index tensors (PROTOCOL §9.1, §9.6).

i-Blurry-N-M: N% of the classes are *disjoint* (all their samples in one task), the rest are
*blurry*: each has a major task, and M% of the blurry samples go to a pool that is dealt out
evenly over all tasks. New classes keep arriving all along the stream, and a label is the
class's order of first appearance, so the classifier grows as the stream goes.

The construction follows the Si-Blurry authors' sampler (which they derived from i-Blurry's
and which reproduces the shape of i-Blurry's published split files): one `torch.Generator`
seeded with the run's seed makes, in this order, the class permutation, (Si-Blurry: the random
cut points), the pool shuffle and one shuffle per task, as theirs does. Their quirks are kept
and named: the class counts are floored to multiples of T, `len(pool) % T` pooled samples are
left out of the stream (at most T-1), and the pool takes the first M% (i-Blurry) or the first
k_i (Si-Blurry) of each task's blurry indices. In which order those indices stand is the run's
`pool_order` (POOL_ORDERS):

- "shuffled" (the default): a seeded random order (a second generator, so the sampler's own
  draws stay the authors' sequence). The pool is then a random M% of the task's blurry samples,
  as both papers describe it, and it reproduces i-Blurry's published Tiny-ImageNet files
  (443-475 of each major's 500 samples kept).
- "dataset": dataset order, as the Si-Blurry authors' sampler does (their online_sampler.py
  lists indices by a loop over the dataset). On torchvision's CIFAR and MNIST, stored with
  classes interleaved, the two agree in distribution (only the draw differs); on a dataset
  stored class by class (an ImageFolder tree: Si-Blurry's Tiny-ImageNet and ImageNet-R) it pools
  whole classes -- the first of a task's blurry classes in storage order leave their task
  entirely and the others stay whole. This is what their published Si-Blurry numbers on those
  datasets ran with; docs/anytime.md measures both.

A class's own share is not exactly 100-M percent even when shuffled, when a task has several
blurry classes (CIFAR100's majors: 448-474 of 500 in the published files).

Si-Blurry ("stochastic" mode, which the authors' scripts always run): disjoint and blurry
classes are each cut into T groups at T-1 sorted random cut points (a task may get no class),
and the pool is M% of all blurry samples, split into T random amounts: task i gives its first
k_i blurry indices to the pool and gets k_i shuffled pool samples back. Task sizes, class
counts and the disjoint/blurry mix vary by task and by seed.

Pure functions of (labels, settings, seed); labels here are the dataset's own labels.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from .protocols import TASK_FREE_STREAMS

KINDS = TASK_FREE_STREAMS  # the streams protocols.py declares task-free
POOL_ORDERS = ("shuffled", "dataset")  # how a task's blurry indices stand before the pool takes its first ones


@dataclass(frozen=True)
class BlurrySplit:
    """A follow-up stream: the tasks (train indices in arrival order) and, per task, its
    disjoint classes and its blurry major classes (dataset labels)."""

    tasks: list[Tensor]
    disjoint: list[list[int]]
    blurry: list[list[int]]
    pooled: list[Tensor] = field(default_factory=list)  # per task, the indices it gave to the pool

    def majors(self, task: int) -> list[int]:
        """The classes a task owns: its disjoint classes, then its blurry major classes."""
        return list(self.disjoint[task]) + list(self.blurry[task])


def class_counts(n_classes: int, n_tasks: int, disjoint_pct: int) -> tuple[int, int]:
    """(disjoint, blurry) class counts: floor(C·N/100) and the rest, each floored to a multiple
    of T (the authors' rule; classes left over by the flooring never appear in the stream)."""
    disjoint = n_classes * disjoint_pct // 100
    disjoint = disjoint // n_tasks * n_tasks
    blurry = (n_classes - disjoint) // n_tasks * n_tasks
    return disjoint, blurry


def _check(n_tasks: int, disjoint_pct: int, blurry_pct: int, pool_order: str = "shuffled") -> None:
    if pool_order not in POOL_ORDERS:
        raise ValueError(f"pool_order must be one of {', '.join(POOL_ORDERS)}, got {pool_order!r}")
    if n_tasks < 1:
        raise ValueError(f"n_tasks must be at least 1, got {n_tasks}")
    if not 0 <= disjoint_pct <= 100:
        raise ValueError(f"disjoint_classes must be in 0..100, got {disjoint_pct}")
    if not 0 <= blurry_pct <= 100:
        raise ValueError(f"blurry must be in 0..100, got {blurry_pct}")


def _indices_by_task(labels: Tensor, classes: list[list[int]], n_classes: int) -> list[Tensor]:
    """For each task, the dataset indices of its classes in dataset order."""
    owner = torch.full((n_classes,), -1, dtype=torch.long)
    for t, group in enumerate(classes):
        if group:
            owner[torch.tensor(group, dtype=torch.long)] = t
    task_of = owner[labels]
    return [(task_of == t).nonzero().flatten() for t in range(len(classes))]


def _shuffle(idx: Tensor, gen: torch.Generator) -> Tensor:
    return idx[torch.randperm(len(idx), generator=gen)]


def _pool_candidates(
    labels: Tensor, blurry: list[list[int]], n_classes: int, seed: int, pool_order: str
) -> list[Tensor]:
    """Per task, its blurry indices in the order the pool takes its first ones from
    (`pool_order`: "shuffled" by the second generator, or "dataset" order as stored)."""
    by_task = _indices_by_task(labels, blurry, n_classes)
    if pool_order == "dataset":
        return by_task
    order_gen = pool_order_generator(seed)
    return [_shuffle(b, order_gen) for b in by_task]


def pool_order_generator(seed: int) -> torch.Generator:
    """The generator that orders each task's blurry indices before the first M% are pooled
    (apart from the sampler's own, so its draws stay the authors' sequence)."""
    return torch.Generator().manual_seed(1_000_003 * (seed + 1))


def iblurry_split(
    labels: Tensor,
    n_tasks: int,
    n_classes: int,
    disjoint_pct: int,
    blurry_pct: int,
    seed: int,
    pool_order: str = "shuffled",
) -> BlurrySplit:
    """i-Blurry-N-M: equal groups of disjoint and blurry classes per task, an even pool."""
    _check(n_tasks, disjoint_pct, blurry_pct, pool_order)
    labels = labels.cpu().long()
    gen = torch.Generator().manual_seed(seed)
    n_disjoint, n_blurry = class_counts(n_classes, n_tasks, disjoint_pct)
    order = torch.randperm(n_classes, generator=gen)
    disjoint = order[:n_disjoint].reshape(n_tasks, -1).tolist()
    blurry = order[n_disjoint : n_disjoint + n_blurry].reshape(n_tasks, -1).tolist()
    disjoint_idx = _indices_by_task(labels, disjoint, n_classes)
    blurry_idx = _pool_candidates(labels, blurry, n_classes, seed, pool_order)
    pooled = []
    for t in range(n_tasks):
        n_out = len(blurry_idx[t]) * blurry_pct // 100
        pooled.append(blurry_idx[t][:n_out])
        blurry_idx[t] = blurry_idx[t][n_out:]
    pool = torch.cat(pooled)
    pool = _shuffle(pool, gen)
    share = len(pool) // n_tasks
    tasks = []
    for t in range(n_tasks):
        mine = torch.cat([disjoint_idx[t], blurry_idx[t], pool[t * share : (t + 1) * share]])
        tasks.append(_shuffle(mine, gen))
    return BlurrySplit(tasks, disjoint, blurry, pooled)


def _random_cuts(n: int, n_tasks: int, gen: torch.Generator) -> list[int]:
    """T+1 boundaries 0 = b_0 <= ... <= b_T = n from T-1 sorted uniform cut points."""
    cuts = torch.randint(0, n, (n_tasks - 1,), generator=gen).sort().values.tolist()
    return [0] + cuts + [n]


def siblurry_split(
    labels: Tensor,
    n_tasks: int,
    n_classes: int,
    disjoint_pct: int,
    blurry_pct: int,
    seed: int,
    pool_order: str = "shuffled",
) -> BlurrySplit:
    """Si-Blurry: random class groups per task, a pool of random per-task amounts."""
    _check(n_tasks, disjoint_pct, blurry_pct, pool_order)
    labels = labels.cpu().long()
    gen = torch.Generator().manual_seed(seed)
    n_disjoint, n_blurry = class_counts(n_classes, n_tasks, disjoint_pct)
    order = torch.randperm(n_classes, generator=gen).tolist()
    disjoint: list[list[int]] = [[] for _ in range(n_tasks)]
    blurry: list[list[int]] = [[] for _ in range(n_tasks)]
    if n_disjoint > 0:
        cut = _random_cuts(n_disjoint, n_tasks, gen)
        disjoint = [order[cut[t] : cut[t + 1]] for t in range(n_tasks)]
    if n_blurry > 0:
        cut = _random_cuts(n_blurry, n_tasks, gen)
        blurry = [order[n_disjoint + cut[t] : n_disjoint + cut[t + 1]] for t in range(n_tasks)]
    disjoint_idx = _indices_by_task(labels, disjoint, n_classes)
    blurry_idx = _pool_candidates(labels, blurry, n_classes, seed, pool_order)
    n_pool = sum(len(b) for b in blurry_idx) * blurry_pct // 100
    amounts = [0] * n_tasks
    pooled: list[Tensor] = [torch.empty(0, dtype=torch.long) for _ in range(n_tasks)]
    if n_pool > 0:
        cut = _random_cuts(n_pool, n_tasks, gen)
        amounts = [cut[t + 1] - cut[t] for t in range(n_tasks)]
        for t in range(n_tasks):
            pooled[t] = blurry_idx[t][: amounts[t]]
            blurry_idx[t] = blurry_idx[t][amounts[t] :]
        pool = _shuffle(torch.cat(pooled), gen)
        start = 0
        for t in range(n_tasks):
            blurry_idx[t] = torch.cat([blurry_idx[t], pool[start : start + amounts[t]]])
            start += amounts[t]
    tasks = [_shuffle(torch.cat([disjoint_idx[t], blurry_idx[t]]), gen) for t in range(n_tasks)]
    return BlurrySplit(tasks, disjoint, blurry, pooled)


def make_split(
    kind: str,
    labels: Tensor,
    n_tasks: int,
    n_classes: int,
    disjoint_pct: int,
    blurry_pct: int,
    seed: int,
    pool_order: str = "shuffled",
) -> BlurrySplit:
    if kind == "iblurry":
        return iblurry_split(labels, n_tasks, n_classes, disjoint_pct, blurry_pct, seed, pool_order)
    if kind == "siblurry":
        return siblurry_split(labels, n_tasks, n_classes, disjoint_pct, blurry_pct, seed, pool_order)
    raise ValueError(f"unknown follow-up stream {kind!r}; allowed: {', '.join(KINDS)}")


def first_appearance_order(labels: Tensor, tasks: list[Tensor], n_classes: int) -> list[int]:
    """The dataset's classes in order of first appearance along the stream (the label each gets);
    classes that never appear follow, in label order (they are never exposed or evaluated)."""
    stream = torch.cat(tasks) if tasks else torch.empty(0, dtype=torch.long)
    seq = labels.cpu()[stream]
    first = torch.full((n_classes,), len(seq), dtype=torch.long)
    positions = torch.arange(len(seq), dtype=torch.long)
    first.scatter_reduce_(0, seq, positions, reduce="amin")
    return sorted(range(n_classes), key=lambda c: (int(first[c]), c))


def first_appearances(remapped: Tensor, tasks: list[Tensor]) -> list[list[tuple[int, int]]]:
    """Per task, (label, position in the task's stream) of every class first seen in it; with
    labels by first appearance these are consecutive labels, in order."""
    out: list[list[tuple[int, int]]] = []
    seen = 0
    for stream in tasks:
        seq = remapped.cpu()[stream.cpu()]
        found: list[tuple[int, int]] = []
        if len(seq):
            new = (seq >= seen).nonzero().flatten()
            for position in new.tolist():  # one pass over the task's new-class samples
                label = int(seq[position])
                if label >= seen:
                    found.append((label, position))
                    seen = label + 1
        out.append(found)
    return out


def exposure_counts(remapped: Tensor, tasks: list[Tensor]) -> Tensor:
    """n_seen after each streamed sample (int64, one per sample over the whole stream)."""
    if not tasks:
        return torch.empty(0, dtype=torch.long)
    seq = remapped.cpu()[torch.cat([t.cpu() for t in tasks])]
    return torch.cummax(seq, 0).values + 1 if len(seq) else seq


def iblurry_statistics(labels: Tensor, split: BlurrySplit, n_classes: int) -> list[dict]:
    """Per task, what the follow-up's tables describe (PROTOCOL §9.1): its size, how many classes
    it holds and how many are new, where the first new class arrives, and the samples of its
    disjoint classes, its blurry majors and each other class present (the minors)."""
    labels = labels.cpu()
    order = first_appearance_order(labels, split.tasks, n_classes)
    remapped = torch.empty(n_classes, dtype=torch.long)
    remapped[torch.tensor(order)] = torch.arange(n_classes)
    first = first_appearances(remapped[labels], split.tasks)
    out = []
    for t, stream in enumerate(split.tasks):
        counts = torch.bincount(labels[stream], minlength=n_classes).tolist()
        own = set(split.majors(t))
        out.append(
            {
                "task": t,
                "size": len(stream),
                "classes": sum(1 for n in counts if n),
                "new": len(first[t]),
                "first_new_position": first[t][0][1] if first[t] else None,
                "new_classes": [order[label] for label, _ in first[t]],
                "disjoint": [counts[c] for c in split.disjoint[t]],
                "majors": [counts[c] for c in split.blurry[t]],
                "minors": sorted((counts[c] for c in range(n_classes) if counts[c] and c not in own), reverse=True),
            }
        )
    return out
