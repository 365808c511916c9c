"""One training step replayed as a CUDA graph: what makes RM's batch-8 memory epochs fast on a GPU.

A ResNet18 step on 8 CIFAR images is a few hundred tiny kernels; launched one by one from
Python the GPU waits on the host for most of each step. Captured once (forward, loss,
backward, optimiser step) and replayed, a step costs one launch. What changes from step to
step enters through static buffers: the batch, its labels, and the batch's CutMix draw (made
on the host from the run's generators, as in the eager step, then applied inside the graph
as a box mask). The graph computes what the eager step computes:

    eager: x[:, :, y1:y2, x1:x2] = x[perm, :, y1:y2, x1:x2];  lam * CE(y) + (1 - lam) * CE(y[perm])
           (no CutMix: CE(y))
    graph: where(box, x[perm], x);  w_a * CE(y_a) + w_b * CE(y_b), with (w_a, w_b) = (lam, 1 - lam)
           or (1, 0) and y_b = y_a, perm = identity, an empty box when the batch draws no CutMix

(selection is exact, 1 * a + 0 * b == a in floating point, and unseen classes are masked
with the same fill), so a graphed run and an eager one give the same numbers up to the
choice of GPU kernels. Only steps that are plain cross-entropy + SGD or Adam (capturable, its
state and lr on the device) are graphed, under both protocols (a task-free run's updates too:
a new class's head row is re-initialised in place, the lr is a device tensor the schedule
fills). A method whose own step is declared capturable (`Method.capturable_step`: ER-ACE, SCR,
PCR, GSA...) is replayed the same way by `MethodStep`: its `step_loss` on the static batch,
backward, its `after_backward`, the optimiser, its `after_step`; its host decisions are made
before the replay (`step_key`) and reach the graph as device tensors the method updates in
place. Methods with
gradient hooks or host decisions inside their step (EWC, Rwalk, iCaRL, ...) and multi-process
runs stay eager.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
import torch.nn.functional as nnf
from torch import Tensor, nn
from torch.utils.weak import WeakIdKeyDictionary

from .augment import CutMixDraw

WARMUP_STEPS = 2  # real steps run eagerly (on a side stream) before capture: cuDNN/cuBLAS set-up
# equal batches of an epoch captured in one graph (train.fit): the host issues one replay and one
# copy of their inputs per 8 steps. On an H100 the host's gap between one-step replays of RM's
# batch-8 ResNet18 step was about a quarter of its 1.7 ms (issue 43): 8 steps a replay leave ~3%;
# more would lengthen the capture and the one-step remainder of every epoch for little.
STEPS_PER_REPLAY = 8
COMPILE_BACKEND = "inductor"  # `compile = "step"`: torch.compile's default backend
# `launch_bound`: input pixels of the largest step graphed by default: a two-view step of the Tiny
# preset (64 images at 64x64: SCR on an H200, 3.7 ms graphed against 12.9 eager). At 32 x 3 x 64 x 64
# `auto` left every two-view method (SCR, PCR, OCM, OnPro) eager at that preset
GRAPHED_PIXELS = 64 * 3 * 64 * 64


class Replayed:
    """What a body replayed as a CUDA graph shares (GraphedStep, CapturedCall): `run()` replays
    the graph, or runs the body eagerly (`_eager`): its first WARMUP_STEPS calls on CUDA (on a
    side stream), and for good once a capture failed (logged); else it captures (`_capture`)."""

    graph: torch.cuda.CUDAGraph | EagerGraph | None
    failed: bool  # the capture failed: the body runs eagerly from now on
    steps: int  # calls so far (the warm-up counts them)
    device: torch.device
    log: Callable[[str], None]

    @property
    def what(self) -> str:
        """What the graph runs, for the log line of a failed capture."""
        raise NotImplementedError

    def _eager(self) -> None:
        raise NotImplementedError

    def _capture(self) -> torch.cuda.CUDAGraph | EagerGraph:
        raise NotImplementedError

    def run(self) -> None:
        if self.graph is not None:
            self.graph.replay()
        elif self.failed:
            self._eager()
        elif self.steps < WARMUP_STEPS and self.device.type == "cuda":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._eager()
            torch.cuda.current_stream().wait_stream(side)
        else:
            try:
                self.graph = self._capture()
            except Exception as err:  # noqa: BLE001 - the eager body is always a valid fallback
                self.failed = True
                first = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
                self.log(
                    f"CUDA graph capture failed for {self.what} ({type(err).__name__}: {first}); "
                    f"those steps run eagerly from now on"
                )
                self._eager()
            else:
                self.graph.replay()  # capture records the step without running it


class GraphedStep(Replayed):
    """forward + loss + backward + `optimizer.step()` for batches of one shape, as a CUDA graph.

    The optimiser must keep its learning rate in a device tensor (`lr_tensor`) so the
    schedule can change it between replays. Recapture (a new GraphedStep) when the optimiser
    or the model's parameters are replaced (each task makes a new optimiser). The modules'
    casts and counters are done a launch for all (ModuleWork)."""

    take_over_module_work = True  # (a method's own step, a compiled one: left to their modules)

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        seen: Tensor,
        batch: int,
        image_shape: tuple[int, ...],
        channels_last: bool,
        autocast: Callable[[], AbstractContextManager[object]],
        log: Callable[[str], None] = print,
        steps: int = 1,
    ) -> None:
        device = self.device = seen.device
        self.model, self.optimizer, self.seen, self.autocast, self.log = model, optimizer, seen, autocast, log
        self.failed = False  # the capture failed: this shape trains eagerly
        self.k = steps  # training steps per call (per replay): k batches of `batch`, in order
        fmt = torch.channels_last if channels_last and len(image_shape) == 3 else torch.contiguous_format
        n = steps * batch
        self.x = torch.zeros(n, *image_shape, device=device).contiguous(memory_format=fmt)
        self.y_a = torch.zeros(n, dtype=torch.long, device=device)
        self.y_b = torch.zeros(n, dtype=torch.long, device=device)
        self.perm = torch.arange(n, device=device)  # each step's CutMix partners, within its batch
        self.identity = torch.arange(batch, device=device).repeat(steps)
        self.no_mix = torch.tensor([[1.0, 0.0]] * steps, dtype=torch.float32, device=device)
        self.box = torch.zeros(steps, 4, dtype=torch.long, device=device)  # y1, y2, x1, x2 per step
        self.weights = torch.zeros(steps, 2, dtype=torch.float32, device=device)  # w_a, w_b per step
        self.loss_sum = torch.zeros((), dtype=torch.float32, device=device)  # Σ loss × batch, read per epoch
        self.steps = 0
        self.graph: torch.cuda.CUDAGraph | EagerGraph | None = None
        self.batch = batch
        h, w = image_shape[-2:]
        self.rows = torch.arange(h, device=device).view(h, 1)
        self.cols = torch.arange(w, device=device).view(1, w)
        self.work: ModuleWork | None = None  # autocast's casts and batch norms' counters at once (prepare_work)

    def _step(self) -> None:
        """The k steps, one after the other (what a replay runs)."""
        b = self.batch
        for i in range(self.k):
            if i:
                self.optimizer.zero_grad(set_to_none=True)  # as before every eager step
            part = slice(i * b, (i + 1) * b)
            y1, y2, x1, x2 = self.box[i]
            inside = (self.rows >= y1) & (self.rows < y2) & (self.cols >= x1) & (self.cols < x2)
            xs = self.x[part]
            x = torch.where(inside, xs[self.perm[part]], xs)
            with self.autocast():
                work = self.work
                with work.in_forward() if work else nullcontext():
                    logits = self.model(x)
                logits = logits.masked_fill(~self.seen, torch.finfo(logits.dtype).min)
                w = self.weights[i]
                loss = w[0] * nnf.cross_entropy(logits, self.y_a[part]) + w[1] * nnf.cross_entropy(
                    logits, self.y_b[part]
                )
            loss.backward()
            if work:
                work.gradients_back()
            self.optimizer.step()
            self.loss_sum.add_(loss.detach().float() * b)  # captured too: no host sync per step

    def prepare_work(self) -> None:
        """The model's per-module work done once a step (ModuleWork), made on the host before the
        body first runs (in the step's autocast, which says the weights' dtype). Once: a step is
        made anew for another model, optimiser or head (train.graphed_step), and checking the
        weights each call cost ~0.3 ms of host time an update for ResNet34 here."""
        if self.take_over_module_work and self.work is None:
            with self.autocast():
                self.work = module_work(self.model, self.device, tuple(self.x[: self.batch].shape), self.work)

    def load(self, x: Tensor, y: Tensor, draw: CutMixDraw | Sequence[CutMixDraw | None] | None) -> None:
        """Copy k batches (x, y: k × batch rows, in step order) and their CutMix draws into the
        graph's inputs: one copy each, whatever k (no host synchronisation)."""
        draws = list(draw) if isinstance(draw, Sequence) else [draw]
        assert len(draws) == self.k, (len(draws), self.k)
        self.prepare_work()
        b = self.batch
        self.x.copy_(x)
        self.y_a.copy_(y)
        if all(d is None for d in draws):  # no CutMix: identity partners, empty boxes, weights (1, 0)
            self.y_b.copy_(y)
            self.perm.copy_(self.identity)
            self.box.zero_()
            self.weights.copy_(self.no_mix)
            return
        perm, offset, box, weights = draw_inputs(draws, b)
        self.y_b.copy_(y[(perm + offset).to(y.device, non_blocking=True)])
        self.perm.copy_(perm, non_blocking=True)
        self.box.copy_(box, non_blocking=True)
        self.weights.copy_(weights, non_blocking=True)

    def __call__(self, x: Tensor, y: Tensor, draw: CutMixDraw | Sequence[CutMixDraw | None] | None) -> None:
        """k training steps on (x, y) (k × batch rows) with the batches' CutMix draws."""
        self.load(x, y, draw)
        self.run()
        self.steps += self.k

    @property
    def what(self) -> str:
        return f"batches of {self.batch}"

    def _eager(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self._step()

    def _capture(self) -> torch.cuda.CUDAGraph | EagerGraph:
        if self.x.device.type != "cuda":  # no CUDA graph here: the body itself, as a replay runs it
            return EagerGraph(self)
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._step()
        return graph


class ModuleWork:
    """What each module of a step body does for itself, a kernel a module, done for all of them
    at once: autocast's weight casts and batch norm's batch counters.

    Why. RM's graphed ResNet18 step at batch 8 and ER's ResNet34 update are bound by the number
    of small kernels, not by arithmetic (issue 43). Under autocast every conv/linear weight is
    cast to bf16 in each forward (graph-safe autocast keeps no cast cache) and its gradient cast
    back in backward: 42 of the 300 kernels of RM's step under bf16. Every training batch norm
    adds 1 to its `num_batches_tracked`: 20 more. Here one multi-tensor copy writes the bf16
    copies before the forward, one writes their gradients back as the float32 weights'
    gradients, and one multi-tensor add counts every norm's batch. The numbers are the same:
    the same rounding to bf16, the same bf16 gradient widened, the same counters.

    What is taken over. Weights autocast itself casts: those of `nn.Linear` and `nn.ConvNd`
    modules running their own forward, trained float32 parameters used by one module (batch
    and layer norms' weights autocast keeps in float32: left alone). Counters of batch norms
    with a momentum (with none, the counter sets the average's weight: left alone). And only
    where each of those modules runs at most once a forward, as a forward on the meta device
    shows (`_called_once`, no arithmetic): autocast casts a weight anew for each call and sums
    the calls' gradients in float32, where one copy would sum them in bf16. That is how the
    default step's forward, `model(x)`, is judged (GraphedStep: the whole forward with the
    copies in place, `in_forward`).

    A method's own step (MethodStep) reads the method's device state, which no meta forward can
    run: its first step is watched instead (StepWatch: each module's calls, under which autocast,
    and each weight's uses in the loss's graph). A module called once under autocast, whose
    weights the loss reaches by at most one other use (a penalty: two gradients sum alike in
    either order), has its copies in place during its own call only (`in_calls`): a read of the
    weight outside it sees the float32 weight, as under autocast, and its gradient is added to
    the copy's widened one. A module called again in a later step runs that call as autocast does."""

    CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d)

    def __init__(
        self,
        model: nn.Module,
        dtype: torch.dtype | None,
        input_shape: tuple[int, ...] | None,
        copies: bool = True,
        watched: StepWatch | None = None,
    ) -> None:
        uses: dict[int, int] = {}
        for _, p in model.named_parameters(remove_duplicate=False):
            uses[id(p)] = uses.get(id(p), 0) + 1
        self.slots: list[tuple[nn.Module, str]] = []  # (module, "weight" | "bias"): the copies' places
        self.weights: list[Tensor] = []  # the float32 parameters the optimiser updates
        self.norms: list[nn.Module] = [m for m in model.modules() if self._counts_batches(m)]
        for module in model.modules() if dtype is not None else ():
            if not self._casts(module):
                continue
            for name, own in module._parameters.items():  # (its own: weight, bias)
                if own is not None and own.requires_grad and own.dtype == torch.float32 and uses[id(own)] == 1:
                    self.slots.append((module, name))
                    self.weights.append(own)
        self.model, self.dtype = model, dtype
        if watched is not None:  # a method's own step, watched (its calls, not a meta forward, decide)
            self._keep_watched(watched)
        self.weight_names, self.counter_names = self._names()  # (in the model, as a stacked step names them)
        self.once = bool(self.weights or self.norms) and (watched is not None or self._called_once(input_shape))
        made = self.once and copies  # (a stacked step makes its own, of the stacked weights)
        self.copies: list[Tensor] = (
            [nn.Parameter(torch.empty_like(p, dtype=dtype)) for p in self.weights] if made else []
        )

    @classmethod
    def _casts(cls, module: nn.Module) -> bool:
        """A module whose forward autocast runs in its lower precision, weight and bias cast."""
        if isinstance(module, nn.Linear):
            return type(module).forward is nn.Linear.forward
        conv = next((k for k in cls.CONVS if isinstance(module, k)), None)
        own = getattr(type(module), "_conv_forward", None)  # (a default: any Module type to mypy)
        return conv is not None and type(module).forward is conv.forward and own is conv._conv_forward

    @staticmethod
    def _counts_batches(module: nn.Module) -> bool:
        """A batch norm that adds 1 to its counter each training forward, a momentum average's."""
        norm = nn.modules.batchnorm._BatchNorm
        return (
            isinstance(module, norm)
            and type(module).forward is norm.forward
            and module.track_running_stats
            and module.momentum is not None
            and isinstance(module.num_batches_tracked, Tensor)
        )

    def __bool__(self) -> bool:
        return self.once

    def _called_once(self, input_shape: tuple[int, ...] | None) -> bool:
        """Whether `model(x)` calls each taken-over module at most once: a forward on the meta
        device (shapes only) with the calls counted. A forward that needs values (a host
        decision) cannot run there: nothing is taken over."""
        from torch.func import functional_call

        if input_shape is None:  # (no forward to run: nothing taken over)
            return False
        calls: dict[int, int] = {}

        def count(module: nn.Module, _args: object) -> None:
            calls[id(module)] = calls.get(id(module), 0) + 1

        state = {n: torch.empty_like(t, device="meta") for n, t in self.model.named_parameters()}
        state.update({n: torch.empty_like(t, device="meta") for n, t in self.model.named_buffers()})
        modules = {id(m): m for m in [*(m for m, _ in self.slots), *self.norms]}
        hooks = [m.register_forward_pre_hook(count) for m in modules.values()]
        try:
            with torch.no_grad():
                functional_call(self.model, state, (torch.empty(input_shape, device="meta"),))
        except Exception:  # noqa: BLE001 - a forward that cannot run without values: left as it is
            return False
        finally:
            for h in hooks:
                h.remove()
        return all(n <= 1 for n in calls.values())

    def _keep_watched(self, watched: StepWatch) -> None:
        """Of the candidates, what the watched step shows exact to take over call by call: a
        module called once, under autocast at this dtype, whose weights the loss reaches by at
        most one other use (two gradients sum alike in either order; a third could round
        otherwise); a norm called once, training."""
        keep = [
            i
            for i, ((module, _), weight) in enumerate(zip(self.slots, self.weights))
            if watched.calls.get(id(module)) == 1
            and watched.cast_calls.get(id(module)) == 1
            and watched.uses.get(id(weight), 0) <= 2
        ]
        self.slots, self.weights = [self.slots[i] for i in keep], [self.weights[i] for i in keep]
        self.norms = [m for m in self.norms if watched.calls.get(id(m)) == 1 and watched.trained_calls.get(id(m)) == 1]

    def _names(self) -> tuple[list[str], list[str]]:
        """The taken-over weights' names in the model, and the counted norms' counters' names."""
        where = {id(m): f"{n}." if n else "" for n, m in self.model.named_modules()}
        return (
            [where[id(m)] + name for m, name in self.slots],
            [where[id(m)] + "num_batches_tracked" for m in self.norms],
        )

    def counting(self) -> list[int]:
        """The norms that count this forward (in training mode), as indices of `norms` and `counter_names`."""
        return [i for i, m in enumerate(self.norms) if m.training]

    def made_for(self, model: nn.Module, dtype: torch.dtype | None) -> bool:
        """Whether this is still `model`'s work at this dtype (a rebuilt head or model: anew)."""
        if self.model is not model or self.dtype != dtype:
            return False
        try:  # the weights still where they were (a rebuilt head's are new)
            return all(model.get_parameter(n) is p for n, p in zip(self.weight_names, self.weights))
        except AttributeError:
            return False

    @contextmanager
    def in_forward(self) -> Iterator[None]:
        """The forward with the bf16 copies in the weights' places and every counter counted
        once after it."""
        if self.weights:
            with torch.no_grad():
                torch._foreach_copy_(self.copies, self.weights)
            for c in self.copies:
                c.grad = None
            for (module, name), copy in zip(self.slots, self.copies):
                module._parameters[name] = copy  # type: ignore[assignment]  # (a Parameter)
        counted = [self.norms[i] for i in self.counting()]
        counters: list[Tensor] = [m._buffers["num_batches_tracked"] for m in counted]  # type: ignore[misc]
        for m in counted:
            m._buffers["num_batches_tracked"] = None  # (its forward then skips the add)
        try:
            yield
        finally:
            for (module, name), weight in zip(self.slots, self.weights):
                module._parameters[name] = weight  # type: ignore[assignment]  # (the Parameter taken out)
            for m, c in zip(counted, counters):
                m._buffers["num_batches_tracked"] = c
        if counters:
            torch._foreach_add_(counters, 1)

    @contextmanager
    def in_calls(self) -> Iterator[None]:
        """A method's own step (StepWatch decided what): each taken-over module with its bf16
        copies in its weights' places during its own first call only, under autocast at this
        dtype (a read of a weight outside it sees the float32 weight, as under autocast), each
        training norm's counter hidden during its first call; every hidden counter counted after
        the step's loss. A second call runs as autocast runs it: its weights cast, its counter
        added by the norm."""
        if self.weights:
            with torch.no_grad():
                torch._foreach_copy_(self.copies, self.weights)
            for c in self.copies:
                c.grad = None
        slots: dict[int, list[tuple[str, Tensor, Tensor]]] = {}
        for (module, name), weight, copy in zip(self.slots, self.weights, self.copies):
            slots.setdefault(id(module), []).append((name, weight, copy))
        called: set[int] = set()
        norms = {id(m) for m in self.norms}
        hidden: dict[int, tuple[nn.Module, Tensor]] = {}  # the counters hidden this step
        device = self.copies[0].device.type if self.copies else "cpu"

        def swap_in(module: nn.Module, _args: object) -> None:
            if id(module) in called:
                return
            called.add(id(module))
            cast = autocast_dtype(device) == self.dtype
            for name, weight, copy in slots.get(id(module), ()):
                if cast and module._parameters[name] is weight:  # (not another's, e.g. functional_call's)
                    module._parameters[name] = copy  # type: ignore[assignment]  # (a Parameter)
            if id(module) in norms and module.training:
                counter = module._buffers["num_batches_tracked"]
                if isinstance(counter, Tensor):
                    hidden[id(module)] = (module, counter)
                    module._buffers["num_batches_tracked"] = None  # (its forward then skips the add)

        def swap_out(module: nn.Module, _args: object, _out: object) -> None:
            for name, weight, copy in slots.get(id(module), ()):
                if module._parameters[name] is copy:
                    module._parameters[name] = weight  # type: ignore[assignment]
            if id(module) in hidden:
                module._buffers["num_batches_tracked"] = hidden[id(module)][1]

        modules = {id(m): m for m in [*(m for m, _ in self.slots), *self.norms]}.values()
        hooks = [h for m in modules for h in (m.register_forward_pre_hook(swap_in), m.register_forward_hook(swap_out))]
        try:
            yield
        finally:
            for h in hooks:
                h.remove()
            for (module, name), weight in zip(self.slots, self.weights):  # (a call that raised)
                module._parameters[name] = weight  # type: ignore[assignment]
            for m, counter in hidden.values():
                m._buffers["num_batches_tracked"] = counter
        if hidden:
            torch._foreach_add_([c for _, c in hidden.values()], 1)

    def gradients_back(self) -> None:
        """The copies' gradients, widened, as the weights' (after backward, before the optimiser);
        added to a weight's own where the loss also read it outside its module (`in_calls`): the
        sum of those two, as autocast's accumulation makes it."""
        fresh: list[tuple[Tensor, Tensor]] = []
        read: list[tuple[Tensor, Tensor]] = []
        for p, c in zip(self.weights, self.copies):
            if c.grad is not None:  # (a weight the loss did not reach keeps no gradient)
                (fresh if p.grad is None else read).append((p, c.grad))
        widened = [torch.empty_like(p) for p, _ in fresh]
        for (p, _), g in zip(fresh, widened):
            p.grad = g
        if fresh:
            torch._foreach_copy_(widened, [g for _, g in fresh])
        for p, g in read:
            assert p.grad is not None
            p.grad.add_(g)


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast runs this device's eligible operators in here, None where it is off."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


class StepWatch:
    """A method's own step watched once (MethodStep's first, eager): how often each module
    ModuleWork could take over is called, under autocast at which dtype, and how many uses of
    each weight the loss's graph holds (`saw`). What decides a method step's ModuleWork: its
    `step_loss` reads the method's device state, so no meta-device forward can run it."""

    def __init__(self, model: nn.Module, device: torch.device) -> None:
        self.device = device.type
        self.calls: dict[int, int] = {}
        self.cast_calls: dict[int, int] = {}  # calls under autocast at `dtype` (the step's: ModuleWork's)
        self.trained_calls: dict[int, int] = {}  # a norm's calls in training mode
        self.uses: dict[int, int] = {}  # id(parameter) -> the loss's graph's edges into it
        self.dtype = autocast_dtype(device.type)
        watched = [m for m in model.modules() if ModuleWork._casts(m) or ModuleWork._counts_batches(m)]
        self.hooks = [m.register_forward_pre_hook(self._count) for m in watched]  # (removed on exit)

    def __enter__(self) -> StepWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        for h in self.hooks:
            h.remove()

    def _count(self, module: nn.Module, _args: object) -> None:
        key = id(module)
        self.calls[key] = self.calls.get(key, 0) + 1
        if autocast_dtype(self.device) == self.dtype:
            self.cast_calls[key] = self.cast_calls.get(key, 0) + 1
        if module.training:
            self.trained_calls[key] = self.trained_calls.get(key, 0) + 1

    def saw(self, loss: Tensor) -> StepWatch:
        """The uses of each leaf the loss's graph reaches, counted."""
        done: set[object] = set()
        todo = [loss.grad_fn]
        while todo:
            fn = todo.pop()
            if fn is None or fn in done:
                continue
            done.add(fn)
            for nxt, _ in fn.next_functions:
                leaf = getattr(nxt, "variable", None)
                if leaf is not None:
                    self.uses[id(leaf)] = self.uses.get(id(leaf), 0) + 1
                elif nxt is not None:
                    todo.append(nxt)
        return self


def module_work(
    model: nn.Module, device: torch.device, input_shape: tuple[int, ...], held: ModuleWork | None
) -> ModuleWork:
    """The ModuleWork of a step body's forward, called inside its autocast region (which says the
    dtype of the weights' copies; none without autocast): `held` again while it is the model's
    (false when there is nothing to take over)."""
    dtype = autocast_dtype(device.type)
    if held is not None and held.made_for(model, dtype):
        return held
    return ModuleWork(model, dtype, input_shape)


def draw_inputs(draws: Sequence[CutMixDraw | None], batch: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """k steps' CutMix draws (None: no CutMix) as a graph's host inputs: each row's partner
    within its batch (k x batch), the batches' row offsets, the boxes (y1, y2, x1, x2; empty
    without CutMix) and the loss weights (lam, 1 - lam; (1, 0) without CutMix)."""
    ident = torch.arange(batch)
    perm = torch.cat([ident if d is None else d.perm for d in draws])
    offset = torch.arange(len(draws)).repeat_interleave(batch) * batch  # a step's partners, as rows of x
    # the eager step multiplies by Python floats: lam and 1 - lam rounded to float32 alike
    box = torch.tensor([[0, 0, 0, 0] if d is None else [d.y1, d.y2, d.x1, d.x2] for d in draws])
    weights = torch.tensor([[1.0, 0.0] if d is None else [d.lam, 1.0 - d.lam] for d in draws], dtype=torch.float32)
    return perm, offset, box, weights


StepInputs = tuple[
    nn.Module,
    torch.optim.Optimizer,
    Tensor,
    int,
    tuple[int, ...],
    bool,
    Callable[[], AbstractContextManager[object]],
    Callable[[str], None],
]


def step_inputs(method: Any, batch: int) -> StepInputs:
    """What a step of `method` (a cl.learner.Learner) is made from, in GraphedStep's order up to
    `log`: its model, optimiser and seen-classes mask, the batch size, the data's image shape and
    the run's accel settings."""
    accel = method.accel
    return (
        method.model,
        method.optimizer,
        method.seen,
        batch,
        method.setup.data.image_shape,
        accel.channels_last,
        lambda: accel.autocast(graph_safe=True),
        method.report.log,
    )


def made_for(step: GraphedStep | CapturedCall, method: Any) -> bool:
    """Whether `step` was made with the model, optimiser and seen-classes mask `method` has now
    (a new task's optimiser, a replaced model or mask: capture anew)."""
    return step.model is method.model and step.optimizer is method.optimizer and step.seen is method.seen


class MethodStep(GraphedStep):
    """A method's own capturable step (`Method.capturable_step`) for batches of one shape and one
    `step_key`, as a CUDA graph: `method.step_loss` on the static batch, backward,
    `method.after_backward`, the optimiser step, `method.after_step`, the loss added to
    `loss_sum`. No CutMix draw enters (a capturable step draws none); the method's per-step host
    decisions are in its device tensors, written by its `step_key` before `__call__`."""

    def __init__(self, method: Any, batch: int, key: tuple[Any, ...], **kwargs: Any) -> None:
        super().__init__(*step_inputs(method, batch), **kwargs)
        self.method, self.key = method, key

    def prepare_work(self) -> None:
        """None here: its first step is watched instead (`_step`, StepWatch)."""

    def mix(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """The loaded CutMix draw on the static batch `x`: (x mixed, y_a, y_b, w_a, w_b)."""
        y1, y2, x1, x2 = self.box[0]
        inside = (self.rows >= y1) & (self.rows < y2) & (self.cols >= x1) & (self.cols < x2)
        w = self.weights[0]
        return torch.where(inside, x[self.perm], x), self.y_a, self.y_b, w[0], w[1]

    def _step(self) -> None:
        """The method's loss, backward, the optimiser. The first step (eager: a warm-up on CUDA)
        is watched; the steps after it, and the capture, do the module work it showed exact
        at once (ModuleWork.in_calls)."""
        method, work = self.method, self.work
        watch = None
        method.mix_graph = self
        try:
            with self.autocast():
                if work is None and self.take_over_module_work:
                    watch = StepWatch(self.model, self.device)
                with work.in_calls() if work else watch or nullcontext():
                    loss = method.step_loss(self.x, self.y_a)
        finally:
            method.mix_graph = None
        if watch is not None:
            self.work = ModuleWork(self.model, watch.dtype, None, watched=watch.saw(loss))
        loss.backward()
        if work:
            work.gradients_back()
        method.after_backward()
        self.optimizer.step()
        method.after_step()
        self.loss_sum.add_(loss.detach().float() * self.batch)

    def load(self, x: Tensor, y: Tensor, draw: CutMixDraw | Sequence[CutMixDraw | None] | None = None) -> None:
        """The batch, and the CutMix the method's `step_key` drew when its step uses one."""
        method = self.method
        if method.mix_pending and method.setup.augmenter.uses_cutmix:
            method.mix_pending = False
            super().load(x, y, method.mix_draw)
            return
        self.x.copy_(x)
        self.y_a.copy_(y)


class CapturedCall(Replayed):
    """`fn(*inputs)` -> one tensor, replayed as a CUDA graph: a method's device work outside its
    training step (MIR's retrieval). `__call__(*args)` copies the args (tensors of the shapes it
    was made for) into static inputs, outside the graph, replays, and returns the static output
    (the next call overwrites it). Made for one model, optimiser and seen-classes mask
    (`made_for`) where the body reads them (a learning rate: the optimiser's tensor, `set_lr`);
    a body that reads none (the augmentation, `TaskFree.augmented`) passes None for both and
    `seen` only for its device."""

    def __init__(
        self,
        fn: Callable[..., Tensor],
        example: Sequence[Tensor],
        model: nn.Module | None,
        optimizer: torch.optim.Optimizer | None,
        seen: Tensor,
        what: str,
        log: Callable[[str], None] = print,
    ) -> None:
        self.fn, self.model, self.optimizer, self.seen, self.log, self._what = fn, model, optimizer, seen, log, what
        self.device = seen.device
        self.inputs = [torch.empty_like(a) for a in example]
        self.output: Tensor | None = None
        self.held: Tensor | None = None  # what an eager call returns (`__call__`)
        self.graph: torch.cuda.CUDAGraph | EagerGraph | None = None
        self.failed = False
        self.steps = 0

    @property
    def what(self) -> str:
        return self._what

    def __call__(self, *args: Tensor) -> Tensor:
        for static, a in zip(self.inputs, args, strict=True):
            static.copy_(a)
        self.run()
        self.steps += 1
        assert self.output is not None
        if isinstance(self.graph, torch.cuda.CUDAGraph):
            return self.output  # the graph's one static output
        # run eagerly (a CPU, a warm-up, a failed capture): one tensor too, overwritten by every call,
        # as a replay's, so a caller that keeps a result across calls is wrong on a CPU as on a GPU
        # (the copy is the stand-in's, not a GPU's launch outside a graph: counted as inside one)
        from .step_audit import graphable

        held = self.held
        with graphable():
            if held is None or held.shape != self.output.shape or held.dtype != self.output.dtype:
                self.held = held = torch.empty_like(self.output)
            return held.copy_(self.output)

    def _eager(self) -> None:
        self.output = self.fn(*self.inputs)

    def _capture(self) -> torch.cuda.CUDAGraph | EagerGraph:
        if self.device.type != "cuda":  # no CUDA graph here: the body itself, as a replay runs it
            return EagerGraph(self)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.output = self.fn(*self.inputs)
        return graph


class CompiledStep(GraphedStep):
    """The same step (the graph's body: CutMix from its static inputs, forward, loss, backward,
    optimiser) run through `torch.compile` on any device instead of captured (`compile = "step"`).
    Compiled once per batch size: the batch, its draw and the learning rate are tensors, so a new
    draw, a new class (the `seen` mask, the head's state restarted in place) or the schedule's
    next lr reuse the compiled code; backward is where dynamo splits it (autograd runs between)."""

    take_over_module_work = False  # inductor fuses the casts itself; no module state swapped under dynamo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        graph_ready_optimizer(self.optimizer, capturable=False)  # lr a tensor: no recompile per lr
        self.compiled = torch.compile(self._step, backend=COMPILE_BACKEND)

    def __call__(self, x: Tensor, y: Tensor, draw: CutMixDraw | Sequence[CutMixDraw | None] | None) -> None:
        self.load(x, y, draw)
        self.optimizer.zero_grad(set_to_none=True)
        self.compiled()
        self.steps += 1


class EagerGraph:
    """A replay where there is no CUDA graph (a CPU): the body run eagerly, as the graph would run
    it (gradients written afresh), inside `step_audit.graphable()` so an audit counts its operators
    as the replayed ones. What the benchmarks and tests measure the graphed path's host work with."""

    def __init__(self, step: Replayed) -> None:
        self.step = step

    def replay(self) -> None:
        from .step_audit import graphable

        with graphable():
            self.step._eager()


def launch_bound(batch: int, image_shape: tuple[int, ...]) -> bool:
    """A step small enough to be bound by kernel launches, where `cuda_graphs=auto` graphs it:
    up to 64 images at 64x64 (256 CIFAR-sized): a two-view step of the Tiny-ImageNet preset (SCR
    on an H200: 3.7 ms graphed, 12.9 eager). Measured on an H100: a
    graphed batch-8 ResNet18 step at 32x32 takes 1.7 ms with the GPU busy 73% of it (eager, it
    launches a few hundred kernels from Python); an eager ER update of ResNet34 on 32 images at
    64x64 took about 16 ms for about 58 GFLOP (a fraction of a millisecond of arithmetic: host
    bound); a ResNet34 step of 256 images at 224 is bound by arithmetic, and its capture failed
    in cuDNN (CUDNN_STATUS_INTERNAL_ERROR)."""
    pixels = 1
    for d in image_shape:
        pixels *= int(d)
    return batch * pixels <= GRAPHED_PIXELS


def graph_ready_optimizer(optimizer: torch.optim.Optimizer, capturable: bool = True) -> torch.optim.Optimizer:
    """Learning rates as float32 tensors on the parameters' device (same values as the float
    the eager step passes), so a captured step reads the current one; an optimiser with a
    `capturable` flag (Adam) has it set (a portable checkpoint's state turned it off), unless
    `capturable` is false (a compiled step: torch.compile handles the optimiser's state)."""
    for group in optimizer.param_groups:
        if capturable and "capturable" in group:
            group["capturable"] = True
        device = group["params"][0].device
        lr = group["lr"]
        if not (isinstance(lr, Tensor) and lr.device == device):
            group["lr"] = torch.tensor(float(lr), dtype=torch.float32, device=device)
    return optimizer


def portable_optimizer_state(state: dict) -> dict:
    """An optimiser state dict with tensor learning rates as floats and Adam's `capturable` off,
    so a checkpoint written by a graphed run loads anywhere (CPU or GPU, graphed or not)."""
    for group in state.get("param_groups", []):
        if group.get("capturable"):
            group["capturable"] = False
        if isinstance(group.get("lr"), Tensor):
            group["lr"] = float(group["lr"])
    return state


# the rate `set_lr` last wrote into each tensor learning rate, with the tensor's version counter
# then (any later in-place write moves it): writing the same rate again launches nothing (a step of
# a constant schedule; MIR's step, whose rate its retrieval set ahead)
_LR_WRITTEN: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> (rate, version)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The schedule's learning rate for the coming epoch (or step), in place when it is a tensor;
    a tensor that holds `lr` from this function, written by nothing since, is left as it is (no
    launch, no sync: the host remembers what it wrote)."""
    for group in optimizer.param_groups:
        rate = group["lr"]
        if isinstance(rate, Tensor):
            if _LR_WRITTEN.get(rate) != (lr, rate._version):
                rate.fill_(lr)
                _LR_WRITTEN[rate] = (lr, rate._version)
        else:
            group["lr"] = lr


def written_lr(optimizer: torch.optim.Optimizer) -> float | None:
    """The rate `set_lr` last wrote into the optimiser's (first group's) tensor learning rate,
    when nothing has written it since; else None. What the host knows without reading it
    (cl/stacked.py: runs stacked only when their rates are one)."""
    rate = optimizer.param_groups[0]["lr"]
    if not isinstance(rate, Tensor):
        return float(rate)
    written = _LR_WRITTEN.get(rate)
    return written[0] if written is not None and written[1] == rate._version else None
