"""The quadratic parameter penalty of EWC and Rwalk: scale * sum_i w_i (theta_i - c_i)^2.

Its gradient, 2 * scale * w * (theta - c), is added to each parameter's .grad by a
post-accumulate-grad hook, in place on preallocated buffers: no autograd nodes and no fresh
parameter-sized tensors per step (allocating those costs more than the arithmetic on CPU).
The penalty therefore is not part of the loss graph; `value()` gives its value. An observer
can see each parameter's gradient of the task loss before the penalty is added (Rwalk needs it).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .params import RegularisedParams


class Regularised:
    """Mixin of EWC and Rwalk: `reg_weight` (the run's, else the method's default), the
    parameters the penalty covers, and the penalty's value (their `quadratic`, once a task is
    consolidated)."""

    default_reg_weight: float
    graphable_step = False  # the penalty's gradient hooks must run eagerly, step by step
    params: RegularisedParams
    model: torch.nn.Module
    quadratic: QuadraticPenalty
    consolidated: int

    @property
    def reg_weight(self) -> float:
        return self.default_reg_weight if self.params.reg_weight is None else self.params.reg_weight

    def trainable(self) -> list[Tensor]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def penalty_value(self) -> float:
        """The penalty at the current parameters (0 before the first task is consolidated)."""
        return float(self.quadratic.value()) if self.consolidated else 0.0


class QuadraticPenalty:
    def __init__(self, params: list[Tensor]) -> None:
        self.params = params
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
            with torch.no_grad():
                if self.observer is not None:
                    self.observer(i, p.grad)
                if self.active and self.scale:
                    buf = self._buffers[i]
                    torch.sub(p, self.centres[i], out=buf)
                    buf.mul_(self.weights[i])
                    p.grad.add_(buf, alpha=2.0 * self.scale)

        return add_penalty_gradient

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
