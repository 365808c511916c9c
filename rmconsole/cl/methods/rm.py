"""Rainbow Memory (Bang et al., CVPR 2021).

What differs from experience replay:
- memory update: per class, candidates (stream + memory) sorted by uncertainty over
  perturbed views, every (n_c / k_c)-th kept, so the memory spans robust to fragile samples;
- batches: during the stream pass every batch is half stream, half memory (the memory
  cycled), and the memory-only epochs use half batches (8), as in the authors' code;
- data augmentation (CutMix + AutoAugment by default) comes from the run's `augment` list.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import Method, Task


class RainbowMemory(Method):
    name = "rm"
    default_memory_policy = "uncertainty"

    @property
    def memory_batch_size(self) -> int:
        return self.cfg.memory_batch_size or self.cfg.batch_size // 2

    def stream_batches(self, task: Task) -> list[Tensor]:
        """Each batch: batch/2 stream samples + batch/2 memory samples (cycled, reshuffled per
        cycle); with an empty memory (task 0) the whole batch is stream."""
        if len(self.memory) == 0:
            return self.shuffled_batches(task.stream, self.train_batch_size)
        half = self.train_batch_size // 2
        stream_part = self.shuffled_batches(task.stream, self.train_batch_size - half)
        need = len(stream_part) * half
        cycles = -(-need // len(self.memory))
        memory_order = torch.cat([self._shuffled(self.memory.indices) for _ in range(cycles)])[:need]
        return [torch.cat([s, m]) for s, m in zip(stream_part, memory_order.split(half))]
