"""PCR's own hyper-parameter: the temperature of its proxy-based contrastive loss.

Torch-free (config.py validates a run's keys without importing torch); the method reads it
as `self.params`, typed by `Method[PCRParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class PCRParams(MethodParams):
    """PCR (Lin et al., CVPR 2023): proxy-based contrastive replay."""

    pcr_temperature: float = param(
        0.09, "PCR: temperature of the proxy-based contrastive loss and of its cosine classifier", gt=0
    )
