"""The CUDA-graphed training step computes what the eager step computes.

The capture itself needs a GPU (tests/runner/test_gpu.py); the step's arithmetic does not: here the
graph's body (CutMix as a box mask, the two-weight loss, tensor learning rate) runs on the CPU
next to the eager step and must give the same parameters bit for bit."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as nnf

from rmconsole.cl.augment import apply_cutmix, draw_cutmix
from rmconsole.cl.graphs import GraphedStep, graph_ready_optimizer, portable_optimizer_state, set_lr
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


def test_only_launch_bound_steps_are_graphed_by_default() -> None:
    from rmconsole.cl.graphs import launch_bound

    assert launch_bound(8, (3, 32, 32)) and launch_bound(16, (3, 32, 32)) and launch_bound(16, (1, 28, 28))
    assert launch_bound(128, (3, 32, 32)) and not launch_bound(129, (3, 32, 32))
    assert launch_bound(32, (3, 64, 64))  # the Tiny-ImageNet preset's task-free update (host-bound on an H100)
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
