"""The training engine's fast paths compute what the plain paths compute, bit for bit:

- `fit` augments several chunks (a small memory's epochs) in one call, with every random draw
  made in the order the chunk-by-chunk loop makes it (augmentation, then each step's CutMix);
- the default step of an MLP runs its kernels without autograd (mlp_step.py);
- a plain fused SGD is stepped by calling its kernel directly.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
import torch.nn.functional as nnf

from rmconsole.cl import train
from rmconsole.cl.augment import apply_cutmix, draw_cutmix
from rmconsole.cl.data import load_digits
from rmconsole.cl.loop import build_protocol, make_augmenter
from rmconsole.cl.methods import Setup, Task, method_class
from rmconsole.cl.mlp_step import MLPStep
from rmconsole.cl.models import build_model
from rmconsole.config import load_config

CPU = torch.device("cpu")


def _learner(method: str = "rm", cls=None, **overrides):
    settings = {"method": method, "augment": "cutmix+autoaug", "memory_size": 40, "seed": 3, **overrides}
    _, cfg = load_config(None, settings)
    torch.manual_seed(cfg.seed)  # the model's initial weights
    data = load_digits()
    proto = build_protocol(cfg, data)
    aug = make_augmenter(cfg, data, CPU)
    learner = (cls or method_class(method))(
        Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, CPU, aug)
    )
    memory = proto.tasks[0][: learner.memory.capacity]
    learner.memory.replace(memory, proto.train_labels[memory])
    task = Task(1, proto.tasks[1], len(proto.tasks))
    learner.before_task(task)
    return learner, task


def _memory_epochs(learner, task, epochs: int) -> None:
    learner.fit(
        epochs, lambda e: learner.shuffled_batches(learner.memory.indices, learner.memory_batch_size), "memory", task
    )


def _state(learner) -> list[torch.Tensor]:
    aug = learner.setup.augmenter
    return (
        [t.clone() for t in learner.model.state_dict().values()]
        + [aug.gen.get_state(), learner.gen.get_state()]
        + [torch.tensor(aug.rng.random())]
    )


def _count_applies(monkeypatch, learner) -> list[int]:
    sizes: list[int] = []
    apply = learner.setup.augmenter.apply
    monkeypatch.setattr(
        learner.setup.augmenter, "apply", lambda images, draw: sizes.append(len(images)) or apply(images, draw)
    )
    return sizes


@pytest.mark.parametrize("augment", ["cutmix+autoaug", "randaug", "none"])
def test_epochs_augmented_together_equal_chunk_by_chunk(monkeypatch, augment: str) -> None:
    train._MIX_PER_STEP.clear()
    grouped, task = _learner(augment=augment)
    plain, _ = _learner(augment=augment)
    sizes = _count_applies(monkeypatch, grouped)
    _memory_epochs(grouped, task, 12)
    with monkeypatch.context() as m:
        m.setattr(train._MixPlanning, "spans", lambda self: False)  # one chunk per call: the unbatched loop
        plain_sizes = _count_applies(m, plain)
        _memory_epochs(plain, task, 12)
    assert len(plain_sizes) == 12 and len(sizes) < 4  # the memory's epochs went through in a few calls
    for a, b in zip(_state(grouped), _state(plain)):
        assert torch.equal(a, b)


def test_a_sample_gets_its_own_draw_in_every_epoch_of_a_group(monkeypatch) -> None:
    learner, task = _learner(augment="autoaug")
    seen: list[torch.Tensor] = []
    apply = learner.setup.augmenter.apply
    monkeypatch.setattr(
        learner.setup.augmenter, "apply", lambda images, draw: seen.append(out := apply(images, draw)) or out
    )
    learner.fit(8, lambda e: [learner.memory.indices[:16]], "memory", task)  # the same 16 samples, in order
    assert len(seen) == 1 and len(seen[0]) == 8 * 16
    views = seen[0].view(8, 16, -1)
    for i in range(16):  # each epoch drew its own crop, flip and ops for sample i
        assert len({bytes(v.numpy().tobytes()) for v in views[:, i]}) >= 6


def test_a_step_that_breaks_the_cutmix_plan_falls_back_and_says_so(monkeypatch) -> None:
    train._MIX_PER_STEP.clear()
    logged: list[str] = []
    count = {"steps": 0}

    class Irregular(method_class("er")):  # type: ignore[misc, valid-type]
        def step_loss(self, x, y):
            count["steps"] += 1
            if count["steps"] > 20 and count["steps"] % 7 == 0:  # once in a while, a second draw
                self.setup.augmenter.draw_mix(len(x), x.shape[-2], x.shape[-1])
            return super().step_loss(x, y)

    learner, task = _learner("er", cls=Irregular)
    monkeypatch.setattr(learner.setup.reporter, "log", logged.append)
    _memory_epochs(learner, task, 16)
    assert train._MIX_PER_STEP[Irregular] is False
    assert any("planned CutMix draw" in line for line in logged)
    assert all(torch.isfinite(p).all() for p in learner.model.parameters())


# ----------------------------------------------------------------------------- the MLP step


def _autograd_step(model, optimizer, seen, x, y, draw) -> None:
    if draw is None:
        logits = model(x)
        logits = logits if bool(seen.all()) else logits.masked_fill(~seen, torch.finfo(logits.dtype).min)
        loss = nnf.cross_entropy(logits, y)
    else:
        x, y_a, y_b, lam = apply_cutmix(x, y, draw)
        logits = model(x)
        logits = logits if bool(seen.all()) else logits.masked_fill(~seen, torch.finfo(logits.dtype).min)
        loss = lam * nnf.cross_entropy(logits, y_a) + (1 - lam) * nnf.cross_entropy(logits, y_b)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def _sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4, fused=True)


@pytest.mark.parametrize("shape,blocks", [((1, 28, 28), 2), ((3, 8, 8), 3)])
def test_the_mlp_step_equals_autograd_bit_for_bit(shape, blocks: int) -> None:
    torch.manual_seed(0)
    model = build_model("mlp400", shape, 10)
    if blocks == 3:  # a deeper stack of the same blocks
        extra = [torch.nn.Linear(400, 400), torch.nn.BatchNorm1d(400), torch.nn.ReLU(inplace=True)]
        model.features = torch.nn.Sequential(*model.features, *extra)
    twin = copy.deepcopy(model)
    opt_a, opt_b = _sgd(model), _sgd(twin)
    step = MLPStep.of(twin, opt_b)
    assert step is not None
    rng, gen, data = random.Random(3), torch.Generator().manual_seed(3), torch.Generator().manual_seed(5)
    mixed = 0
    seen = torch.tensor([True] * 6 + [False] * 4)
    for i in range(40):
        if i == 10:
            seen[6] = True  # a class arrives in place (task-free streams): the step's cached mask must follow
        if i == 20:
            seen = torch.ones(10, dtype=torch.bool)  # another tensor
        x = torch.randn(8, *shape, generator=data)
        y = torch.randint(0, 7 if i >= 10 else 6, (8,), generator=data)  # unseen classes: their gradient masked
        draw = draw_cutmix(8, shape[-2], shape[-1], rng, gen) if i % 2 else None
        mixed += draw is not None
        _autograd_step(model, opt_a, seen, x, y, draw)
        step(x, y, None if draw is None else apply_cutmix(x, y, draw), seen)
        opt_b.step()
    assert mixed >= 10
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values()):
        assert torch.equal(a, b), name  # weights, batch-norm statistics, num_batches_tracked
    for (name, a), b in zip(opt_a.state_dict()["state"].items(), opt_b.state_dict()["state"].values()):
        assert torch.equal(a["momentum_buffer"], b["momentum_buffer"]), name


def test_the_mlp_step_writes_weight_gradients_into_buffers_of_its_own() -> None:
    """A CPU pays page faults for every fresh parameter-sized tensor: each weight's gradient is
    written into a buffer the step made once (ER's update at the MNIST preset 13.2 -> 11.4 ms),
    so a step allocates nothing near a weight's size, even after zero_grad(set_to_none=True)."""
    from torch.profiler import ProfilerActivity, profile

    model = build_model("mlp400", (1, 28, 28), 10)
    opt = _sgd(model)
    step = MLPStep.of(model, opt)
    assert step is not None
    data = torch.Generator().manual_seed(5)
    grads = []
    for _ in range(3):
        opt.zero_grad(set_to_none=True)
        x, y = torch.randn(8, 1, 28, 28, generator=data), torch.randint(0, 10, (8,), generator=data)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step(x, y, None, None)
        opt.step()
        grads.append(model.features[1].weight.grad)
    weight = model.features[1].weight
    assert max(e.cpu_memory_usage for e in prof.events()) < weight.numel() * weight.element_size() // 4
    assert grads[0] is grads[1] is grads[2]


def test_the_mlp_step_declines_what_it_does_not_compute() -> None:
    mlp = build_model("mlp400", (1, 8, 8), 10)
    assert MLPStep.of(mlp, _sgd(mlp)) is not None
    resnet = build_model("resnet18", (3, 8, 8), 10)
    assert MLPStep.of(resnet, _sgd(resnet)) is None
    head_frozen = torch.optim.SGD([p for n, p in mlp.named_parameters() if not n.startswith("fc.")], lr=0.1)
    assert MLPStep.of(mlp, head_frozen) is None
    handle = mlp.features[2].register_forward_hook(lambda *a: None)
    assert MLPStep.of(mlp, _sgd(mlp)) is None
    handle.remove()
    handle = mlp.fc.weight.register_hook(lambda g: g)
    assert MLPStep.of(mlp, _sgd(mlp)) is None
    handle.remove()
    assert MLPStep.of(mlp.double(), _sgd(mlp)) is None
    flat_all = build_model("mlp400", (1, 8, 8), 10)
    flat_all.features[0] = torch.nn.Flatten(0, -1)  # not the batch-keeping flatten it computes
    assert MLPStep.of(flat_all, _sgd(flat_all)) is None
    no_bias = build_model("mlp400", (1, 8, 8), 10)
    no_bias.features[1] = torch.nn.Linear(64, 400, bias=False)
    assert MLPStep.of(no_bias, _sgd(no_bias)) is None


def test_the_mlp_step_counts_every_class_label_in_its_loss() -> None:
    """Labels past 99 (Tiny-ImageNet has 200 classes) are targets like any other: only -100 is
    ignored, as autograd's cross-entropy ignores it."""
    torch.manual_seed(0)
    model = build_model("mlp400", (1, 8, 8), 200)
    twin = copy.deepcopy(model)
    step = MLPStep.of(twin, _sgd(twin))
    assert step is not None
    x, y = torch.randn(8, 1, 8, 8), torch.tensor([100, 100, 150, 3, 199, 100, 0, 42])
    loss = step(x, y, None, None)
    expected = nnf.cross_entropy(model(x), y)
    expected.backward()
    assert torch.equal(loss, expected.detach())
    for a, b in zip(model.parameters(), twin.parameters()):
        assert torch.equal(a.grad, b.grad)


def test_the_engine_uses_the_mlp_step_only_for_the_default_step(monkeypatch) -> None:
    calls = {"mlp": 0}
    original = MLPStep.__call__

    def counting(self, *args):
        calls["mlp"] += 1
        return original(self, *args)

    monkeypatch.setattr(MLPStep, "__call__", counting)
    learner, task = _learner("er")
    _memory_epochs(learner, task, 1)
    assert calls["mlp"] == len(learner.shuffled_batches(learner.memory.indices, learner.memory_batch_size)) > 0
    calls["mlp"] = 0
    for method in ("ewc", "icarl", "bic", "rwalk"):  # their own loss, hooks or after_step
        learner, task = _learner(method)
        _memory_epochs(learner, task, 1)
        assert calls["mlp"] == 0, method


def test_the_direct_fused_sgd_step_equals_optimizer_step() -> None:
    torch.manual_seed(1)
    a = build_model("mlp400", (1, 8, 8), 10)
    b = copy.deepcopy(a)
    opt_a, opt_b = _sgd(a), _sgd(b)
    params = train._plain_fused_sgd(opt_b)
    assert params is not None and train._plain_fused_sgd(torch.optim.SGD(a.parameters(), lr=0.1)) is None
    gen = torch.Generator().manual_seed(2)
    for i in range(6):
        x, y = torch.randn(8, 1, 8, 8, generator=gen), torch.randint(0, 10, (8,), generator=gen)
        for model, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad(set_to_none=True)
            nnf.cross_entropy(model(x), y).backward()
        opt_a.step()
        assert train._fused_sgd_step(opt_b, params) is (i > 0)  # the first step makes the momentum buffers
        if i == 0:
            opt_b.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_non_finite_parameter_anywhere_is_found(bad: float, where: str) -> None:
    """`train.finite` (the per-epoch divergence check) reads each tensor's min and max: one bad
    element at either end of any tensor, or in between, must be seen; a finite model passes,
    whatever its magnitudes."""
    params = [torch.randn(50, 7), torch.randn(13), torch.empty(0), torch.randn(3, 3)]
    assert train.finite(params)
    assert train.finite([p * 1e37 for p in params])  # large but finite
    for i in (0, 1, 3):
        broken = [p.clone() for p in params]
        flat = broken[i].view(-1)
        flat[{"first": 0, "middle": len(flat) // 2, "last": -1}[where]] = bad
        assert not train.finite(broken), (i, where, bad)
