"""EWC++'s own hyper-parameters (the follow-up's task-free EWC).

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[EWCppParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class EWCppParams(MethodParams):
    """EWC++ (Chaudhry et al. 2018) as the follow-up runs it: an online Fisher (EMA of squared
    gradients) and one penalty slot refreshed at task ends."""

    ewcpp_weight: float = param(100.0, "EWC++: penalty weight on sum F (theta - theta*)^2 (the follow-up's 100)", ge=0)
    ewcpp_alpha: float = param(0.5, "EWC++: weight of the newest squared gradient in the Fisher EMA", gt=0, le=1)
