"""L2P, Learning to Prompt (Wang et al., CVPR 2022), on a frozen ViT (cl/vit.py), on the
follow-up's task-free streams (i-Blurry, Si-Blurry: the setting of Moon et al., ICCV 2023).

The mechanics, equation by equation (docs/prompts.md maps each to its test):

(1) a prompt pool P = {(k_i, P_i)}, i = 1..M: keys k_i in R^D and prompts P_i in R^{L_p x D}, both
    initialised uniform on [0, 1) (the authors' code);
(2) the query q(x) = the frozen, unprompted ViT's pre-logits [CLS] feature (no gradient);
(3) matching: the N keys of highest cosine similarity gamma(q(x), k_i) choose the prompts; in
    training the authors' code makes the choice batch-wise (the N prompt ids chosen most often in
    the batch, ties to the smaller id, serve every image of it); at inference per image;
(4) the prompted input x_p = [x_cls; P_s1; ...; P_sN; x_patches]: the chosen prompts' tokens
    inserted after the [CLS] token, before the patch tokens (cl/vit.py ViT.run), through the frozen
    encoder;
(5) the classifier reads the average of the encoder's outputs at the N * L_p prompt positions
    (the authors' `head_type = prompt`);
(6) loss = cross-entropy (over the exposed classes, as the Si-Blurry code masks) - lambda *
    sum_i gamma(q(x), k_si) / B, the surrogate loss pulling the chosen keys to their queries;
(7) only prompts, keys and the classifier head learn: the ViT is bit-identical after training.

Rehearsal-free, as in the paper and in the Si-Blurry comparison: nothing enters the memory; a
training batch is `batch_size` stream samples, `online_iter` updates per sample as the follow-up
trains every method.

Deviations (stated): the prompts get no position embedding (the paper's x_p = [P; x_e] with x_e
the embedding layer's output; the PyTorch reimplementation gives them interpolated ones); no
gradient clipping (the authors' code clips at 1.0); the run's optimiser, learning rate and
augmentation (the presets set the follow-up's).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ..models import Backbone
from ..vit import ViT, ViTBackbone
from .base import Method
from .l2p_params import L2PParams
from .taskfree import TaskFree


def frozen_vit(model: Any, method: str) -> ViT:
    """The run's ViT encoder, frozen (TypeError, one line, for another backbone)."""
    if not isinstance(model, ViTBackbone):
        raise TypeError(f"method {method!r} prompts a Vision Transformer: use model = vit_b16 (or vit_tiny for tests)")
    vit = model.features
    vit.requires_grad_(False)
    return vit.eval()


class PromptPool(nn.Module):
    """(1) M prompts of L_p tokens and their keys, uniform on [0, 1)."""

    def __init__(self, size: int, length: int, dim: int) -> None:
        super().__init__()
        self.prompts = nn.Parameter(torch.rand(size, length, dim))
        self.keys = nn.Parameter(torch.rand(size, dim))

    def match(self, query: Tensor, top_k: int, batchwise: bool) -> tuple[Tensor, Tensor]:
        """(3) the chosen prompt ids (B, N) and the summed similarity of the chosen keys / B."""
        similarity = nnf.normalize(query, dim=1, eps=1e-12) @ nnf.normalize(self.keys, dim=1, eps=1e-12).T
        chosen = similarity.topk(top_k, dim=1).indices
        if batchwise:
            counts = torch.zeros(len(self.keys), device=query.device).scatter_add_(
                0, chosen.flatten(), torch.ones(chosen.numel(), device=query.device)
            )
            major = torch.argsort(counts, descending=True, stable=True)[:top_k]
            chosen = major.expand(len(query), -1)
        pulled = similarity.gather(1, chosen).sum() / len(query)  # (6)
        return chosen, pulled

    def tokens(self, chosen: Tensor) -> Tensor:
        """(B, N * L_p, D): the chosen prompts, concatenated."""
        picked = self.prompts[chosen]  # (B, N, L_p, D)
        return picked.flatten(1, 2)


class L2PFeatures(nn.Module):
    """features(x) of the prompted model: (2)-(5), per-image selection (inference)."""

    def __init__(self, vit: ViT, params: L2PParams) -> None:
        super().__init__()
        self.vit = vit
        self.pool = PromptPool(params.l2p_pool_size, params.l2p_length, vit.dim)
        self.top_k, self.length = params.l2p_top_k, params.l2p_length

    def prompted(self, x: Tensor, batchwise: bool) -> tuple[Tensor, Tensor]:
        """(feature, pulled similarity): the mean output at the prompt positions."""
        with torch.no_grad():
            query = self.vit(x)  # (2) the frozen, unprompted [CLS]
        chosen, pulled = self.pool.match(query, self.top_k, batchwise)
        out = self.vit.run(x, prompts=self.pool.tokens(chosen))  # (4)
        return out[:, 1 : 1 + self.top_k * self.length].mean(dim=1), pulled  # (5)

    def forward(self, x: Tensor) -> Tensor:
        return self.prompted(x, batchwise=False)[0]


class L2P(TaskFree, Method[L2PParams]):
    name = "l2p"

    def build_model(self) -> Backbone:
        vit = frozen_vit(super().build_model(), self.name)
        features = L2PFeatures(vit, self.params)
        return Backbone(features, vit.dim, self.n_classes).to(self.device)

    @property
    def temp_batch_size(self) -> int:
        return self.cfg.batch_size  # rehearsal-free: the whole batch is stream

    def online_store(self, index: int, label: int) -> None:
        """Rehearsal-free: nothing is stored."""

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        features = self.model.features
        assert isinstance(features, L2PFeatures)
        feats, pulled = features.prompted(x, batchwise=self.params.l2p_batchwise)
        logits = self.mask_unseen(self.model.fc(feats))
        return nnf.cross_entropy(logits, y) - self.params.l2p_pull * pulled  # (6)
