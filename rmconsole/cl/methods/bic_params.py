"""BiC's own hyper-parameters (BiC* reads the same): held-out set, distillation, bias correction.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[BiCParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import RunSettings, param
from .icarl_params import ICaRLParams


@dataclass(frozen=True)
class BiCParams(ICaRLParams):
    """BiC and BiC*: the held-out validation set, distillation and the bias-correction stage."""

    bic_val_fraction: float = param(0.1, "BiC: share of the memory held out for validation", gt=0, lt=1)
    bic_temperature: float = param(2.0, "BiC: distillation temperature T", gt=0)
    bic_bias_epochs: int = param(200, "BiC: epochs of the bias-correction stage on the held-out set", ge=0)
    bic_anytime_passes: int = param(
        256,
        "BiC on task-free streams: Adam passes (lr 1e-3, batches of 100) over the held-out set's logits that "
        "refit the current task's bias layer before every evaluation (the follow-up's 256)",
        ge=0,
    )

    def check(self, settings: RunSettings, n_classes: int) -> None:
        held_out = max(1, round(self.bic_val_fraction * settings.memory_size))
        if settings.memory_size - held_out < n_classes:
            raise ValueError(
                f"bic_val_fraction={self.bic_val_fraction}: holding out {held_out} of memory_size="
                f"{settings.memory_size} leaves fewer training slots than the {n_classes} classes"
            )
