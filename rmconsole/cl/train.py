"""The training engine: what `Method.fit` runs. Methods supply the hooks (their loss, what
happens after a step); this module runs the epochs.

One `fit` call trains E epochs over index batches: it sets each epoch's learning rate,
augments chunks of upcoming batches in one batched call (what makes per-sample
RandAugment/AutoAugment cheap), has the chunks' images decoded ahead while the model trains
(streamed datasets), gives each rank its shard of every batch, reports progress and, when the
run records it, evaluates after every epoch. `Stepper` is the one place an optimiser step
happens.

Batching without changing a draw. A chunk (consecutive batches, up to `chunk_images` images)
is what the unbatched loop augments in one call: it draws the chunk's augmentation, then
each step draws its batch's CutMix. Here the chunk's augmentation is drawn (`Augmenter.draw`)
and, when the method's steps draw CutMix once each, its steps' CutMix draws are planned right
after (`Augmenter.plan_mix`), so the generators advance exactly as the unbatched loop's; then
several chunks (a small memory's epochs, up to `chunk_images` images) are augmented in one
call and sliced per step. Same seeds, same images, same steps, same weights
(tests/test_train.py). Whether a method's step draws CutMix once is learned on its first
chunk, which runs unplanned; a step that ever takes a different draw ends the planning
(logged), and the run goes on drawing live.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor
from torch.optim import optimizer as optim_hooks

from . import graphs
from .accel import train_chunk
from .augment import Augmenter, TrainDraw
from .compute import ledger_of
from .distributed import Dist
from .events import EpochStats
from .graphs import CompiledStep, GraphedStep, MethodStep, launch_bound, set_lr
from .learner import Learner, Task
from .mlp_step import MLPStep
from .pipeline import iter_batches
from .schedule import epoch_lr
from .step_audit import graphable

# method class -> whether its step draws CutMix exactly once (learned on its first chunk)
_MIX_PER_STEP: dict[type, bool] = {}


class Diverged(FloatingPointError):
    """Training made the model's parameters non-finite (a loss became inf or NaN): the run stops
    with one line instead of "finishing" at chance accuracy."""


def finite(params: list[Tensor]) -> bool:
    """Whether every element of every tensor is finite: one read of each (`aminmax`, which
    carries a NaN through to both ends, so min and max are finite exactly when all are) and
    one host sync; no mask as large as the model is made (11x cheaper than `isfinite().all()`
    on the MNIST MLP)."""
    ends = [end for p in params if p.numel() for end in torch.aminmax(p.detach())]
    return not ends or bool(torch.stack(ends).isfinite().all())


def check_finite(method: Learner, task: Task, where: str) -> None:
    """Raise Diverged when any parameter is inf or NaN (checked after every epoch)."""
    if finite(list(method.model.parameters())):
        return
    knobs = [f"lr (now {method.cfg.lr:g})"]
    reg_weight = getattr(method, "reg_weight", None)
    if isinstance(reg_weight, (int, float)):
        knobs.insert(0, f"reg_weight (now {reg_weight:g})")
    raise Diverged(
        f"{method.cfg.method} diverged in task {task.index + 1} ({where}): the model's parameters are "
        f"not finite (the loss became inf or NaN); lower {' or '.join(knobs)}"
    )


def fit(
    method: Learner,
    epochs: int,
    batches_for_epoch: Callable[[int], list[Tensor]],
    phase: str,
    task: Task,
    chunk_images: int | None = None,
) -> None:
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
    method.best_epoch_accuracy = None

    def batches_of(epoch: int) -> list[Tensor]:
        return plans[epoch] if plans else (first if epoch == 0 else batches_for_epoch(epoch))

    augmenter = method.setup.augmenter
    h, w = data.image_shape[-2:]
    streamed = hasattr(data.train, "batches")  # decoded ahead epoch by epoch: one chunk per call
    planning = _MixPlanning(method, augmenter, spanning=not streamed)
    step = Stepper(method)
    prefetch: Iterator[Tensor] | None = None
    epoch = _EpochTally()
    chunks = _epoch_chunks(epochs, batches_of, chunk_images, dist)
    for group in _groups(chunks, chunk_images, planning.spans):
        # the draws, in the order the chunk-by-chunk loop makes them
        ahead = len(group) > 1 and augmenter.uses_cutmix
        draws = []
        for chunk in group:
            if len(chunk.flat):
                draws.append(augmenter.draw(len(chunk.flat), h, w))
                if ahead:
                    augmenter.plan_mix([len(part) for part, _ in chunk.shard], h, w)
        flats = [chunk.flat for chunk in group if len(chunk.flat)]
        if flats:
            if streamed:
                if group[0].first:
                    prefetch = iter_batches(data.train, group[0].epoch_flats)
                assert prefetch is not None
                raw = next(prefetch)
            else:
                raw = data.train.take(torch.cat(flats) if len(flats) > 1 else flats[0])
            flat = torch.cat(flats) if len(flats) > 1 else flats[0]
            images = method.accel.prepare(augmenter.apply(raw, TrainDraw.cat(draws)))
            labels = method.labels_of(flat)
        calls, steps, offset = augmenter.mix_calls, 0, 0
        for chunk in group:
            if chunk.first:
                epoch.start(epoch_lr(chunk.epoch, method.cfg.lr, method.cfg.schedule), method.graphs.values())
                set_lr(optimizer, epoch.lr)
                method.model.train()
            sizes = [len(part) for part, _ in chunk.shard]
            if sizes:
                n = sum(sizes)
                ledger = ledger_of(method)  # host counts of the steps' shapes (cl/compute.py)
                i, row = 0, offset
                while i < len(sizes):  # a graphed run's equal batches go k to a replay (`Stepper.span`)
                    k, b = step.span(sizes, i), sizes[i]
                    x, y = images[row : row + k * b], labels[row : row + k * b]
                    epoch.step(step(x, y, chunk.shard[i][1], k), k * b)
                    ledger.add("train", x[:b].shape, k)
                    i, row = i + k, row + k * b
                offset += n
                steps += len(sizes)
                method.report.advance(chunk.samples)
                epoch.samples += chunk.samples
            if chunk.last:
                check_finite(method, task, f"{phase} epoch {chunk.epoch + 1}/{epochs}")
                if dist:  # one model on every rank: rank 0's batch-norm statistics (and weights)
                    dist.sync_module(method.model)
                loss_total = _epoch_loss(epoch.losses, epoch.sizes, method.graphs.values())  # one host sync
                seconds = time.perf_counter() - epoch.started
                acc = None
                if method.epoch_eval is not None and phase != "stream":
                    acc = method.epoch_eval()
                    method.best_epoch_accuracy = max(acc, method.best_epoch_accuracy or acc)
                mean_loss = loss_total / max(epoch.trained, 1)
                method.report.epoch_finished(
                    EpochStats(
                        task.index,
                        phase,
                        chunk.epoch,
                        epochs,
                        mean_loss if math.isfinite(mean_loss) else None,
                        epoch.lr,
                        epoch.samples,
                        seconds,
                        acc,
                    )
                )
        planning.check(augmenter.mix_calls - calls, steps, ahead)


class _EpochTally:
    """What an epoch's statistics need, gathered step by step without a host sync: each eager
    step's detached mean loss and batch size (a graphed step adds to its graph's `loss_sum`)."""

    def start(self, lr: float, graphed: Iterable[GraphedStep]) -> None:
        self.started = time.perf_counter()  # chunks several epochs long are augmented up front:
        self.lr = lr  # an epoch's seconds then exclude its augmentation
        self.losses: list[Tensor] = []
        self.sizes: list[int] = []
        self.trained = 0  # samples this process trained on (its shard, with several ranks)
        self.samples = 0  # samples of the epoch (all ranks)
        for g in graphed:
            g.loss_sum.zero_()

    def step(self, loss: Tensor | None, size: int) -> None:
        self.trained += size
        if loss is not None:
            self.losses.append(loss)
            self.sizes.append(size)


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
    return float(cast(Tensor, sum(p.to(parts[0].device) for p in parts)).item())


class Stepper:
    """The one place an optimiser step happens. `stepper(x, y, weight)`: one step on an
    augmented batch — the method's loss, backward, its `after_backward`, the ranks' gradients
    averaged (weighted by their shard), the update, then the method's `after_step`; on a
    single-process CUDA run of a default-step method, a CUDA graph replay. Returns the step's mean loss, detached (no host
    sync), or None for a graphed step, whose graph adds it (× batch size) to its own `loss_sum`.

    What stays the same from step to step is looked up once: whether steps are graphed, whether
    the default step of an MLP runs without autograd (mlp_step.py, with its unseen-class mask),
    and the parameters a plain fused SGD updates (its kernel called directly, the call
    `SGD.step` makes, without its Python wrapper); looked up again when the method's optimiser,
    model or head is another object (a new task's optimiser, a rebuilt head, GDumb's fresh
    model). `fit` keeps one per call, a task-free method one for its whole stream."""

    def __init__(self, method: Learner) -> None:
        self.method = method
        self.graphs = method.uses_graphs and method.plain_step
        self.captured = method.captured_step and method.dist is None  # its own step, capturable
        self.capture = method.uses_graphs and self.captured
        self.compiled = method.accel.compile_step and method.plain_step and method.dist is None
        self.plain = method.plain_step and method.dist is None
        self.manual = (
            method.plain_step and method.dist is None and method.accel.amp_dtype is None and method.device.type == "cpu"
        )
        self.optimizer: torch.optim.Optimizer | None = None
        self.model: torch.nn.Module | None = None
        self.head: object = None
        self.sgd: list[Tensor] | None = None
        self.mlp: MLPStep | None = None

    def graphed(self, batch: int, shape: tuple[int, ...]) -> bool:
        """Whether a step of this batch is a CUDA graph replay."""
        return self.graphs and batch > 1 and (self.method.cfg.cuda_graphs is True or launch_bound(batch, shape))

    def span(self, sizes: list[int], i: int) -> int:
        """How many of the batches `sizes[i:]` one call takes: `graphs.STEPS_PER_REPLAY` equal
        graphed ones (one replay, one copy of their inputs), else 1."""
        k, b = graphs.STEPS_PER_REPLAY, sizes[i]
        shape = self.method.setup.data.image_shape
        if k > 1 and len(sizes) - i >= k and sizes[i : i + k] == [b] * k and self.graphed(b, shape):
            return k
        return 1

    def __call__(self, x: Tensor, y: Tensor, weight: float, steps: int = 1) -> Tensor | None:
        """`steps` > 1 (graphed runs, `span`): x and y hold that many equal batches, in order."""
        method = self.method
        if steps > 1:
            b = len(x) // steps
            draws = [method.setup.augmenter.draw_mix(b, x.shape[-2], x.shape[-1]) for _ in range(steps)]
            graphed_step(method, b, steps)(x, y, draws)
            return None
        if not self.plain:  # a method's own step: its host side first (`step_key`), outside any graph
            key = method.step_key(x, y)
            if self.capture and len(x) > 1 and (method.cfg.cuda_graphs is True or launch_bound(len(x), x.shape[1:])):
                method_step(method, len(x), key)(x, y, None)
                return None
            if self.captured:  # what the CUDA graph replays on a GPU (counted apart by an active step_audit)
                with graphable():
                    return self._eager(x, y, weight)
            return self._eager(x, y, weight)
        # a CUDA graph replay, or (compile = "step") the same body compiled
        if self.graphed(len(x), x.shape[1:]) or (self.compiled and len(x) > 1):
            graphed_step(method, len(x))(x, y, method.setup.augmenter.draw_mix(len(x), x.shape[-2], x.shape[-1]))
            return None
        if self.plain:  # what a CUDA graph replays on a GPU (counted apart by an active step_audit)
            with graphable():
                return self._eager(x, y, weight)
        return self._eager(x, y, weight)

    def _eager(self, x: Tensor, y: Tensor, weight: float) -> Tensor:
        method = self.method
        optimizer = method.optimizer
        assert optimizer is not None
        head = getattr(method.model, "fc", None)
        if optimizer is not self.optimizer or method.model is not self.model or head is not self.head:
            self.optimizer, self.model, self.head = optimizer, method.model, head
            self.sgd = _plain_fused_sgd(optimizer)
            self.mlp = MLPStep.of(method.model, optimizer) if self.manual else None
        if self.mlp is not None and method.model.training:  # the default step, its kernels called directly
            seen = None if getattr(method, "all_seen", False) else method.seen
            loss = self.mlp(x, y, method.setup.augmenter.maybe_cutmix(x, y), seen)
            if self.sgd is None or not _fused_sgd_step(optimizer, self.sgd):
                optimizer.step()
            method.after_step()
            return loss
        with method.accel.autocast():
            loss = method.step_loss(x, y)
        if self.sgd is None:
            optimizer.zero_grad(set_to_none=True)
        else:
            for p in self.sgd:
                p.grad = None
        loss.backward()
        method.after_backward()
        if method.dist:
            method.dist.average_gradients(trained_parameters(optimizer), weight)
        if self.sgd is None or not _fused_sgd_step(optimizer, self.sgd):
            optimizer.step()
        method.after_step()
        return loss.detach()


def _plain_fused_sgd(optimizer: torch.optim.Optimizer | None) -> list[Tensor] | None:
    """The parameters of a fused, momentum SGD with one parameter group and no hooks (what
    `make_optimizer` builds), else None (the optimiser's own `step` runs)."""
    if type(optimizer) is not torch.optim.SGD or len(optimizer.param_groups) != 1:
        return None
    group = optimizer.param_groups[0]
    plain = (
        group.get("fused")
        and not group.get("differentiable")
        and not group.get("maximize")
        and group["momentum"] != 0
        and not optimizer._optimizer_step_pre_hooks
        and not optimizer._optimizer_step_post_hooks
        and not optim_hooks._global_optimizer_pre_hooks
        and not optim_hooks._global_optimizer_post_hooks
        and getattr(optimizer, "grad_scale", None) is None
        and getattr(optimizer, "found_inf", None) is None
    )
    return list(group["params"]) if plain else None


def _fused_sgd_step(optimizer: torch.optim.Optimizer, params: list[Tensor]) -> bool:
    """`SGD.step()` of a plain fused SGD once every parameter has a gradient and a momentum
    buffer: the same kernel on the same tensors. False when it cannot (the first step makes
    the buffers): the caller runs `optimizer.step()`."""
    grads = [p.grad for p in params]
    state = optimizer.state
    buffers = [state[p].get("momentum_buffer") if p in state else None for p in params]
    if any(g is None or g.is_sparse for g in grads) or any(b is None for b in buffers):
        return False
    group = optimizer.param_groups[0]
    with torch.no_grad():
        torch._fused_sgd_(
            params,
            cast("list[Tensor]", grads),
            cast("list[Tensor]", buffers),
            weight_decay=group["weight_decay"],
            momentum=group["momentum"],
            lr=group["lr"],
            dampening=group["dampening"],
            nesterov=group["nesterov"],
            maximize=False,
            is_first_step=False,
            grad_scale=None,
            found_inf=None,
        )
    return True


def graphed_step(method: Learner, batch: int, steps: int = 1) -> GraphedStep:
    """The method's captured (or compiled: `compile = "step"`) step for this batch size, made anew when the model, the optimiser
    (a new one each task) or the seen-classes mask it was captured with has been replaced."""
    cached = method.graphs.get((batch, steps))
    if cached is None or not graphs.made_for(cached, method):
        assert method.optimizer is not None
        stack = getattr(method, "seed_stack", None)  # seeds stacked in one process (cl/stacked.py)
        if stack is not None:
            cached = method.graphs[batch, steps] = stack.seat_for(method, batch, steps)
        else:
            kind = CompiledStep if method.accel.compile_step else GraphedStep
            cached = method.graphs[batch, steps] = kind(*graphs.step_inputs(method, batch), steps)
    return cached


# a capturable method's graphs kept at once (each step_key its own graph: ER-ACE's stream count
# while the memory fills, a new teacher...): the oldest is dropped beyond this
METHOD_GRAPHS = 4


def method_step(method: Learner, batch: int, key: tuple[object, ...]) -> MethodStep:
    """The method's captured own step (`capturable_step`) for this batch size and `step_key`,
    made anew when the model, the optimiser or the seen-classes mask has been replaced."""
    cached = method.graphs.get((batch, 1, *key))
    if not isinstance(cached, MethodStep) or not graphs.made_for(cached, method):
        mine = [k for k, g in method.graphs.items() if isinstance(g, MethodStep)]
        for k in mine[: max(0, len(mine) + 1 - METHOD_GRAPHS)]:
            del method.graphs[k]
        assert method.optimizer is not None
        # every group's lr a device tensor: a method may add a group after make_optimizer (SCR's
        # projection head), whose float lr a graph would keep at its capture's value
        graphs.graph_ready_optimizer(method.optimizer)
        cached = method.graphs[batch, 1, *key] = MethodStep(method, batch, key)
    return cached


def trained_parameters(optimizer: torch.optim.Optimizer) -> list[Tensor]:
    """What the optimiser updates: the gradients averaged over ranks."""
    return [p for group in optimizer.param_groups for p in group["params"]]


# ----------------------------------------------------------------------------- chunks and groups


@dataclass
class _Chunk:
    """Consecutive batches of one epoch that the chunk-by-chunk loop augments in one call."""

    epoch: int
    shard: list[tuple[Tensor, float]]  # this rank's part of each batch, and its gradient weight
    flat: Tensor  # this rank's indices, in step order
    samples: int  # samples of the whole batches (progress)
    first: bool  # first chunk of its epoch (or the epoch has none)
    last: bool
    epoch_flats: list[Tensor]  # every chunk's `flat` of the epoch: the decode-ahead plan


def _epoch_chunks(
    epochs: int, batches_of: Callable[[int], list[Tensor]], chunk_images: int, dist: Dist | None
) -> Iterator[_Chunk]:
    """The chunks of every epoch in order; an epoch's batches are asked for when its first
    chunk is (an epoch without batches is one empty chunk: its learning rate, evaluation...)."""
    for epoch in range(epochs):
        chunks = list(_chunks(batches_of(epoch), chunk_images))
        shards = [[dist.shard(b) for b in chunk] if dist else [(b, 1.0) for b in chunk] for chunk in chunks]
        flats = [torch.cat([part for part, _ in shard]) for shard in shards]
        if not chunks:
            yield _Chunk(epoch, [], torch.empty(0, dtype=torch.long), 0, True, True, [])
        for i, (chunk, shard, flat) in enumerate(zip(chunks, shards, flats)):
            yield _Chunk(epoch, shard, flat, sum(len(b) for b in chunk), i == 0, i == len(chunks) - 1, flats)


def _groups(chunks: Iterator[_Chunk], max_images: int, spans: Callable[[], bool]) -> Iterator[list[_Chunk]]:
    """Consecutive chunks augmented in one call: up to `max_images` images when `spans()` (asked
    before each group is formed, so after the previous one trained), else one chunk each."""
    held: _Chunk | None = None
    while True:
        head = held if held is not None else next(chunks, None)
        held = None
        if head is None:
            return
        group, size = [head], len(head.flat)
        if spans():
            for chunk in chunks:
                if size + len(chunk.flat) > max_images:
                    held = chunk
                    break
                group.append(chunk)
                size += len(chunk.flat)
        yield group


class _MixPlanning:
    """Whether groups may span chunks: always without CutMix (a step then draws nothing), and
    with it once the method's step is known to draw CutMix exactly once (so its draws can be
    planned ahead in step order)."""

    def __init__(self, method: Learner, augmenter: Augmenter, spanning: bool) -> None:
        self.cls, self.augmenter, self.spanning, self.report = type(method), augmenter, spanning, method.report

    def spans(self) -> bool:
        return self.spanning and (not self.augmenter.uses_cutmix or _MIX_PER_STEP.get(self.cls) is True)

    def check(self, calls: int, steps: int, planned: bool) -> None:
        """After a group: did every step take exactly one CutMix draw (the planned one)?"""
        left, broken = self.augmenter.drop_plan(), self.augmenter.plan_broken
        self.augmenter.plan_broken = False
        if not self.augmenter.uses_cutmix or steps == 0:
            return
        once = calls == steps and not left and not broken
        if planned and not once:
            self.report.log(
                f"{self.cls.__name__}: a training step did not take its planned CutMix draw; "
                "augmenting chunk by chunk from here on"
            )
        if not once or self.cls not in _MIX_PER_STEP:
            _MIX_PER_STEP[self.cls] = once


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
