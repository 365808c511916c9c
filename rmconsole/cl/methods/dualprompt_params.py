"""DualPrompt's own hyper-parameters (Wang et al., ECCV 2022): where its G- and E-prompts go and
how long they are.

Torch-free (config.py validates a run's keys without importing torch); the method reads them as
`self.params`, typed by `Method[DualPromptParams]`. Defaults: the paper's ViT-B/16 setting
(G-prompt at layers 1-2, E-prompts at layers 3-5, prefix-tuning; an E-prompt per task).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..settings import MethodParams, param


@dataclass(frozen=True)
class DualPromptParams(MethodParams):
    """DualPrompt: a shared G-prompt in the first layers, task E-prompts chosen by key matching in the next."""

    dp_g_end: int = param(2, "DualPrompt: the G-prompt prefixes layers 0 .. dp_g_end-1 (paper: 1-2)", ge=0)
    dp_e_end: int = param(5, "DualPrompt: E-prompts prefix layers dp_g_end .. dp_e_end-1 (paper: 3-5)", ge=1)
    dp_g_length: int = param(5, "DualPrompt: G-prompt length (prefix keys, and as many values)", ge=1)
    dp_e_length: int = param(5, "DualPrompt: E-prompt length (prefix keys, and as many values)", ge=1)
    dp_e_pool: int = param(10, "DualPrompt: E-prompts in the pool (one per task; task t uses t mod pool)", ge=1)
    dp_pull: float = param(1.0, "DualPrompt: weight of the matching loss pulling the task's key to the query", ge=0)
