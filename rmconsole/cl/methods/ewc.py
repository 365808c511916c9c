"""Elastic Weight Consolidation (Kirkpatrick et al., PNAS 2017) with an episodic memory.

What differs from experience replay:
- after each task, the diagonal Fisher information F_t is estimated at the task's final
  parameters theta*_t, from per-sample gradients of log p(y|x) with y drawn from the model's
  own predictive distribution (the Fisher as defined, not the "empirical" one with true labels);
- while learning later tasks the loss gets lambda/2 * sum_t sum_i F_t,i (theta_i - theta*_t,i)^2,
  one penalty per finished task (the paper's multi-task form). The sum of quadratics is kept as
  one quadratic (precision A, centre c, constant) so a step costs one penalty term, not T; it
  is applied as an exact proximal step after each SGD step (default; stable for any lambda) or
  as a gradient added in place by parameter hooks (`penalty_step=gradient`; quadratic.py);
- the memory is a reservoir (the RM paper's "fair comparison" setting).

The Fisher is estimated on the data of the task's last training phase: the memory in online
runs (the stream is gone by then), the task's stream plus the memory in offline runs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor
from torch.func import functional_call, grad, vmap

from ..train import check_finite as parameters_finite
from .base import Method, Task
from .ewc_params import EWCParams
from .quadratic import QuadraticPenalty, Regularised


class EWC(Regularised[EWCParams], Method[EWCParams]):
    name = "ewc"
    default_memory_policy = "reservoir"
    # The paper's (and the authors' scripts') weight. Gradient descent on lambda/2 * A (theta - c)^2
    # is stable only while lr * lambda * A_max stays small (SGD, Nesterov momentum 0.9); with the
    # per-sample Fisher A_max grows with the tasks and the embedded digits run diverged in task 5.
    # The default `penalty_step=proximal` applies the penalty as an exact proximal step instead,
    # stable for every lambda (quadratic.py); `check_finite` still stops a run that diverges.
    default_reg_weight = 100.0

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        # A (theta - c)^2 + constant = sum_t F_t (theta - theta*_t)^2: A = sum_t F_t (`weights`),
        # c the Fisher-weighted mean of the anchors (`centres`); its gradient is added in backward
        # by the parameter hooks of `self.quadratic`, not through the loss
        self.quadratic = QuadraticPenalty(self.trainable(), proximal=self.params.penalty_step == "proximal")
        self.consolidated = 0  # tasks folded into the penalty

    def after_step(self) -> None:
        self.penalty_step()

    def fisher_samples(self, task: Task) -> Tensor:
        if self.cfg.stream == "online":
            return self.memory.indices
        return torch.cat([task.stream, self.memory.indices])

    def after_task(self, task: Task) -> None:
        check_finite(self, task)
        idx = self.fisher_samples(task)
        if len(idx) == 0:
            return
        fisher = diagonal_fisher(self, idx)
        self.consolidate(fisher, [p.detach() for p in self.trainable()])
        fisher_mean = float(sum(f.sum() for f in fisher) / sum(f.numel() for f in fisher))
        self.report.log(
            f"task {task.index + 1}: EWC Fisher from {len(idx)} samples, mean {fisher_mean:.3g}, "
            f"max {max(float(f.max()) for f in fisher):.3g}; {self.consolidated} task(s) consolidated, "
            f"lambda={self.reg_weight:g}"
        )

    @torch.no_grad()
    def consolidate(self, fisher: list[Tensor], anchor: list[Tensor]) -> None:
        """Fold F (theta - anchor)^2 into A (theta - c)^2 + constant, exactly:
        A(x-c)^2 + F(x-b)^2 = (A+F)(x - (Ac+Fb)/(A+F))^2 + AF/(A+F) (c-b)^2."""
        q = self.quadratic
        for a, c, f, b in zip(q.weights, q.centres, fisher, anchor):
            total = a + f
            safe = torch.where(total > 0, total, torch.ones_like(total))
            q.constant += float((a.double() * f.double() / safe.double() * (c.double() - b.double()).pow(2)).sum())
            c.copy_(torch.where(total > 0, (a * c + f * b) / safe, b))
            a.copy_(total)
        self.consolidated += 1
        q.scale, q.active = 0.5 * self.reg_weight, True

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        q = self.quadratic
        state["ewc"] = {
            "precision": q.weights,
            "centre": q.centres,
            "constant": q.constant,
            "consolidated": self.consolidated,
        }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        ewc, q = state["ewc"], self.quadratic
        for a, c, a_saved, c_saved in zip(q.weights, q.centres, ewc["precision"], ewc["centre"]):
            a.copy_(a_saved)
            c.copy_(c_saved)
        q.constant, self.consolidated = float(ewc["constant"]), int(ewc["consolidated"])
        q.scale, q.active = 0.5 * self.reg_weight, self.consolidated > 0


def diagonal_fisher(method: Method, idx: Tensor, max_floats: int = 2**25) -> list[Tensor]:
    """Mean over samples of (d log p(y|x) / d theta)^2 with y ~ p(.|x) from the model, per parameter.

    Per-sample gradients come from torch.func (vmap over grad) in chunks sized so that a chunk's
    gradients stay under `max_floats` floats. The model is in eval mode (batch norm uses its
    running statistics, so each sample's gradient is its own), on clean (test-transformed) images.
    """
    model = method.model
    model.eval()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    params = {n: p.detach() for n, p in model.named_parameters() if p.requires_grad}
    buffers = {n: b.detach() for n, b in model.named_buffers()}
    n_params = sum(p.numel() for p in params.values())
    chunk = max(1, min(256, max_floats // max(n_params, 1)))
    seen = method.seen

    def log_likelihood(p: dict[str, Tensor], x: Tensor, y: Tensor) -> Tensor:
        logits = functional_call(model, (p, buffers), (x.unsqueeze(0),))
        logits = logits.masked_fill(~seen, torch.finfo(logits.dtype).min)
        return (nnf.log_softmax(logits, dim=-1)[0] * y).sum()  # y: one-hot (indexing cannot be vmapped)

    per_sample = vmap(grad(log_likelihood), in_dims=(None, 0, 0))
    fisher = {n: torch.zeros_like(p) for n, p in params.items()}
    test = method.setup.augmenter.test
    for part in idx.split(chunk):
        x = test(method.images_of(part))
        with torch.no_grad():
            probs = torch.softmax(method.mask_unseen(model(x)), dim=-1)
        y = torch.multinomial(probs.float().cpu(), 1, generator=method.gen).flatten().to(x.device)
        y = nnf.one_hot(y, probs.shape[-1]).to(probs.dtype)
        grads = per_sample(params, x, y)
        for n in names:
            fisher[n] += grads[n].pow(2).sum(0)
    return [fisher[n] / len(idx) for n in names]


def check_finite(method: Method, task: Task) -> None:
    """Stop a diverged run with a clear reason instead of consolidating NaNs (train.Diverged)."""
    parameters_finite(method, task, "after its training, before consolidating")
