"""The shared method interface and the training machinery every method reuses.

A method is one file: a subclass of `Method` that overrides only what makes it different
(its memory policy, its loss, its batch composition, its classifier). The per-task
schedule (PROTOCOL §2) lives here:

    online:  one pass over the stream (with memory replay) -> memory update -> E epochs on
             the memory alone
    offline: E epochs over stream + memory -> memory update
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterator

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .. import memory as M
from ..accel import Accel, inference_batch, train_chunk
from ..augment import Augmenter
from ..data import Dataset
from ..events import Reporter
from .. import distributed
from ..graphs import GraphedStep, graph_ready_optimizer, portable_optimizer_state, set_lr
from ..models import Backbone, build_model
from ..pipeline import iter_batches, prefetching
from ..schedule import epoch_lr
from ..uncertainty import vote_uncertainty


@dataclass
class Setup:
    """Everything a method is built from. `cfg` is the run's validated config."""

    cfg: Any
    data: Dataset  # sources on the training device
    train_labels: Tensor  # remapped labels of the train split (on the device)
    test_labels: Tensor
    groups: list[list[int]]  # major classes of each task
    device: torch.device
    augmenter: Augmenter
    reporter: Reporter = field(default_factory=Reporter)

    @property
    def n_classes(self) -> int:
        return self.data.n_classes


@dataclass
class Task:
    index: int
    stream: Tensor  # train-set indices in arrival order (CPU)
    n_tasks: int

    def __len__(self) -> int:
        return len(self.stream)


class Method:
    """Experience replay with the run's memory policy: the base every method extends."""

    name: ClassVar[str] = "er"
    default_memory_policy: ClassVar[str] = "random"
    single_task: ClassVar[bool] = False  # joint training sees the whole train set as one task
    # attributes beyond the base state that carry over from task to task (EWC's Fisher, BiC's
    # bias layer, ...): checkpointed and restored by name; modules by their state_dict
    checkpoint_attrs: ClassVar[tuple[str, ...]] = ()

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.cfg = setup.cfg
        self.device = setup.device
        self.n_classes = setup.n_classes
        self.dist = distributed.context()  # None unless torchrun started several ranks
        self.accel = Accel.from_config(self.cfg, self.device)
        self.model: Backbone = self.build_model()
        self.memory = M.Memory(self.cfg.memory_size)
        self.memory_policy: str = self.cfg.memory_policy or self.default_memory_policy
        self.seen = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        self.gen = torch.Generator().manual_seed(self.cfg.seed + 1)  # memory / batching draws
        self.optimizer: torch.optim.Optimizer | None = None
        self.memory_info: dict[str, Any] = {}
        self.epoch_eval: Callable[[], float] | None = None  # set by the loop when best-epoch is recorded
        self.best_epoch_accuracy: float | None = None
        self.graphs: dict[int, GraphedStep] = {}  # CUDA-graphed steps by batch size, for this optimiser

    # ------------------------------------------------------------------ building blocks

    def build_model(self) -> Backbone:
        """A freshly initialised model, ready for this run's device (fast path, synced batch norm)."""
        shape = self.setup.data.image_shape
        model = build_model(self.cfg.model, shape, self.n_classes).to(self.device)
        if self.dist:
            model = distributed.sync_batch_norm(model, self.dist)
        return self.accel.prepare_model(model)

    def make_optimizer(self) -> torch.optim.Optimizer:
        fused = self.device.type in ("cuda", "cpu")
        params = [p for name, p in self.model.named_parameters()
                  if getattr(self.cfg, "train_head", True) or not name.startswith("fc.")]
        self.graphs = {}
        optimizer = torch.optim.SGD(params, lr=self.cfg.lr, momentum=0.9, nesterov=True,
                                    weight_decay=self.cfg.weight_decay, fused=fused)
        return graph_ready_optimizer(optimizer) if self.uses_graphs else optimizer

    @property
    def uses_graphs(self) -> bool:
        """Training steps replayed as CUDA graphs: single-process CUDA runs of methods whose step
        is the plain one (`cuda_graphs` = auto/true); see cl/graphs.py."""
        wanted = getattr(self.cfg, "cuda_graphs", "auto")
        plain = all(getattr(type(self), hook) is getattr(Method, hook)
                    for hook in ("step_loss", "penalty", "after_step"))
        return bool(wanted) and self.device.type == "cuda" and self.dist is None and plain

    def graphed_step(self, batch: int) -> GraphedStep:
        cached = self.graphs.get(batch)
        if cached is None or any(a is not b for a, b in zip((cached.model, cached.optimizer, cached.seen),
                                                             (self.model, self.optimizer, self.seen))):
            assert self.optimizer is not None
            self.graphs[batch] = GraphedStep(self.model, self.optimizer, self.seen, batch,
                                             self.setup.data.image_shape, self.accel.channels_last,
                                             lambda: self.accel.autocast(graph_safe=True))
        return self.graphs[batch]

    @property
    def report(self) -> Reporter:
        return self.setup.reporter

    def labels_of(self, idx: Tensor) -> Tensor:
        return self.setup.train_labels[idx.to(self.setup.train_labels.device)]

    def images_of(self, idx: Tensor) -> Tensor:
        return self.setup.data.train.take(idx)

    def mask_unseen(self, logits: Tensor) -> Tensor:
        """Classes not yet exposed get no probability: the authors' growing head, in effect."""
        if bool(self.seen.all()):
            return logits
        return logits.masked_fill(~self.seen, torch.finfo(logits.dtype).min)

    @property
    def train_batch_size(self) -> int:
        return self.cfg.batch_size

    @property
    def memory_batch_size(self) -> int:
        return self.cfg.memory_batch_size or self.cfg.batch_size

    def _shuffled(self, idx: Tensor) -> Tensor:
        return idx[torch.randperm(len(idx), generator=self.gen)]

    def shuffled_batches(self, idx: Tensor, batch_size: int) -> list[Tensor]:
        """A shuffled pass in batches; a last batch of one is dropped (batch norm needs two)."""
        batches = list(self._shuffled(idx).split(batch_size))
        if batches and len(batches[-1]) < 2:
            batches.pop()
        return batches

    # ------------------------------------------------------------------ one training call

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        """Cross-entropy on an augmented batch, with CutMix when the run enables it."""
        mixed = self.setup.augmenter.maybe_cutmix(x, y)
        if mixed is None:
            return nnf.cross_entropy(self.mask_unseen(self.model(x)), y)
        x, y_a, y_b, lam = mixed
        logits = self.mask_unseen(self.model(x))
        return lam * nnf.cross_entropy(logits, y_a) + (1 - lam) * nnf.cross_entropy(logits, y_b)

    def penalty(self) -> Tensor | None:
        """An extra loss term (EWC, Rwalk); None for none."""
        return None

    def after_step(self) -> None:
        """Called after every optimiser step (Rwalk accumulates its path integral here)."""

    def fit(self, epochs: int, batches_for_epoch: Callable[[int], list[Tensor]], phase: str,
            task: Task, chunk_images: int | None = None) -> None:
        """Train `epochs` epochs; epoch e runs the index batches `batches_for_epoch(e)`.

        Augmentation runs once per chunk of upcoming batches (one batched call for many
        batches), which is what makes per-sample RandAugment/AutoAugment cheap. The chunks'
        images are decoded ahead while the model trains (streamed datasets). With several
        ranks, each trains on its shard of every batch and the gradients are averaged.
        """
        assert self.optimizer is not None, "before_task must create the optimiser"
        if chunk_images is None:
            chunk_images = train_chunk(self.setup.data.image_shape, self.train_batch_size)
        plans = [batches_for_epoch(e) for e in range(epochs)] if epochs <= 4 else None
        total = sum(len(b) for plan in plans for b in plan) if plans else None
        if total is None:  # long calls: every epoch has the same size
            first = batches_for_epoch(0)
            total = sum(len(b) for b in first) * epochs
        self.report.phase(task.index, phase, total)
        aug = self.setup.augmenter
        self.best_epoch_accuracy = None
        for epoch in range(epochs):
            batches = plans[epoch] if plans else (first if epoch == 0 else batches_for_epoch(epoch))
            set_lr(self.optimizer, epoch_lr(epoch, self.cfg.lr, self.cfg.schedule))
            self.model.train()
            chunks = list(_chunks(batches, chunk_images))
            shards = [[self.dist.shard(b) for b in chunk] for chunk in chunks] if self.dist else \
                [[(b, 1.0) for b in chunk] for chunk in chunks]
            flats = [torch.cat([part for part, _ in shard]) for shard in shards]
            for chunk, shard, flat, raw in zip(chunks, shards, flats, self.chunk_images(flats)):
                sizes = [len(part) for part, _ in shard]
                images = self.accel.prepare(aug.train(raw))
                labels = self.labels_of(flat)
                for x, y, (_, weight) in zip(images.split(sizes), labels.split(sizes), shard):
                    if self.uses_graphs and len(x) > 1:
                        self.graphed_step(len(x))(x, y, aug.draw_mix(len(x), x.shape[-2], x.shape[-1]))
                        continue
                    with self.accel.autocast():
                        loss = self.step_loss(x, y)
                    extra = self.penalty()
                    if extra is not None:
                        loss = loss + extra
                    self.optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    if self.dist:
                        self.dist.average_gradients(self.trained_parameters(), weight)
                    self.optimizer.step()
                    self.after_step()
                self.report.advance(sum(len(b) for b in chunk))
            if self.dist:  # one model on every rank: rank 0's batch-norm statistics (and weights)
                self.dist.sync_module(self.model)
            if self.epoch_eval is not None and phase != "stream":
                acc = self.epoch_eval()
                self.best_epoch_accuracy = max(acc, self.best_epoch_accuracy or acc)

    def chunk_images(self, flats: list[Tensor]) -> Iterator[Tensor]:
        """uint8 images of each chunk: decoded ahead by the source's pipeline when it streams
        from disk (and `images_of` is the base one), else `images_of` one chunk at a time."""
        if type(self).images_of is Method.images_of:
            return iter_batches(self.setup.data.train, flats)
        return (self.images_of(flat) for flat in flats)

    def trained_parameters(self) -> list[Tensor]:
        """What the optimiser updates: the gradients averaged over ranks."""
        assert self.optimizer is not None
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    # ------------------------------------------------------------------ the schedule

    def before_task(self, task: Task) -> None:
        self.seen |= torch.bincount(self.labels_of(task.stream), minlength=self.n_classes).bool()
        if getattr(self.cfg, "reset_head", False):
            self.reset_head()
        self.optimizer = self.make_optimizer()  # optimiser and schedule reset each task

    def reset_head(self) -> None:
        """A freshly initialised classifier head: the authors' code builds a new `fc` at every
        task (`before_task`), even when the class count does not change (blurry streams)."""
        old = self.model.fc
        self.model.fc = torch.nn.Linear(old.in_features, old.out_features).to(self.device)

    def learn_task(self, task: Task) -> None:
        if self.cfg.stream == "online":
            self.fit(1, lambda e: self.stream_batches(task), "stream", task)
            self.update_memory(task)
            if len(self.memory) and self.cfg.epochs > 0:
                self.fit(self.cfg.epochs, lambda e: self.shuffled_batches(self.memory.indices, self.memory_batch_size),
                         "memory", task)
        else:
            self.fit(self.cfg.epochs, lambda e: self.stream_batches(task), "offline", task)
            self.update_memory(task)

    def after_task(self, task: Task) -> None:
        """Called after the task is learned, before evaluation."""

    def stream_batches(self, task: Task) -> list[Tensor]:
        """One pass over the task's stream: the authors' finetune shuffles stream and memory together."""
        return self.shuffled_batches(torch.cat([task.stream, self.memory.indices]), self.train_batch_size)

    # ------------------------------------------------------------------ memory

    @property
    def seen_classes(self) -> list[int]:
        return self.seen.nonzero().flatten().tolist()

    def update_memory(self, task: Task) -> None:
        """Refill the memory from the stream and the current memory by the run's policy."""
        started = time.perf_counter()
        self.report.phase(task.index, "memory update", len(task.stream) + len(self.memory))
        candidates = torch.cat([self.memory.indices, task.stream])
        labels = self.labels_of(candidates).cpu()
        cap, classes, policy = self.memory.capacity, self.seen_classes, self.memory_policy
        self.memory_info = {"policy": policy}
        if policy == "reservoir":
            chosen, self.memory.seen = M.reservoir_update(self.memory.indices, task.stream, self.memory.seen,
                                                          cap, self.gen)
        elif policy == "greedy_balanced":  # GDumb's sampler: decides per streamed sample, like reservoir
            chosen = M.greedy_balanced_update(self.memory.indices, self.memory.labels, task.stream,
                                              self.labels_of(task.stream).cpu(), cap, self.gen)
        elif len(candidates) <= cap:
            chosen = candidates
        elif policy == "random":
            chosen = M.random_select(candidates, cap, self.gen)
        elif policy == "class_balanced":
            chosen = M.class_balanced_select(candidates, labels, cap, classes, self.gen)
        elif policy == "uncertainty":
            chosen = self.uncertainty_memory(task, candidates, labels)
        elif policy == "prototype":
            chosen = M.herding_select(candidates, labels, self.features_of(candidates), cap, classes, self.gen)
        else:
            raise ValueError(f"unknown memory policy {policy!r}")
        if self.dist:
            chosen = self.agree_on_memory(task, chosen)
        self.memory.replace(chosen, self.labels_of(chosen).cpu())
        cache = getattr(self.setup.data.train, "cache", None)
        if cache is not None:  # a streamed dataset keeps the memory decoded (when it fits)
            self.memory_info["memory_cached"] = cache(self.memory.indices)
        self.report.advance(len(candidates))
        self.memory_info["seconds"] = round(time.perf_counter() - started, 3)
        self.report.memory_updated(task.index, self.memory.histogram(self.n_classes),
                                   M.slots_per_class(cap, len(classes)), self.memory_info)

    def agree_on_memory(self, task: Task, chosen: Tensor) -> Tensor:
        """Every rank holds rank 0's memory. Ranks decide alike (same scores, same generator
        draws); a rank that did not is logged, and rank 0's choice wins everywhere."""
        assert self.dist is not None
        if not self.dist.same_on_every_rank(chosen.cpu()):
            self.report.log(f"rank {self.dist.rank}: memory choice differed between ranks at task "
                            f"{task.index + 1}; rank 0's is used")
            self.memory_info["ranks_differed"] = True
        chosen = self.dist.broadcast(chosen.cpu())
        self.dist.agree(f"memory after task {task.index + 1} ({len(chosen)} samples)", chosen)
        return chosen

    def uncertainty_memory(self, task: Task, candidates: Tensor, labels: Tensor) -> Tensor:
        """RM's diversity-aware selection; task 0 is class-balanced random as in the authors' code
        (the uncertainty of a model that has seen one pass is not yet informative)."""
        cap, classes = self.memory.capacity, self.seen_classes
        if task.index == 0:
            self.memory_info["note"] = "task 0: class-balanced random (authors' code)"
            return M.class_balanced_select(candidates, labels, cap, classes, self.gen)
        u, votes = self.uncertainty_of(candidates)
        chosen = M.uncertainty_select(candidates, labels, u, cap, classes, self.gen)
        picked = torch.isin(candidates, chosen)
        self.memory_info.update({
            "measure": self.cfg.uncertainty,
            "views": self.cfg.uncertainty_views,
            "candidates_uncertainty": _histogram(u, self.cfg.uncertainty_views),
            "chosen_uncertainty": _histogram(u[picked], self.cfg.uncertainty_views),
        })
        return chosen

    @torch.inference_mode()
    def uncertainty_of(self, idx: Tensor) -> tuple[Tensor, Tensor | None]:
        """u(x) for every index, scored in large batches on the device (on several ranks, each
        scores a block of the candidates and the scores are gathered in order)."""
        self.model.eval()
        aug = self.setup.augmenter
        local = self.dist.block(idx) if self.dist else idx
        views = 1 if self.cfg.uncertainty == "none" else self.cfg.uncertainty_views
        chunk_images = inference_batch(self.setup.data.image_shape, self.device)
        per_chunk = max(1, chunk_images // views)  # vote_uncertainty's own chunking, decoded ahead
        images_of = self.images_of
        if type(self).images_of is Method.images_of:
            images_of = prefetching(self.setup.data.train, list(local.split(per_chunk)))
        with self.accel.autocast():
            u, votes = vote_uncertainty(lambda x: self.logits(self.accel.prepare(x)), images_of, local,
                                        self.cfg.uncertainty, self.cfg.uncertainty_views, aug.gen, aug.test,
                                        chunk_images=chunk_images)
        if hasattr(images_of, "close"):
            images_of.close()
        if self.dist:
            u = self.dist.gather(u)
            votes = None if votes is None else self.dist.gather(votes)
        return u, votes

    @torch.inference_mode()
    def features_of(self, idx: Tensor, chunk: int | None = None) -> Tensor:
        self.model.eval()
        test = self.setup.augmenter.test
        local = self.dist.block(idx) if self.dist else idx
        plan = list(local.split(chunk or inference_batch(self.setup.data.image_shape, self.device, 4096)))
        images = (iter_batches(self.setup.data.train, plan) if type(self).images_of is Method.images_of
                  else (self.images_of(part) for part in plan))
        with self.accel.autocast():
            feats = [self.model.features(self.accel.prepare(test(x))).float() for x in images]
        out = torch.cat(feats) if feats else torch.empty(0, self.model.feature_dim, device=self.device)
        return self.dist.gather(out) if self.dist else out

    # ------------------------------------------------------------------ inference

    def logits(self, x: Tensor) -> Tensor:
        return self.mask_unseen(self.model(x))

    @torch.inference_mode()
    def predict(self, x: Tensor) -> Tensor:
        """Class predictions for normalised images (iCaRL overrides with nearest-mean)."""
        self.model.eval()
        return self.logits(x).argmax(-1)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": portable_optimizer_state(self.optimizer.state_dict()) if self.optimizer else None,
            "memory": self.memory.state_dict(),
            "seen": self.seen.cpu(),
            "gen": self.gen.get_state(),
            "extra": {name: _checkpointable(getattr(self, name)) for name in self.checkpoint_attrs},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.memory.load_state_dict(state["memory"])
        self.seen = state["seen"].to(self.device)
        self.gen.set_state(state["gen"])
        if state.get("optimizer") is not None:
            self.optimizer = self.make_optimizer()
            self.optimizer.load_state_dict(state["optimizer"])
            if self.uses_graphs:
                graph_ready_optimizer(self.optimizer)
        for name in self.checkpoint_attrs:
            value, current = state["extra"][name], getattr(self, name, None)
            if isinstance(current, torch.nn.Module):
                current.load_state_dict(value)
            else:
                setattr(self, name, _on_device(value, self.device))


def _checkpointable(value: Any) -> Any:
    """A module as its state_dict, tensors moved to the CPU (weights_only-loadable)."""
    if isinstance(value, torch.nn.Module):
        return value.state_dict()
    return _on_device(value, torch.device("cpu"))


def _on_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _on_device(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_device(v, device) for v in value)
    return value


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


def _histogram(u: Tensor, views: int) -> list[int]:
    """Counts of uncertainty values in views + 1 bins (u = 0, 1/A, ..., 1)."""
    bins = (u * views).round().long().clamp(0, views)
    return torch.bincount(bins, minlength=views + 1).tolist()
