"""GSA: gradient-sensitive adjustment (Guo et al., CVPR 2023, "Dealing with Cross-Task Class
Discrimination in Online Continual Learning").

Each step has two parts (one batch: the first `stream_count` rows are part A, the rest part B):

- A, the current task's data: the incoming stream samples plus up to `gsa_current_memory`
  memory samples stored during the current task. Its loss L_p is cross-entropy over the
  classes *new in this task* only (first seen since its boundary), on the rows of those classes:
  learning the new classes never pushes the earlier tasks' logits;
- B, the mixed batch of `gsa_mixed_batch` samples: int(B (1 - r)) memory samples of earlier
  tasks and the first int(B r) samples of A, r = new classes / classes seen. Its loss L_n is a
  cross-entropy over every class seen whose target for class c is weighted by
  2 / (1 + exp(1 - ANT_c)), ANT_c = (N_c - sum p_c) / sum p_c' : the positive gradient class c's
  logit has received (N_c samples of c, probability p_c each: 1 - p_c per sample) over the
  negative gradient it has received (its probability p_c' on every sample of another class),
  both summed over every step since the start (the probabilities of this step's forward,
  detached, included): weight 1 at ANT = 1, below 1 for a class whose logit has been pushed
  down more than up, towards 2 above; the first `gsa_warmup_steps` steps of each task use
  weight 1.

Loss = 2 L_n + L_p (the authors' code); while the memory is empty, L_p alone. Predictions: the
head's arg-max over the classes seen. Memory: the follow-up's reservoir (K - batch/2 slots),
each slot tagged with the task its sample arrived in.

Task-free adaptation (the i-Blurry stream has task boundaries, GSA needs them): "new classes"
are those first seen since the current task began (the authors' `new_class_holder`); a stream
sample of an earlier class (a blurry minority sample) is in A but outside L_p (the authors'
disjoint tasks have none), and is in B's current share.

Deviations from the authors' code (labelled in docs/anytime.md):
- each sample is seen once, augmented by the run's pipeline, A and B in one forward (theirs:
  each sample and its horizontal flip, A also greyscale + resized crop, two forwards);
- the head covers every class from the start, unseen classes masked (theirs grows by a task's
  classes at its start, so its new-class loss also covers the task's classes not yet arrived);
- the ratio's denominator is clamped at 1e-12 (theirs divides as is);
- the run's optimiser and stream batch (the follow-up's Adam 3e-4, batch/2 stream samples;
  theirs Adam 1e-3 with weight decay 1e-4, 10 stream samples).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor

from ..learner import Task
from .base import Method
from .gsa_params import GSAParams
from .taskfree import TaskFree


def gsa_class_weights(count: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
    """2 / (1 + exp(1 - ANT_c)), ANT_c = (N_c - sum p_c) / sum p_c' per class (GSA's ratio)."""
    ratio = (count - positive) / negative.clamp_min(1e-12)
    return 2.0 / (1.0 + torch.exp(1.0 - ratio))


def new_class_loss(logits: Tensor, y: Tensor, new: Tensor) -> Tensor:
    """L_p: cross-entropy over the `new` classes (a bool mask) on the rows whose label is new."""
    fill = torch.finfo(logits.dtype).min
    per_row = nnf.cross_entropy(logits.masked_fill(~new, fill), y, reduction="none")
    rows = new[y].to(logits.dtype)
    return (per_row * rows).sum() / rows.sum().clamp_min(1.0)


def weighted_replay_loss(logits: Tensor, y: Tensor, class_weight: Tensor) -> Tensor:
    """L_n: -mean_i w_{y_i} log p_{y_i}, the softmax over the given (seen-masked) logits."""
    log_p = nnf.log_softmax(logits, dim=1).gather(1, y[:, None]).squeeze(1)
    return -(class_weight[y] * log_p).mean()


class GSA(TaskFree, Method[GSAParams]):
    name = "gsa"
    default_memory_policy = "reservoir"
    # captured as a CUDA graph (graphs.MethodStep): the statistics and the new-class mask are
    # updated in place on the device; part A's size and the warm-up are host decisions made in
    # `step_key`, the graph's key
    capturable_step = True

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.count = torch.zeros(self.n_classes, device=self.device)  # N_c: samples of c in B so far
        self.positive = torch.zeros(self.n_classes, device=self.device)  # sum of p_c over them
        self.negative = torch.zeros(self.n_classes, device=self.device)  # sum of p_c over other classes' samples
        self.new = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)  # new in this task
        self.new_host: set[int] = set()
        self.seen_set: set[int] = set()  # the classes seen, on the host (the batch sizes' rate)
        self.slot_task: list[int] = []  # the task each memory slot's sample arrived in
        self.task_index = 0
        self.task_steps = 0  # steps since the task began (the warm-up)
        self.warm = True  # this step is in the task's warm-up (step_key)

    def online_task_start(self, task: Task) -> None:
        self.task_index = task.index
        self.task_steps = 0
        self.new_host = set()
        self.new.zero_()  # in place: a captured step reads this tensor

    def online_new_class(self, label: int) -> None:
        super().online_new_class(label)
        self.new_host.add(label)
        self.seen_set.add(label)
        self.new[label] = True

    def online_store(self, index: int, label: int) -> None:
        slot = self.online_memory.reservoir(index, label, self.sample_rng)
        if slot is None:
            return
        if slot == len(self.slot_task):
            self.slot_task.append(self.task_index)
        else:
            self.slot_task[slot] = self.task_index

    def _draw_slots(self, current: bool, n: int) -> Tensor:
        """Train indices of min(n, available) memory samples of the current task (or of earlier ones)."""
        slots = [s for s, t in enumerate(self.slot_task) if (t == self.task_index) == current]
        if n <= 0 or not slots:
            return torch.empty(0, dtype=torch.long)
        chosen = torch.tensor(slots)[torch.randperm(len(slots), generator=self.gen)[:n]]
        return self.memory.indices[chosen]

    def online_train(self, stream: Tensor, iterations: int) -> None:
        batches, counts = [], []
        rate = len(self.new_host) / max(len(self.seen_set), 1)
        for _ in range(iterations):
            part_a = torch.cat([stream, self._draw_slots(True, self.params.gsa_current_memory)])
            part_b = torch.empty(0, dtype=torch.long)
            if len(self.memory) > 0:
                size = self.params.gsa_mixed_batch
                part_b = torch.cat([self._draw_slots(False, int(size * (1 - rate))), part_a[: int(size * rate)]])
            batches.append(torch.cat([part_a, part_b]))
            counts.append(len(part_a))
        self.train_batches(batches, counts)

    def step_key(self, x: Tensor, y: Tensor) -> tuple[int, bool]:
        """The step's host side: part A's size and whether the task's warm-up is on (counted here)."""
        n_a = self.stream_rows(y)
        self.warm = self.task_steps < self.params.gsa_warmup_steps
        self.task_steps += 1
        return n_a, self.warm

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        n_a = self.stream_rows(y)
        logits = self.model(x)
        loss = new_class_loss(logits[:n_a], y[:n_a], self.new)
        warm = self.warm
        if n_a == len(y):
            return loss
        mixed, y_b = self.mask_unseen(logits[n_a:]), y[n_a:]
        with torch.no_grad():
            p = torch.softmax(mixed.float(), dim=1)
            onehot = torch.zeros_like(p).scatter_(1, y_b[:, None], 1.0)  # (one_hot: a host sync)
            self.count += onehot.sum(0)
            self.positive += (p * onehot).sum(0)
            self.negative += (p * (1 - onehot)).sum(0)
            weight = (
                torch.ones_like(self.count) if warm else gsa_class_weights(self.count, self.positive, self.negative)
            )
        return 2.0 * weighted_replay_loss(mixed, y_b, weight) + loss

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "gsa": {
                "count": self.count.cpu(),
                "positive": self.positive.cpu(),
                "negative": self.negative.cpu(),
                "new": sorted(self.new_host),
                "slot_task": list(self.slot_task),
                "task_index": self.task_index,
                "task_steps": self.task_steps,
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        gsa = state["gsa"]
        self.count = gsa["count"].to(self.device)
        self.positive = gsa["positive"].to(self.device)
        self.negative = gsa["negative"].to(self.device)
        self.new_host = set(gsa["new"])
        self.seen_set = set(self.seen.nonzero().flatten().tolist())
        self.new = torch.zeros_like(self.new)
        self.new[sorted(self.new_host)] = True
        self.slot_task = list(gsa["slot_task"])
        self.task_index, self.task_steps = int(gsa["task_index"]), int(gsa["task_steps"])
