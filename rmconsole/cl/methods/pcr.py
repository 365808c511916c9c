"""PCR: proxy-based contrastive replay (Lin et al., CVPR 2023).

The classifier is a cosine one: a class's score is cos(f(x), w_c) / tau, w_c the class's row
of the head ("proxy"; the head's bias is not used), tau = `pcr_temperature` (0.09, the
authors'). Training replaces cross-entropy by the proxy-based contrastive loss: every sample of
the stream + memory batch is an anchor, and its positives and negatives are the proxies of the
*samples in the batch*, not of every class seen,

    L = - mean_i log( exp(cos(z_i, w_{y_i}) / tau) / sum_j exp(cos(z_i, w_{y_j}) / tau) ),

j over the batch (a class counts once per sample of it, as the authors' SupConLoss in its
"proxy" mode sums over the batch's proxies); a class absent from the batch is neither pushed
down nor pulled, which is PCR's answer to the new classes' dominance of ER's cross-entropy.
Each sample is seen twice (two views), as the authors' code trains on [batch, augmented batch].
Predictions: the arg-max of the cosine scores over the classes seen (the same proxies).

Batches and the reservoir memory are the follow-up's ER's (taskfree.py): batch/2 stream + batch/2
memory samples, each twice. A head row is left as it is when its class arrives (the authors'
head has every class's row from the start, and a row no batch has held was never trained).
CutMix is not applied (the loss pairs anchors with their class's proxy).

Deviations from the authors' code (labelled in docs/anytime.md):
- views: two independent draws of the run's augmentation (as SCR's default `scr_views =
  pipeline`), not the clean image plus one view of their recipe (resized crop, flip, colour
  jitter, greyscale);
- one forward of the stream + memory batch together (theirs forwards the two separately, which
  differs only for a model with batch norm), and the loss on the stream alone while the memory
  is empty (theirs skips the first batch: its loss is 0 x cross-entropy until the memory has
  samples);
- predictions over the classes seen (theirs: the arg-max over every class's proxy, the mask
  commented out in their evaluation), as every method of this protocol predicts;
- the run's optimiser (the follow-up's Adam 3e-4 in the i-Blurry presets; theirs SGD 0.1) and
  the follow-up's batch (batch/2 + batch/2; theirs 10 + 10).
"""

from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .base import Method
from .pcr_params import PCRParams
from .taskfree import TaskFree


def proxy_contrastive_loss(features: Tensor, proxies: Tensor, y: Tensor, temperature: float) -> Tensor:
    """PCR's loss: each row of `features` (N, d) against the proxies (rows of `proxies`, one per
    class) of the labels in the batch `y` (N,), cosine similarities over `temperature`; the
    positive is its own class's proxy. No host sync (fixed shapes)."""
    z = nnf.normalize(features, dim=1)
    w = nnf.normalize(proxies[y], dim=1)  # (N, d): the proxy of every sample of the batch
    sim = z @ w.T / temperature  # sim[i, j] = cos(z_i, w_{y_j}) / tau
    return (torch.logsumexp(sim, dim=1) - sim.diagonal()).mean()


def cosine_scores(features: Tensor, proxies: Tensor, temperature: float) -> Tensor:
    """cos(f, w_c) / tau for every class c: PCR's classifier."""
    return nnf.normalize(features, dim=1) @ nnf.normalize(proxies, dim=1).T / temperature


class PCR(TaskFree, Method[PCRParams]):
    name = "pcr"
    default_memory_policy = "reservoir"
    capturable_step = True  # the proxy loss: fixed shapes, no host decision (graphs.MethodStep)

    def online_train(self, stream: Tensor, iterations: int) -> None:
        n_memory = self.cfg.batch_size - len(stream)
        batches = []
        for _ in range(iterations):
            batch = torch.cat([stream, self.memory_draw(n_memory)])
            batches.append(torch.cat([batch, batch]))  # two views: each image is augmented on its own
        self.train_batches(batches)

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        return proxy_contrastive_loss(self.model.features(x), self.model.fc.weight, y, self.params.pcr_temperature)

    def head_takes(self, label: int) -> None:
        """The arriving class's proxy is the row it always had (untrained until now)."""

    def logits(self, x: Tensor) -> Tensor:
        scores = cosine_scores(self.model.features(x), self.model.fc.weight, self.params.pcr_temperature)
        return self.mask_unseen(scores)
