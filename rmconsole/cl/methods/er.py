"""Experience replay as the field means it (Chaudhry et al. 2019; the follow-up's and
Avalanche's ER): a reservoir memory, and every training batch half stream, half memory.

Not the RM authors' `finetune` (finetune.py): theirs draws the memory at random from memory ∪
stream and shuffles it into the stream, so a batch holds about K/(K+N) memory samples (≈ 4%
on MNIST), and on a disjoint stream its memory ends nearly all last-task samples.

- task-free streams (i-Blurry, Si-Blurry): the follow-up's ER, the defaults of `TaskFree`
  (temp batch of batch/2 stream samples, `online_iter` updates per sample, each on the temp
  batch plus batch/2 memory samples drawn uniformly without replacement; reservoir memory of
  K - batch/2 slots, updated per sample);
- the RM paper's protocol (stream = online / offline): during the stream pass each batch is
  batch/2 stream samples plus batch/2 memory samples drawn uniformly without replacement (the
  whole batch is stream while the memory is empty), the memory is a reservoir over the stream
  (updated at the task's end, as every method of that protocol), then the run's schedule
  (memory epochs online, E epochs offline) as for every method.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import Method, Task
from .taskfree import TaskFree


class ER(TaskFree, Method):
    name = "er"
    default_memory_policy = "reservoir"

    def stream_batches(self, task: Task) -> list[Tensor]:
        """The RM protocol's stream pass: batch/2 stream + batch/2 memory samples per batch."""
        if len(self.memory) == 0:
            return self.shuffled_batches(task.stream, self.train_batch_size)
        half = self.train_batch_size // 2
        stream_part = self.shuffled_batches(task.stream, self.train_batch_size - half)
        memory = self.memory.indices
        return [torch.cat([s, memory[torch.randperm(len(memory), generator=self.gen)[:half]]]) for s in stream_part]
