"""`TaskFree`: the hooks of the follow-up's task-free protocol (cl/online.py), with the
follow-up's experience replay as their defaults (PROTOCOL §9.2).

A method that runs on the i-Blurry / Si-Blurry streams lists this mixin before `Method`
(`class ER(TaskFree, Method)`) and overrides what makes it different. The driver calls, in
stream order:

    online_start()              once, before the first sample (and before a resume's restore)
    online_task_start(task)     at a task boundary, for methods the protocol gives one to
    online_new_class(label)     the first sample of a class arrives (labels by first appearance)
    online_observe(index, y)    every streamed sample the learner receives
    online_before_eval()        before each anytime evaluation (GDumb trains here)
    online_task_end(task)       at a task boundary (EWC++, RM use it; ER and CLIB do nothing)
    memory_report(task)         at a task boundary, after the evaluation (the memory panel's snapshot)

The defaults are the follow-up's ER: a streamed sample joins a temp batch of batch_size/2 and
adds `online_iter` to a budget of updates; when the temp batch is full, int(budget) iterations
run, each on the whole temp batch (re-augmented) plus min(|memory|, batch_size/2) memory
samples drawn uniformly without replacement, the fraction of the budget carries over (with
`train_gflop_per_sample`: iterations while the run's FLOP credit covers them, cl/compute.py
`Credit`, instead of `online_iter`), and then each temp sample is offered to the reservoir
memory (capacity K - batch_size/2, as the follow-up's code keeps K for memory + temp batch). A new class's head row and the head's bias
are re-initialised and the head's optimiser state restarted (in place), as the follow-up rebuilds its fc;
with `schedule = exp_reset` the learning rate is multiplied by `lr_gamma` after every step
and returns to `lr` when a new class arrives.

Building blocks: `train_batches` (augments the batches of several iterations in one batched
call, then one `train.Stepper` per batch), `memory_draw`, `online_optimizer`, `cost` (image
passes the learner has spent: forward 1 + backward 2 per image, for `compute_budget`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor

from .. import train
from ..accel import train_chunk
from ..augment import TrainDraw
from ..compute import credit_of, ledger_of
from ..graphs import CapturedCall, graph_ready_optimizer, launch_bound, set_lr
from ..learner import Task
from ..memory import slots_per_class
from ..online_memory import OnlineMemory
from ..protocols import is_task_free
from ..schedule import epoch_lr
from ..step_audit import auditing

HEAD_RULES = ("extend", "keep_moments", "rebuild")
AUGMENT_GRAPHS = 4  # augmentation graphs kept at once (one per batch shape: a filling memory's are new)

# The hooks as data: every name the task-free protocol (online.py) and the engine call on a
# method, the driver's hooks above and those it shares with the task protocol (construction,
# the step, inference, checkpoints: base.TASK_HOOKS). rmconsole.testing reads it to flag an
# override this protocol never calls.
TASK_FREE_HOOKS: tuple[str, ...] = (
    "online_start",
    "online_task_start",
    "online_new_class",
    "online_observe",
    "online_before_eval",
    "online_task_end",
    "memory_report",
    "build_model",
    "make_optimizer",
    "step_loss",
    "after_backward",
    "after_step",
    "graphable_step",
    "capturable_step",
    "step_key",
    "logits",
    "class_scores",
    "predict",
    "state_dict",
    "load_state_dict",
)


if TYPE_CHECKING:  # the mixin is only ever used before Method in a method's bases: typed as one
    from .base import Method

    _MethodBase = Method[Any]
else:
    _MethodBase = object


class TaskFree(_MethodBase):
    """Mixin: the task-free hooks. `self` is also a `Method` (listed after this class)."""

    # How the head takes a new class: "extend" (the follow-up's ER: new row and the bias
    # re-initialised, the head's optimiser state dropped), "keep_moments" (its CLIB: as extend,
    # but Adam's moments are kept, the new row's zeroed), "rebuild" (its RM port: a new head
    # and a new optimiser).
    head_rule: ClassVar[str] = "extend"
    full_capacity: ClassVar[bool] = False  # True: the memory holds K (CLIB, GDumb), else K - temp batch

    # ------------------------------------------------------------------ set-up

    @property
    def task_free(self) -> bool:
        return is_task_free(self.cfg.stream)

    def stream_rows(self, y: Tensor) -> int:
        """How many rows at the head of the batch `y` labels came from the stream (the rest: the
        memory's); a batch with no such split is all stream."""
        return self.stream_count if self.stream_count is not None else len(y)

    @property
    def temp_batch_size(self) -> int:
        return max(1, self.cfg.batch_size // 2)

    @property
    def online_capacity(self) -> int:
        k = self.cfg.memory_size
        return k if self.full_capacity else max(1, k - self.temp_batch_size)

    def online_start(self) -> None:
        """Before the first sample: the memory, the optimiser and the online state."""
        self.memory = OnlineMemory(self.online_capacity)
        self.optimizer = self.make_optimizer()
        self.temp: list[int] = []
        self.temp_labels: list[int] = []
        self.num_updates = 0.0
        self.credit = credit_of(self.cfg)  # train_gflop_per_sample: a FLOP credit instead of online_iter
        self.lr_steps = 0  # optimiser steps since the learning rate was last reset (exp_reset)
        self.online_steps = 0
        self.cost = 0.0  # image passes spent (forward 1 + backward 2 per trained image)
        self.sample_rng = random.Random(self.cfg.seed + 3)  # per-sample memory decisions
        self.stream_count: int | None = None  # stream samples at the head of the current batch
        self.stepper = train.Stepper(self)  # a step per few samples: set up once
        self.augment_graphs: dict[tuple[object, ...], CapturedCall] = {}  # by role and shape: `augmented`

    def make_optimizer(self) -> torch.optim.Optimizer:
        """Task-free runs: the run's `optimizer` (the follow-up's Adam, or Nesterov SGD)."""
        if not self.task_free:
            return super().make_optimizer()
        params = [p for name, p in self.model.named_parameters() if self.cfg.train_head or not name.startswith("fc.")]
        fused = self.device.type in ("cuda", "cpu")
        if self.cfg.optimizer == "adam":
            # graphed (CUDA): its state and learning rate live on the device, so a captured step
            # reads the lr the schedule set and the head's moments reset in place (`head_takes`)
            graphed = self.uses_graphs
            adam = torch.optim.Adam(
                params, lr=self.cfg.lr, weight_decay=self.cfg.weight_decay, fused=fused, capturable=graphed
            )
            return graph_ready_optimizer(adam) if graphed else adam
        optimizer = torch.optim.SGD(
            params, lr=self.cfg.lr, momentum=0.9, nesterov=True, weight_decay=self.cfg.weight_decay, fused=fused
        )
        return graph_ready_optimizer(optimizer) if self.uses_graphs else optimizer

    # ------------------------------------------------------------------ the hooks

    def online_task_start(self, task: Task) -> None:
        """A task boundary (only methods that use one act on it)."""

    def online_task_end(self, task: Task) -> None:
        """A task boundary: ER and CLIB do nothing here (PROTOCOL §9.2)."""

    def online_before_eval(self) -> None:
        """Before an anytime evaluation."""

    def online_new_class(self, label: int) -> None:
        """The first sample of class `label` arrived: expose it and give the head its row."""
        self.expose(label)
        self.head_takes(label)
        if self.cfg.schedule == "exp_reset":
            self.lr_steps = 0

    def online_observe(self, index: int, label: int) -> None:
        """ER: the temp batch, `online_iter` updates per sample, then the reservoir."""
        for i, y in self.train_on_temp(index, label):
            self.online_store(i, y)

    def train_on_temp(self, index: int, label: int) -> list[tuple[int, int]]:
        """Add a sample to the temp batch; when it is full, train `online_iter` updates per
        sample on it (the fraction carried over) and return its (index, label) pairs, else []."""
        self.temp.append(index)
        self.temp_labels.append(label)
        self.earn_updates()
        if len(self.temp) < self.temp_batch_size:
            return []
        stream = torch.tensor(self.temp, dtype=torch.long)
        if self.credit is not None:  # steps while the FLOP credit covers them (cl/compute.py, Credit)
            self.on_credit(lambda: self.online_train(stream, 1))
        else:
            iterations = int(self.num_updates)
            self.online_train(stream, iterations)
            self.num_updates -= iterations
        batch = list(zip(self.temp, self.temp_labels))
        self.temp, self.temp_labels = [], []
        return batch

    def earn_updates(self) -> None:
        """A streamed sample's share of training: `online_iter` updates, or with
        `train_gflop_per_sample` that many GFLOP of credit."""
        if self.credit is not None:
            self.credit.earn()
        else:
            self.num_updates += self.cfg.online_iter

    def on_credit(self, iteration: Callable[[], None]) -> int:
        """`iteration` (one update, with whatever passes the method makes for it) as many times as
        the FLOP credit covers, each charged what the ledger counts for it; how many ran."""
        assert self.credit is not None
        return self.credit.run(ledger_of(self), self.model, iteration)

    def online_train(self, stream: Tensor, iterations: int) -> None:
        """`iterations` steps, each on the stream batch plus a fresh memory draw."""
        n_memory = self.cfg.batch_size - len(stream)
        batches = [torch.cat([stream, self.memory_draw(n_memory)]) for _ in range(iterations)]
        self.train_batches(batches, [len(stream)] * iterations)

    def online_store(self, index: int, label: int) -> None:
        """ER's memory: reservoir sampling."""
        self.online_memory.reservoir(index, label, self.sample_rng)

    # ------------------------------------------------------------------ building blocks

    def memory_draw(self, n: int) -> Tensor:
        """Train indices of min(n, |memory|) memory samples, uniform without replacement."""
        if n <= 0 or len(self.memory) == 0:
            return torch.empty(0, dtype=torch.long)
        return self.memory.indices[self.online_memory.draw(n, self.gen)]

    @property
    def online_memory(self) -> OnlineMemory:
        """The memory as the task-free hooks use it: the OnlineMemory `setup_online` made."""
        memory = self.memory
        assert isinstance(memory, OnlineMemory), "the task-free hooks run after setup_online"
        return memory

    def step_lr(self) -> float:
        if self.cfg.schedule == "exp_reset":
            return self.cfg.lr * self.cfg.lr_gamma**self.lr_steps
        return self.cfg.lr

    def train_batches(
        self, batches: list[Tensor], stream_counts: list[int] | None = None, lr: float | None = None
    ) -> None:
        """One optimiser step per index batch. The batches' images are taken and augmented in a
        few batched calls (every sample its own draw), each step is `train.Stepper`; the
        learning rate is the schedule's (`step_lr`, advanced per step) unless `lr` is given.
        A batch of fewer than two samples is skipped (batch norm needs two)."""
        counts: list[int | None] = list(stream_counts) if stream_counts else [None] * len(batches)
        kept = [(b, n) for b, n in zip(batches, counts) if len(b) >= 2]
        if not kept:
            return
        data = self.setup.data
        chunk_images = train_chunk(data.image_shape, max(len(b) for b, _ in kept))
        start = 0
        while start < len(kept):
            group: list[tuple[Tensor, int | None]] = []
            size = 0
            while start < len(kept) and (not group or size + len(kept[start][0]) <= chunk_images):
                group.append(kept[start])
                size += len(kept[start][0])
                start += 1
            flat = torch.cat([b for b, _ in group])
            images = self.augmented(self.images_of(flat), max(len(b) for b, _ in group))
            labels = self.labels_of(flat)
            sizes = [len(b) for b, _ in group]
            self.model.train()
            for x, y, (_, n_stream) in zip(images.split(sizes), labels.split(sizes), group):
                self.step_on(x, y, n_stream, lr)

    def augmented(self, raw: Tensor, batch: int, draw: TrainDraw | None = None, role: str = "train") -> Tensor:
        """`raw` (uint8, the images of a few steps of at most `batch`) train-augmented and prepared,
        every sample its own draw. Where those steps are CUDA graphs the augmentation is one too:
        the draw becomes data (`Augmenter.static_params`, one copy) and `Augmenter.apply_static`
        is replayed per shape (`graphs.CapturedCall`), not ~35 launches from the host. A CPU keeps
        the grouped `apply` (the static one takes it 1.4-6.5x as long), but under an active step_audit it takes
        the GPU's path (CapturedCall runs its body eagerly there, counted as a graph's), so the
        count is a GPU's. The same draws and pixels either way (tests/cl/test_augment.py).
        `draw`: made by the caller (CLIB draws its iterations' in their own order), else drawn here.
        The result is the graph's output, overwritten by the next call of the same shape and
        `role`: a caller that holds two augmented batches at once gives them two roles (MIR)."""
        aug = self.setup.augmenter
        if draw is None:
            draw = aug.draw(len(raw), raw.shape[-2], raw.shape[-1])
        if not self.augments_captured(batch, tuple(raw.shape[1:])):
            return self.accel.prepare(aug.apply(raw, draw))
        params = aug.static_params(raw, draw)
        if params is None:  # a geometric op outside the space's table: the grouped apply
            return self.accel.prepare(aug.apply(raw, draw))
        calls = self.augment_graphs
        key = (role, *raw.shape)
        if key not in calls:
            for old in list(calls)[: max(0, len(calls) + 1 - AUGMENT_GRAPHS)]:
                del calls[old]
            calls[key] = CapturedCall(
                lambda images, p: self.accel.prepare(aug.apply_static(images, p)),
                (raw, params),
                None,
                None,
                self.seen,
                f"the augmentation of {len(raw)} images",
                self.report.log,
            )
        return calls[key](raw, params)

    def augments_captured(self, batch: int, shape: tuple[int, ...]) -> bool:
        """Whether `augmented` replays the augmentation of steps of `batch` as a CUDA graph: where
        those steps would be graphs (`uses_graphs`, or `graphs_wanted` on a CPU under an audit;
        launch-bound or `cuda_graphs = true`)."""
        if not (self.uses_graphs or (self.graphs_wanted and self.device.type == "cpu" and auditing())):
            return False
        return self.cfg.cuda_graphs is True or launch_bound(batch, shape)

    def step_on(self, x: Tensor, y: Tensor, n_stream: int | None = None, lr: float | None = None) -> None:
        """One optimiser step (`train.Stepper`) on augmented images, at the schedule's learning
        rate (advanced) or at `lr`; `n_stream`: how many of them are stream samples (ER-ACE)."""
        assert self.optimizer is not None, "make_optimizer runs before the first step"
        set_lr(self.optimizer, self.step_lr() if lr is None else lr)
        self.stream_count = n_stream
        self.stepper(x, y, 1.0)
        if lr is None:
            self.lr_steps += 1
        self.online_steps += 1
        self.cost += 3 * len(x)
        ledger_of(self).add("train", x.shape)  # (a host count: measured later, cl/compute.py)

    def memory_epochs(self, task: Task, epochs: int, batch_size: int) -> None:
        """`epochs` passes over the memory alone (RM's and GDumb's training): epoch 0 at 0.1 x lr,
        then cosine warm restarts down to 0.01 x lr (PROTOCOL §5, §9.5)."""
        if epochs <= 0 or len(self.memory) < 2:
            return
        per_epoch = len(self.memory)
        self.report.phase(task.index, "memory", per_epoch * epochs)
        for epoch in range(epochs):
            batches = self.shuffled_batches(self.memory.indices, batch_size)
            self.train_batches(batches, lr=epoch_lr(epoch, self.cfg.lr, "cosine"))
            self.report.advance(per_epoch)

    def head_takes(self, label: int) -> None:
        """The head's share of a new class, by `head_rule` (see the class variable)."""
        fc = self.model.fc
        if self.head_rule == "rebuild":
            self.model.fc = torch.nn.Linear(fc.in_features, fc.out_features).to(fc.weight.device)
            self.optimizer = self.make_optimizer()
            return
        bound = 1.0 / math.sqrt(fc.in_features)  # nn.Linear's own initialisation
        with torch.no_grad():
            fc.weight[label].uniform_(-bound, bound)
            fc.bias.uniform_(-bound, bound)
        state = self.optimizer.state if self.optimizer is not None else {}
        restart: dict[torch.device, list[Tensor]] = {}  # zeroed in one call per device (one launch)
        for p in (fc.weight, fc.bias):
            if p not in state:
                continue
            if self.head_rule == "keep_moments":
                for key in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
                    if key in state[p] and state[p][key] is not None:
                        state[p][key][label] = 0
            else:
                # SGD: a zero buffer is what a dropped one restarts as (buf = grad), and fused SGD
                # needs every buffer once it has begun; Adam: moments and step count start over for
                # the head, as the follow-up's new fc, reset in place (the same numbers as a dropped
                # state, whose first step makes zeros) so a captured step keeps its tensors
                for value in state[p].values():
                    if isinstance(value, Tensor):
                        restart.setdefault(value.device, []).append(value)
        for tensors in restart.values():
            torch._foreach_zero_(tensors)

    def memory_report(self, task: Task, info: dict[str, Any] | None = None) -> None:
        """The memory as it is now, as a memory-panel snapshot."""
        n_seen = self.n_seen
        short = self.cfg.memory_size - self.memory.capacity
        why = (
            {
                "note": f"holds {self.memory.capacity} = K {self.cfg.memory_size} - {short} "
                f"(batch_size/2: the stream batch's share of the budget, as the follow-up's ER; docs/protocol.md §9.2)"
            }
            if short > 0
            else {}
        )
        self.memory_info = {
            "policy": type(self).__name__.lower(),
            "samples_seen": self.memory.seen,
            **why,
            **(info or {}),
        }
        self.report.memory_updated(
            task.index,
            self.memory.histogram(self.n_classes),
            slots_per_class(self.memory.capacity, n_seen),
            self.memory_info,
        )

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.task_free and hasattr(self, "temp"):
            state["online"] = {
                "temp": list(self.temp),
                "temp_labels": list(self.temp_labels),
                "num_updates": self.num_updates,
                **({"credit": self.credit.state()} if self.credit is not None else {}),
                "lr_steps": self.lr_steps,
                "online_steps": self.online_steps,
                "cost": self.cost,
                "sample_rng": self.sample_rng.getstate(),
            }
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        online = state.get("online")
        if online is not None:
            self.temp, self.temp_labels = list(online["temp"]), list(online["temp_labels"])
            self.num_updates, self.lr_steps = float(online["num_updates"]), int(online["lr_steps"])
            self.online_steps, self.cost = int(online["online_steps"]), float(online["cost"])
            self.sample_rng.setstate(online["sample_rng"])
            if self.credit is not None and "credit" in online:
                self.credit.load(online["credit"])
