"""`Method`: the interface every continual-learning method implements, and its defaults.

A method is one file: a subclass of `Method` that overrides only what makes it different (its
memory policy, its loss, its batch composition, its classifier). The engine that runs the
hooks lives elsewhere: the epochs and optimiser steps in train.py, batched inference in
inference.py, the memory policies in memory.py, the protocol (tasks, evaluation,
checkpoints) in loop.py. The per-task schedule (PROTOCOL §2), `learn_task`'s default:

    online:  one pass over the stream (with memory replay) -> memory update -> E epochs on
             the memory alone
    offline: E epochs over stream + memory -> memory update

Class variables

    name                    the config's `method` value (its MethodSpec: REGISTRY in __init__.py)
    params_type             its parameter class, from `Method[P]` (class X(Method[XParams])):
                            `self.params` is a P built from the run's config
    default_memory_policy   the memory policy when the run names none (memory.POLICIES)
    single_task             True: the loop gives it the whole train set as one task (joint)

Hooks a method may override (called by)                          default

    build_model()           construction; GDumb at each task      the run's backbone on its device
    make_optimizer()        before_task, resume                    SGD, Nesterov momentum 0.9, over
                                                                   the model (less the head if
                                                                   train_head is false)
    before_task(task)       loop, before a task                    mark its classes seen, reset the
                                                                   head if reset_head, new optimiser
    learn_task(task)        loop                                   the online / offline schedule above
    stream_batches(task)    learn_task: the stream pass            shuffled batches of stream + memory
    memory_batch_size       learn_task: the memory epochs          memory_batch_size, else batch_size
    step_loss(x, y)         train.Stepper, every step              cross-entropy over seen classes,
                                                                   CutMix when the run enables it
    after_backward()        train.Stepper, after backward, before  nothing
                            the ranks' averaging and the update
    after_step()            train.Stepper, after each update       nothing
    graphable_step          (class variable) train.Stepper         True: on a single-process CUDA run
                                                                   the default step is replayed as a
                                                                   CUDA graph (graphs.py); a method
                                                                   whose step hides other work (EWC's
                                                                   gradient hooks) sets False;
                                                                   overriding step_loss, after_backward
                                                                   or after_step also keeps the step eager
    capturable_step         (class variable) train.Stepper         False: True declares the method's own
                                                                   step (step_loss, after_backward,
                                                                   after_step) capturable
                                                                   as a CUDA graph: it reads the batch and
                                                                   device tensors the method updates in
                                                                   place, makes no host sync, changes no
                                                                   host state, and runs the same operators
                                                                   on the same shapes for one step_key
    step_key(x, y)          train.Stepper, before each step of a   (): the host side of a capturable step,
                            method's own step_loss                 run outside the graph: host decisions
                                                                   written into the method's device tensors,
                                                                   and the host values its shapes depend on
                                                                   (a new key: a graph of its own)
    update_memory(task)     learn_task                             refill by the run's memory policy
    after_task(task)        loop, after learn_task, before eval    nothing
    logits(x)               uncertainty scoring, class_scores      model(x), unseen classes masked
    class_scores(x)         predict, top-k evaluation              logits(x) in eval mode
    predict(x)              loop's evaluation                      arg-max of class_scores(x)
    state_dict() /          loop: checkpoint after every task,     model, optimiser, memory, seen
    load_state_dict(state)  resume                                 classes, generator; extend with
                                                                   super() for what a method carries
                                                                   from task to task

A regulariser is part of `step_loss` (BiC's distillation, iCaRL's targets); for EWC and
Rwalk, a gradient added by parameter hooks during backward (quadratic.py); for EWC++, whose
step is captured, a gradient added to all parameters at once in `after_backward` (a few
multi-tensor operations where autograd would run a handful of nodes per parameter). Images
always come from the dataset (`images_of`, decoded ahead when it streams); a method does not
rewrite them.

Building blocks a method calls: `fit` (train.fit), `shuffled_batches`, `labels_of`,
`images_of`, `mask_unseen`, `uncertainty_of` / `features_of` (inference.py), `report`,
`seen_classes`; its settings are `cfg` (the run's common keys, `RunSettings`) and `params`
(its own hyper-parameters: the `MethodParams` subclass P of `Method[P]`, declared in a torch-free
module beside the method, e.g. ewc_params.py, and named by its `MethodSpec`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar, cast, get_args, get_origin

import torch
import torch.nn.functional as nnf
from torch import Tensor

from .. import distributed, inference, train
from .. import memory as M
from ..accel import Accel
from ..augment import CutMixDraw, apply_cutmix
from ..events import Reporter
from ..graphs import GraphedStep, MethodStep, graph_ready_optimizer, portable_optimizer_state
from ..learner import Setup, Task
from ..models import Backbone, build_model
from ..settings import MethodParams

__all__ = ["TASK_HOOKS", "Method", "Setup", "Task"]

# The table above as data: every name the task protocol (loop.py) and the engine (train.py,
# inference.py) call on a method. rmconsole.testing reads it to flag an override no protocol
# calls (an `after_epoch`, a typo'd `after_taks`); tests/cl/test_method_interface.py keeps it and the
# docstring's table the same. The task-free protocol's table is taskfree.TASK_FREE_HOOKS.
TASK_HOOKS: tuple[str, ...] = (
    "build_model",
    "make_optimizer",
    "before_task",
    "learn_task",
    "stream_batches",
    "memory_batch_size",
    "step_loss",
    "after_backward",
    "after_step",
    "graphable_step",
    "capturable_step",
    "step_key",
    "update_memory",
    "after_task",
    "logits",
    "class_scores",
    "predict",
    "state_dict",
    "load_state_dict",
)

P = TypeVar("P", bound=MethodParams)


def mixed_cross_entropy(logits: Tensor, y_a: Tensor, y_b: Tensor, w_a: Any, w_b: Any) -> Tensor:
    """CutMix's loss: w_a CE(y_a) + w_b CE(y_b) (w_b = 1 - w_a, as a float or a device tensor)."""
    return w_a * nnf.cross_entropy(logits, y_a) + w_b * nnf.cross_entropy(logits, y_b)


class Method(Generic[P]):
    """Experience replay with the run's memory policy: the base every method extends.

    Generic over its parameter class: `class EWC(Regularised, Method[EWCParams])` reads typed
    `self.params.reg_weight`; a method without parameters of its own extends plain `Method`."""

    name: ClassVar[str] = "er"
    default_memory_policy: ClassVar[str] = "random"
    single_task: ClassVar[bool] = False
    graphable_step: ClassVar[bool] = True
    capturable_step: ClassVar[bool] = False  # its own step is capturable (see the table above)
    # host syncs its step needs by its published algorithm (step_audit.DeclaredSync; docs/performance.md)
    declared_syncs: ClassVar[tuple[Any, ...]] = ()
    params_type: ClassVar[type[MethodParams]] = MethodParams  # P of Method[P] (set by __init_subclass__)
    params: P

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Record P of `Method[P]` among the class's own bases as its `params_type` (a subclass
        that names none keeps its parent's), so the parameter class is declared once."""
        super().__init_subclass__(**kwargs)
        for base in cls.__dict__.get("__orig_bases__", ()):
            origin = get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Method):
                (params,) = get_args(base)
                if not (isinstance(params, type) and issubclass(params, MethodParams)):
                    raise TypeError(f"{cls.__name__}: Method[{params!r}]: the parameter must be a MethodParams class")
                cls.params_type = params

    def __init__(self, setup: Setup) -> None:
        self.setup = setup
        self.cfg = setup.cfg
        self.params = cast(P, self.params_type.from_settings(setup.cfg))
        self.device = setup.device
        self.n_classes = setup.n_classes
        self.dist = distributed.context()  # None unless torchrun started several ranks
        self.accel = Accel.from_config(self.cfg, self.device)
        self.model: Backbone = self.build_model()
        self.memory = M.Memory(self.cfg.memory_size)
        self.memory_policy: str = self.cfg.memory_policy or self.default_memory_policy
        self.seen = torch.zeros(self.n_classes, dtype=torch.bool, device=self.device)
        self._seen_mirror: tuple[Tensor, int, list[bool], int] | None = None  # see `seen_host`
        self.gen = torch.Generator().manual_seed(self.cfg.seed + 1)  # memory / batching draws
        self.optimizer: torch.optim.Optimizer | None = None
        self.memory_info: dict[str, Any] = {}
        self._scored = 0
        self.epoch_eval: Callable[[], float] | None = None  # set by the loop when best-epoch is recorded
        self.best_epoch_accuracy: float | None = None
        # graphed steps by (batch, steps per replay), a capturable step's by (batch, 1, step_key)
        self.graphs: dict[tuple[Any, ...], GraphedStep] = {}
        self.seed_stack: Any = None  # a cl.stacked.SeedStack while this run's steps are stacked with other seeds'
        self.mix_draw: CutMixDraw | None = None  # this step's CutMix, drawn by `draw_step_mix`
        self.mix_pending = False  # drawn and not yet applied
        self.mix_graph: MethodStep | None = None  # set while a captured step records its body

    # ------------------------------------------------------------------ building blocks

    def build_model(self) -> Backbone:
        """A freshly initialised model, ready for this run's device (fast path, synced batch norm)."""
        shape = self.setup.data.image_shape
        model = build_model(self.cfg.model, shape, self.n_classes, self.cfg.model_weights).to(self.device)
        if self.dist:
            model = distributed.sync_batch_norm(model, self.dist)
        return self.accel.prepare_model(model)

    def make_optimizer(self) -> torch.optim.Optimizer:
        fused = self.device.type in ("cuda", "cpu")
        params = [p for name, p in self.model.named_parameters() if self.cfg.train_head or not name.startswith("fc.")]
        self.graphs = {}
        optimizer = torch.optim.SGD(
            params, lr=self.cfg.lr, momentum=0.9, nesterov=True, weight_decay=self.cfg.weight_decay, fused=fused
        )
        return graph_ready_optimizer(optimizer) if self.uses_graphs else optimizer

    @property
    def plain_step(self) -> bool:
        """The step is the default one (cross-entropy over seen classes with CutMix, nothing
        after it, no gradient hooks), so the engine may run it its own way: a CUDA graph
        (graphs.py), an MLP's step without autograd (mlp_step.py)."""
        return self.graphable_step and all(
            getattr(type(self), hook) is getattr(Method, hook)
            for hook in ("step_loss", "after_backward", "after_step", "mask_unseen")
        )

    @property
    def captured_step(self) -> bool:
        """The method's own step is replayed as a CUDA graph where the default one would be
        (`capturable_step`; graphs.MethodStep); on CPU it is counted as the graph's body."""
        return self.capturable_step and self.graphable_step and not self.plain_step

    @property
    def uses_graphs(self) -> bool:
        """Training steps replayed as CUDA graphs (graphs.py): single-process CUDA runs of methods
        whose step is the default one or declared capturable, unless the run's `cuda_graphs` is
        false or its `compile` is "step" (the default step compiled instead: graphs.CompiledStep)."""
        return self.graphs_wanted and self.device.type == "cuda"

    @property
    def graphs_wanted(self) -> bool:
        """`uses_graphs` but for the device: what a CUDA run of these settings would graph (a CPU
        audit counts that path: TaskFree.augmented)."""
        return (
            bool(self.cfg.cuda_graphs)
            and self.cfg.compile != "step"
            and (self.plain_step or self.captured_step)
            and self.dist is None
        )

    @property
    def report(self) -> Reporter:
        return self.setup.reporter

    def labels_of(self, idx: Tensor) -> Tensor:
        return self.setup.train_labels[idx.to(self.setup.train_labels.device)]

    def images_of(self, idx: Tensor) -> Tensor:
        """uint8 train images of `idx` (one batch now; the engine decodes whole plans ahead)."""
        return self.setup.data.train.take(idx)

    @property
    def seen_host(self) -> list[bool]:
        """`seen` as the host knows it, read without a host sync: the host decides which classes
        are exposed (`expose`, `before_task`), so it keeps a mirror. Code that writes `seen`
        directly (its version counter moves) or replaces it makes the mirror read the device
        once, outside any step."""
        seen, mirror = self.seen, getattr(self, "_seen_mirror", None)  # (a test may build a method bare)
        if mirror is None or mirror[0] is not seen or mirror[1] != seen._version:
            values = [bool(v) for v in seen.tolist()]
            mirror = self._seen_mirror = (seen, seen._version, values, sum(values))
        return mirror[2]

    @property
    def n_seen(self) -> int:
        """How many classes are exposed (the host mirror's count)."""
        self.seen_host  # noqa: B018  (refreshes the mirror when `seen` was written directly)
        assert self._seen_mirror is not None
        return self._seen_mirror[3]

    @property
    def all_seen(self) -> bool:
        return self.n_seen == self.n_classes

    def expose(self, label: int) -> None:
        """Class `label` is seen from now on: the device mask written, the host mirror kept."""
        values = self.seen_host
        count = self.n_seen + (not values[label])
        values[label] = True
        self.seen[label] = True
        self._seen_mirror = (self.seen, self.seen._version, values, count)

    def mask_unseen(self, logits: Tensor) -> Tensor:
        """Classes not yet exposed get no probability: the authors' growing head, in effect."""
        if self.all_seen:
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

    def fit(
        self,
        epochs: int,
        batches_for_epoch: Callable[[int], list[Tensor]],
        phase: str,
        task: Task,
        chunk_images: int | None = None,
    ) -> None:
        """Train `epochs` epochs; epoch e runs the index batches `batches_for_epoch(e)` (train.fit)."""
        train.fit(self, epochs, batches_for_epoch, phase, task, chunk_images)

    def uncertainty_of(
        self, idx: Tensor, progress: Callable[[int], None] | None = None
    ) -> tuple[Tensor, Tensor | None]:
        """u(x) of train indices, and the top vote counts (inference.uncertainty_of)."""
        return inference.uncertainty_of(self, idx, progress)

    def features_of(self, idx: Tensor, chunk: int | None = None) -> Tensor:
        return inference.features_of(self, idx, chunk)

    # ------------------------------------------------------------------ training hooks

    def step_loss(self, x: Tensor, y: Tensor) -> Tensor:
        """Cross-entropy on an augmented batch, with CutMix when the run enables it."""
        mixed = self.setup.augmenter.maybe_cutmix(x, y)
        if mixed is None:
            return nnf.cross_entropy(self.mask_unseen(self.model(x)), y)
        x, y_a, y_b, lam = mixed
        return mixed_cross_entropy(self.mask_unseen(self.model(x)), y_a, y_b, lam, 1 - lam)

    def after_backward(self) -> None:
        """Called after every backward, before the gradients are averaged over ranks and the
        optimiser steps: a regulariser's closed-form gradient joins the loss's here (EWC++)."""

    def after_step(self) -> None:
        """Called after every optimiser step (Rwalk accumulates its path integral here)."""

    def step_key(self, x: Tensor, y: Tensor) -> tuple[Any, ...]:
        """A capturable step's host side (`capturable_step`), run before it, outside the graph:
        nothing by default."""
        return ()

    def draw_step_mix(self, x: Tensor) -> None:
        """A capturable step's CutMix draw, made in its `step_key` (the host side): the step's
        `step_cutmix` applies it."""
        self.mix_draw = self.setup.augmenter.draw_mix(len(x), x.shape[-2], x.shape[-1])
        self.mix_pending = True

    def step_cutmix(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor, Any, Any] | None:
        """This step's CutMix as (x, y_a, y_b, w_a, w_b) for w_a CE(y_a) + w_b CE(y_b), or None
        (train on x, y as they are). Eager: the draw `draw_step_mix` made (drawn now when none
        is pending), applied as `Augmenter.maybe_cutmix` does (w_b = 1 - w_a, floats). Inside a
        captured step (graphs.MethodStep): the graph's box-mask form of whatever draw the replay
        loads (its static inputs; weights (1, 0) for none: the same numbers)."""
        if self.mix_graph is not None:
            return self.mix_graph.mix(x) if self.setup.augmenter.uses_cutmix else None
        draw = self.mix_draw if self.mix_pending else self.setup.augmenter.draw_mix(len(x), x.shape[-2], x.shape[-1])
        self.mix_pending = False
        if draw is None:
            return None
        x, y_a, y_b, lam = apply_cutmix(x, y, draw)
        return x, y_a, y_b, lam, 1 - lam

    # ------------------------------------------------------------------ the schedule

    def before_task(self, task: Task) -> None:
        self.seen |= torch.bincount(self.labels_of(task.stream), minlength=self.n_classes).bool()
        self.seen_host  # noqa: B018  (the host mirror reads the new mask here, before any step)
        if self.cfg.reset_head:
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
                self.fit(
                    self.cfg.epochs,
                    lambda e: self.shuffled_batches(self.memory.indices, self.memory_batch_size),
                    "memory",
                    task,
                )
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
        return [c for c, seen in enumerate(self.seen_host) if seen]

    def update_memory(self, task: Task) -> None:
        """Refill the memory from the stream and the current memory by the run's policy."""
        started = time.perf_counter()
        self.report.phase(task.index, "memory update", len(task.stream) + len(self.memory))
        self.memory_info = {"policy": self.memory_policy}
        self._scored = 0  # candidates scored so far: the phase's progress while a policy scores them
        candidates = self.candidates(task)
        chosen = M.policy_named(self.memory_policy).select(candidates)
        if self.dist:
            chosen = self.agree_on_memory(task, chosen)
        self.memory.replace(chosen, self.labels_of(chosen).cpu())
        cache = getattr(self.setup.data.train, "cache", None)
        if cache is not None:  # a streamed dataset keeps the memory decoded (when it fits)
            self.memory_info["memory_cached"] = cache(self.memory.indices)
        self.report.advance(max(len(candidates.indices) - self._scored, 0))
        self.memory_info["seconds"] = round(time.perf_counter() - started, 3)
        self.report.memory_updated(
            task.index,
            self.memory.histogram(self.n_classes),
            M.slots_per_class(self.memory.capacity, len(candidates.classes)),
            self.memory_info,
        )

    def candidates(self, task: Task) -> M.Candidates:
        """The memory and the task's stream, as a memory policy sees them."""
        indices = torch.cat([self.memory.indices, task.stream])
        return M.Candidates(
            indices,
            self.labels_of(indices).cpu(),
            self.memory,
            task.stream,
            self.seen_classes,
            task.index,
            self.gen,
            self.cfg,
            score=lambda idx: self.uncertainty_of(idx, self._candidates_scored)[0],
            embed=self.features_of,
            info=self.memory_info,
        )

    def _candidates_scored(self, n: int) -> None:
        """n more memory candidates have their uncertainty: the memory update's progress."""
        self._scored += n
        self.report.advance(n)

    def agree_on_memory(self, task: Task, chosen: Tensor) -> Tensor:
        """Every rank holds rank 0's memory. Ranks decide alike (same scores, same generator
        draws); a rank that did not is logged, and rank 0's choice wins everywhere."""
        assert self.dist is not None
        if not self.dist.same_on_every_rank(chosen.cpu()):
            self.report.log(
                f"rank {self.dist.rank}: memory choice differed between ranks at task "
                f"{task.index + 1}; rank 0's is used"
            )
            self.memory_info["ranks_differed"] = True
        chosen = self.dist.broadcast(chosen.cpu())
        self.dist.agree(f"memory after task {task.index + 1} ({len(chosen)} samples)", chosen)
        return chosen

    # ------------------------------------------------------------------ inference

    def logits(self, x: Tensor) -> Tensor:
        return self.mask_unseen(self.model(x))

    @torch.inference_mode()
    def class_scores(self, x: Tensor) -> Tensor:
        """Per-class scores of normalised images, higher = more likely: what predictions and top-k
        rank (iCaRL overrides with minus the distance to each class's mean of exemplars)."""
        self.model.eval()
        return self.logits(x)

    @torch.inference_mode()
    def predict(self, x: Tensor) -> Tensor:
        """Class predictions for normalised images: the arg-max of `class_scores`."""
        return self.class_scores(x).argmax(-1)

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": portable_optimizer_state(self.optimizer.state_dict()) if self.optimizer else None,
            "memory": self.memory.state_dict(),
            "seen": self.seen.cpu(),
            "gen": self.gen.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.memory.load_state_dict(state["memory"])
        self.seen = state["seen"].to(self.device)
        self.seen_host  # noqa: B018  (the host mirror, read here rather than in a step)
        self.gen.set_state(state["gen"])
        if state.get("optimizer") is not None:
            self.optimizer = self.make_optimizer()
            self.optimizer.load_state_dict(state["optimizer"])
            if self.uses_graphs:
                graph_ready_optimizer(self.optimizer)
