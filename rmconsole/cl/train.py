"""The training engine: what `Method.fit` runs. Methods supply the hooks (their loss, what
happens after a step); this module runs the epochs.

One `fit` call trains E epochs over index batches: it sets each epoch's learning rate,
augments chunks of upcoming batches in one batched call (what makes per-sample
RandAugment/AutoAugment cheap), has the chunks' images decoded ahead while the model trains
(streamed datasets), gives each rank its shard of every batch, reports progress and, when the
run records it, evaluates after every epoch. `train_step` is the one place an optimiser step
happens.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Iterable, Iterator

import torch
from torch import Tensor

from .accel import train_chunk
from .events import EpochStats
from .graphs import GraphedStep, set_lr
from .learner import Learner, Task
from .pipeline import iter_batches
from .schedule import epoch_lr


def fit(method: Learner, epochs: int, batches_for_epoch: Callable[[int], list[Tensor]], phase: str,
        task: Task, chunk_images: int | None = None) -> None:
    """Train `epochs` epochs; epoch e runs the index batches `batches_for_epoch(e)`.

    With several ranks, each trains on its shard of every batch and the gradients are averaged."""
    optimizer, dist, data = method.optimizer, method.dist, method.setup.data
    assert optimizer is not None, "before_task must create the optimiser"
    if chunk_images is None:
        chunk_images = train_chunk(data.image_shape, method.train_batch_size)
    plans = [batches_for_epoch(e) for e in range(epochs)] if epochs <= 4 else None
    total = sum(len(b) for plan in plans for b in plan) if plans else None
    if total is None:  # long calls: every epoch has the same size
        first = batches_for_epoch(0)
        total = sum(len(b) for b in first) * epochs
    method.report.phase(task.index, phase, total)
    augment = method.setup.augmenter.train
    method.best_epoch_accuracy = None
    for epoch in range(epochs):
        started = time.perf_counter()
        batches = plans[epoch] if plans else (first if epoch == 0 else batches_for_epoch(epoch))
        lr = epoch_lr(epoch, method.cfg.lr, method.cfg.schedule)
        set_lr(optimizer, lr)
        losses: list[Tensor] = []  # each eager step's mean loss (detached: no kernel, no sync)
        step_sizes: list[int] = []  # the batch size of each of those steps
        trained = 0  # samples this process trained on (its shard, with several ranks)
        for graphed in method.graphs.values():
            graphed.loss_sum.zero_()
        method.model.train()
        chunks = list(_chunks(batches, chunk_images))
        shards = [[dist.shard(b) for b in chunk] for chunk in chunks] if dist else \
            [[(b, 1.0) for b in chunk] for chunk in chunks]
        flats = [torch.cat([part for part, _ in shard]) for shard in shards]
        for chunk, shard, flat, raw in zip(chunks, shards, flats, iter_batches(data.train, flats)):
            sizes = [len(part) for part, _ in shard]
            images = method.accel.prepare(augment(raw))
            labels = method.labels_of(flat)
            for x, y, (_, weight) in zip(images.split(sizes), labels.split(sizes), shard):
                loss = train_step(method, x, y, weight)
                trained += len(x)
                if loss is not None:
                    losses.append(loss)
                    step_sizes.append(len(x))
            method.report.advance(sum(len(b) for b in chunk))
        if dist:  # one model on every rank: rank 0's batch-norm statistics (and weights)
            dist.sync_module(method.model)
        samples = sum(len(b) for b in batches)
        loss_total = _epoch_loss(losses, step_sizes, method.graphs.values())  # the one host sync of the epoch
        seconds = time.perf_counter() - started
        acc = None
        if method.epoch_eval is not None and phase != "stream":
            acc = method.epoch_eval()
            method.best_epoch_accuracy = max(acc, method.best_epoch_accuracy or acc)
        mean_loss = loss_total / max(trained, 1)
        method.report.epoch_finished(EpochStats(task.index, phase, epoch, epochs,
                                                mean_loss if math.isfinite(mean_loss) else None, lr, samples, seconds,
                                                acc))


def _epoch_loss(losses: list[Tensor], sizes: list[int], graphed: Iterable[GraphedStep]) -> float:
    """The epoch's summed (loss × batch size): eager steps' detached mean losses weighted by
    their batch sizes, plus what the CUDA-graphed steps accumulated inside their graphs; read
    from the device once."""
    parts = []
    if losses:
        stacked = torch.stack(losses).float()
        parts.append((stacked * torch.tensor(sizes, dtype=torch.float32, device=stacked.device)).sum())
    parts += [g.loss_sum.float() for g in graphed]
    if not parts:
        return math.nan
    return float(sum(p.to(parts[0].device) for p in parts).item())


def train_step(method: Learner, x: Tensor, y: Tensor, weight: float) -> Tensor | None:
    """One optimiser step on an augmented batch: the method's loss, backward, the ranks'
    gradients averaged (weighted by their shard), the update, then the method's `after_step`.
    On a single-process CUDA run of a default-step method, the step is a CUDA graph replay.
    Returns the step's mean loss, detached (no host sync), or None for a graphed step, whose
    graph adds it (× batch size) to its own `loss_sum`."""
    if method.uses_graphs and len(x) > 1:
        graphed_step(method, len(x))(x, y, method.setup.augmenter.draw_mix(len(x), x.shape[-2], x.shape[-1]))
        return None
    optimizer = method.optimizer
    with method.accel.autocast():
        loss = method.step_loss(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if method.dist:
        method.dist.average_gradients(trained_parameters(optimizer), weight)
    optimizer.step()
    method.after_step()
    return loss.detach()


def graphed_step(method: Learner, batch: int) -> GraphedStep:
    """The method's captured step for this batch size, made anew when the model, the optimiser
    (a new one each task) or the seen-classes mask it was captured with has been replaced."""
    cached = method.graphs.get(batch)
    current = (method.model, method.optimizer, method.seen)
    if cached is None or any(a is not b for a, b in zip((cached.model, cached.optimizer, cached.seen), current)):
        assert method.optimizer is not None
        cached = method.graphs[batch] = GraphedStep(
            method.model, method.optimizer, method.seen, batch, method.setup.data.image_shape,
            method.accel.channels_last, lambda: method.accel.autocast(graph_safe=True))
    return cached


def trained_parameters(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    """What the optimiser updates: the gradients averaged over ranks."""
    return [p for group in optimizer.param_groups for p in group["params"]]


def _chunks(batches: list[Tensor], max_images: int) -> Iterator[list[Tensor]]:
    chunk: list[Tensor] = []
    size = 0
    for b in batches:
        if chunk and size + len(b) > max_images:
            yield chunk
            chunk, size = [], 0
        chunk.append(b)
        size += len(b)
    if chunk:
        yield chunk
