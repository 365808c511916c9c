"""GDumb (Prabhu et al., ECCV 2020): a greedy class-balanced sampler and a dumb learner.

What differs from experience replay:
- the stream only feeds the sampler: each arriving sample enters the memory while it has room,
  or later if its class holds fewer than K / |classes seen| slots, evicting a random sample of
  the largest class (the `greedy_balanced` policy); no gradient step ever sees the stream;
- at every task end the model is thrown away and a FRESH one (new initialisation, new
  optimiser and schedule) is trained on the memory alone for E epochs, then evaluated.
Online and offline runs are therefore the same for GDumb. Classes never exposed are masked at
inference, as GDumb masks classes absent from its memory.
"""

from __future__ import annotations

from typing import Any

from .base import Method, Task


class GDumb(Method):
    name = "gdumb"
    default_memory_policy = "greedy_balanced"

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.fresh_models = 0  # how many times the learner was re-initialised

    def learn_task(self, task: Task) -> None:
        self.update_memory(task)
        self.model = self.build_model()
        self.optimizer = self.make_optimizer()
        self.fresh_models += 1
        self.report.log(f"task {task.index + 1}: GDumb trains fresh model #{self.fresh_models} on "
                        f"{len(self.memory)} memory samples")
        if len(self.memory) and self.cfg.epochs > 0:
            self.fit(self.cfg.epochs, lambda e: self.shuffled_batches(self.memory.indices, self.memory_batch_size),
                     "memory", task)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "fresh_models": self.fresh_models}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.fresh_models = int(state.get("fresh_models", 0))
