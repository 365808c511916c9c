"""DualPrompt (Wang et al., ECCV 2022) on a frozen ViT (cl/vit.py), on the follow-up's task-free
streams (i-Blurry, Si-Blurry).

The mechanics (docs/prompts.md maps each to its test in tests/cl/test_dualprompt.py):

(1) a G-prompt g (shared) for layers [0, g_end) and a pool of E-prompts e_1..e_M with keys
    k_1..k_M for layers [g_end, e_end); each prompt, per layer, is a prefix of keys p_K and values
    p_V (L tokens each, the layout of the authors' code), initialised uniform on [-1, 1];
(2) prefix-tuning: at a prompted layer, attention(q = h W_q, K = [p_K; h W_k], V = [p_V; h W_v]):
    the queries and the output length are unchanged (cl/vit.py Attention);
(3) the query q(x) = the frozen, unprompted ViT's [CLS] pre-logits feature;
(4) training: the E-prompt of the current task (its index from the stream's task boundaries,
    mod M) is used and its key pulled to the query: loss = CE (over exposed classes) - lambda *
    sum_b gamma(q(x_b), k_t) / B; inference: each image takes the E-prompt whose key has the
    highest cosine similarity gamma with its query;
(5) the classifier reads the [CLS] output (the authors' `head_type = token`);
(6) only prompts, keys and the head learn: the ViT stays bit-identical.

Rehearsal-free: nothing enters the memory. Deviations (stated): the task index the E-prompt is
trained under is the stream's task (Si-Blurry's tasks have stochastic classes; the paper's had
disjoint ones); no gradient clipping; the run's optimiser and augmentation.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ..learner import Task
from ..models import Backbone
from ..vit import ViT
from .base import Method
from .dualprompt_params import DualPromptParams
from .l2p import frozen_vit
from .taskfree import TaskFree


class DualPromptFeatures(nn.Module):
    """features(x): the prompted [CLS] output, the E-prompt chosen by key matching (inference)."""

    def __init__(self, vit: ViT, params: DualPromptParams) -> None:
        super().__init__()
        if not 0 <= params.dp_g_end <= params.dp_e_end <= vit.depth or params.dp_g_end == params.dp_e_end:
            raise ValueError(
                f"dp_g_end={params.dp_g_end}, dp_e_end={params.dp_e_end}: need 0 <= dp_g_end < dp_e_end <= "
                f"{vit.depth} (the ViT's layers)"
            )
        self.vit = vit
        self.g_layers = list(range(params.dp_g_end))
        self.e_layers = list(range(params.dp_g_end, params.dp_e_end))
        d = vit.dim
        self.g = nn.Parameter(torch.empty(len(self.g_layers), 2, params.dp_g_length, d).uniform_(-1, 1))
        self.e = nn.Parameter(
            torch.empty(params.dp_e_pool, len(self.e_layers), 2, params.dp_e_length, d).uniform_(-1, 1)
        )
        self.keys = nn.Parameter(torch.empty(params.dp_e_pool, d).uniform_(-1, 1))

    def similarity(self, query: Tensor) -> Tensor:
        return nnf.normalize(query, dim=1, eps=1e-12) @ nnf.normalize(self.keys, dim=1, eps=1e-12).T

    def prefixes(self, chosen: Tensor) -> dict[int, tuple[Tensor, Tensor]]:
        """layer -> (keys, values), each (B, L, D): the G-prompt's, then each image's E-prompt's."""
        b = len(chosen)
        out = {
            layer: (self.g[i, 0].expand(b, -1, -1), self.g[i, 1].expand(b, -1, -1))
            for i, layer in enumerate(self.g_layers)
        }
        e = self.e[chosen]  # (B, layers, 2, L, D)
        out.update({layer: (e[:, i, 0], e[:, i, 1]) for i, layer in enumerate(self.e_layers)})
        return out

    def prompted(self, x: Tensor, task: Tensor | None) -> tuple[Tensor, Tensor]:
        """(the [CLS] output, the pulled similarity sum / B). `task`: the E-prompt id every image
        uses (training), or None: each image's best-matching key (inference)."""
        with torch.no_grad():
            query = self.vit(x)  # (3)
        similarity = self.similarity(query)
        chosen = similarity.argmax(dim=1) if task is None else task.expand(len(x))
        pulled = similarity.gather(1, chosen[:, None]).sum() / len(x)
        return self.vit.run(x, prefixes=self.prefixes(chosen))[:, 0], pulled  # (5)

    def forward(self, x: Tensor) -> Tensor:
        return self.prompted(x, None)[0]


class DualPrompt(TaskFree, Method[DualPromptParams]):
    name = "dualprompt"

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.task_index = torch.zeros((), dtype=torch.long, device=self.device)

    def build_model(self) -> Backbone:
        vit = frozen_vit(super().build_model(), self.name)
        return Backbone(DualPromptFeatures(vit, self.params), vit.dim, self.n_classes).to(self.device)

    @property
    def temp_batch_size(self) -> int:
        return self.cfg.batch_size  # rehearsal-free: the whole batch is stream

    def online_store(self, index: int, label: int) -> None:
        """Rehearsal-free: nothing is stored."""

    def online_task_start(self, task: Task) -> None:
        """The E-prompt trained from here on: the task's, mod the pool."""
        self.task_index = torch.tensor(task.index % self.params.dp_e_pool, device=self.device)

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        features = self.model.features
        assert isinstance(features, DualPromptFeatures)
        cls, pulled = features.prompted(x, self.task_index)
        return nnf.cross_entropy(self.mask_unseen(self.model.fc(cls)), y) - self.params.dp_pull * pulled  # (4)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "dualprompt_task": self.task_index.cpu()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.task_index = state["dualprompt_task"].to(self.device)
