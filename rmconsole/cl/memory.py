"""The episodic memory and its update policies (paper Alg. 1 and Table 6).

The memory holds train-set indices, never pixels. Each selection rule is a pure function from
candidates (and, where it needs them, uncertainties or features) to the chosen indices; each
policy a config can name is one small class over it, `select(candidates) -> indices`, in
POLICIES (Avalanche's storage policies, in effect). To add a policy: a class here with
`@memory_policy`, and its name in `catalog.MEMORY_POLICIES` (the torch-free list the config
validates against).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor

from .catalog import MEMORY_POLICIES  # noqa: F401  (re-exported)
from .settings import RunSettings


@dataclass
class Memory:
    """K slots of train-set indices with their labels; `seen` counts stream samples (reservoir)."""

    capacity: int
    indices: Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    labels: Tensor = field(default_factory=lambda: torch.empty(0, dtype=torch.long))
    seen: int = 0

    def __len__(self) -> int:
        return len(self.indices)

    def replace(self, indices: Tensor, labels: Tensor) -> None:
        if len(indices) > self.capacity:
            raise ValueError(f"memory over capacity: {len(indices)} > {self.capacity}")
        self.indices, self.labels = indices.cpu().long(), labels.cpu().long()

    def histogram(self, n_classes: int) -> list[int]:
        return torch.bincount(self.labels, minlength=n_classes).tolist()

    def state_dict(self) -> dict:
        return {"capacity": self.capacity, "indices": self.indices, "labels": self.labels, "seen": self.seen}

    def load_state_dict(self, state: dict) -> None:
        self.capacity = int(state["capacity"])
        self.indices, self.labels, self.seen = state["indices"], state["labels"], int(state["seen"])


def slots_per_class(capacity: int, n_seen: int) -> int:
    """k_c = floor(K / N_seen): GDumb's and RM's class-balanced slot count."""
    return capacity // max(1, n_seen)


def _fill_rest(chosen: Tensor, candidates: Tensor, capacity: int, gen: torch.Generator) -> Tensor:
    """Top up to K with random unchosen candidates, so the memory stays full (Alg. 1 leaves
    K - N*k_c slots, and classes with few candidates leave more)."""
    rest = capacity - len(chosen)
    if rest <= 0:
        return chosen
    unchosen = candidates[~torch.isin(candidates, chosen)]
    extra = unchosen[torch.randperm(len(unchosen), generator=gen)[:rest]]
    return torch.cat([chosen, extra])


def random_select(candidates: Tensor, capacity: int, gen: torch.Generator) -> Tensor:
    """K samples drawn uniformly from memory + stream (Table 6 "Random")."""
    return candidates[torch.randperm(len(candidates), generator=gen)[:capacity]]


def class_balanced_select(
    candidates: Tensor, labels: Tensor, capacity: int, classes: list[int], gen: torch.Generator
) -> Tensor:
    """k_c random samples of every seen class, then random fill (the authors' task-0 RM memory)."""
    k = slots_per_class(capacity, len(classes))
    chosen = []
    for c in classes:
        pool = candidates[labels == c]
        chosen.append(pool[torch.randperm(len(pool), generator=gen)[:k]])
    picked = torch.cat(chosen) if chosen else candidates[:0]
    return _fill_rest(picked, candidates, capacity, gen)


def step_positions(n: int, k: int) -> Tensor:
    """The k ranks Algorithm 1 keeps of a class's n candidates sorted most certain first:
    D_c[j * n / k] for j = 1..k in the paper's 1-based indexing, i.e. 0-based floor(j * n / k) - 1.

    The picks are evenly spaced over the whole ranking and the last is the least certain
    sample (the authors' code instead starts at rank 0 and steps by floor(n / k), which keeps
    the most certain end and, when n < 2k, covers only the certain part).
    """
    if n <= k:
        return torch.arange(n)
    return (torch.arange(1, k + 1, dtype=torch.float64) * n / k).floor().long() - 1


def uncertainty_select(
    candidates: Tensor, labels: Tensor, uncertainty: Tensor, capacity: int, classes: list[int], gen: torch.Generator
) -> Tensor:
    """Rainbow Memory's diversity-aware update (Alg. 1): per class, sort by uncertainty (most
    certain first) and take every (n_c / k_c)-th sample; fill leftover slots at random."""
    k = slots_per_class(capacity, len(classes))
    chosen = []
    for c in classes:
        mask = labels == c
        pool, u = candidates[mask], uncertainty[mask]
        order = torch.argsort(u, stable=True)
        chosen.append(pool[order[step_positions(len(pool), k)]])
    picked = torch.cat(chosen) if chosen else candidates[:0]
    return _fill_rest(picked, candidates, capacity, gen)


def reservoir_update(
    memory: Tensor, stream: Tensor, seen: int, capacity: int, gen: torch.Generator
) -> tuple[Tensor, int]:
    """Classic reservoir sampling (Vitter's Algorithm R) of the stream, in stream order.

    Sample i of the stream (the (seen + i)-th ever) enters while the memory is not full, and
    afterwards replaces slot j ~ U{0 .. seen + i} when j < K. Vectorised: each slot keeps the
    last stream sample that drew it, which is what the sequential loop leaves behind.
    Returns (new memory, new seen count).
    """
    memory = memory.clone()
    free = max(0, capacity - len(memory))
    head, tail = stream[:free], stream[free:]
    memory = torch.cat([memory, head])
    seen += len(head)
    if len(tail):
        counts = seen + torch.arange(len(tail), dtype=torch.float64) + 1  # samples seen incl. this one
        slot = (torch.rand(len(tail), generator=gen, dtype=torch.float64) * counts).floor().long()
        hit = (slot < capacity).nonzero().flatten()
        if len(hit):
            last = torch.full((capacity,), -1, dtype=torch.long)
            last.scatter_reduce_(0, slot[hit], hit, reduce="amax")
            filled = last >= 0
            memory[filled] = tail[last[filled]]
        seen += len(tail)
    return memory, seen


def herding_order(features: Tensor, k: int) -> Tensor:
    """iCaRL's herding (Rebuffi et al. 2017, Alg. 4) over one class: positions of the k picks, in
    pick order. With phi the L2-normalised features and mu their mean, pick j is the unchosen
    sample that brings the mean of the picks closest to mu:
    p_j = argmin_x || mu - (phi(x) + sum_{i<j} phi(p_i)) / j ||.
    mu is the plain mean of the normalised features (not normalised again): the running mean
    of the picks and mu are the same kind of quantity, so the comparison is consistent."""
    phi = torch.nn.functional.normalize(features.double(), dim=1)
    mu = phi.mean(0)
    running = torch.zeros_like(mu)
    available = torch.ones(len(phi), dtype=torch.bool)
    picks = []
    for j in range(min(k, len(phi))):
        dist = ((running + phi) / (j + 1) - mu).norm(dim=1)
        dist[~available] = float("inf")
        i = int(dist.argmin())
        picks.append(i)
        available[i] = False
        running += phi[i]
    return torch.tensor(picks, dtype=torch.long)


def herding_select(
    candidates: Tensor, labels: Tensor, features: Tensor, capacity: int, classes: list[int], gen: torch.Generator
) -> Tensor:
    """iCaRL's herding exemplars (Table 6 "Prototype"): per class, the first k_c picks of
    `herding_order`; a class with at most k_c candidates keeps them all; random fill after."""
    k = slots_per_class(capacity, len(classes))
    chosen = []
    for c in classes:
        mask = labels == c
        pool = candidates[mask]
        chosen.append(pool if len(pool) <= k else pool[herding_order(features[mask], k)])
    picked = torch.cat(chosen) if chosen else candidates[:0]
    return _fill_rest(picked, candidates, capacity, gen)


def greedy_balanced_update(
    memory: Tensor, memory_labels: Tensor, stream: Tensor, stream_labels: Tensor, capacity: int, gen: torch.Generator
) -> Tensor:
    """GDumb's greedy class-balancing sampler (Prabhu et al. 2020, Alg. 1), in stream order.

    A sample enters while the memory has room; once full, a sample of class y enters only if
    y holds fewer than K / |classes seen so far| slots, evicting a random sample of the
    currently largest class. Sequential by nature (each decision depends on the last), so it
    runs over plain Python ints: a few microseconds per streamed sample, once per task.
    """
    slots = memory.tolist()
    labels = memory_labels.tolist()
    by_class: dict[int, list[int]] = {}
    for position, label in enumerate(labels):
        by_class.setdefault(label, []).append(position)
    # one uniform draw per streamed sample, taken up front from the run's generator
    draws = torch.rand(len(stream), generator=gen, dtype=torch.float64).tolist()
    for index, label, draw in zip(stream.tolist(), stream_labels.tolist(), draws):
        by_class.setdefault(label, [])
        if len(slots) < capacity:
            by_class[label].append(len(slots))
            slots.append(index)
            labels.append(label)
            continue
        quota = capacity // len(by_class)
        if len(by_class[label]) >= quota:
            continue
        largest = max(by_class, key=lambda c: len(by_class[c]))
        victims = by_class[largest]
        position = victims.pop(int(draw * len(victims)))
        slots[position], labels[position] = index, label
        by_class[label].append(position)
    return torch.tensor(slots, dtype=torch.long)


# ---------------------------------------------------------------------------- policies


@dataclass
class Candidates:
    """What a policy chooses from at a task's end: the memory, then the task's stream.

    Uncertainty and features cost batched inference, so a policy asks for them
    (`uncertainty()`, `features()`) and only the policies that need them pay."""

    indices: Tensor  # the memory's train-set indices, then the stream's
    labels: Tensor  # their labels
    memory: Memory  # before the update
    stream: Tensor  # this task's train-set indices, in arrival order
    classes: list[int]  # classes seen so far
    task: int
    gen: torch.Generator  # the run's memory and batching draws
    settings: RunSettings
    score: Callable[[Tensor], Tensor]  # uncertainty u(x) of train indices (batched inference)
    embed: Callable[[Tensor], Tensor]  # features of train indices (batched inference)
    info: dict[str, Any]  # what the update reports; a policy may add to it

    @property
    def capacity(self) -> int:
        return self.memory.capacity

    def uncertainty(self) -> Tensor:
        return self.score(self.indices)

    def features(self) -> Tensor:
        return self.embed(self.indices)


class MemoryPolicy:
    """One way to refill the memory: `select` returns the train indices to keep (<= capacity)."""

    name: ClassVar[str]

    def select(self, c: Candidates) -> Tensor:
        raise NotImplementedError


class PoolPolicy(MemoryPolicy):
    """Chooses K of memory + stream at once; with no more candidates than slots, keeps them all."""

    def select(self, c: Candidates) -> Tensor:
        return c.indices if len(c.indices) <= c.capacity else self.choose(c)

    def choose(self, c: Candidates) -> Tensor:
        raise NotImplementedError


POLICIES: dict[str, MemoryPolicy] = {}


def memory_policy(cls: type[MemoryPolicy]) -> type[MemoryPolicy]:
    """Class decorator: the policy becomes selectable by its `name`."""
    POLICIES[cls.name] = cls()
    return cls


def policy_named(name: str) -> MemoryPolicy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown memory policy {name!r}; known: {', '.join(POLICIES)}") from None


@memory_policy
class Uncertainty(PoolPolicy):
    """RM's diversity-aware selection; task 0 is class-balanced random as in the authors' code
    (the uncertainty of a model that has seen one pass is not yet informative)."""

    name = "uncertainty"

    def choose(self, c: Candidates) -> Tensor:
        if c.task == 0:
            c.info["note"] = "task 0: class-balanced random (authors' code)"
            return class_balanced_select(c.indices, c.labels, c.capacity, c.classes, c.gen)
        u = c.uncertainty()
        chosen = uncertainty_select(c.indices, c.labels, u, c.capacity, c.classes, c.gen)
        views = c.settings.uncertainty_views
        c.info.update(
            {
                "measure": c.settings.uncertainty,
                "views": views,
                "candidates_uncertainty": uncertainty_histogram(u, views),
                "chosen_uncertainty": uncertainty_histogram(u[torch.isin(c.indices, chosen)], views),
            }
        )
        return chosen


@memory_policy
class Random(PoolPolicy):
    name = "random"

    def choose(self, c: Candidates) -> Tensor:
        return random_select(c.indices, c.capacity, c.gen)


@memory_policy
class Reservoir(MemoryPolicy):
    """Reservoir sampling of the stream; the memory counts the samples it has streamed."""

    name = "reservoir"

    def select(self, c: Candidates) -> Tensor:
        chosen, c.memory.seen = reservoir_update(c.memory.indices, c.stream, c.memory.seen, c.capacity, c.gen)
        return chosen


@memory_policy
class Prototype(PoolPolicy):
    """iCaRL's herding exemplars."""

    name = "prototype"

    def choose(self, c: Candidates) -> Tensor:
        return herding_select(c.indices, c.labels, c.features(), c.capacity, c.classes, c.gen)


@memory_policy
class ClassBalanced(PoolPolicy):
    name = "class_balanced"

    def choose(self, c: Candidates) -> Tensor:
        return class_balanced_select(c.indices, c.labels, c.capacity, c.classes, c.gen)


@memory_policy
class GreedyBalanced(MemoryPolicy):
    """GDumb's sampler: decides per streamed sample, like the reservoir."""

    name = "greedy_balanced"

    def select(self, c: Candidates) -> Tensor:
        stream_labels = c.labels[len(c.memory) :]
        return greedy_balanced_update(c.memory.indices, c.memory.labels, c.stream, stream_labels, c.capacity, c.gen)


def uncertainty_histogram(u: Tensor, views: int) -> list[int]:
    """Counts of uncertainty values in views + 1 bins (u = 0, 1/A, ..., 1)."""
    bins = (u * views).round().long().clamp(0, views)
    return torch.bincount(bins, minlength=views + 1).tolist()
