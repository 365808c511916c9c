"""Rwalk's own hyper-parameters: EWC's penalty plus the EWC++ Fisher / path-integral windows.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[RwalkParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import param
from .ewc_params import EWCParams


@dataclass(frozen=True)
class RwalkParams(EWCParams):
    """Rwalk: the penalty's weight and the EWC++ Fisher / path-integral windows."""

    rwalk_alpha: float = param(0.9, "Rwalk: weight of the newest window in the EWC++ Fisher", gt=0, le=1)
    rwalk_interval: int = param(10, "Rwalk: optimiser steps per Fisher/score update", ge=1)
