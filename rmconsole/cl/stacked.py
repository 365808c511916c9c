"""Seeds stacked in one process: N runs of one configuration (seeds apart), each in its own
thread, whose graphed training steps are taken as one (issue 43, item 3).

Why. On an H100 RM's memory epochs (ResNet18, batch 8 at 32x32) were bound by ~300 small
kernels a step, not by arithmetic: the card sat ~1% busy, and more steps a replay did not help.
Stacked, N seeds' steps issue the same kernels once, each N times larger
(`torch.func.stack_module_state` + `vmap` over the models, one SGD over the stacked
parameters), so the launches a sample cost fall N-fold. The other way to fill the card, packed
runs (`--runs-per-gpu`, one process each), keeps the launches and shares the card between
processes; which is faster is a GPU measurement (benchmarks/rm_memory_step.py `--stack N`).

What stays each run's own. Every run keeps its own loop, generators, augmentation, memory
and decisions: each runs its `fit` (or whole stream) in its thread exactly as it would alone.
Only the graphed step (`train.graphed_step`) is handed to the `SeedStack`, which waits until
every seated run has handed one in and then takes them together. So the decisions are the
separate runs' decisions and the floats are theirs up to the kernels' summation order (an MLP
within 1e-5 on CPU; in float64 a ResNet's identical: tests/cl/test_stacked.py).

How the weights stay each run's. `StackedModels` stacks every parameter and buffer of the N
models and re-points each model's own tensors to their row of the stack (`.data` views), so a
run's evaluation, its eager steps, its batch-norm statistics and its checkpoint read and write
the stacked storage. SGD is elementwise, so one SGD over the stacked parameters updates row i
as run i's SGD would; its momentum buffers are shared with the runs' optimisers the same way.
Stacked steps need plain SGD with one parameter group and equal hyperparameters (what
`make_optimizer` builds for RM's memory epochs); any other step runs apart, per run, in order.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor
from torch.func import functional_call, stack_module_state, vmap

from .augment import CutMixDraw
from .graphs import (
    EagerGraph,
    GraphedStep,
    ModuleWork,
    Replayed,
    draw_inputs,
    graph_ready_optimizer,
    step_inputs,
    written_lr,
)

Draws = Sequence[CutMixDraw | None]


class Unstackable(ValueError):
    """The runs' steps cannot be taken as one (another optimiser, other hyperparameters, other
    architectures): they are taken apart."""


def _sgd_settings(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    if type(optimizer) is not torch.optim.SGD or len(optimizer.param_groups) != 1:
        raise Unstackable(f"a stacked step needs one plain SGD parameter group, not {type(optimizer).__name__}")
    group = optimizer.param_groups[0]
    return {k: v for k, v in group.items() if k not in ("params", "lr")}


class StackedModels:
    """The N runs' models and SGD optimisers as one (see the module docstring)."""

    def __init__(self, methods: Sequence[Any]) -> None:
        self.models = [m.model for m in methods]
        self.optimizers = [m.optimizer for m in methods]
        settings = [_sgd_settings(o) for o in self.optimizers]
        if any(s != settings[0] for s in settings[1:]):
            raise Unstackable("the runs' SGD settings differ")
        names = [[n for n, _ in m.named_parameters()] + [n for n, _ in m.named_buffers()] for m in self.models]
        if any(n != names[0] for n in names[1:]) or any(type(m) is not type(self.models[0]) for m in self.models):
            raise Unstackable("the runs' models differ in architecture")
        for o in self.optimizers:
            graph_ready_optimizer(o)  # the schedule writes the lr tensor in place (`set_lr`)
        self.params, self.buffers = stack_module_state(self.models)
        for i, model in enumerate(self.models):  # each run's tensors: views of its row
            for name, p in model.named_parameters():
                p.data = self.params[name].detach()[i]
            for name, b in model.named_buffers():
                b.data = self.buffers[name][i]
        self.base = [self.models[0]]  # the architecture functional_call runs (its own tensors are replaced)
        by_param = {p: name for name, p in self.models[0].named_parameters()}
        first = self.optimizers[0].param_groups[0]
        self.names = [by_param[p] for p in first["params"]]  # what the runs' optimisers update
        stacked = [self.params[n] for n in self.names]
        # run 0's lr tensor: a SeedStack stacks steps only when every run's rate is the one it holds
        self.optimizer = torch.optim.SGD(stacked, lr=first["lr"], **settings[0])
        self.shared = False
        self._share_state()

    @property
    def n(self) -> int:
        return len(self.models)

    def current(self, methods: Sequence[Any]) -> bool:
        """Whether these are still the runs' models and optimisers (a new task's optimiser: stack anew)."""
        return [m.model for m in methods] == self.models and [m.optimizer for m in methods] == self.optimizers

    def _share_state(self) -> None:
        """The momentum buffers as one: the runs' (stacked, when they have them) become views of
        the stacked optimiser's rows, so an eager step of one run, or its checkpoint, sees them."""
        params = [o.param_groups[0]["params"] for o in self.optimizers]
        for j, stacked in enumerate(self.optimizer.param_groups[0]["params"]):
            runs = [self.optimizers[i].state.get(params[i][j], {}).get("momentum_buffer") for i in range(self.n)]
            mine = self.optimizer.state.get(stacked, {}).get("momentum_buffer")
            if mine is None and all(r is not None for r in runs):
                mine = self.optimizer.state[stacked]["momentum_buffer"] = torch.stack(runs)
            if mine is None:
                return
            for i in range(self.n):
                self.optimizers[i].state[params[i][j]]["momentum_buffer"] = mine[i]
        self.shared = True

    def forward(self, x: Tensor, uncounted: Sequence[str] = ()) -> Tensor:
        """The N models on their N batches: x [N, B, ...] -> logits [N, B, classes]; the
        `uncounted` batch-norm counters left out (counted after, at once: graphs.ModuleWork)."""
        base = self.base[0]
        skip = dict.fromkeys(uncounted)

        def one(p: dict[str, Tensor], b: dict[str, Tensor], xs: Tensor) -> Tensor:
            state: dict[str, Any] = {**b, **skip}  # (None: the counter's add skipped)
            return functional_call(base, (p, state), (xs,))

        return vmap(one)(self.params, self.buffers, x)

    def step(self) -> None:
        self.optimizer.step()
        if not self.shared:
            self._share_state()


class StackedStep(Replayed):
    """N runs' graphed steps on batches of one shape, k a call, as one: each run's CutMix
    mixed in as GraphedStep mixes it (a box mask, partners as rows, the draw's weights as data),
    the N models' forward under vmap, each run's masked cross-entropy, one backward, one SGD.
    On CUDA captured and replayed as a graph (`Replayed`); on a CPU the body runs as a replay
    would (`EagerGraph`)."""

    def __init__(
        self,
        models: StackedModels,
        seen: Tensor,
        batch: int,
        steps: int,
        image_shape: tuple[int, ...],
        autocast: Callable[[], AbstractContextManager[object]],
        loss_sum: Tensor,
        log: Callable[[str], None] = print,
    ) -> None:
        self.models, self.batch, self.k, self.autocast, self.log = models, batch, steps, autocast, log
        device = self.device = seen.device
        self.failed, self.steps = False, 0
        self.graph: torch.cuda.CUDAGraph | EagerGraph | None = None
        n, rows = models.n, steps * batch
        self.seen = torch.zeros(n, seen.shape[-1], dtype=torch.bool, device=device)
        self.x = torch.zeros(n, rows, *image_shape, device=device)
        self.y_a = torch.zeros(n, rows, dtype=torch.long, device=device)
        self.y_b = torch.zeros(n, rows, dtype=torch.long, device=device)
        self.identity = torch.arange(rows, device=device).repeat(n, 1)
        self.perm = self.identity.clone()  # each row's CutMix partner, a row of its own run's k batches
        self.box = torch.zeros(n, steps, 4, dtype=torch.long, device=device)
        self.no_mix = torch.tensor([1.0, 0.0], device=device).repeat(n, steps, 1)
        self.weights = self.no_mix.clone()
        self.runs = torch.arange(n, device=device).view(n, 1)
        h, w = image_shape[-2:]
        self.rows_hw = torch.arange(h, device=device).view(1, h, 1)
        self.cols_hw = torch.arange(w, device=device).view(1, 1, w)
        self.loss_sum = loss_sum  # [N]: Σ loss × batch per run, read at each epoch's end
        self.image_shape = tuple(image_shape)
        self.work: ModuleWork | None = None  # the norms' counters taken over (prepare_work)

    @property
    def what(self) -> str:
        return f"{self.models.n} stacked runs' batches of {self.batch}"

    def load(self, xs: Sequence[Tensor], ys: Sequence[Tensor], seens: Sequence[Tensor], draws: Sequence[Draws]) -> None:
        """The runs' k batches, labels, seen classes and CutMix draws into the static inputs:
        one copy each (a stack), whatever N and k."""
        self.prepare_work()
        torch.stack(list(xs), out=self.x)
        torch.stack(list(ys), out=self.y_a)
        torch.stack(list(seens), out=self.seen)
        b = self.batch
        if all(d is None for run in draws for d in run):
            self.y_b.copy_(self.y_a)
            self.perm.copy_(self.identity)
            self.box.zero_()
            self.weights.copy_(self.no_mix)
            return
        runs = [draw_inputs(run, b) for run in draws]  # GraphedStep's inputs, a row per run
        self.perm.copy_(torch.stack([perm + offset for perm, offset, _, _ in runs]), non_blocking=True)
        torch.gather(self.y_a, 1, self.perm, out=self.y_b)
        self.box.copy_(torch.stack([box for _, _, box, _ in runs]), non_blocking=True)
        self.weights.copy_(torch.stack([weights for _, _, _, weights in runs]), non_blocking=True)

    def prepare_work(self) -> None:
        """The norms' counters counted with one multi-tensor add (graphs.ModuleWork, judged on
        the architecture), made on the host before the body runs. The weights' casts stay
        autocast's: inside vmap it casts on CUDA but falls through on a CPU (its batched matmul),
        so copies in their place could not be checked here."""
        if self.work is None:
            self.work = ModuleWork(self.models.base[0], None, (self.batch, *self.image_shape), copies=False)

    def _forward(self, x: Tensor) -> Tensor:
        """The stacked forward, every counted norm's counter added at once after it."""
        work = self.work
        if not work:
            return self.models.forward(x)
        counted = [work.counter_names[i] for i in work.counting()]
        logits = self.models.forward(x, uncounted=counted)
        if counted:
            torch._foreach_add_([self.models.buffers[c] for c in counted], 1)
        return logits

    def _step(self) -> None:
        b, n = self.batch, self.models.n
        optimizer = self.models.optimizer
        for i in range(self.k):
            if i:
                optimizer.zero_grad(set_to_none=True)
            part = slice(i * b, (i + 1) * b)
            box = self.box[:, i].view(n, 4, 1, 1)
            inside = (
                (self.rows_hw >= box[:, 0])
                & (self.rows_hw < box[:, 1])
                & (self.cols_hw >= box[:, 2])
                & (self.cols_hw < box[:, 3])
            )  # [N, H, W]
            xs = self.x[:, part]
            partners = self.x[self.runs, self.perm[:, part]]
            x = torch.where(inside.view(n, 1, 1, *inside.shape[1:]), partners, xs)
            with self.autocast():
                logits = self._forward(x)
                logits = logits.masked_fill(~self.seen.view(n, 1, -1), torch.finfo(logits.dtype).min)
                flat = logits.flatten(0, 1)
                ce_a = nnf.cross_entropy(flat, self.y_a[:, part].flatten(), reduction="none").view(n, b).mean(1)
                ce_b = nnf.cross_entropy(flat, self.y_b[:, part].flatten(), reduction="none").view(n, b).mean(1)
                w = self.weights[:, i]
                loss = w[:, 0] * ce_a + w[:, 1] * ce_b  # [N]: each run's own loss
            loss.sum().backward()  # the runs are independent: row i's gradient is run i's
            self.models.step()
            self.loss_sum.add_(loss.detach().float() * b)

    def _eager(self) -> None:
        self.models.optimizer.zero_grad(set_to_none=True)
        self._step()

    def _capture(self) -> torch.cuda.CUDAGraph | EagerGraph:
        if self.device.type != "cuda":
            return EagerGraph(self)
        self.models.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step()
        return graph

    def __call__(
        self, xs: Sequence[Tensor], ys: Sequence[Tensor], seens: Sequence[Tensor], draws: Sequence[Draws]
    ) -> None:
        self.load(xs, ys, seens, draws)
        self.run()
        self.steps += self.k


class Seat:
    """A run's graphed step when its run is seated in a SeedStack: what `train.graphed_step`
    caches in `method.graphs`. A call hands the step to the stack and returns once it was taken
    (with the other runs', or apart)."""

    def __init__(self, stack: SeedStack, method: Any, batch: int, steps: int, loss_sum: Tensor) -> None:
        self.stack, self.method, self.batch, self.k = stack, method, batch, steps
        self.model, self.optimizer, self.seen = method.model, method.optimizer, method.seen  # graphs.made_for
        self.loss_sum = loss_sum  # a view of the stack's row for this run
        self.apart: GraphedStep | None = None

    def __call__(self, x: Tensor, y: Tensor, draw: CutMixDraw | Draws | None) -> None:
        draws = list(draw) if isinstance(draw, Sequence) else [draw]
        self.stack.take(self, x, y, draws)

    def alone(self, x: Tensor, y: Tensor, draws: Draws) -> None:
        """The step apart (its run's own GraphedStep), adding to the same loss row."""
        if self.apart is None:
            self.apart = GraphedStep(*step_inputs(self.method, self.batch), self.k)
            self.apart.loss_sum = self.loss_sum
        self.apart(x, y, list(draws))


@dataclass
class _Handed:
    seat: Seat
    x: Tensor
    y: Tensor
    draws: Draws


@dataclass
class StackCounts:
    """How the handed-in steps were taken: stacked (one call for N runs) or apart (and why)."""

    stacked: int = 0
    apart: int = 0
    why_apart: dict[str, int] = field(default_factory=dict)


class SeedStack:
    """N runs, each in its own thread (`run_stacked`), whose graphed steps are taken together.
    A run seated here (`seat`) hands each graphed step in; when every seated run still at work
    has handed one in, the last to arrive takes them all: as one StackedStep when they are of
    one shape and the runs' optimisers stack, else apart, run by run. A run that ends (or
    fails) leaves, so the others never wait for it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.methods: list[Any] = []
        self.active: set[int] = set()
        self.waiting: dict[int, _Handed] = {}
        self.generation = 0
        self.failure: BaseException | None = None
        self.models: StackedModels | None = None
        self.unstackable: str | None = None  # why the current models were not stacked
        self.steps: dict[tuple[int, int], StackedStep] = {}
        self.losses: dict[tuple[int, int], Tensor] = {}
        self.counts = StackCounts()

    def seat(self, method: Any) -> None:
        with self.cond:
            method.seed_stack = self
            if not any(m is method for m in self.methods):  # a run seated again keeps its row
                self.methods.append(method)
            self.active.add(self._row(method))

    def leave(self, method: Any) -> None:
        with self.cond:
            self.active.discard(self._row(method))
            if self.waiting and set(self.waiting) >= self.active:
                self._take_all()

    def _row(self, method: Any) -> int:
        return next(i for i, m in enumerate(self.methods) if m is method)

    def seat_for(self, method: Any, batch: int, steps: int) -> Seat:
        """The run's Seat for steps of this shape (train.graphed_step caches it)."""
        with self.cond:
            rows = self.losses.get((batch, steps))
            if rows is None:
                rows = self.losses[batch, steps] = torch.zeros(len(self.methods), device=method.device)
            return Seat(self, method, batch, steps, rows[self._row(method)])

    def take(self, seat: Seat, x: Tensor, y: Tensor, draws: Draws) -> None:
        with self.cond:
            if self.failure is not None:
                raise RuntimeError("a stacked run failed") from self.failure
            self.waiting[self._row(seat.method)] = _Handed(seat, x, y, draws)
            generation = self.generation
            if set(self.waiting) >= self.active:
                self._take_all()
            else:
                while self.generation == generation:
                    self.cond.wait()
            if self.failure is not None:
                raise RuntimeError("a stacked run failed") from self.failure

    def _take_all(self) -> None:
        handed, self.waiting = self.waiting, {}
        try:
            why = self._why_apart(handed)
            if why is None:
                self._stacked(handed)
                self.counts.stacked += 1
            else:
                for row in sorted(handed):
                    h = handed[row]
                    h.seat.alone(h.x, h.y, h.draws)
                self.counts.apart += 1
                self.counts.why_apart[why] = self.counts.why_apart.get(why, 0) + 1
        except BaseException as err:  # noqa: BLE001 - every waiting run stops with it (re-raised there)
            self.failure = err
        finally:
            self.generation += 1
            self.cond.notify_all()

    def _why_apart(self, handed: dict[int, _Handed]) -> str | None:
        if len(handed) != len(self.methods):
            return "a run has ended"
        if len({(h.seat.batch, h.seat.k, tuple(h.x.shape)) for h in handed.values()}) != 1:
            return "steps of different shapes"
        rates = {written_lr(m.optimizer) for m in self.methods}
        if len(rates) != 1 or None in rates:  # one run in its next epoch, or a rate the host does not know
            return "learning rates differ"
        if self.models is None or not self.models.current(self.methods):
            self.steps.clear()
            self.models, self.unstackable = None, None
            try:
                self.models = StackedModels(self.methods)
            except Unstackable as err:
                self.unstackable = str(err)
        return self.unstackable

    def _stacked(self, handed: dict[int, _Handed]) -> None:
        assert self.models is not None
        first = handed[0].seat
        key = (first.batch, first.k)
        step = self.steps.get(key)
        if step is None:
            method = first.method
            step = self.steps[key] = StackedStep(
                self.models,
                method.seen,
                first.batch,
                first.k,
                method.setup.data.image_shape,
                lambda: method.accel.autocast(graph_safe=True),
                self.losses[key],
                method.report.log,
            )
        rows = [handed[i] for i in range(len(self.methods))]
        step([h.x for h in rows], [h.y for h in rows], [h.seat.method.seen for h in rows], [h.draws for h in rows])


def run_stacked(methods: Sequence[Any], work: Callable[[Any], None], stack: SeedStack | None = None) -> SeedStack:
    """`work(method)` for every method, each in its own thread, the methods seated in one
    SeedStack (their graphed steps taken together); raises the first failure once all threads
    ended. Returns the stack (its `counts`: how the steps were taken)."""
    stack = stack or SeedStack()
    for m in methods:
        stack.seat(m)
    errors: list[BaseException] = []

    def job(method: Any) -> None:
        try:
            work(method)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            errors.append(err)
        finally:
            stack.leave(method)

    threads = [threading.Thread(target=job, args=(m,), name=f"stacked-run-{i}") for i, m in enumerate(methods)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for m in methods:
        m.seed_stack = None
    if errors:
        raise errors[0]
    return stack
