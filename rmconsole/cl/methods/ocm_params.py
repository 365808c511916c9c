"""OCM's own hyper-parameters: its InfoNCE temperature, its projection head and its memory batch.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[OCMParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class OCMParams(MethodParams):
    """OCM (Guo et al., ICML 2022): online continual learning through mutual information
    maximization. The defaults are the authors' code's (temperature 0.07, a 128-d projection
    head, a memory batch of min(64, 7 x classes seen))."""

    ocm_temperature: float = param(0.07, "OCM: temperature of its InfoNCE losses", gt=0)
    ocm_projection: int = param(128, "OCM: width of its projection head (the InfoNCE embedding)", ge=1)
    ocm_memory_batch: int = param(64, "OCM: most memory samples per step (after the first task boundary)", ge=1)
    ocm_memory_per_class: int = param(
        7, "OCM: memory samples per class seen per step, up to ocm_memory_batch (the authors' 7)", ge=1
    )
