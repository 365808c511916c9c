"""Rainbow Memory (Bang et al., CVPR 2021).

What differs from experience replay:
- memory update: per class, candidates (stream + memory) sorted by uncertainty over
  perturbed views, every (n_c / k_c)-th kept, so the memory spans robust to fragile samples;
- batches: during the stream pass every batch is half stream, half memory (the memory
  cycled), and the memory-only epochs use half batches (8), as in the authors' code;
- data augmentation (CutMix + AutoAugment by default) comes from the run's `augment` list.

On the follow-up's task-free streams, RM comes twice, on purpose (`rm_variant`):
- ``paper``: RM as its paper defines it, under anytime evaluation: batches of the follow-up's
  ER (batch/2 stream + batch/2 memory, `online_iter` updates per sample), the head kept as ER
  keeps it; the task's stream is remembered (as indices) and at each task boundary the memory
  is rebuilt by uncertainty (Alg. 1, K slots, from memory + the task's stream), then E epochs
  on the memory alone (epoch 0 at 0.1 lr, cosine restarts).
- ``iblurry``: the follow-up's port (PROTOCOL §9.5): one update per `batch_size` samples on
  those stream samples only (`online_iter` ignored), a class-balanced memory with a random
  victim (K - batch/2 slots; the uncertainty update is never called), the head rebuilt from
  scratch and the optimiser reset at every new class, and at each task boundary the optimiser
  reset and E memory-only epochs. Its gradient clipping (norm 10) in the memory epochs is not
  reproduced. Nearly every anytime evaluation of this port sees a head rebuilt since the last
  memory epochs: the reason the follow-up's table puts RM last.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .base import Method, Task
from .rm_params import RMParams
from .taskfree import TaskFree


class RainbowMemory(TaskFree, Method[RMParams]):
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

    # ------------------------------------------------------------------ task-free streams

    @property
    def port(self) -> bool:
        """The follow-up's port (rm_variant = iblurry)."""
        return self.params.rm_variant == "iblurry"

    @property
    def head_rule(self) -> str:  # type: ignore[override]  # TaskFree's ClassVar, per run here (rm_variant)
        return "rebuild" if self.port else "extend"

    @property
    def full_capacity(self) -> bool:  # type: ignore[override]  # TaskFree's ClassVar, per run here (rm_variant)
        return not self.port  # the paper's memory holds K; the port keeps K - batch/2 (the follow-up's ER)

    def online_start(self) -> None:
        super().online_start()
        self.task_stream: list[int] = []  # the paper variant's candidates of this task

    def online_task_start(self, task: Task) -> None:
        if self.port:
            self.optimizer = self.make_optimizer()

    def online_observe(self, index: int, label: int) -> None:
        if not self.port:
            self.task_stream.append(index)
            self.train_on_temp(index, label)  # the memory is RM's own update at task ends
            return
        self.temp.append(index)
        self.temp_labels.append(label)
        if len(self.temp) >= self.cfg.batch_size:  # one stream-only step per batch of samples
            self.train_batches([torch.tensor(self.temp, dtype=torch.long)])
            for i, y in zip(self.temp, self.temp_labels):
                self.online_memory.balanced(i, y, self.sample_rng.choice)
            self.temp, self.temp_labels = [], []

    def online_task_end(self, task: Task) -> None:
        if self.port:
            self.optimizer = self.make_optimizer()
            info: dict[str, Any] = {"rm_variant": "iblurry"}
        else:
            stream = torch.tensor(self.task_stream, dtype=torch.long)
            self.update_memory(Task(task.index, stream, task.n_tasks))  # Alg. 1 over memory + the task's stream
            self.task_stream = []
            self.optimizer = self.make_optimizer()
            info = {"rm_variant": "paper"}
        self.memory_epochs(task, self.cfg.epochs, self.cfg.batch_size)
        self.memory_info.update(info)

    def memory_report(self, task: Task, info: dict[str, Any] | None = None) -> None:
        if self.port:
            super().memory_report(task, info)  # the paper variant reported its update in update_memory

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.task_free and hasattr(self, "task_stream"):
            state["rm_task_stream"] = list(self.task_stream)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if "rm_task_stream" in state:
            self.task_stream = list(state["rm_task_stream"])
