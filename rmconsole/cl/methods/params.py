"""The methods' own hyper-parameters, one small frozen dataclass per method family.

Each field is a config key (`rmconsole config-keys` lists them with the methods that read
them). They live here, not beside each method's hooks, because this module must stay free of
torch: config.py builds RunConfig from these classes, and the CLI and the TUI validate configs
without importing torch. A method names its class in the registry (`cl/methods/__init__.py`)
and reads its values from `self.params`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..settings import MethodParams, RunSettings, param

NEW_CLASS_RULES = ("task", "unseen")


@dataclass(frozen=True)
class RegularisedParams(MethodParams):
    """EWC and Rwalk: the weight of the quadratic penalty and how it is applied."""

    reg_weight: float | None = param(
        None, "EWC / Rwalk regularisation weight lambda (default: the method's own, EWC 100, Rwalk 1)", ge=0)
    penalty_step: Literal["proximal", "gradient"] = param(
        "proximal", "EWC / Rwalk: how the quadratic penalty moves the parameters: an implicit (proximal) step "
        "after each SGD step, stable for any lambda, or its gradient added to the loss's (unstable when "
        "lr * lambda * F is large)")


@dataclass(frozen=True)
class RwalkParams(RegularisedParams):
    """Rwalk: the penalty's weight and the EWC++ Fisher / path-integral windows."""

    rwalk_alpha: float = param(0.9, "Rwalk: weight of the newest window in the EWC++ Fisher", gt=0, le=1)
    rwalk_interval: int = param(10, "Rwalk: optimiser steps per Fisher/score update", ge=1)


@dataclass(frozen=True)
class NewClassesParams(MethodParams):
    """iCaRL: which of a task's classes count as new (see incremental.py)."""

    new_classes: Literal["task", "unseen"] = param(
        "task", "iCaRL / BiC: a task's new classes are its own classes (task) or only never-seen ones (unseen)")


@dataclass(frozen=True)
class BiCParams(NewClassesParams):
    """BiC and BiC*: the held-out validation set, distillation and the bias-correction stage."""

    bic_val_fraction: float = param(0.1, "BiC: share of the memory held out for validation", gt=0, lt=1)
    bic_temperature: float = param(2.0, "BiC: distillation temperature T", gt=0)
    bic_bias_epochs: int = param(200, "BiC: epochs of the bias-correction stage on the held-out set", ge=0)

    def check(self, settings: RunSettings, n_classes: int) -> None:
        held_out = max(1, round(self.bic_val_fraction * settings.memory_size))
        if settings.memory_size - held_out < n_classes:
            raise ValueError(f"bic_val_fraction={self.bic_val_fraction}: holding out {held_out} of memory_size="
                             f"{settings.memory_size} leaves fewer training slots than the {n_classes} classes")
