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
from .ewc import check_finite
from .quadratic import QuadraticPenalty, Regularised
from .rwalk_params import RwalkParams

EPSILON = 1e-3  # the paper's / reference code's damping of the score denominator


class Rwalk(Regularised[RwalkParams], Method[RwalkParams]):
    name = "rwalk"
    default_memory_policy = "reservoir"
    # The penalty's curvature is 2 lambda w with w = F + s <= 2. Applied as a gradient
    # (`penalty_step=gradient`), SGD with Nesterov momentum 0.9 at lr 0.05 stays stable only while
    # lr * 4 lambda < ~1.36, i.e. lambda < ~6.8: the RM authors' 100 (meant for their unnormalised,
    # near-zero importances) diverged (MNIST Blurry10-Online seed 1, task 2). The default proximal
    # step is stable for any lambda; 1 stays the default: the RWalk authors' own value.
    default_reg_weight = 1.0
    kept_state: tuple[str, ...] = (
        *Regularised.kept_state,
        *("fisher", "window_grad_sq", "small_omega", "task_score", "score", "task_grad"),
        *("previous", "window_start", "_delta"),
    )  # its scores and windows (memory bytes)

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        params = self.trainable()
        zeros = lambda: [torch.zeros_like(p) for p in params]  # noqa: E731
        self.fisher = zeros()  # running EWC++ Fisher
        self.window_grad_sq = zeros()  # squared task-loss gradients summed over the current window
        self.small_omega = zeros()  # sum of -g * delta_theta over the current window
        self.task_score = zeros()  # this task's accumulated path-integral score
        self.score = zeros()  # consolidated (averaged over tasks) score
        self.task_grad = zeros()  # the last step's task-loss gradient (before the penalty's is added)
        self.previous = [p.detach().clone() for p in params]  # theta before the step being taken
        self.window_start = [p.detach().clone() for p in params]
        self._delta = zeros()
        self.window_steps = 0
        self.fisher_started = False
        self.consolidated = 0
        # lambda * sum (F + s)(theta - theta*)^2: `weights` = normalised F + s, `centres` = theta*
        self.quadratic = QuadraticPenalty(params, proximal=self.params.penalty_step == "proximal")
        self.quadratic.observer = self._observe_task_gradient

    @property
    def weight(self) -> list[Tensor]:
        return self.quadratic.weights

    @property
    def anchor(self) -> list[Tensor]:
        return self.quadratic.centres

    def before_task(self, task: Task) -> None:
        super().before_task(task)
        torch._foreach_copy_(self.previous, [p.detach() for p in self.trainable()])
        torch._foreach_copy_(self.window_start, self.previous)

    def _observe_task_gradient(self, i: int, grad: Tensor) -> None:
        """Runs in backward, before the penalty's gradient joins: grad is the task loss's."""
        self.task_grad[i].copy_(grad)
        self.window_grad_sq[i].addcmul_(grad, grad)

    @torch.no_grad()
    def after_step(self) -> None:
        self.penalty_step()  # (proximal mode) the penalty's move is part of this step's delta theta
        params = [p.detach() for p in self.trainable()]
        torch._foreach_copy_(self._delta, params)
        torch._foreach_sub_(self._delta, self.previous)
        torch._foreach_addcmul_(self.small_omega, self.task_grad, self._delta, value=-1.0)  # -g * delta_theta
        torch._foreach_copy_(self.previous, params)
        torch._foreach_zero_(self.task_grad)  # a parameter without a gradient next step moved by no loss
        self.window_steps += 1
        if self.window_steps >= self.params.rwalk_interval:
            self.close_window()

    @torch.no_grad()
    def close_window(self) -> None:
        """Fold the window into the running Fisher and the task's score (paper eqs. 6-7)."""
        if self.window_steps == 0:
            return
        alpha = self.params.rwalk_alpha
        params = [p.detach() for p in self.trainable()]
        fresh = self.window_grad_sq
        torch._foreach_div_(fresh, float(self.window_steps))  # mean squared gradient of the window
        if self.fisher_started:
            torch._foreach_mul_(self.fisher, 1 - alpha)
            torch._foreach_add_(self.fisher, fresh, alpha=alpha)
        else:
            torch._foreach_copy_(self.fisher, fresh)
        distance = self._delta  # 1/2 F (theta - theta_window_start)^2 + eps, in place
        torch._foreach_copy_(distance, params)
        torch._foreach_sub_(distance, self.window_start)
        torch._foreach_mul_(distance, distance)
        torch._foreach_mul_(distance, self.fisher)
        torch._foreach_mul_(distance, 0.5)
        torch._foreach_add_(distance, EPSILON)
        torch._foreach_div_(self.small_omega, distance)
        torch._foreach_clamp_min_(self.small_omega, 0.0)  # only positive influence counts
        torch._foreach_add_(self.task_score, self.small_omega)
        torch._foreach_zero_(self.small_omega)
        torch._foreach_zero_(self.window_grad_sq)
        torch._foreach_copy_(self.window_start, params)
        self.fisher_started = True
        self.window_steps = 0

    @torch.no_grad()
    def after_task(self, task: Task) -> None:
        check_finite(self, task)
        self.close_window()
        params = self.trainable()
        if self.consolidated:
            self.score = [(s + t) / 2 for s, t in zip(self.score, self.task_score)]
        else:
            self.score = [t.clone() for t in self.task_score]
        fisher_n, score_n = _min_max(self.fisher), _min_max(self.score)
        q = self.quadratic
        for w, a, f, sc, p in zip(q.weights, q.centres, fisher_n, score_n, params):
            w.copy_(f + sc)
            a.copy_(p)
        q.scale, q.active = self.reg_weight, True
        total = lambda ts: float(sum(t.sum() for t in ts))  # noqa: E731
        self.report.log(
            f"task {task.index + 1}: Rwalk task score sum {total(self.task_score):.4g}, consolidated "
            f"score sum {total(self.score):.4g}, Fisher sum {total(self.fisher):.4g}, lambda={self.reg_weight:g}"
        )
        for t in self.task_score:
            t.zero_()
        self.consolidated += 1

    _STATE = (
        "fisher",
        "window_grad_sq",
        "small_omega",
        "task_score",
        "score",
        "weight",
        "anchor",
        "previous",
        "window_start",
        "task_grad",
    )

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["rwalk"] = {k: getattr(self, k) for k in self._STATE}
        state["rwalk"].update(
            window_steps=self.window_steps, fisher_started=self.fisher_started, consolidated=self.consolidated
        )
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        saved = state["rwalk"]
        for k in self._STATE:
            torch._foreach_copy_(getattr(self, k), [t.to(self.device) for t in saved[k]])
        self.window_steps, self.fisher_started = int(saved["window_steps"]), bool(saved["fisher_started"])
        self.consolidated = int(saved["consolidated"])
        self.quadratic.scale, self.quadratic.active = self.reg_weight, self.consolidated > 0


def _min_max(tensors: list[Tensor]) -> list[Tensor]:
    """Scale a set of tensors jointly to [0, 1] (the paper normalises F and s before adding them)."""
    low = min(float(t.min()) for t in tensors)
    high = max(float(t.max()) for t in tensors)
    span = high - low
    if span <= 0:
        return [torch.zeros_like(t) for t in tensors]
    return [(t - low) / span for t in tensors]
