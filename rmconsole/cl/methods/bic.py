"""BiC, Large Scale Incremental Learning (Wu et al., CVPR 2019), and BiC* (no distillation).

What differs from experience replay:
- held-out validation: `bic_val_fraction` of the memory budget (10%) is a class-balanced
  validation set, never trained on. A task's share is set aside from its stream as the stream
  arrives; the training memory gets the remaining K - V slots (herding exemplars, as BiC);
- stage 1 (the usual schedule): loss = lam * L_d + (1 - lam) * L_c with lam = n_old / n_seen,
  L_c the cross-entropy over seen classes and L_d the distillation over the old classes'
  logits at temperature T = `bic_temperature` (2), against the previous model (with its bias
  correction) on the same input. BiC* (`bic_star`, the RM paper's ImageNet row) drops L_d;
- stage 2: the network frozen, two scalars (alpha, beta) correct the logits of the task's new
  classes, o -> alpha * o + beta, fitted by cross-entropy on the validation set as in BiC's
  code: SGD (the run's lr, momentum 0.9), `bic_bias_epochs` (200) epochs of minibatches, an L2
  term 0.1 * beta^2 / 2. Corrections of earlier tasks stay fixed on their classes;
- inference uses the corrected logits (the RM authors' blurry runs train alpha, beta but their
  forward pass applies another, untrained layer: the correction is never used).
"New" and "old" classes in blurry streams follow `new_classes` (see incremental.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .. import memory as M
from .base import Method, Task
from .incremental import NewOldClasses
from .params import BiCParams

BETA_L2 = 0.1  # BiC's reference code penalises beta (its "gamma") by 0.1 * beta^2 / 2


class BiC(NewOldClasses, Method):
    name = "bic"
    default_memory_policy = "prototype"
    distill: bool = True
    params: BiCParams

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.val_capacity = max(1, round(self.params.bic_val_fraction * self.cfg.memory_size))
        self.memory = M.Memory(self.cfg.memory_size - self.val_capacity)
        self.val_indices = torch.empty(0, dtype=torch.long)
        self.val_labels = torch.empty(0, dtype=torch.long)
        # the bias correction layer, per class: logit_c -> alpha_c * logit_c + beta_c
        self.alpha = torch.ones(self.n_classes, device=self.device)
        self.beta = torch.zeros(self.n_classes, device=self.device)
        self.new_classes = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        self.old_classes = torch.zeros_like(self.new_classes)
        self.previous: tuple[torch.nn.Module, Tensor, Tensor] | None = None  # old model and its correction
        self.bias_history: list[dict[str, Any]] = []

    # ------------------------------------------------------------------ the bias layer

    @staticmethod
    def correct(logits: Tensor, alpha: Tensor, beta: Tensor) -> Tensor:
        return logits * alpha + beta

    def logits(self, x: Tensor) -> Tensor:
        return self.mask_unseen(self.correct(self.model(x), self.alpha, self.beta))

    # ------------------------------------------------------------------ the schedule

    def before_task(self, task: Task) -> None:
        super().before_task(task)  # new / old classes and the frozen previous model
        self.previous = None if self.previous_model is None else \
            (self.previous_model, self.alpha.clone(), self.beta.clone())
        # stage 1 trains the new classes uncorrected; their (alpha, beta) is fitted in stage 2
        self.alpha = torch.where(self.new_classes, torch.ones_like(self.alpha), self.alpha)
        self.beta = torch.where(self.new_classes, torch.zeros_like(self.beta), self.beta)

    def learn_task(self, task: Task) -> None:
        held_out = self.hold_out(task)
        training = Task(task.index, task.stream[~torch.isin(task.stream, held_out)], task.n_tasks)
        super().learn_task(training)

    def after_task(self, task: Task) -> None:
        fit: dict[str, Any] = {"task": task.index, "classes": self.new_classes.nonzero().flatten().tolist()}
        if self.previous is not None and bool(self.new_classes.any()) and len(self.val_indices):
            fit.update(self.fit_bias(task))
        else:
            fit["note"] = "not fitted: no old classes or no new classes"
        self.bias_history.append(fit)
        held = torch.bincount(self.val_labels, minlength=self.n_classes).tolist()
        self.report.log(f"task {task.index + 1}: validation set {held}; bias correction {fit}")

    def hold_out(self, task: Task) -> Tensor:
        """Refill the class-balanced validation set from the old one and this task's stream;
        returns the stream samples it took (they are never trained on)."""
        candidates = torch.cat([self.val_indices, task.stream])
        labels = self.labels_of(candidates).cpu()
        chosen = M.class_balanced_select(candidates, labels, self.val_capacity, self.seen_classes, self.gen)
        self.val_indices, self.val_labels = chosen, self.labels_of(chosen).cpu()
        return chosen[torch.isin(chosen, task.stream)]

    # ------------------------------------------------------------------ stage 1

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        mixed = self.setup.augmenter.maybe_cutmix(x, y)
        if mixed is not None:
            x, y_a, y_b, lam_mix = mixed
        logits = self.correct(self.model(x), self.alpha, self.beta)
        masked = self.mask_unseen(logits)
        if mixed is None:
            classification = nnf.cross_entropy(masked, y)
        else:
            classification = lam_mix * nnf.cross_entropy(masked, y_a) + (1 - lam_mix) * nnf.cross_entropy(masked, y_b)
        if not self.distill or self.previous is None:
            return classification
        old_model, old_alpha, old_beta = self.previous
        with torch.no_grad():
            old_logits = self.correct(old_model(x), old_alpha, old_beta)[:, self.old_classes]
        temperature = self.params.bic_temperature
        soft_targets = torch.softmax(old_logits / temperature, dim=1)
        distillation = -(soft_targets * torch.log_softmax(logits[:, self.old_classes] / temperature, dim=1)).sum(1).mean()
        lam = float(self.old_classes.sum()) / float(self.seen.sum())
        return lam * distillation + (1 - lam) * classification

    # ------------------------------------------------------------------ stage 2

    def fit_bias(self, task: Task) -> dict[str, Any]:
        """Fit this task's (alpha, beta) on the held-out set with the network frozen (its logits
        are computed once, on clean images)."""
        epochs = self.params.bic_bias_epochs
        self.report.phase(task.index, "bias correction", len(self.val_indices) * max(epochs, 1))
        self.model.eval()
        with torch.no_grad():
            test = self.setup.augmenter.test
            logits = torch.cat([self.model(test(self.images_of(part))) for part in self.val_indices.split(4096)])
        labels = self.val_labels.to(logits.device)
        pair = torch.tensor([1.0, 0.0], device=self.device, requires_grad=True)
        optimizer = torch.optim.SGD([pair], lr=self.cfg.lr, momentum=0.9)

        def corrected(rows: Tensor) -> Tensor:
            alpha = torch.where(self.new_classes, pair[0], self.alpha)
            beta = torch.where(self.new_classes, pair[1], self.beta)
            return self.mask_unseen(self.correct(logits[rows], alpha, beta))

        everything = torch.arange(len(labels), device=logits.device)
        with torch.no_grad():
            before = float(nnf.cross_entropy(corrected(everything), labels))
        for _ in range(epochs):
            order = torch.randperm(len(labels), generator=self.gen).to(logits.device)
            for rows in order.split(self.cfg.batch_size):
                loss = nnf.cross_entropy(corrected(rows), labels[rows]) + BETA_L2 * pair[1] ** 2 / 2
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            self.report.advance(len(labels))
        with torch.no_grad():
            after = float(nnf.cross_entropy(corrected(everything), labels))
        alpha, beta = (float(v) for v in pair.detach())
        self.alpha = torch.where(self.new_classes, torch.full_like(self.alpha, alpha), self.alpha)
        self.beta = torch.where(self.new_classes, torch.full_like(self.beta, beta), self.beta)
        return {"alpha": round(alpha, 4), "beta": round(beta, 4), "val_loss_before": round(before, 4),
                "val_loss_after": round(after, 4)}

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["bic"] = {"val_indices": self.val_indices, "val_labels": self.val_labels, "alpha": self.alpha.cpu(),
                        "beta": self.beta.cpu(), "bias_history": self.bias_history}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        bic = state["bic"]
        self.val_indices, self.val_labels = bic["val_indices"], bic["val_labels"]
        self.alpha, self.beta = bic["alpha"].to(self.device), bic["beta"].to(self.device)
        self.bias_history = list(bic["bias_history"])


class BiCStar(BiC):
    """BiC* (RM paper, ImageNet row): BiC without the distillation loss."""

    name = "bic_star"
    distill = False
