"""SCR's own hyper-parameters: the contrastive loss's temperature and projection size, and
where its two views come from.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[SCRParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..settings import MethodParams, param


@dataclass(frozen=True)
class SCRParams(MethodParams):
    """SCR (Mai et al. 2021): supervised contrastive replay and a nearest-class-mean classifier."""

    scr_temperature: float = param(0.07, "SCR: temperature of the supervised contrastive loss", gt=0)
    scr_projection: int = param(128, "SCR: output size of the projection head", ge=2)
    scr_views: Literal["pipeline", "recipe"] = param(
        "pipeline",
        "SCR: its two views; pipeline: two draws of the run's augmentation (as the other methods "
        "train); recipe: SCR's own code, the clean image and one view of its recipe (resized crop, flip, "
        "colour jitter, greyscale; cl/augment_scr.py)",
    )
