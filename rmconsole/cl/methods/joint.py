"""Joint training: one model trained on the whole training set at once, the upper bound that
intransigence (I_last) is measured against.

The loop gives a `single_task` method the whole train set as one task (every class from the
first batch) and evaluates it on every class. It trains E epochs of shuffled batches over that
set, with no memory and no stream/memory split; the run is stored like any other, and
`rmconsole runs` / `show` compute I_last of the other runs from it (see store/runs.py).
"""

from __future__ import annotations

from .base import Method, Task


class Joint(Method):
    name = "joint"
    single_task = True

    def learn_task(self, task: Task) -> None:
        self.memory_info = {"policy": "none (joint training keeps no memory)"}
        if self.cfg.epochs > 0:
            self.fit(
                self.cfg.epochs, lambda e: self.shuffled_batches(task.stream, self.train_batch_size), "joint", task
            )
