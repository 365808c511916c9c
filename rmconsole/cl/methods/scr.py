"""SCR: supervised contrastive replay (Mai et al., CVPR-W 2021).

What differs from ER:
- the loss is the supervised contrastive loss (Khosla et al. 2020) on the stream + memory
  batch seen twice (two independent augmentations of each sample), over L2-normalised outputs
  of a projection head (feature_dim -> feature_dim -> `scr_projection`, ReLU between) on the
  backbone's features, temperature `scr_temperature`; the classifier head is not trained;
- predictions come from the nearest class mean (NCM): the mean L2-normalised feature of each
  class's memory samples (clean images), nearest by cosine; a class with no memory sample
  cannot be predicted.
Batches and the reservoir memory are the follow-up's ER's. The two views are `scr_views`'s
(scr_params.py):
- "pipeline" (default): two independent draws of the run's augmentation, the pipeline every
  other method of the run trains with (so a sweep compares losses, not augmentations);
- "recipe": SCR's own code -- the un-augmented image and one view of SCR's recipe
  (RandomResizedCrop scale 0.2-1, horizontal flip, colour jitter 0.4/0.4/0.4/0.1 at p 0.8,
  greyscale at p 0.2), batched with per-sample draws (cl/augment_scr.py) from a generator of
  its own, so the run's pipeline draws nothing for these steps.
CutMix is not applied either way (the contrastive loss pairs views by label).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn

from ..augment_scr import recipe_view
from .base import Method
from .scr_params import SCRParams
from .taskfree import TaskFree


def supervised_contrastive_loss(z: Tensor, y: Tensor, temperature: float) -> Tensor:
    """Khosla et al.'s L^sup_out on L2-normalised embeddings z (N, d): for each anchor, the mean
    over its positives (same label, not itself) of -log softmax over all other samples."""
    sim = z @ z.T / temperature
    n = len(y)
    self_mask = torch.eye(n, dtype=torch.bool, device=z.device)
    sim = sim.masked_fill(self_mask, float("-inf"))
    log_prob = sim - torch.logsumexp(sim, dim=1, keepdim=True)
    positives = (y[:, None] == y[None, :]) & ~self_mask
    counts = positives.sum(1)
    # anchors without a positive contribute 0 and are not counted: no boolean indexing, no host sync
    per_anchor = -(log_prob.masked_fill(~positives, 0.0).sum(1) / counts.clamp(min=1))
    return per_anchor.sum() / (counts > 0).sum().clamp(min=1)


class SCR(TaskFree, Method[SCRParams]):
    name = "scr"
    default_memory_policy = "reservoir"
    capturable_step = True  # projection, contrastive loss: fixed shapes, no host decision (graphs.MethodStep)
    kept_state: tuple[str, ...] = ("projection", "_means")  # projection head, class means (memory bytes)

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        d = self.model.feature_dim
        self.projection = nn.Sequential(
            nn.Linear(d, d), nn.ReLU(inplace=True), nn.Linear(d, self.params.scr_projection)
        ).to(self.device)
        self._means: tuple[Any, Tensor, Tensor] | None = None  # (key, classes, normalised means)
        # "recipe": SCR's own augmentation draws from a generator of its own (the pipeline's stays untouched)
        self.recipe_gen = torch.Generator().manual_seed(7_919 * (self.cfg.seed + 1))

    def make_optimizer(self) -> torch.optim.Optimizer:
        optimizer = super().make_optimizer()
        if self.task_free:  # the projection head learns too; the unused classifier head does not
            optimizer.add_param_group({"params": list(self.projection.parameters())})
        return optimizer

    def online_start(self) -> None:
        super().online_start()
        if self.params.scr_views == "recipe":  # the run's recorded pipeline is not what SCR trains on: say so
            self.report.log(
                "scr_views=recipe: SCR's two views are the clean image and SCR's own recipe "
                "(random_resized_crop(scale=0.2-1), horizontal_flip(p=0.5), "
                "color_jitter(0.4, 0.4, 0.4, 0.1, p=0.8), grayscale(p=0.2), normalize), "
                "not the run's pipeline"
            )

    def online_train(self, stream: Tensor, iterations: int) -> None:
        n_memory = self.cfg.batch_size - len(stream)
        if self.params.scr_views == "recipe":
            self.train_recipe_views(stream, n_memory, iterations)
            return
        batches = []
        for _ in range(iterations):
            batch = torch.cat([stream, self.memory_draw(n_memory)])
            batches.append(torch.cat([batch, batch]))  # two views: each image is augmented on its own
        self.train_batches(batches)

    def train_recipe_views(self, stream: Tensor, n_memory: int, iterations: int) -> None:
        """SCR's own views: per step, the clean batch and one view of SCR's recipe of it."""
        aug = self.setup.augmenter
        for _ in range(iterations):
            batch = torch.cat([stream, self.memory_draw(n_memory)])
            if len(batch) < 2:  # batch norm needs two (train_batches' rule)
                continue
            images = self.images_of(batch)
            x = torch.cat([aug.test(images), recipe_view(images, self.recipe_gen, aug.mean, aug.std)])
            y = self.labels_of(batch)
            self.model.train()
            self.step_on(self.accel.prepare(x), torch.cat([y, y]))

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        z = nnf.normalize(self.projection(self.model.features(x)), dim=1)
        return supervised_contrastive_loss(z, y, self.params.scr_temperature)

    def head_takes(self, label: int) -> None:
        """No classifier head to extend (NCM)."""

    def class_means(self) -> tuple[Tensor, Tensor]:
        """(classes, their normalised mean memory feature), recomputed when the model or memory moved."""
        key = (self.online_steps, self.memory.seen, len(self.memory))
        if self._means is None or self._means[0] != key:
            feats = nnf.normalize(self.features_of(self.memory.indices).float(), dim=1)
            labels = self.memory.labels.to(feats.device)
            classes = labels.unique()
            means = torch.stack([feats[labels == c].mean(0) for c in classes]) if len(classes) else feats[:0]
            self._means = (key, classes, nnf.normalize(means, dim=1))
        return self._means[1], self._means[2]

    @torch.inference_mode()
    def predict(self, x: Tensor) -> Tensor:
        classes, means = self.class_means()
        self.model.eval()
        feats = nnf.normalize(self.model.features(x).float(), dim=1)
        if len(classes) == 0:
            return torch.zeros(len(x), dtype=torch.long, device=x.device)
        return classes[(feats @ means.T).argmax(1)]

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "projection": self.projection.state_dict(),
            "recipe_gen": self.recipe_gen.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.projection.load_state_dict(state["projection"])
        if "recipe_gen" in state:  # checkpoints written before scr_views had none
            self.recipe_gen.set_state(state["recipe_gen"])
        super().load_state_dict(state)
