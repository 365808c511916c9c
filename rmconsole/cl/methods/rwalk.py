"""Riemannian Walk (Chaudhry et al., ECCV 2018) with an episodic memory.

What differs from experience replay:
- EWC++ Fisher: a running average F <- alpha * F_window + (1 - alpha) * F of the squared
  gradients of the task loss (empirical Fisher), refreshed every `rwalk_interval` steps;
- path-integral score: every step adds -g * delta_theta (the loss decrease each parameter
  caused, g = gradient of the task loss without the penalty); every interval the sum is divided
  by the KL distance travelled, 1/2 F (theta - theta_window_start)^2 + eps, and its positive
  part accumulates. At a task's end the task's score is averaged with the previous one,
  s <- (s + s_task) / 2, so regularisation does not grow ever more rigid;
- loss + lambda * sum_i (F_i + s_i) (theta_i - theta*_i)^2 with F and s each min-max
  normalised to [0, 1] and theta* the parameters at the last task's end;
- the memory is a reservoir (the RM paper's "fair comparison" setting).

The RM authors' Rwalk keeps references to the live parameters and gradients instead of
copies, so "new" and "old" are the same tensors and the score stays zero; here parameters
and gradients are copied before they change.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .base import Method, Task
from .quadratic import quadratic_penalty

EPSILON = 1e-3  # the paper's / reference code's damping of the score denominator


class Rwalk(Method):
    name = "rwalk"
    default_memory_policy = "reservoir"
    # On the paper's [0, 1]-normalised importances lambda = 100 makes the penalty's curvature
    # (2 lambda w, up to 400) unstable for SGD at lr 0.05; 1 is the RWalk authors' own value.
    default_reg_weight = 1.0

    @property
    def reg_weight(self) -> float:
        return self.default_reg_weight if self.cfg.reg_weight is None else self.cfg.reg_weight

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        params = self.trainable()
        zeros = lambda: [torch.zeros_like(p) for p in params]  # noqa: E731
        self.fisher = zeros()  # running EWC++ Fisher
        self.window_grad_sq = zeros()  # squared task-loss gradients summed over the current window
        self.small_omega = zeros()  # sum of -g * delta_theta over the current window
        self.task_score = zeros()  # this task's accumulated path-integral score
        self.score = zeros()  # consolidated (averaged over tasks) score
        self.weight = zeros()  # normalised F + s of the penalty
        self.anchor = [p.detach().clone() for p in params]  # theta* of the penalty
        self.previous = [p.detach().clone() for p in params]  # theta before the step being taken
        self.window_start = [p.detach().clone() for p in params]
        self.window_steps = 0
        self.fisher_started = False
        self.consolidated = 0

    def trainable(self) -> list[Tensor]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def before_task(self, task: Task) -> None:
        super().before_task(task)
        with torch.no_grad():
            for prev, start, p in zip(self.previous, self.window_start, self.trainable()):
                prev.copy_(p)
                start.copy_(p)

    def penalty(self) -> Tensor | None:
        if not self.consolidated or self.reg_weight == 0:
            return None
        return quadratic_penalty(self.trainable(), self.weight, self.anchor, self.reg_weight)

    @torch.no_grad()
    def after_step(self) -> None:
        params = self.trainable()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        reg = self.reg_weight if self.consolidated else 0.0
        if reg:  # the task loss's gradient: remove the penalty's, 2 lambda w (theta_prev - theta*)
            pull = torch._foreach_mul(torch._foreach_sub(self.previous, self.anchor), self.weight)
            grads = torch._foreach_sub(grads, torch._foreach_mul(pull, 2.0 * reg))
        delta = torch._foreach_sub(params, self.previous)
        torch._foreach_addcmul_(self.small_omega, grads, delta, value=-1.0)  # -g * delta_theta
        torch._foreach_addcmul_(self.window_grad_sq, grads, grads)
        torch._foreach_copy_(self.previous, params)
        self.window_steps += 1
        if self.window_steps >= self.cfg.rwalk_interval:
            self.close_window()

    @torch.no_grad()
    def close_window(self) -> None:
        """Fold the window into the running Fisher and the task's score (paper eqs. 6-7)."""
        if self.window_steps == 0:
            return
        alpha = self.cfg.rwalk_alpha
        for i, p in enumerate(self.trainable()):
            fresh = self.window_grad_sq[i] / self.window_steps
            if self.fisher_started:
                self.fisher[i].mul_(1 - alpha).add_(alpha * fresh)
            else:
                self.fisher[i].copy_(fresh)
            distance = 0.5 * self.fisher[i] * (p - self.window_start[i]).pow(2) + EPSILON
            self.task_score[i].add_((self.small_omega[i] / distance).clamp_(min=0))
            self.small_omega[i].zero_()
            self.window_grad_sq[i].zero_()
            self.window_start[i].copy_(p)
        self.fisher_started = True
        self.window_steps = 0

    @torch.no_grad()
    def after_task(self, task: Task) -> None:
        self.close_window()
        params = self.trainable()
        if self.consolidated:
            self.score = [(s + t) / 2 for s, t in zip(self.score, self.task_score)]
        else:
            self.score = [t.clone() for t in self.task_score]
        fisher_n, score_n = _min_max(self.fisher), _min_max(self.score)
        self.weight = [f + s for f, s in zip(fisher_n, score_n)]
        self.anchor = [p.detach().clone() for p in params]
        total = lambda ts: float(sum(t.sum() for t in ts))  # noqa: E731
        self.report.log(f"task {task.index + 1}: Rwalk task score sum {total(self.task_score):.4g}, consolidated "
                        f"score sum {total(self.score):.4g}, Fisher sum {total(self.fisher):.4g}, lambda={self.reg_weight:g}")
        for t in self.task_score:
            t.zero_()
        self.consolidated += 1

    _STATE = ("fisher", "window_grad_sq", "small_omega", "task_score", "score", "weight", "anchor", "previous",
              "window_start")

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["rwalk"] = {k: getattr(self, k) for k in self._STATE}
        state["rwalk"].update(window_steps=self.window_steps, fisher_started=self.fisher_started,
                              consolidated=self.consolidated)
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        saved = state["rwalk"]
        for k in self._STATE:
            setattr(self, k, [t.to(self.device) for t in saved[k]])
        self.window_steps, self.fisher_started = int(saved["window_steps"]), bool(saved["fisher_started"])
        self.consolidated = int(saved["consolidated"])


def _min_max(tensors: list[Tensor]) -> list[Tensor]:
    """Scale a set of tensors jointly to [0, 1] (the paper normalises F and s before adding them)."""
    low = min(float(t.min()) for t in tensors)
    high = max(float(t.max()) for t in tensors)
    span = high - low
    if span <= 0:
        return [torch.zeros_like(t) for t in tensors]
    return [(t - low) / span for t in tensors]
