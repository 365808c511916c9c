"""MVP, Mask and Visual Prompt tuning (Moon et al., ICCV 2023, "Online Class Incremental Learning
on Stochastic Blurry Task Boundary via Mask and Visual Prompt Tuning": the Si-Blurry paper), on a
frozen ViT (cl/vit.py), on the follow-up's task-free streams (i-Blurry, Si-Blurry).

Specification: the authors' code (KHU-AGI/Si-Blurry, models/mvp.py and methods/mvp.py, read, not
copied) and the paper's abstract (its full text was not at hand: the numbering is rmconsole's). The
mechanics, equation by equation (docs/prompts.md maps each to its test in tests/cl/test_mvp.py):

(1) prompts, DualPrompt's layout as the authors' MVP builds it: one G-prompt (L_g tokens per layer)
    for layers [0, g_end), a pool of M E-prompts (L_e tokens per layer) for layers [g_end, e_end),
    M keys k_j in R^D and M logit masks m_j in R^C; prompts and keys drawn N(0, 1), masks -1;
(2) prompt tuning: at a prompted layer its tokens are appended to the layer's input, the block runs,
    and the output keeps only the image's own tokens (the prompts do not carry to the next layer);
    the prompts get no position embedding;
(3) the query q(x): the frozen, unprompted ViT's [CLS] token after all layers but the last (the
    authors' run; `mvp_query_last_layer` for after all), not normed, no gradient;
(4) the key choice: the key of least distance d_j = 1 - cos(q, k_j); with contrastive prompt tuning
    the distance is scaled by the key's usage, d_j * (n_j + 1), n_j the times key j was chosen in
    training so far (counted after each training step's choice);
(5) instance-wise logit masking: logits = (W f + b) * 2 sigmoid(m_s), m_s the chosen key's mask,
    f the prompted [CLS] output after the final norm; classes not yet exposed are masked out;
(6) contrastive visual prompt tuning: L_CVPT = -log(A / (P + A)), P = exp(d_s / w),
    A = mean_j exp((1 - cos(k_s, sg(k_j))) / w), w = n_s + 1 (the chosen key pulled to its query,
    pushed from the other keys, which are not moved by it); without it, the key loss is d_s;
    averaged over the batch and added with weight 1;
(7) the reweighting: the gradient-similarity focal loss weights each sample's cross-entropy by
    (1 - alpha) + alpha * s^gamma, s = 1 - cos(g_i, g_B), g_i the gradient of the sample's loss and
    g_B of the batch's mean loss with respect to the head row of the sample's class (features and
    masks held fixed; in closed form: g_i = (p_iy - 1) m_iy f_i, g_B = mean_a (p_ay - [y_a = y])
    m_ay f_a); adaptive feature scaling feeds the head f / (1 - cos(sg(w_y), sg(f)) + margin);
(8) only prompts, keys, masks and the classifier head learn: the ViT stays bit-identical.

Rehearsal-free, as the authors' run (memory size 0): nothing enters the memory. Deviations (stated
where docs/prompts.md lists them): one key chosen per image (the authors' selection_size default,
not a parameter here); L_CVPT computed per image as written in (6): the authors' tensors broadcast
across the batch, and their latest revision of it reads attributes the model does not have; the
focal weight applied per sample (the authors' code multiplies the batch-mean loss by each weight,
then averages); no automatic mixed precision; the run's optimiser and augmentation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ..models import Backbone
from ..vit import ViT
from .base import Method
from .l2p import frozen_vit
from .mvp_params import MVPParams
from .taskfree import TaskFree


def distance(a: Tensor, b: Tensor) -> Tensor:
    """1 - cosine similarity of every row of a with every row of b: (len(a), len(b))."""
    return 1 - nnf.normalize(a, dim=1, eps=1e-12) @ nnf.normalize(b, dim=1, eps=1e-12).T


class MVPFeatures(nn.Module):
    """features(x): the prompted, normed [CLS] output, the E-prompt chosen by its key (1)-(4)."""

    counts: Tensor  # n_j, the times key j was chosen in training (a buffer: checkpointed with the model)

    def __init__(self, vit: ViT, params: MVPParams, n_classes: int, pool: int) -> None:
        super().__init__()
        if not 0 <= params.mvp_g_end < params.mvp_e_end <= vit.depth:
            raise ValueError(
                f"mvp_g_end={params.mvp_g_end}, mvp_e_end={params.mvp_e_end}: need 0 <= mvp_g_end < mvp_e_end <= "
                f"{vit.depth} (the ViT's layers)"
            )
        self.vit, self.params = vit, params
        d, g_layers, e_layers = vit.dim, params.mvp_g_end, params.mvp_e_end - params.mvp_g_end
        self.g_prompts = nn.Parameter(torch.randn(g_layers, params.mvp_g_length, d))
        self.e_prompts = nn.Parameter(torch.randn(pool, e_layers, params.mvp_e_length, d))
        self.keys = nn.Parameter(torch.randn(pool, d))
        self.masks = nn.Parameter(torch.full((pool, n_classes), -1.0))
        self.register_buffer("counts", torch.zeros(pool))

    def query(self, x: Tensor) -> Tensor:
        """(3) the frozen, unprompted [CLS], after all layers or all but the last, not normed."""
        with torch.no_grad():
            tokens = self.vit.embed(x)
            blocks = self.vit.blocks if self.params.mvp_query_last_layer else self.vit.blocks[:-1]
            for block in blocks:
                tokens = block(tokens)
            return tokens[:, 0]

    def choose(self, query: Tensor) -> Tensor:
        """(4) each image's key: least distance, scaled by usage under contrastive prompt tuning."""
        scaled = distance(query, self.keys)
        if self.params.mvp_contrastive:
            scaled = scaled * (self.counts + 1)
        return scaled.argmin(dim=1)

    def run(self, x: Tensor, chosen: Tensor) -> Tensor:
        """(2) the prompted ViT: each prompted layer's tokens appended, run, dropped after it."""
        tokens = self.vit.embed(x)
        n, b = tokens.shape[1], len(x)
        e = self.e_prompts[chosen]  # (B, E layers, L_e, D)
        g_end = self.params.mvp_g_end
        for i, block in enumerate(self.vit.blocks):
            if i < g_end:
                tokens = torch.cat([tokens, self.g_prompts[i].expand(b, -1, -1)], dim=1)
            elif i < self.params.mvp_e_end:
                tokens = torch.cat([tokens, e[:, i - g_end]], dim=1)
            tokens = block(tokens)[:, :n]
        return self.vit.norm(tokens)[:, 0]

    def prompted(self, x: Tensor, count: bool) -> tuple[Tensor, Tensor, Tensor]:
        """(feature f, mask factor 2 sigmoid(m_s) (B, C), key loss (6)); `count`: a training step,
        the choices counted (after the loss has read the counts)."""
        query = self.query(x)
        chosen = self.choose(query)
        weight = self.counts[chosen] + 1  # w = n_s + 1, the counts before this step's choices
        d_s = distance(query, self.keys).gather(1, chosen[:, None])[:, 0]
        if self.params.mvp_contrastive:
            key_distance = distance(self.keys[chosen], self.keys.detach())  # (B, M): 1 - cos(k_s, sg(k_j))
            log_a = torch.logsumexp(key_distance / weight[:, None], dim=1) - math.log(len(self.keys))
            key_loss = nnf.softplus(d_s / weight - log_a).mean()  # -log(A / (P + A)) = log(1 + P / A)
        else:
            key_loss = d_s.mean()
        if count:
            with torch.no_grad():
                self.counts.scatter_add_(0, chosen, torch.ones_like(chosen, dtype=self.counts.dtype))
        factor = 2 * torch.sigmoid(self.masks[chosen])
        return self.run(x, chosen), factor, key_loss

    def forward(self, x: Tensor) -> Tensor:
        return self.prompted(x, count=False)[0]


class MVPModel(Backbone):
    """The prompted ViT and its head; logits = head(f) * 2 sigmoid(m_s) with the mask on (5)."""

    features: MVPFeatures

    def forward(self, x: Tensor) -> Tensor:
        feature, factor, _ = self.features.prompted(x, count=False)
        logits = self.fc(feature)
        return logits * factor if self.features.params.mvp_mask else logits


def focal_scores(features: Tensor, y: Tensor, logits: Tensor, factor: Tensor) -> Tensor:
    """(7) s_i = 1 - cos(g_i, g_B): per-sample against batch-mean gradient of the cross-entropy of
    `logits` with respect to the head row W_y (logits = (W f + b) * factor, masked), in closed form."""
    with torch.no_grad():
        residual = (torch.softmax(logits, dim=1) - nnf.one_hot(y, logits.shape[1]).to(logits.dtype)) * factor
        batch = residual.T @ features / len(y)  # (C, D): d mean loss / d W
        own = residual.gather(1, y[:, None]) * features  # (B, D): d loss_i / d W_{y_i}
        return 1 - nnf.cosine_similarity(own, batch[y], dim=1)


class MVP(TaskFree, Method[MVPParams]):
    name = "mvp"

    def build_model(self) -> Backbone:
        vit = frozen_vit(super().build_model(), self.name)
        pool = self.params.mvp_pool or self.cfg.n_tasks
        features = MVPFeatures(vit, self.params, self.n_classes, pool)
        return MVPModel(features, vit.dim, self.n_classes).to(self.device)

    @property
    def temp_batch_size(self) -> int:
        return self.cfg.batch_size  # rehearsal-free: the whole batch is stream

    def online_store(self, index: int, label: int) -> None:
        """Rehearsal-free: nothing is stored."""

    def exposed(self, logits: Tensor) -> Tensor:
        """Classes not yet exposed masked out (no host sync: masked_fill with the seen mask)."""
        return logits.masked_fill(~self.seen, torch.finfo(logits.dtype).min)

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        model, p = self.model, self.params
        assert isinstance(model, MVPModel)
        feature, factor, key_loss = model.features.prompted(x, count=True)
        factor = factor if p.mvp_mask else torch.ones_like(factor)
        fc = model.fc
        if p.mvp_gsf:
            plain = self.exposed(fc(feature.detach()) * factor.detach())
            scores = focal_scores(feature.detach(), y, plain, factor.detach())
        head_in = feature
        if p.mvp_afs:
            w = fc.weight.detach()[y]
            head_in = feature / (1 - nnf.cosine_similarity(w, feature.detach(), dim=1) + p.mvp_margin)[:, None]
        losses = nnf.cross_entropy(self.exposed(fc(head_in) * factor), y, reduction="none")
        if p.mvp_gsf:
            losses = losses * ((1 - p.mvp_alpha) + p.mvp_alpha * scores**p.mvp_gamma)
        return losses.mean() + key_loss
