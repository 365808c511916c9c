"""GDumb (Prabhu et al., ECCV 2020): a greedy class-balanced sampler and a dumb learner.

What differs from experience replay:
- the stream only feeds the sampler: each arriving sample enters the memory while it has room,
  or later if its class holds fewer than K / |classes seen| slots, evicting a random sample of
  the largest class (the `greedy_balanced` policy); no gradient step ever sees the stream;
- at every task end the model is thrown away and a FRESH one (new initialisation, new
  optimiser and schedule) is trained on the memory alone for E epochs, then evaluated.
Online and offline runs are therefore the same for GDumb. Classes never exposed are masked at
inference, as GDumb masks classes absent from its memory.

On the task-free streams (the follow-up's GDumb, PROTOCOL §9.5): the memory holds all K slots
and takes every sample, evicting a random sample of its largest class (counting the incoming
one: the follow-up's rule); before every anytime evaluation (and at a task boundary when the
memory changed since) a fresh model is trained on the memory for `epochs` epochs (the follow-up
trains 255 per snapshot, after the stream; the numbers are the same, the curve is live here) and
predicts only classes its memory holds.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .base import Method, Task
from .taskfree import TaskFree


class GDumb(TaskFree, Method):
    name = "gdumb"
    default_memory_policy = "greedy_balanced"
    full_capacity = True

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.fresh_models = 0  # how many times the learner was re-initialised

    def learn_task(self, task: Task) -> None:
        self.update_memory(task)
        self.model = self.build_model()
        self.optimizer = self.make_optimizer()
        self.fresh_models += 1
        self.report.log(
            f"task {task.index + 1}: GDumb trains fresh model #{self.fresh_models} on {len(self.memory)} memory samples"
        )
        if len(self.memory) and self.cfg.epochs > 0:
            self.fit(
                self.cfg.epochs,
                lambda e: self.shuffled_batches(self.memory.indices, self.memory_batch_size),
                "memory",
                task,
            )

    # ------------------------------------------------------------------ task-free streams

    def online_start(self) -> None:
        super().online_start()
        self.trained_at: tuple[int, int] | None = None  # (memory.seen, len) of the last fresh model
        self.memory_classes = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)

    def head_takes(self, label: int) -> None:
        """No head to extend: every evaluation trains a fresh model."""

    def online_observe(self, index: int, label: int) -> None:
        self.online_memory.balanced(index, label, self.sample_rng.choice)

    def online_before_eval(self) -> None:
        """A fresh model trained on the memory as it is now."""
        key = (self.memory.seen, len(self.memory))
        if key == self.trained_at:
            return
        self.model = self.build_model()
        self.optimizer = self.make_optimizer()
        self.fresh_models += 1
        self.memory_classes = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        self.memory_classes[self.memory.labels.unique().to(self.device)] = True
        self.memory_epochs(Task(-1, self.memory.indices, 0), self.cfg.epochs, self.cfg.batch_size)
        self.trained_at = key

    def online_task_end(self, task: Task) -> None:
        self.online_before_eval()

    def memory_epochs(self, task: Task, epochs: int, batch_size: int) -> None:
        """As TaskFree's, without progress phases (they would flood the log at every evaluation)."""
        if epochs <= 0 or len(self.memory) < 2:
            return
        from ..schedule import epoch_lr

        for epoch in range(epochs):
            batches = self.shuffled_batches(self.memory.indices, batch_size)
            self.train_batches(batches, lr=epoch_lr(epoch, self.cfg.lr, "cosine"))

    def logits(self, x: Tensor) -> Tensor:
        logits = super().logits(x)
        if self.task_free and hasattr(self, "memory_classes") and bool(self.memory_classes.any()):
            logits = logits.masked_fill(~self.memory_classes, torch.finfo(logits.dtype).min)
        return logits

    def state_dict(self) -> dict[str, Any]:
        state = {**super().state_dict(), "fresh_models": self.fresh_models}
        if self.task_free and hasattr(self, "memory_classes"):
            state["gdumb"] = {"trained_at": self.trained_at, "memory_classes": self.memory_classes.cpu()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.fresh_models = int(state.get("fresh_models", 0))
        saved = state.get("gdumb")
        if saved is not None:
            self.trained_at = tuple(saved["trained_at"]) if saved["trained_at"] is not None else None
            self.memory_classes = saved["memory_classes"].to(self.device)
