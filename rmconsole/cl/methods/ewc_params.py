"""EWC's own hyper-parameters (and Rwalk's, which extend them): the quadratic penalty.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[EWCParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..settings import MethodParams, param


@dataclass(frozen=True)
class EWCParams(MethodParams):
    """EWC (and Rwalk): the weight of the quadratic penalty and how it is applied."""

    reg_weight: float | None = param(
        None, "EWC / Rwalk regularisation weight lambda (default: the method's own, EWC 100, Rwalk 1)", ge=0
    )
    penalty_step: Literal["proximal", "gradient"] = param(
        "proximal",
        "EWC / Rwalk: how the quadratic penalty moves the parameters: an implicit (proximal) step "
        "after each SGD step, stable for any lambda, or its gradient added to the loss's (unstable when "
        "lr * lambda * F is large)",
    )
