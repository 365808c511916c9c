"""iCaRL's own hyper-parameter (BiC's extend it): which of a task's classes count as new.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[ICaRLParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..settings import MethodParams, param

NEW_CLASS_RULES = ("task", "unseen")


@dataclass(frozen=True)
class ICaRLParams(MethodParams):
    """iCaRL (and BiC): which of a task's classes count as new (see incremental.py)."""

    new_classes: Literal["task", "unseen"] = param(
        "task", "iCaRL / BiC: a task's new classes are its own classes (task) or only never-seen ones (unseen)"
    )
