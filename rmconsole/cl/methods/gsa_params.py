"""GSA's own hyper-parameters: its two memory batches and its warm-up.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[GSAParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class GSAParams(MethodParams):
    """GSA (Guo et al., CVPR 2023): gradient-sensitive adjustment of the replay loss. The defaults
    are the authors' code's (22 current-task memory samples beside a stream batch of 10, a mixed
    batch of 64, the ratio used from a task's 6th step)."""

    gsa_current_memory: int = param(
        22, "GSA: memory samples of the current task added to the stream batch (its new-class loss)", ge=0
    )
    gsa_mixed_batch: int = param(
        64, "GSA: size of the mixed batch (earlier tasks' memory + current data) of its weighted loss", ge=1
    )
    gsa_warmup_steps: int = param(
        5, "GSA: steps of each task whose weighted loss uses weight 1 before the gradient ratio", ge=0
    )
