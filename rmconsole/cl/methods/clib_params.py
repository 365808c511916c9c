"""CLIB's own hyper-parameters: importance updates and the adaptive learning rate.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[CLIBParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class CLIBParams(MethodParams):
    """CLIB (Koh et al., ICLR 2022): sample-wise importance memory and the adaptive learning rate."""

    imp_update_period: int = param(1, "CLIB: iterations between sample-wise importance updates (ImageNet 10)", ge=1)
    lr_step: float = param(0.95, "CLIB: ratio of the low to the high learning rate", gt=0, lt=1)
    lr_length: int = param(10, "CLIB: loss-decrease records per learning rate before the t-test", ge=2)
    lr_period: int = param(10, "CLIB: importance updates between learning-rate switches", ge=1)
