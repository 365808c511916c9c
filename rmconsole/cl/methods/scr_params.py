"""SCR's own hyper-parameters: the contrastive loss's temperature and projection size.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[SCRParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class SCRParams(MethodParams):
    """SCR (Mai et al. 2021): supervised contrastive replay and a nearest-class-mean classifier."""

    scr_temperature: float = param(0.07, "SCR: temperature of the supervised contrastive loss", gt=0)
    scr_projection: int = param(128, "SCR: output size of the projection head", ge=2)
