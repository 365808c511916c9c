"""OnPro's own hyper-parameters: its temperatures, its memory batch and its feedback mixup.

Torch-free (config.py validates a run's keys without importing torch); the method reads them
as `self.params`, typed by `Method[OnProParams]`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class OnProParams(MethodParams):
    """OnPro (Wei et al., ICCV 2023): online prototype equilibrium and adaptive prototypical
    feedback. The defaults are the authors' code's for CIFAR-10 (its default dataset): the
    CIFAR-100 / Tiny-ImageNet presets set their values (mixup 0.2 / 0.9, similarity scale 1)."""

    onpro_proto_temperature: float = param(
        0.5, "OnPro: temperature of the prototype contrastive loss (online prototype equilibrium)", gt=0
    )
    onpro_ins_temperature: float = param(
        0.07, "OnPro: temperature of the instance-wise contrastive loss over the rotated views", gt=0
    )
    onpro_sim_scale: float = param(
        0.5, "OnPro: scale of the instance-wise similarities after the first task (1 in the first)", gt=0
    )
    onpro_projection: int = param(128, "OnPro: width of the projection head (capped at the feature width)", ge=1)
    onpro_memory_batch: int = param(
        64, "OnPro: memory samples per step (at most onpro_memory_per_class per seen class)", ge=1
    )
    onpro_memory_per_class: int = param(
        7, "OnPro: memory samples per seen class in a step's memory batch, after the first task", ge=1
    )
    onpro_mixup_base_rate: float = param(
        0.75, "OnPro: share of the memory batch mixed with random partners; the rest by prototype feedback", ge=0, le=1
    )
    onpro_mixup_p: float = param(
        0.6, "OnPro: probability a sample (a class pair, in the feedback share) is mixed", ge=0, le=1
    )
    onpro_mixup_upper: float = param(
        0.6, "OnPro: upper bound of the random share's mixing weight, drawn from U(0, it)", ge=0, le=1
    )
    onpro_mixup_alpha: float = param(0.4, "OnPro: Beta(alpha, alpha) of the feedback share's mixing weight", gt=0)
