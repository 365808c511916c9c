"""The CUDA-graphed training step computes what the eager step computes.

The capture itself needs a GPU (tests/runner/test_gpu.py); the step's arithmetic does not: here the
graph's body (CutMix as a box mask, the two-weight loss, tensor learning rate) runs on the CPU
next to the eager step and must give the same parameters bit for bit."""

from __future__ import annotations

import contextlib
import random

import pytest
import torch
import torch.nn.functional as nnf
from torch.utils._python_dispatch import TorchDispatchMode

from rmconsole.cl.augment import apply_cutmix, draw_cutmix
from rmconsole.cl.graphs import (
    CompiledStep,
    EagerGraph,
    GraphedStep,
    graph_ready_optimizer,
    portable_optimizer_state,
    set_lr,
)
from rmconsole.cl.models import build_model


def _pair(model_name: str, shape: tuple[int, ...]):
    torch.manual_seed(0)
    a = build_model(model_name, shape, 10)
    b = build_model(model_name, shape, 10)
    b.load_state_dict(a.state_dict())

    def sgd(m):
        return torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4, fused=True)

    return a, sgd(a), b, graph_ready_optimizer(sgd(b))


def _eager_step(model, optimizer, seen, x, y, draw):
    if draw is None:
        logits = model(x).masked_fill(~seen, torch.finfo(torch.float32).min)
        loss = nnf.cross_entropy(logits, y)
    else:
        x, y_a, y_b, lam = apply_cutmix(x, y, draw)
        logits = model(x).masked_fill(~seen, torch.finfo(torch.float32).min)
        loss = lam * nnf.cross_entropy(logits, y_a) + (1 - lam) * nnf.cross_entropy(logits, y_b)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


@pytest.mark.parametrize("model_name,shape", [("mlp400", (1, 8, 8)), ("resnet18", (3, 8, 8))])
def test_graph_body_equals_the_eager_step(model_name: str, shape: tuple[int, ...]) -> None:
    eager, eager_opt, graphed, graphed_opt = _pair(model_name, shape)
    seen = torch.tensor([True] * 6 + [False] * 4)
    step = GraphedStep(graphed, graphed_opt, seen, 8, shape, False, torch.autograd.profiler.record_function)
    step.autocast = lambda: torch.autograd.profiler.record_function("step")  # no autocast on CPU
    rng, gen = random.Random(3), torch.Generator().manual_seed(3)
    data_gen = torch.Generator().manual_seed(5)
    mixed = 0
    for i in range(8):
        x = torch.randn(8, *shape, generator=data_gen)
        y = torch.randint(0, 6, (8,), generator=data_gen)
        draw = draw_cutmix(8, shape[-2], shape[-1], rng, gen) if i % 2 else None
        mixed += draw is not None and draw.x2 > draw.x1 and draw.y2 > draw.y1
        lr = 0.05 * (1 + i) / 8
        set_lr(eager_opt, lr)
        set_lr(graphed_opt, lr)
        _eager_step(eager, eager_opt, seen, x, y, draw)
        step.load(x, y, draw)
        graphed_opt.zero_grad(set_to_none=True)
        step._step()
    assert mixed >= 2  # some steps really pasted a box
    for (name, p), q in zip(eager.state_dict().items(), graphed.state_dict().values()):
        assert torch.equal(p, q), name


def test_checkpoints_keep_learning_rates_as_numbers() -> None:
    _, _, _, opt = _pair("mlp400", (1, 8, 8))
    assert isinstance(opt.param_groups[0]["lr"], torch.Tensor)
    state = portable_optimizer_state(opt.state_dict())
    assert state["param_groups"][0]["lr"] == pytest.approx(0.05) and isinstance(state["param_groups"][0]["lr"], float)


def test_set_lr_writes_a_tensor_rate_only_when_it_is_not_already_there() -> None:
    """The same rate set again launches nothing (a constant schedule's step; MIR's step, whose
    retrieval set its rate ahead); a new rate, or a tensor written since by anything else, is filled."""
    opt = graph_ready_optimizer(torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.05))
    rate = opt.param_groups[0]["lr"]
    set_lr(opt, 0.02)
    written = rate._version
    set_lr(opt, 0.02)
    assert rate._version == written  # no fill_
    rate.fill_(0.5)  # a write set_lr did not make
    set_lr(opt, 0.02)
    assert rate.item() == pytest.approx(0.02)
    set_lr(opt, 0.03)
    assert rate.item() == pytest.approx(0.03)


def test_only_launch_bound_steps_are_graphed_by_default() -> None:
    from rmconsole.cl.graphs import launch_bound

    assert launch_bound(8, (3, 32, 32)) and launch_bound(16, (3, 32, 32)) and launch_bound(16, (1, 28, 28))
    assert launch_bound(256, (3, 32, 32)) and not launch_bound(257, (3, 32, 32))
    assert launch_bound(32, (3, 64, 64))  # the Tiny-ImageNet preset's task-free update (host-bound on an H100)
    # a two-view step there (SCR, PCR, OCM, OnPro: 2 x 32 images; SCR graphed 3.7 ms, eager 12.9 on an H200)
    assert launch_bound(64, (3, 64, 64)) and not launch_bound(65, (3, 64, 64))
    assert not launch_bound(256, (3, 224, 224))  # an ImageNet step: arithmetic-bound, its capture failed


def test_a_failed_capture_falls_back_to_the_eager_step() -> None:
    """When capturing fails (cuDNN refused a ResNet34 step at 224 on an H100), that step and every
    later one of its shape run the same step eagerly, with one line in the log."""
    eager, eager_opt, graphed, graphed_opt = _pair("mlp400", (1, 8, 8))
    seen = torch.ones(10, dtype=torch.bool)
    lines = []
    step = GraphedStep(
        graphed,
        graphed_opt,
        seen,
        8,
        (1, 8, 8),
        False,
        lambda: torch.autograd.profiler.record_function("step"),
        lines.append,
    )

    def refuse():
        raise RuntimeError("cuDNN error: CUDNN_STATUS_INTERNAL_ERROR\nmore detail")

    step._capture = refuse
    step.steps = 2  # past the warm-up (which needs a CUDA stream)
    data_gen = torch.Generator().manual_seed(1)
    for _ in range(3):
        x, y = torch.randn(8, 1, 8, 8, generator=data_gen), torch.randint(0, 10, (8,), generator=data_gen)
        _eager_step(eager, eager_opt, seen, x, y, None)
        step(x, y, None)
    assert step.failed and step.graph is None and step.steps == 5
    assert len(lines) == 1 and "CUDNN_STATUS_INTERNAL_ERROR" in lines[0] and "eagerly" in lines[0]
    for (name, p), q in zip(eager.state_dict().items(), graphed.state_dict().values()):
        assert torch.equal(p, q), name


@pytest.mark.slow  # torch.compile on CPU generates and builds C++ (inductor): seconds of compiler
@pytest.mark.full  # 50-150 s of a worker here: not in CI (pyproject's markers)
def test_the_compiled_step_gives_the_eager_weights() -> None:
    """compile = "step" (graphs.CompiledStep, torch.compile of the graph's body with inductor) on a
    tiny MLP on CPU: the weights of 6 steps (CutMix on every other, the lr changing every step, a
    class becoming seen midway) equal the eager step's within float32 rounding (inductor may fuse
    and reorder); once the optimiser has its state (step 2), the lr as a tensor, the draws and the
    mask as data compile nothing new."""
    from torch._dynamo.utils import counters

    eager, eager_opt, compiled, compiled_opt = _pair("mlp400", (1, 4, 4))
    compiled_opt = torch.optim.SGD(compiled.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    seen = torch.tensor([True] * 5 + [False] * 5)
    step = CompiledStep(compiled, compiled_opt, seen, 8, (1, 4, 4), False, contextlib.nullcontext)
    assert isinstance(compiled_opt.param_groups[0]["lr"], torch.Tensor)
    rng, gen, data_gen = random.Random(3), torch.Generator().manual_seed(3), torch.Generator().manual_seed(5)
    compiled_graphs = []
    for i in range(6):
        compiled_graphs.append(counters["stats"]["unique_graphs"])
        if i == 3:
            seen[5] = True  # a new class: in place, as the run's mask
        x = torch.randn(8, 1, 4, 4, generator=data_gen)
        y = torch.randint(0, 6, (8,), generator=data_gen)
        draw = draw_cutmix(8, 4, 4, rng, gen) if i % 2 else None
        lr = 0.05 * (1 + i) / 6
        set_lr(eager_opt, lr)
        set_lr(compiled_opt, lr)
        _eager_step(eager, eager_opt, seen, x, y, draw)
        step(x, y, draw)
    assert step.steps == 6 and compiled_graphs[1] > 0
    assert counters["stats"]["unique_graphs"] == compiled_graphs[2], compiled_graphs
    for (name, p), q in zip(eager.state_dict().items(), compiled.state_dict().values()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), name


def test_steps_per_replay_give_the_one_step_weights() -> None:
    """k = 4 steps a call (a replay) on CPU, where a replay runs the body eagerly (EagerGraph): the
    weights and the loss tally of 8 one-step calls, bit for bit; a call without CutMix and one
    mixing drawn and draw-less batches."""
    shape = (1, 8, 8)
    one_model, _, four_model, four_opt = _pair("mlp400", shape)
    one_opt = graph_ready_optimizer(
        torch.optim.SGD(one_model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4, fused=True)
    )
    seen = torch.tensor([True] * 6 + [False] * 4)
    null = contextlib.nullcontext
    one = GraphedStep(one_model, one_opt, seen, 8, shape, False, null)
    four = GraphedStep(four_model, four_opt, seen, 8, shape, False, null, steps=4)
    rng, gen, data_gen = random.Random(3), torch.Generator().manual_seed(3), torch.Generator().manual_seed(5)
    x = torch.randn(64, *shape, generator=data_gen)
    y = torch.randint(0, 6, (64,), generator=data_gen)
    draws = [draw_cutmix(8, 8, 8, rng, gen) if i >= 4 and i % 2 else None for i in range(8)]
    assert sum(d is not None and d.x2 > d.x1 and d.y2 > d.y1 for d in draws) >= 1
    for i in range(8):
        one(x[8 * i : 8 * i + 8], y[8 * i : 8 * i + 8], draws[i])
    four(x[:32], y[:32], draws[:4])
    four(x[32:], y[32:], draws[4:])
    assert (one.steps, four.steps) == (8, 8) and isinstance(four.graph, EagerGraph)
    assert torch.equal(one.loss_sum, four.loss_sum)
    for (name, p), q in zip(one_model.state_dict().items(), four_model.state_dict().values()):
        assert torch.equal(p, q), name


def _rm_graphed_on_cpu(steps_per_replay: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[torch.Tensor], set, dict]:
    """RM over two tasks of the digits stream (memory epochs with CutMix) taking the graphed path
    on CPU (a replay runs its body: EagerGraph), `steps_per_replay` equal batches a replay."""
    from support.online_helpers import tiny_data

    from rmconsole.cl import graphs
    from rmconsole.cl.compute import ledger_of
    from rmconsole.cl.learner import Task
    from rmconsole.cl.loop import build_protocol
    from rmconsole.cl.methods import Setup, method_class
    from rmconsole.cl.resume import make_augmenter
    from rmconsole.config import load_config

    monkeypatch.setattr(graphs, "STEPS_PER_REPLAY", steps_per_replay)
    sets = {"method": "rm", "epochs": 2, "memory_size": 40, "batch_size": 8, "n_tasks": 2, "augment": "cutmix"}
    cfg = load_config(None, {**sets, "uncertainty_views": 2})[1]
    data, cpu = tiny_data(per_class=12, test_per_class=2, n_classes=4), torch.device("cpu")
    torch.manual_seed(0)
    proto = build_protocol(cfg, data)
    setup = Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
    rm = method_class("rm")
    m = type(rm.__name__, (rm,), {"uses_graphs": property(lambda self: True)})(setup)
    for t in range(len(proto.tasks)):
        task = Task(t, proto.tasks[t], len(proto.tasks))
        m.before_task(task)
        m.learn_task(task)
        m.after_task(task)
    graphed = {k for k, g in m.graphs.items() if g.graph is not None}
    return [p.detach().clone() for p in m.model.parameters()], graphed, dict(ledger_of(m).counts)


def test_memory_epochs_with_several_steps_a_replay_give_one_step_replays_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RM's memory epochs (train.fit, graphed path) with 4 equal batches a replay: the weights of
    one step a replay, bit for bit (draws, order and arithmetic unchanged); the 4-step graph ran."""
    one, one_graphs, one_counts = _rm_graphed_on_cpu(1, monkeypatch)
    four, four_graphs, four_counts = _rm_graphed_on_cpu(4, monkeypatch)
    assert all(k == 1 for _, k in one_graphs) and any(k == 4 for _, k in four_graphs), (one_graphs, four_graphs)
    assert four_counts == one_counts  # the FLOP ledger charges each of a replay's steps
    for a, b in zip(one, four):
        assert torch.equal(a, b)


def _bf16() -> contextlib.AbstractContextManager[object]:
    return torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False)  # the graph-safe autocast


class _TwiceHead(torch.nn.Module):
    """A model calling one Linear twice a forward (a weight autocast casts twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(64, 64)
        self.norm = torch.nn.BatchNorm1d(64)
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.body(x.flatten(1)))
        return self.head(self.body(torch.relu(h)))


class _TiedHead(torch.nn.Module):
    """Two Linears sharing one weight (each called once: the weight is used twice)."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.head = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 10)
        self.b.weight = self.a.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.b(torch.relu(self.a(x.flatten(1)))))


def _no_norms() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


class _HostDecision(torch.nn.Module):
    """A forward that reads a value on the host (no meta-device forward can run it)."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = torch.nn.Linear(64, 64), torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x.flatten(1))
        return self.head(h if float(h.detach().mean()) > -1e9 else -h)


OWN_MODELS = {"twice": _TwiceHead, "tied": _TiedHead, "no_norms": _no_norms, "host_decision": _HostDecision}


def _bf16_runs(model_name: str, shape: tuple[int, ...], channels_last: bool) -> tuple[torch.nn.Module, ...]:
    """6 steps (CutMix on every other) of the eager step under autocast bf16 and of the graph's
    body (GraphedStep) under the graph-safe autocast: (eager model, graphed model, the step)."""
    if model_name in OWN_MODELS:
        torch.manual_seed(0)
        eager, graphed = OWN_MODELS[model_name](), OWN_MODELS[model_name]()
        graphed.load_state_dict(eager.state_dict())
    else:
        eager, _, graphed, _ = _pair(model_name, shape)
    if channels_last:
        eager, graphed = eager.to(memory_format=torch.channels_last), graphed.to(memory_format=torch.channels_last)

    def sgd(m: torch.nn.Module) -> torch.optim.Optimizer:
        return torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)

    eager_opt, graphed_opt = sgd(eager), graph_ready_optimizer(sgd(graphed))
    seen = torch.tensor([True] * 6 + [False] * 4)
    step = GraphedStep(graphed, graphed_opt, seen, 8, shape, channels_last, _bf16)
    rng, gen, data_gen = random.Random(3), torch.Generator().manual_seed(3), torch.Generator().manual_seed(5)
    low = torch.finfo(torch.bfloat16).min
    for i in range(6):
        x, y = torch.randn(8, *shape, generator=data_gen), torch.randint(0, 6, (8,), generator=data_gen)
        draw = draw_cutmix(8, shape[-2], shape[-1], rng, gen) if i % 2 else None
        with _bf16():
            mixed, y_a, y_b, lam = apply_cutmix(x, y, draw) if draw is not None else (x, y, y, 1.0)
            logits = eager(mixed).masked_fill(~seen, low)
            loss = lam * nnf.cross_entropy(logits, y_a) + (1 - lam) * nnf.cross_entropy(logits, y_b)
        eager_opt.zero_grad(set_to_none=True)
        loss.backward()
        eager_opt.step()
        step(x, y, draw)
    return eager, graphed, step


@pytest.mark.parametrize(
    "model_name,shape,channels_last,weights,norms",
    [
        ("resnet18", (3, 8, 8), True, 22, 20),
        ("mlp400", (1, 8, 8), False, 6, 2),
        ("no_norms", (1, 8, 8), False, 4, 0),
        ("tied", (1, 8, 8), False, 4, 0),  # a's and b's biases and the head's; the shared weight left to autocast
        ("twice", (1, 8, 8), False, 0, 0),
        ("host_decision", (1, 8, 8), False, 0, 0),  # its calls cannot be counted: left to autocast
    ],
)
def test_module_work_at_once_gives_autocasts_weights(
    model_name: str, shape: tuple[int, ...], channels_last: bool, weights: int, norms: int
) -> None:
    """Under bf16 autocast the graph's body casts every conv/linear weight with one multi-tensor
    copy and widens their gradients with another, and counts every batch norm's batch with one
    multi-tensor add (graphs.ModuleWork): weights, momentum and counters are the eager autocast
    step's bit for bit. A model calling a Linear twice a forward is left to autocast (one bf16
    copy would sum the two calls' gradients in bf16), with the same result."""
    eager, graphed, step = _bf16_runs(model_name, shape, channels_last)
    work = step.work
    assert work is not None and bool(work) == (weights > 0)
    assert len(work.copies) == weights  # (none made where nothing is taken over)
    assert not any(m._forward_pre_hooks for m in graphed.modules())  # the counting hooks removed
    assert (len(work.weights) if work else 0, len(work.norms) if work else 0) == (weights, norms)
    for (name, p), q in zip(eager.state_dict().items(), graphed.state_dict().values()):
        assert torch.equal(p, q), name
    assert all(p.dtype == torch.float32 for p in graphed.parameters())  # the weights put back


class _OpCounts(TorchDispatchMode):
    """Operators dispatched, by name (what a step's body issues)."""

    def __init__(self) -> None:
        super().__init__()
        self.n: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        name = func.overloadpacket.__name__
        self.n[name] = self.n.get(name, 0) + 1
        return func(*args, **(kwargs or {}))


def test_module_work_takes_one_launch_for_all_casts_and_counters() -> None:
    """One body step of ResNet18 under bf16: with the module work taken over, 2 x 22 fewer casts
    and 20 fewer counter adds, for 2 multi-tensor copies and 1 multi-tensor add."""
    counted = []
    for take_over in (False, True):
        _, _, model, opt = _pair("resnet18", (3, 8, 8))
        step = GraphedStep(model, opt, torch.ones(10, dtype=torch.bool), 8, (3, 8, 8), False, _bf16)
        step.take_over_module_work = take_over
        step.load(torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,)), None)
        opt.zero_grad(set_to_none=True)
        with _OpCounts() as ops:
            step._step()
        counted.append(ops.n)
    before, after = counted
    assert before["_to_copy"] - after["_to_copy"] == 2 * 22 and after["_foreach_copy_"] == 2
    assert before["add_"] - after["add_"] == 20 and after["_foreach_add_"] == 1
    assert "_foreach_copy_" not in before and "_foreach_add_" not in before


def test_the_bf16_body_with_module_work_is_capturable() -> None:
    """The graph's body under bf16 with the module work taken over (copies written, put in
    place and taken out, gradients widened into new tensors, counters added) passes the CPU
    checker of what a CUDA graph capture refuses, step after step, the lr changing."""
    from rmconsole.cl.step_audit import Capturable, StepAudit

    _, _, model, opt = _pair("resnet18", (3, 8, 8))
    model = model.to(memory_format=torch.channels_last)
    step = GraphedStep(model, opt, torch.ones(10, dtype=torch.bool), 8, (3, 8, 8), True, _bf16)
    audit = StepAudit()
    region = Capturable(audit)
    data_gen = torch.Generator().manual_seed(5)
    with audit:
        for i in range(4):  # the first, as on CUDA, a warm-up outside (the optimiser makes its state)
            set_lr(opt, 0.05 / (1 + i))
            step.load(torch.randn(8, 3, 8, 8, generator=data_gen), torch.randint(0, 10, (8,), generator=data_gen), None)
            audit.mark(
                opt,
                *model.parameters(),
                *model.buffers(),
                *[v for v in vars(step).values() if isinstance(v, torch.Tensor)],
                *(step.work.copies if step.work else []),  # (made on the device, as the weights)
            )
            opt.zero_grad(set_to_none=True)
            with region if i else contextlib.nullcontext():
                step._step()
    assert step.work and region.entries == 3 and not audit.syncs


def test_module_work_is_made_anew_for_another_model_head_or_dtype() -> None:
    """A ModuleWork stays the step's while its model, the weights it copies and the autocast
    dtype are the same; a rebuilt head (a new Linear) or another dtype asks for a new one."""
    from rmconsole.cl.graphs import module_work

    _, _, model, _ = _pair("mlp400", (1, 8, 8))
    _, _, other, _ = _pair("mlp400", (1, 8, 8))
    with _bf16():
        work = module_work(model, torch.device("cpu"), (8, 1, 8, 8), None)
        assert module_work(model, torch.device("cpu"), (8, 1, 8, 8), work) is work
        assert module_work(other, torch.device("cpu"), (8, 1, 8, 8), work) is not work
    assert work.made_for(model, torch.bfloat16) and not work.made_for(model, None)
    assert not work.made_for(other, torch.bfloat16)
    model.fc = torch.nn.Linear(model.fc.in_features, 10)
    assert not work.made_for(model, torch.bfloat16)
    model.fc = torch.nn.Identity()  # (no weight where one was)
    assert not work.made_for(model, torch.bfloat16)


# ----------------------------------------------------------------- a method's own step, watched


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.norm = torch.nn.Linear(64, 32), torch.nn.BatchNorm1d(32)
        self.b, self.head = torch.nn.Linear(32, 32), torch.nn.Linear(32, 10)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.b(torch.relu(self.norm(self.a(x.flatten(1))))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def _ce(net: _Net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nnf.cross_entropy(net(x), y)


def _read_again(net: _Net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _ce(net, x, y) + 1e-2 * net.head.weight.square().sum()  # (a penalty: the weight's second use)


def _read_twice_more(net: _Net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    w = net.head.weight  # three uses: a third gradient could be summed in another order
    return _ce(net, x, y) + 1e-2 * w.square().sum() + 1e-2 * w.abs().sum()


def _called_twice(net: _Net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _ce(net, x, y) + _ce(net, x.flip(0), y.flip(0))  # (two views, two forwards)


def _head_in_float32(net: _Net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    h = net.features(x)
    with torch.autocast("cpu", enabled=False):
        return nnf.cross_entropy(net.head(h.float()), y)


def _norm_in_eval(net: _Net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    net.norm.eval()  # (its statistics frozen: no counter counts)
    return _ce(net, x, y)


class _Method:
    """What graphs.MethodStep reads of a method: its model, optimiser, seen mask, data shape,
    accel, log, and its own `step_loss` (here `loss(model, x, y)`) under bf16 autocast."""

    def __init__(self, loss) -> None:  # type: ignore[no-untyped-def]
        from types import SimpleNamespace

        self.model, self.loss = _Net(), loss
        self.optimizer = graph_ready_optimizer(torch.optim.Adam(self.model.parameters(), lr=1e-2), capturable=False)
        self.seen = torch.ones(10, dtype=torch.bool)
        self.setup = SimpleNamespace(data=SimpleNamespace(image_shape=(1, 8, 8)))
        self.accel = SimpleNamespace(channels_last=False, autocast=lambda graph_safe=False: _bf16())
        self.report = SimpleNamespace(log=print)
        self.mix_pending, self.mix_graph = False, None

    def step_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss(self.model, x, y)

    def after_backward(self) -> None:
        pass

    def after_step(self) -> None:
        pass


def _method_steps(first, later, take_over: bool):  # type: ignore[no-untyped-def]
    """6 steps of graphs.MethodStep (its body, as a replay runs it on a CPU) with the loss
    `first`, then `later`: (the method, the step)."""
    from rmconsole.cl.graphs import MethodStep

    torch.manual_seed(0)
    method = _Method(first)
    step = MethodStep(method, 8, ())
    step.take_over_module_work = take_over
    gen = torch.Generator().manual_seed(1)
    for i in range(6):
        method.loss = first if i == 0 else later
        step(torch.randn(8, 1, 8, 8, generator=gen), torch.randint(0, 10, (8,), generator=gen), None)
    return method, step


@pytest.mark.parametrize(
    "first,later,weights,norms",
    [
        (_ce, _ce, 6, 1),
        (_read_again, _read_again, 6, 1),  # the head's weight taken over, its gradients summed
        (_read_twice_more, _read_twice_more, 5, 1),  # the head's weight left to autocast
        (_called_twice, _called_twice, 0, 0),
        (_head_in_float32, _head_in_float32, 4, 1),  # the head runs in float32: left alone
        (_norm_in_eval, _norm_in_eval, 6, 0),
        (_ce, _called_twice, 6, 1),  # watched once, then called twice: the second call is autocast's
        (_ce, _read_twice_more, 6, 1),  # the head read twice after it: three gradients, summed as autocast does here
        (_ce, _head_in_float32, 6, 1),  # the head in float32 after it: its float32 weights, as autocast's
    ],
)
def test_a_method_steps_module_work_is_what_its_watched_step_shows_and_gives_autocasts_weights(
    first, later, weights: int, norms: int
) -> None:  # type: ignore[no-untyped-def]
    """A method's own step (graphs.MethodStep) is watched on its first step: a module taken over
    is one called once under autocast whose weights the loss reaches by at most one other use, a
    norm one called once in training. Its later steps under bf16 give the plain autocast step's
    weights, Adam moments and counters bit for bit, a module called twice after all included."""
    plain, _ = _method_steps(first, later, take_over=False)
    taken, step = _method_steps(first, later, take_over=True)
    work = step.work
    assert work is not None and (len(work.weights), len(work.norms)) == (weights, norms)
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in taken.model.modules())  # hooks removed
    for (name, p), q in zip(plain.model.state_dict().items(), taken.model.state_dict().values()):
        assert torch.equal(p, q), name
    for a, b in zip(plain.optimizer.state.values(), taken.optimizer.state.values()):
        assert all(torch.equal(a[k], b[k]) for k in a), "Adam's moments"
    assert all(isinstance(p, torch.nn.Parameter) and p.dtype == torch.float32 for p in taken.model.parameters())


def test_a_method_steps_module_work_takes_one_launch_for_its_casts_and_counters() -> None:
    """After the watched step, a step of the method's own loss casts its 6 weights with one
    multi-tensor copy and widens their gradients with another, and counts its norm with one
    multi-tensor add: 2 x 6 fewer casts."""
    counted = []
    for take_over in (False, True):
        method, step = _method_steps(_ce, _ce, take_over)
        method.optimizer.zero_grad(set_to_none=True)
        with _OpCounts() as ops:
            step._step()
        counted.append(ops.n)
    before, after = counted
    assert before["_to_copy"] - after["_to_copy"] == 2 * 6 and after["_foreach_copy_"] == 2
    assert after["_foreach_add_"] == 1 and "_foreach_copy_" not in before


def test_a_watched_step_counts_every_use_of_each_weight_in_the_losss_graph() -> None:
    """StepWatch.saw walks the loss's whole graph once: a node reached twice (a residual's
    diamond) is walked once, and every edge into a weight counts, however far past it."""
    from rmconsole.cl.graphs import StepWatch

    w, b = torch.nn.Parameter(torch.randn(3)), torch.nn.Parameter(torch.randn(3))
    q = w * 2  # reached twice: by the sum and through sin
    loss = w.cos().sum() + (q + q.sin()).sum() + (b * 3).sum()  # (the diamond walked before cos)
    with StepWatch(torch.nn.Sequential(), torch.device("cpu")) as watch:
        pass
    assert watch.saw(loss).uses == {id(w): 2, id(b): 1}
