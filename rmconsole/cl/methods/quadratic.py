"""The quadratic parameter penalty EWC and Rwalk add to the loss: scale * sum_i w_i (theta_i - c_i)^2.

Written as one autograd function over whole parameter lists with `torch._foreach_*` kernels, so
a training step pays a handful of fused passes over the parameters instead of autograd nodes
per tensor and operation; value and gradient are exact.
"""

from __future__ import annotations

import torch
from torch import Tensor


class _Quadratic(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weights: list[Tensor], centres: list[Tensor], scale: float, *params: Tensor) -> Tensor:  # type: ignore[override]
        diffs = torch._foreach_sub(list(params), centres)
        weighted = torch._foreach_mul(diffs, weights)
        value = torch.stack([torch.dot(a.flatten(), b.flatten()) for a, b in zip(weighted, diffs)]).sum()
        ctx.grads = torch._foreach_mul(weighted, 2.0 * scale)
        return value * scale

    @staticmethod
    def backward(ctx, grad_output: Tensor):  # type: ignore[override]
        return (None, None, None, *torch._foreach_mul(ctx.grads, grad_output))


def quadratic_penalty(params: list[Tensor], weights: list[Tensor], centres: list[Tensor], scale: float) -> Tensor:
    """scale * sum over tensors of sum(w * (p - c)^2), differentiable in `params`."""
    return _Quadratic.apply(weights, centres, scale, *params)
