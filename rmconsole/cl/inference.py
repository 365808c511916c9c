"""Batched inference over train or test indices: uncertainty scoring, features, evaluation.

Each pass runs in large batches on the training device, with the images decoded ahead when
the split streams from disk; on several ranks each scores a block of the indices and the
results are gathered in order, so every rank holds the same answer.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from . import metrics
from .accel import inference_batch
from .augment import Augmenter
from .data import Dataset
from .learner import Learner
from .pipeline import iter_batches, prefetching
from .uncertainty import vote_uncertainty


@torch.inference_mode()
def uncertainty_of(method: Learner, idx: Tensor,
                   progress: Callable[[int], None] | None = None) -> tuple[Tensor, Tensor | None]:
    """u(x) (and the top vote counts) of train indices under the run's measure and views;
    `progress(n)`: n more of `idx` scored (with several ranks, counted for all of them)."""
    method.model.eval()
    cfg, dist, accel, train = method.cfg, method.dist, method.accel, method.setup.data.train
    aug = method.setup.augmenter
    local = dist.block(idx) if dist else idx
    views = 1 if cfg.uncertainty == "none" else cfg.uncertainty_views
    chunk_images = inference_batch(method.setup.data.image_shape, method.device)
    per_chunk = max(1, chunk_images // views)  # vote_uncertainty's own chunking, decoded ahead
    images_of = prefetching(train, list(local.split(per_chunk)))
    with accel.autocast():
        u, votes = vote_uncertainty(lambda x: method.logits(accel.prepare(x)), images_of, local,
                                    cfg.uncertainty, cfg.uncertainty_views, aug.gen, aug.test,
                                    chunk_images=chunk_images,
                                    progress=None if progress is None else
                                    (lambda n: progress(n * len(idx) // max(len(local), 1))))
    if hasattr(images_of, "close"):
        images_of.close()
    if dist:
        u = dist.gather(u)
        votes = None if votes is None else dist.gather(votes)
    return u, votes


@torch.inference_mode()
def features_of(method: Learner, idx: Tensor, chunk: int | None = None) -> Tensor:
    """The backbone's features of train indices, on clean (test-transformed) images."""
    method.model.eval()
    dist, accel, test = method.dist, method.accel, method.setup.augmenter.test
    local = dist.block(idx) if dist else idx
    plan = list(local.split(chunk or inference_batch(method.setup.data.image_shape, method.device, 4096)))
    with accel.autocast():
        feats = [method.model.features(accel.prepare(test(x))).float()
                 for x in iter_batches(method.setup.data.train, plan)]
    out = torch.cat(feats) if feats else torch.empty(0, method.model.feature_dim, device=method.device)
    return dist.gather(out) if dist else out


@torch.inference_mode()
def evaluate(method: Learner, data: Dataset, labels: Tensor, classes: list[int], augmenter: Augmenter,
             batch_size: int | None = None) -> tuple[float, list[float | None]]:
    """Accuracy (percent) and per-class accuracy of `method.predict` on the test samples of `classes`."""
    keep = torch.isin(labels, torch.tensor(classes, device=labels.device)).nonzero().flatten()
    batch_size = batch_size or inference_batch(data.image_shape, method.device, 4096)
    accel, dist = method.accel, method.dist
    local = dist.block(keep) if dist else keep
    preds = []
    with accel.autocast():
        for images in iter_batches(data.test, local.split(batch_size)):
            preds.append(method.predict(accel.prepare(augmenter.test(images))).cpu())
    pred = torch.cat(preds) if preds else torch.empty(0, dtype=torch.long)
    if dist:
        pred = dist.gather(pred)
    truth = labels[keep].cpu()
    return metrics.accuracy(pred, truth), metrics.per_class_accuracy(pred, truth, data.n_classes)
