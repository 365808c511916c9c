"""The episodic memory of the task-free protocol: updated one streamed sample at a time.

`OnlineMemory` is a `memory.Memory` (slots of train-set indices and their labels, the same
shape every store row, checkpoint and memory panel already reads) that also keeps, per class,
its slot positions in insertion order, so the follow-up's per-sample rules cost a few list
operations, not a pass over the memory:

- `reservoir`: Vitter's Algorithm R, as the follow-up's ER (PROTOCOL §9.2): the n-th sample
  ever seen takes slot j ~ U{0..n-1} when j < K (plain, not class-balanced).
- `balanced`: the follow-up's class-balanced rule (its GDumb, RM port and CLIB, §9.4-9.5):
  a full memory counts its classes with the incoming sample's class + 1, takes the largest
  (ties: the earliest-seen class, which has the smallest label since labels follow first
  appearance) and evicts one of its samples -- chosen by the caller (random for GDumb and RM,
  lowest importance for CLIB). The incoming sample always enters.

Draws come from a `random.Random` the method owns (one per run, checkpointed), so the
per-sample decisions cost microseconds and replay exactly on resume.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .memory import Memory


@dataclass
class OnlineMemory(Memory):
    """A Memory with per-class slot lists; `seen` counts the samples offered to `reservoir`."""

    by_class: dict[int, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.indices = self.indices.clone().long()
        self.labels = self.labels.clone().long()
        if not self.by_class:
            for position, label in enumerate(self.labels.tolist()):
                self.by_class.setdefault(label, []).append(position)

    @property
    def full(self) -> bool:
        return len(self.indices) >= self.capacity

    def count(self, label: int) -> int:
        return len(self.by_class.get(label, ()))

    def replace(self, indices: Tensor, labels: Tensor) -> None:
        """A whole new memory (RM's task-end update): the class lists are rebuilt."""
        super().replace(indices, labels)
        self.by_class = {}
        for position, label in enumerate(self.labels.tolist()):
            self.by_class.setdefault(label, []).append(position)

    def append(self, index: int, label: int) -> int:
        position = len(self.indices)
        self.indices = torch.cat([self.indices, torch.tensor([index], dtype=torch.long)])
        self.labels = torch.cat([self.labels, torch.tensor([label], dtype=torch.long)])
        self.by_class.setdefault(label, []).append(position)
        return position

    def put(self, position: int, index: int, label: int) -> None:
        """Slot `position` now holds (index, label): the old sample leaves its class list."""
        old = int(self.labels[position])
        self.by_class[old].remove(position)
        if not self.by_class[old]:
            del self.by_class[old]
        self.indices[position] = index
        self.labels[position] = label
        self.by_class.setdefault(label, []).append(position)

    def reservoir(self, index: int, label: int, rng: random.Random) -> int | None:
        """Algorithm R; returns the slot written, or None when the sample was not kept."""
        self.seen += 1
        if not self.full:
            return self.append(index, label)
        j = rng.randrange(self.seen)
        if j < self.capacity:
            self.put(j, index, label)
            return j
        return None

    def largest_class(self, incoming: int) -> int:
        """The class to evict from: the largest, counting the incoming sample; ties to the smallest label."""
        best, best_count = incoming, self.count(incoming) + 1
        for label, slots in self.by_class.items():
            n = len(slots) + (label == incoming)
            if n > best_count or (n == best_count and label < best):
                best, best_count = label, n
        return best

    def balanced(self, index: int, label: int, victim: Callable[[list[int]], int]) -> int:
        """The class-balanced rule; `victim(slots of the largest class)` picks the slot to evict."""
        self.seen += 1
        if not self.full:
            return self.append(index, label)
        position = victim(self.by_class[self.largest_class(label)])
        self.put(position, index, label)
        return position

    def draw(self, n: int, gen: torch.Generator) -> Tensor:
        """min(n, size) slot positions, uniform without replacement."""
        return torch.randperm(len(self.indices), generator=gen)[: min(n, len(self.indices))]

    def state_dict(self) -> dict:
        """A copy: the slots change in place afterwards (a checkpoint must not follow them)."""
        return {
            **super().state_dict(),
            "indices": self.indices.clone(),
            "labels": self.labels.clone(),
            "by_class": {k: list(v) for k, v in self.by_class.items()},
        }

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.indices, self.labels = self.indices.clone().long(), self.labels.clone().long()
        saved = state.get("by_class")
        self.by_class = {int(k): list(v) for k, v in saved.items()} if saved is not None else {}
        if saved is None:
            for position, label in enumerate(self.labels.tolist()):
                self.by_class.setdefault(label, []).append(position)
