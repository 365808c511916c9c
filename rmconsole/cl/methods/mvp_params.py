"""MVP's own hyper-parameters (Moon et al., ICCV 2023, "Online Class Incremental Learning on
Stochastic Blurry Task Boundary via Mask and Visual Prompt Tuning"): its prompts, its instance-wise
logit mask, its contrastive visual prompt tuning loss and its reweighting of the loss.

Torch-free (config.py validates a run's keys without importing torch); the method reads them as
`self.params`, typed by `Method[MVPParams]`. Defaults: the authors' code and its run script
(KHU-AGI/Si-Blurry, scripts/mvp.sh: --use_mask --use_contrastiv --use_afs --use_gsf, no
--use_last_layer; configuration/config.py: alpha 0.5, gamma 2, margin 0.5; models/mvp.py: G-prompts
on layers 0-1 of length 5, E-prompts on layers 2-4 of length 20, one E-prompt per task).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class MVPParams(MethodParams):
    """MVP: DualPrompt-style prompts chosen by key, a learned logit mask per key, a contrastive key loss, reweighting."""

    mvp_g_end: int = param(2, "MVP: the G-prompt is prompt-tuned into layers 0 .. mvp_g_end-1 (authors: 0-1)", ge=0)
    mvp_e_end: int = param(
        5, "MVP: E-prompts are prompt-tuned into layers mvp_g_end .. mvp_e_end-1 (authors: 2-4)", ge=1
    )
    mvp_g_length: int = param(5, "MVP: G-prompt tokens per layer", ge=1)
    mvp_e_length: int = param(20, "MVP: E-prompt tokens per layer", ge=1)
    mvp_pool: int = param(0, "MVP: E-prompts (keys, masks) in the pool; 0: the run's n_tasks (the authors' code)", ge=0)
    mvp_mask: bool = param(
        True, "MVP: instance-wise logit masking (logits times 2 sigmoid(m) of the chosen key's mask)"
    )
    mvp_contrastive: bool = param(
        True,
        "MVP: contrastive visual prompt tuning (usage-weighted key choice, the L_CVPT loss); false: the plain "
        "key-query distance loss",
    )
    mvp_query_last_layer: bool = param(
        False,
        "MVP: the query is the [CLS] after every layer (true) or after all but the last (false: the authors' run)",
    )
    mvp_gsf: bool = param(True, "MVP: reweight each sample's loss by its gradient dissimilarity (the focal term)")
    mvp_alpha: float = param(0.5, "MVP: weight alpha of the gradient-similarity focal term", ge=0, le=1)
    mvp_gamma: float = param(2.0, "MVP: focal exponent gamma of the gradient-similarity term", ge=0)
    mvp_afs: bool = param(True, "MVP: adaptive feature scaling (the feature divided by 1 - cos(w_y, f) + margin)")
    mvp_margin: float = param(0.5, "MVP: margin of the adaptive feature scaling", gt=0)
