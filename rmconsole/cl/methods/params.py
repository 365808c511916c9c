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

from ..protocols import is_task_free
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
    bic_anytime_passes: int = param(
        256, "BiC on task-free streams: Adam passes (lr 1e-3, batches of 100) over the held-out set's logits that "
        "refit the current task's bias layer before every evaluation (the follow-up's 256)", ge=0)

    def check(self, settings: RunSettings, n_classes: int) -> None:
        held_out = max(1, round(self.bic_val_fraction * settings.memory_size))
        if settings.memory_size - held_out < n_classes:
            raise ValueError(f"bic_val_fraction={self.bic_val_fraction}: holding out {held_out} of memory_size="
                             f"{settings.memory_size} leaves fewer training slots than the {n_classes} classes")


# ---------------------------------------------------------------------------- the follow-up's methods
# (task-free streams: cl/online.py; PROTOCOL §9)

RM_VARIANTS = ("paper", "iblurry")


@dataclass(frozen=True)
class RMParams(MethodParams):
    """RM on the task-free streams: as its paper defines it, or as the follow-up ported it."""

    rm_variant: Literal["paper", "iblurry"] = param(
        "paper", "RM on task-free streams: paper (uncertainty memory, stream+memory batches, head kept) or iblurry "
                 "(the follow-up's port: stream-only batches, class-balanced memory, head rebuilt at every new class)")

    def check(self, settings: RunSettings, n_classes: int) -> None:
        if self.rm_variant != "paper" and not is_task_free(settings):
            raise ValueError(f"rm_variant={self.rm_variant}: the follow-up's port runs on the task-free streams only "
                             f"(stream=iblurry or siblurry), not stream={settings.stream}")


@dataclass(frozen=True)
class EWCppParams(MethodParams):
    """EWC++ (Chaudhry et al. 2018) as the follow-up runs it: an online Fisher (EMA of squared
    gradients) and one penalty slot refreshed at task ends."""

    ewcpp_weight: float = param(100.0, "EWC++: penalty weight on sum F (theta - theta*)^2 (the follow-up's 100)", ge=0)
    ewcpp_alpha: float = param(0.5, "EWC++: weight of the newest squared gradient in the Fisher EMA", gt=0, le=1)


@dataclass(frozen=True)
class MIRParams(MethodParams):
    """MIR (Aljundi et al. 2019): how many memory candidates are scored per step."""

    mir_candidates: int = param(50, "MIR: memory candidates scored by their loss increase per step", ge=1)


@dataclass(frozen=True)
class SCRParams(MethodParams):
    """SCR (Mai et al. 2021): supervised contrastive replay and a nearest-class-mean classifier."""

    scr_temperature: float = param(0.07, "SCR: temperature of the supervised contrastive loss", gt=0)
    scr_projection: int = param(128, "SCR: output size of the projection head", ge=2)


@dataclass(frozen=True)
class CLIBParams(MethodParams):
    """CLIB (Koh et al., ICLR 2022): sample-wise importance memory and the adaptive learning rate."""

    imp_update_period: int = param(1, "CLIB: iterations between sample-wise importance updates (ImageNet 10)", ge=1)
    lr_step: float = param(0.95, "CLIB: ratio of the low to the high learning rate", gt=0, lt=1)
    lr_length: int = param(10, "CLIB: loss-decrease records per learning rate before the t-test", ge=2)
    lr_period: int = param(10, "CLIB: importance updates between learning-rate switches", ge=1)
