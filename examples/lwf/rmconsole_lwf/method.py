"""Learning without Forgetting (Li & Hoiem, ECCV 2016; TPAMI 2017) on rmconsole's task protocol.

The paper, per new task: record the current network's responses on the new data for the old
tasks' outputs (the teacher), optionally warm up (train only the new outputs, everything else
frozen), then train the whole network on

    L = L_new(y, y_hat) + lambda_o * L_old(y_o, y_hat_o)

where L_old is the cross-entropy between the teacher's and the network's old outputs, both
softened with temperature T: y'_i = y_i^(1/T) / sum_j y_j^(1/T), i.e. softmax(z / T) of the
logits z. The paper uses lambda_o = 1 and T = 2 (`lwf_lambda`, `lwf_temperature`), and no
exemplars of old tasks.

On rmconsole's class-incremental, single-head protocol (README.md says why):
- the "new task outputs" are the logits of the task's own (major) classes and of any class first
  seen in it, the "old task outputs" those of the other classes seen before the task (iCaRL's
  and BiC's `new_classes = task` rule, `incremental.split_new_old`: identical to "first seen in
  the task" on disjoint streams; on blurry streams, where every class appears in task 0, the
  literal rule, `lwf_new_classes = "unseen"`, leaves nothing new after task 0); L_new is the cross-entropy over every seen
  class (the head is shared, there is no task identity at test time);
- the teacher is a frozen copy of the model taken when the task starts and run on the same
  (augmented) batch as the student, rather than responses recorded once per image: identical
  without augmentation, and the distillation stays consistent with the augmented input;
- no memory: LwF keeps no exemplars, so the run's memory stays empty whatever memory_size says;
  with stream=online it makes one pass over each task (no memory epochs), with stream=offline
  `epochs` passes;
- warm-up (`lwf_warmup_epochs`, default 0: the paper trains it "to convergence", a length it
  does not give): SGD on the head alone, features computed in eval mode without gradients (the
  shared layers, batch-norm statistics included, stay as they are), the rows of classes that
  are not new restored after every step.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor

from rmconsole.cl.methods.base import Method, Task
from rmconsole.cl.methods.incremental import frozen_copy, split_new_old

from .params import LwFParams


def distillation(old_logits: Tensor, new_logits: Tensor, temperature: float) -> Tensor:
    """The paper's L_old: cross-entropy of the network's softened outputs against the teacher's
    (softmax(z / T), which is its y^(1/T) renormalised), averaged over the batch."""
    soft_targets = torch.softmax(old_logits / temperature, dim=1)
    return -(soft_targets * torch.log_softmax(new_logits / temperature, dim=1)).sum(1).mean()


class LwF(Method[LwFParams]):
    name = "lwf"
    default_memory_policy = "random"  # never used: LwF keeps no exemplars

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.teacher: torch.nn.Module | None = None
        self.old_classes = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        self.new_classes = torch.zeros_like(self.old_classes)
        self.frozen_head: tuple[Tensor, Tensor] | None = None  # during the warm-up: the head as it was

    # ------------------------------------------------------------------ the schedule

    def before_task(self, task: Task) -> None:
        seen_before = self.seen.clone()
        # the teacher is the model as the previous task left it (before a reset_head run rebuilds the head)
        teacher = frozen_copy(self.model) if bool(seen_before.any()) else None
        super().before_task(task)
        # iCaRL's and BiC's rule (incremental.split_new_old; lwf_new_classes = "task", the default): new =
        # this task's major classes and any class never seen; old = seen before and not new. On a blurry
        # stream every class is seen in task 0, so "unseen" (never seen before) leaves nothing new after
        # it: no warm-up, and the task's own classes distilled towards the teacher.
        self.new_classes, self.old_classes = split_new_old(
            seen_before, self.seen, self.setup.groups[task.index], self.params.lwf_new_classes
        )
        self.teacher = teacher if bool(self.old_classes.any()) else None

    def learn_task(self, task: Task) -> None:
        if self.teacher is not None and self.params.lwf_warmup_epochs > 0 and bool(self.new_classes.any()):
            self._warm_up(task)
        super().learn_task(task)

    def stream_batches(self, task: Task) -> list[Tensor]:
        """The task's own data only: LwF replays nothing."""
        return self.shuffled_batches(task.stream, self.train_batch_size)

    def update_memory(self, task: Task) -> None:
        """LwF keeps no exemplars: the memory stays empty (the panel shows it so)."""
        self.report.memory_updated(task.index, [0] * self.n_classes, 0, {"policy": "none (LwF keeps no exemplars)"})

    # ------------------------------------------------------------------ warm-up: the new outputs alone

    def _warm_up(self, task: Task) -> None:
        head = self.model.fc
        self.frozen_head = (head.weight.detach().clone(), head.bias.detach().clone())
        self.optimizer = torch.optim.SGD(
            head.parameters(), lr=self.cfg.lr, momentum=0.9, nesterov=True, weight_decay=self.cfg.weight_decay
        )
        try:
            self.fit(self.params.lwf_warmup_epochs, lambda e: self.stream_batches(task), "warm-up", task)
        finally:
            self.frozen_head = None
        self.optimizer = self.make_optimizer()  # the joint stage starts with a fresh optimiser over everything

    def _head_logits(self, x: Tensor) -> Tensor:
        """The warm-up's forward: frozen features (eval mode, no gradient), the head trained."""
        self.model.eval()
        with torch.no_grad():
            features = self.model.features(x)
        self.model.train()
        return self.model.fc(features)

    def after_step(self) -> None:
        if self.frozen_head is None:
            return
        weight, bias = self.frozen_head
        keep = ~self.new_classes
        with torch.no_grad():  # old (and unseen) outputs are frozen in the warm-up: undo the step on their rows
            self.model.fc.weight[keep] = weight[keep]
            self.model.fc.bias[keep] = bias[keep]

    # ------------------------------------------------------------------ the joint stage

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        """L_new (cross-entropy over the seen classes, CutMix when the run enables it) plus, from
        the second task on, lambda_o x L_old; in the warm-up, L_new through the head alone."""
        mixed = self.setup.augmenter.maybe_cutmix(x, y)  # one draw per step, warm-up included
        if mixed is not None:
            x, y_a, y_b, lam = mixed
        warming_up = self.frozen_head is not None
        logits = self._head_logits(x) if warming_up else self.model(x)
        masked = self.mask_unseen(logits)
        if mixed is None:
            loss = nnf.cross_entropy(masked, y)
        else:
            loss = lam * nnf.cross_entropy(masked, y_a) + (1 - lam) * nnf.cross_entropy(masked, y_b)
        if warming_up or self.teacher is None or self.params.lwf_lambda == 0:
            return loss  # (in the warm-up the old outputs are frozen: L_old is a constant)
        with torch.no_grad():
            old_logits = self.teacher(x)[:, self.old_classes]
        return loss + self.params.lwf_lambda * distillation(
            old_logits, logits[:, self.old_classes], self.params.lwf_temperature
        )

    # ------------------------------------------------------------------ checkpoints
    # The teacher is rebuilt from the model at every task start and checkpoints are taken between
    # tasks, so the base state (model, optimiser, seen classes, generator) is all LwF carries.
