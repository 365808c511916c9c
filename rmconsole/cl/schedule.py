"""Learning-rate schedules as pure functions of the epoch index within one training call.

Both follow the authors' loop: epoch 0 of every training call is a warm-up at 0.1 x lr,
epoch 1 runs at lr, and from epoch 2 on the scheduler steps once per epoch.
"""

from __future__ import annotations

import math

STEP_MILESTONES = (30, 60, 80, 90)


def cosine_restarts_lr(steps: int, base_lr: float, eta_min: float) -> float:
    """CosineAnnealingWarmRestarts(T_0=1, T_mult=2) after `steps` scheduler steps."""
    if steps <= 0:
        return base_lr
    cycle = int(math.log2(steps + 1))  # steps in [2^i - 1, 2^(i+1) - 1) belong to cycle i
    t_i = 2**cycle
    t_cur = steps - (t_i - 1)
    return eta_min + (base_lr - eta_min) * (1 + math.cos(math.pi * t_cur / t_i)) / 2


def epoch_lr(epoch: int, base_lr: float, schedule: str = "cosine") -> float:
    """The learning rate for `epoch` (0-based) of a training call."""
    if epoch <= 0:
        return 0.1 * base_lr
    steps = epoch - 1
    if schedule == "cosine":
        return cosine_restarts_lr(steps, base_lr, 0.01 * base_lr)
    if schedule == "step":
        return base_lr * 0.1 ** sum(steps >= m for m in STEP_MILESTONES)
    if schedule == "constant":
        return base_lr
    raise ValueError(f"unknown schedule {schedule!r}")
