"""The quadratic parameter penalty of EWC and Rwalk: scale * sum_i w_i (theta_i - c_i)^2.

Its gradient, 2 * scale * w * (theta - c), is added to each parameter's .grad by a
post-accumulate-grad hook, in place on preallocated buffers: no autograd nodes and no fresh
parameter-sized tensors per step (allocating those costs more than the arithmetic on CPU).
The penalty therefore is not part of the loss graph; `value()` gives its value. An observer
can see each parameter's gradient of the task loss before the penalty is added (Rwalk needs it).

Two ways to apply it (`penalty_step`):
- `gradient`: the penalty's gradient joins the loss's before the SGD step. Gradient descent
  on s * w * (theta - c)^2 with Nesterov momentum mu is stable only while
  lr * 2 s w / (1 - mu) stays under a small constant; with the true (per-sample) Fisher the
  largest w grows task after task, and EWC at the paper's lambda = 100 diverges on digits.
- `proximal` (default): the SGD step (with momentum) takes the loss's gradient only, then the
  penalty's proximal operator is applied exactly, per parameter:
  theta <- argmin_x s w (x - c)^2 + (x - theta)^2 / (2 t) = (theta + 2 t s w c) / (1 + 2 t s w),
  with t = lr / (1 - mu), the step the momentum gives a steady gradient, so the training's
  fixed points are those of loss + penalty, as with the gradient. The map is a contraction
  towards c for every lambda, so the penalty can no longer make training diverge; where
  lr * s * w is small it equals the gradient step to first order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, cast

import torch
from torch import Tensor

from ..models import Backbone
from .ewc_params import EWCParams

RP = TypeVar("RP", bound=EWCParams)


class Regularised(Generic[RP]):
    """Mixin of EWC and Rwalk: `reg_weight` (the run's, else the method's default), the
    parameters the penalty covers, and the penalty's value (their `quadratic`, once a task is
    consolidated)."""

    default_reg_weight: float
    graphable_step = False  # the penalty's gradient hooks must run eagerly, step by step
    kept_state: tuple[str, ...] = ("quadratic.weights", "quadratic.centres")  # Fisher and anchor (memory bytes)
    params: RP  # EWC's params, or Rwalk's (which extend them)
    model: Backbone
    quadratic: QuadraticPenalty
    consolidated: int
    optimizer: torch.optim.Optimizer | None

    @property
    def reg_weight(self) -> float:
        return self.default_reg_weight if self.params.reg_weight is None else self.params.reg_weight

    def trainable(self) -> list[Tensor]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def penalty_step(self) -> None:
        """After each optimiser step (`after_step`): the penalty's proximal step, when it is
        applied that way. Its step t = lr / (1 - momentum) of the optimiser's (one) group."""
        if not self.quadratic.proximal:
            return
        assert self.optimizer is not None  # after a step: the task's optimiser exists
        group = self.optimizer.param_groups[0]
        lr = float(group["lr"])
        self.quadratic.proximal_step(lr / (1.0 - float(group.get("momentum", 0.0))))

    def penalty_value(self) -> float:
        """The penalty at the current parameters (0 before the first task is consolidated)."""
        return float(self.quadratic.value()) if self.consolidated else 0.0


class QuadraticPenalty:
    def __init__(self, params: list[Tensor], proximal: bool = False) -> None:
        self.params = params
        self.proximal = proximal  # True: the hooks leave the gradient alone; `proximal_step` applies the penalty
        self.weights = [torch.zeros_like(p) for p in params]
        self.centres = [p.detach().clone() for p in params]
        self.scale = 0.0
        self.constant = 0.0  # added to value() only (EWC's exact sum of per-task penalties)
        self.active = False
        self.observer: Callable[[int, Tensor], None] | None = None
        self._buffers = [torch.empty_like(p) for p in params]
        self._handles = [p.register_post_accumulate_grad_hook(self._hook(i)) for i, p in enumerate(params)]

    def _hook(self, i: int) -> Callable[[Tensor], None]:
        def add_penalty_gradient(p: Tensor) -> None:
            grad = cast(Tensor, p.grad)  # a post-accumulate-grad hook: the gradient is there
            with torch.no_grad():
                if self.observer is not None:
                    self.observer(i, grad)
                if self.active and self.scale and not self.proximal:
                    buf = self._buffers[i]
                    torch.sub(p, self.centres[i], out=buf)
                    buf.mul_(self.weights[i])
                    grad.add_(buf, alpha=2.0 * self.scale)

        return add_penalty_gradient

    @torch.no_grad()
    def proximal_step(self, step: float) -> None:
        """theta <- (theta + 2 t s w c) / (1 + 2 t s w) for every parameter (t = `step`)."""
        if not (self.active and self.scale):
            return
        t = 2.0 * self.scale * step
        for p, w, c, buf in zip(self.params, self.weights, self.centres, self._buffers):
            torch.mul(w, t, out=buf)  # buf = 2 t s w
            p.addcmul_(buf, c)  # theta + 2 t s w c
            buf.add_(1.0)
            p.div_(buf)

    @torch.no_grad()
    def value(self) -> Tensor:
        """scale * (sum w (theta - c)^2 + constant) at the current parameters."""
        total = torch.zeros((), dtype=torch.float64)
        for p, w, c, buf in zip(self.params, self.weights, self.centres, self._buffers):
            torch.sub(p, c, out=buf)
            total += float(torch.dot((buf * w).flatten(), buf.flatten()))
        return (self.scale * (total + self.constant)).float()

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
