"""MIR's own hyper-parameter: how many memory candidates are scored per step.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[MIRParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class MIRParams(MethodParams):
    """MIR (Aljundi et al. 2019): how many memory candidates are scored per step."""

    mir_candidates: int = param(50, "MIR: memory candidates scored by their loss increase per step", ge=1)
