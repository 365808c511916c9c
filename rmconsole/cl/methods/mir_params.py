"""MIR's own hyper-parameters: how many memory candidates are scored per step, and in which
batch-norm mode.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[MIRParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..settings import MethodParams, param


@dataclass(frozen=True)
class MIRParams(MethodParams):
    """MIR (Aljundi et al. 2019): how many memory candidates are scored per step, and how.

    `mir_score_mode`: "eval" (the default; MIR's own paper and code) scores the candidates with
    batch norm in eval mode, so the look-ahead and the scoring leave the running statistics as
    they are; "train" is the follow-up's code (its mir.py keeps the model in train mode): the
    look-ahead's stream forward and the candidates' scoring forward use batch statistics and
    update the running statistics (PROTOCOL §9.5; docs/anytime.md measures both)."""

    mir_candidates: int = param(50, "MIR: memory candidates scored by their loss increase per step", ge=1)
    mir_score_mode: Literal["eval", "train"] = param(
        "eval",
        "MIR: batch-norm mode of the look-ahead and the candidates' scoring; eval: running statistics "
        "untouched (MIR's paper); train: batch statistics, running statistics updated (the follow-up's code)",
    )
