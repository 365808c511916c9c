"""Batched inference over train or test indices: uncertainty scoring, features, evaluation.

Each pass runs in large batches on the training device, with the images decoded ahead when
the split streams from disk; on several ranks each scores a block of the indices and the
results are gathered in order, so every rank holds the same answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from . import metrics
from .accel import inference_batch
from .augment import Augmenter
from .compute import ledger_of
from .data import Dataset
from .learner import Learner
from .pipeline import iter_batches, prefetching
from .uncertainty import vote_uncertainty


@torch.inference_mode()
def uncertainty_of(
    method: Learner, idx: Tensor, progress: Callable[[int], None] | None = None
) -> tuple[Tensor, Tensor | None]:
    """u(x) (and the top vote counts) of train indices under the run's measure and views;
    `progress(n)`: n more of `idx` scored (with several ranks, counted for all of them)."""
    method.model.eval()
    cfg, dist, accel, train = method.cfg, method.dist, method.accel, method.setup.data.train
    aug = method.setup.augmenter
    local = dist.block(idx) if dist else idx
    views = 1 if cfg.uncertainty == "none" else cfg.uncertainty_views
    # the views are drawn a whole-GPU chunk at a time whatever the run's memory share (so the
    # draws, and the memory RM picks, do not depend on how many runs share the GPU); the forward
    # passes over them run in share-sized batches
    chunk_images = inference_batch(method.setup.data.image_shape, method.device, share=1.0)
    forward = inference_batch(method.setup.data.image_shape, method.device)
    per_chunk = max(1, chunk_images // views)  # vote_uncertainty's own chunking, decoded ahead
    images_of = prefetching(train, list(local.split(per_chunk)))

    def logits(x: Tensor) -> Tensor:
        ledger_of(method).add("forward", x.shape)  # (per image: a split batch costs the same)
        if len(x) <= forward:
            return method.logits(accel.prepare(x))
        return torch.cat([method.logits(accel.prepare(part)) for part in x.split(forward)])

    with accel.autocast():
        u, votes = vote_uncertainty(
            logits,
            images_of,
            local,
            cfg.uncertainty,
            cfg.uncertainty_views,
            aug.gen,
            aug.test,
            chunk_images=chunk_images,
            progress=None if progress is None else (lambda n: progress(n * len(idx) // max(len(local), 1))),
        )
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
        feats = [
            method.model.features(accel.prepare(test(x))).float() for x in iter_batches(method.setup.data.train, plan)
        ]
    out = torch.cat(feats) if feats else torch.empty(0, method.model.feature_dim, device=method.device)
    return dist.gather(out) if dist else out


@dataclass
class Evaluation:
    """One evaluation: top-1 accuracy (percent) and per class; with `topk` > 1 also the top-k
    accuracy (the label among the k highest-scored classes) and per class."""

    accuracy: float
    class_accuracy: list[float | None]
    topk: int = 1
    topk_accuracy: float | None = None
    topk_class_accuracy: list[float | None] | None = None


@torch.inference_mode()
def evaluation(
    method: Learner,
    data: Dataset,
    labels: Tensor,
    classes: list[int],
    augmenter: Augmenter,
    topk: int = 1,
    batch_size: int | None = None,
) -> Evaluation:
    """`method.predict` (top-1) on the test samples of `classes`; with topk > 1 the method's class
    scores are ranked once per batch and give both the top-1 and the top-k hits."""
    keep = torch.isin(labels, torch.tensor(classes, device=labels.device)).nonzero().flatten()
    return _measure(method, data.test, keep, labels[keep].cpu(), data, augmenter, topk, batch_size)


@torch.inference_mode()
def validation(
    method: Learner,
    data: Dataset,
    indices: Tensor,
    train_labels: Tensor,
    classes: list[int],
    augmenter: Augmenter,
    batch_size: int | None = None,
) -> Evaluation:
    """`method.predict` (top-1) on the held-out TRAIN samples `indices` of `classes` (the
    validation stream, issue 30): measured as the test evaluation is (batched, clean images,
    the same scope of classes), but a call of its own that never reads the test split, so a
    search that selects on validation can be shown to touch no test sample."""
    indices = indices.to(train_labels.device)
    truth = train_labels[indices]
    keep = indices[torch.isin(truth, torch.tensor(classes, device=truth.device))]
    return _measure(method, data.train, keep, train_labels[keep].cpu(), data, augmenter, 1, batch_size)


def _measure(
    method: Learner,
    images: object,
    keep: Tensor,
    truth: Tensor,
    data: Dataset,
    augmenter: Augmenter,
    topk: int,
    batch_size: int | None,
) -> Evaluation:
    """Predictions on `images` (a split) at indices `keep` against `truth`, in batches."""
    batch_size = batch_size or inference_batch(data.image_shape, method.device, 4096)
    accel, dist = method.accel, method.dist
    local = dist.block(keep) if dist else keep
    truth_local = dist.block(truth) if dist else truth  # the same block as `local`
    preds, hits = [], []
    start = 0
    with accel.autocast():
        for batch in iter_batches(images, local.split(batch_size)):
            x = accel.prepare(augmenter.test(batch))
            ledger_of(method).add("eval", x.shape)
            if topk > 1:
                scores = method.class_scores(x)
                preds.append(scores.argmax(-1).cpu())
                y = truth_local[start : start + len(x)]
                hits.append(metrics.topk_hits(scores.topk(min(topk, scores.shape[-1]), dim=-1).indices.cpu(), y))
            else:
                preds.append(method.predict(x).cpu())
            start += len(x)
    pred = torch.cat(preds) if preds else torch.empty(0, dtype=torch.long)
    hit = torch.cat(hits) if hits else torch.empty(0, dtype=torch.bool)
    if dist:
        pred = dist.gather(pred)
        hit = dist.gather(hit) if topk > 1 else hit
    out = Evaluation(metrics.accuracy(pred, truth), metrics.per_class_accuracy(pred, truth, data.n_classes), topk)
    if topk > 1:
        out.topk_accuracy = metrics.hit_rate(hit)
        out.topk_class_accuracy = metrics.per_class_hit_rate(hit, truth, data.n_classes)
    return out


def evaluate(
    method: Learner,
    data: Dataset,
    labels: Tensor,
    classes: list[int],
    augmenter: Augmenter,
    batch_size: int | None = None,
) -> tuple[float, list[float | None]]:
    """Top-1 accuracy (percent) and per-class accuracy of `method.predict` on the test samples of `classes`."""
    result = evaluation(method, data, labels, classes, augmenter, batch_size=batch_size)
    return result.accuracy, result.class_accuracy
