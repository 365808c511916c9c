"""RM's own hyper-parameter: which RM runs on the follow-up's task-free streams.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[RMParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..protocols import is_task_free
from ..settings import MethodParams, RunSettings, param

RM_VARIANTS = ("paper", "iblurry")


@dataclass(frozen=True)
class RMParams(MethodParams):
    """RM on the task-free streams: as its paper defines it, or as the follow-up ported it."""

    rm_variant: Literal["paper", "iblurry"] = param(
        "paper",
        "RM on task-free streams: paper (uncertainty memory, stream+memory batches, head kept) or iblurry "
        "(the follow-up's port: stream-only batches, class-balanced memory, head rebuilt at every new class)",
    )

    def check(self, settings: RunSettings, n_classes: int) -> None:
        if self.rm_variant != "paper" and not is_task_free(settings):
            raise ValueError(
                f"rm_variant={self.rm_variant}: the follow-up's port runs on the task-free streams only "
                f"(stream=iblurry or siblurry), not stream={settings.stream}"
            )
