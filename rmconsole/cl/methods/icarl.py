"""iCaRL (Rebuffi et al., CVPR 2017) on the RM protocol.

What differs from experience replay:
- memory: herding exemplars per class (the `prototype` policy: greedily keep the samples whose
  running feature mean stays closest to the class mean);
- loss: sigmoid outputs and binary cross-entropy over the seen classes. For the task's new
  classes the target is the label (one-hot); for old classes it is the previous model's sigmoid
  output on the same (augmented) input: distillation. The previous model is a frozen copy taken
  when the task starts;
- inference: nearest mean of exemplars. Features are L2-normalised, each class's mean is the
  normalised mean of its exemplars' features, and a test sample takes the closest mean's class.
  The linear head is used only for training, but it is trained: every parameter of the network
  is in the optimiser (the RM authors' code builds its optimiser before adding the head, so
  their head is never updated).

"New" and "old" classes in blurry streams follow `new_classes` (see incremental.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .base import Method, Task
from .icarl_params import ICaRLParams
from .incremental import NewOldClasses


def _one_hot(y: Tensor, n_classes: int) -> Tensor:
    """float one-hot rows (`one_hot(y, n).float()`; its range check reads y's min and max on the host)."""
    return torch.zeros(len(y), n_classes, device=y.device).scatter_(1, y[:, None], 1.0)


class ICaRL(NewOldClasses[ICaRLParams], Method[ICaRLParams]):
    name = "icarl"
    kept_state: tuple[str, ...] = ("previous_model", "class_means")  # (memory bytes)
    default_memory_policy = "prototype"

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.previous_model: torch.nn.Module | None = None
        self.new_classes = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        self.old_classes = torch.zeros_like(self.new_classes)
        self.class_means: Tensor | None = None  # (n_classes, feature_dim), recomputed when stale
        self.means_valid = torch.zeros_like(self.new_classes)

    def before_task(self, task: Task) -> None:
        super().before_task(task)  # new / old classes and the frozen previous model
        self.class_means = None

    def targets(self, x: Tensor, onehot: Tensor) -> Tensor:
        """Per-class BCE targets: labels for new classes, the previous model's outputs for old ones."""
        if self.previous_model is None:
            return onehot
        with torch.no_grad():
            old = torch.sigmoid(self.previous_model(x))
        return torch.where(self.old_classes, old, onehot)

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        mixed = self.setup.augmenter.maybe_cutmix(x, y)
        if mixed is None:
            onehot = _one_hot(y, self.n_classes)
        else:
            x, y_a, y_b, lam = mixed
            onehot = lam * _one_hot(y_a, self.n_classes) + (1 - lam) * _one_hot(y_b, self.n_classes)
        logits = self.model(x)
        bce = nnf.binary_cross_entropy_with_logits(logits, self.targets(x, onehot), reduction="none")
        return (bce * self.seen).sum(1).mean()  # summed over seen classes, like CE's scale

    def after_step(self) -> None:
        self.class_means = None  # the features moved

    def update_memory(self, task: Task) -> None:
        super().update_memory(task)
        self.class_means = None

    # ------------------------------------------------------------------ nearest mean of exemplars

    @torch.inference_mode()
    def compute_class_means(self) -> None:
        feats = nnf.normalize(self.features_of(self.memory.indices).float(), dim=1)
        labels = self.memory.labels.to(feats.device)
        sums = torch.zeros(self.n_classes, feats.shape[1], device=feats.device).index_add_(0, labels, feats)
        counts = torch.bincount(labels, minlength=self.n_classes)
        self.class_means = nnf.normalize(sums, dim=1)
        self.means_valid = (counts > 0).to(self.device)

    @torch.inference_mode()
    def class_scores(self, x: Tensor) -> Tensor:
        """Minus the distance to each class's mean of exemplars (classes without one: -inf), so
        the arg-max is the nearest mean and top-k the k nearest."""
        if len(self.memory) == 0:  # no exemplars yet (only during the first stream pass)
            return super().class_scores(x)
        if self.class_means is None:
            self.compute_class_means()
        assert self.class_means is not None  # compute_class_means sets it
        self.model.eval()
        feats = nnf.normalize(self.model.features(x).float(), dim=1)
        dist = torch.cdist(feats, self.class_means)
        return -dist.masked_fill(~self.means_valid, float("inf"))

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["icarl"] = {"new_classes": self.new_classes.cpu(), "old_classes": self.old_classes.cpu()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.new_classes = state["icarl"]["new_classes"].to(self.device)
        self.old_classes = state["icarl"]["old_classes"].to(self.device)
        self.class_means = None
