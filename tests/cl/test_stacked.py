"""Seeds stacked in one process (cl/stacked.py): N runs' graphed steps taken as one give each
run what its own step gives, and the runs' decisions stay their own.

On a CPU the stacked step's body runs as a replay would (EagerGraph); its arithmetic is the
N graphed steps' up to summation order: an MLP within 1e-5 in float32; in float64 a ResNet18
with batch norm agrees to 1e-9 (float32 ResNet gradients agree to a few 1e-6 relative, and
training amplifies that, as any change of kernel would)."""

from __future__ import annotations

import contextlib
import random
import threading

import pytest
import torch

from rmconsole.cl.augment import draw_cutmix
from rmconsole.cl.graphs import GraphedStep, graph_ready_optimizer, set_lr
from rmconsole.cl.models import build_model
from rmconsole.cl.stacked import StackedModels, StackedStep, run_stacked


class _Run:
    """What StackedModels reads of a method: its model, optimiser and seen classes."""

    def __init__(self, model, optimizer, seen):
        self.model, self.optimizer, self.seen = model, optimizer, seen


def _sgd(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4, fused=True)
    return graph_ready_optimizer(opt)


def _no_autocast():
    return contextlib.nullcontext()


def _runs(model_name, shape, n):
    torch.manual_seed(0)
    alone = [build_model(model_name, shape, 10) for _ in range(n)]
    stacked = [build_model(model_name, shape, 10) for _ in range(n)]
    for a, s in zip(alone, stacked):
        s.load_state_dict(a.state_dict())
    seens = [torch.tensor([True] * (4 + i) + [False] * (6 - i)) for i in range(n)]
    return alone, stacked, seens


def _max_gap(alone, stacked):
    return max(
        (p - q).abs().max().item()
        for a, s in zip(alone, stacked)
        for p, q in zip(a.state_dict().values(), s.state_dict().values())
        if p.is_floating_point()
    )


@pytest.mark.parametrize(
    "model_name,shape,dtype,tol,n,calls",  # float64 convolutions are slow on CPU: fewer runs and calls
    [("mlp400", (1, 8, 8), torch.float32, 1e-5, 3, 4), ("resnet18", (3, 8, 8), torch.float64, 1e-9, 2, 2)],
)
def test_a_stacked_step_gives_every_run_its_own_steps_weights(model_name, shape, dtype, tol, n, calls) -> None:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        b, k = 8, 2
        alone, stacked, seens = _runs(model_name, shape, n)
        steps = [GraphedStep(m, _sgd(m), s, b, shape, False, _no_autocast, steps=k) for m, s in zip(alone, seens)]
        models = StackedModels([_Run(m, _sgd(m), s) for m, s in zip(stacked, seens)])
        step = StackedStep(models, seens[0], b, k, shape, _no_autocast, torch.zeros(n))
        rng, gen, data = random.Random(3), torch.Generator().manual_seed(3), torch.Generator().manual_seed(5)
        mixed = 0
        for i in range(calls):
            xs = [torch.randn(k * b, *shape, generator=data) for _ in range(n)]
            ys = [torch.randint(0, 4, (k * b,), generator=data) for _ in range(n)]
            draws = [
                [draw_cutmix(b, shape[-2], shape[-1], rng, gen) if (i + r + j) % 2 else None for j in range(k)]
                for r in range(n)
            ]
            mixed += sum(d is not None and d.x2 > d.x1 and d.y2 > d.y1 for run in draws for d in run)
            for r in range(n):
                set_lr(steps[r].optimizer, 0.05 / (1 + i))
                steps[r].load(xs[r], ys[r], draws[r])
                steps[r]._eager()
            set_lr(models.optimizers[0], 0.05 / (1 + i))  # run 0's rate is the stack's (one schedule)
            step.load(xs, ys, seens, draws)
            step._eager()
        assert mixed >= 2
        gap = _max_gap(alone, stacked)
        assert gap <= tol, gap
        assert step.work and len(step.work.norms) == {"mlp400": 2, "resnet18": 20}[model_name]
        for a, s in zip(alone, stacked):  # the norms' counters (one add for all in each), each run's own
            counters = [
                (p, q) for p, q in zip(a.state_dict().values(), s.state_dict().values()) if not p.is_floating_point()
            ]
            assert all(torch.equal(p, q) and int(p) == 2 * calls for p, q in counters), counters
        moved = max(
            (p - q).abs().max().item()
            for p, q in zip(alone[0].state_dict().values(), _runs(model_name, shape, n)[0][0].state_dict().values())
            if p.is_floating_point()
        )
        assert moved > 1e3 * max(tol, 1e-9)  # the steps really trained
        assert torch.allclose(
            step.loss_sum, torch.stack([s.loss_sum for s in steps]).to(step.loss_sum.dtype), atol=1e-5
        )
    finally:
        torch.set_default_dtype(previous)


def test_each_runs_tensors_are_its_row_of_the_stack() -> None:
    """A run's own model and optimiser see the stacked updates (its evaluation, eager steps and
    checkpoint read the stack), and its momentum buffers are the stack's rows."""
    _, stacked, seens = _runs("mlp400", (1, 8, 8), 2)
    runs = [_Run(m, _sgd(m), s) for m, s in zip(stacked, seens)]
    models = StackedModels(runs)
    step = StackedStep(models, seens[0], 4, 1, (1, 8, 8), _no_autocast, torch.zeros(2))
    before = [m.fc.weight.clone() for m in stacked]
    step.load([torch.randn(4, 1, 8, 8) for _ in range(2)], [torch.tensor([0, 1, 2, 3])] * 2, seens, [[None], [None]])
    step._eager()
    for i, m in enumerate(stacked):
        assert not torch.equal(m.fc.weight, before[i])
        assert m.fc.weight.data_ptr() == models.params["fc.weight"][i].data_ptr()
        buf = runs[i].optimizer.state[m.fc.weight]["momentum_buffer"]
        assert buf.data_ptr() == models.optimizer.state[models.params["fc.weight"]]["momentum_buffer"][i].data_ptr()


# ----------------------------------------------------------------------------- RM's memory epochs


def _rm(seed: int, memory: int):
    """An RM run of the MNIST shape (synthetic images, the MLP) on the graphed path (a CPU
    replays the graph's body: EagerGraph), its memory filled, its task begun."""
    from rmconsole.cl.data import Dataset, TensorImages
    from rmconsole.cl.events import Reporter
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup, Task, method_class
    from rmconsole.config import build_config

    cfg = build_config(
        {
            "dataset": "mnist",
            "model": "mlp400",
            "method": "rm",
            "memory_size": memory,
            "epochs": 2,
            "seed": seed,
            "augment": ["cutmix"],
            "batch_size": 16,
            "lr": 0.05,
            "schedule": "cosine",
            "device": "cpu",
        }
    )
    gen = torch.Generator().manual_seed(0)

    def split(k):
        return TensorImages(
            torch.randint(0, 256, (k, 1, 28, 28), dtype=torch.uint8, generator=gen), torch.arange(k) % 10
        )

    data = Dataset("mnist", split(200), split(50), [f"c{i}" for i in range(10)], (0.1307,), (0.3081,), crop_padding=4)
    protocol = build_protocol(cfg, data)
    setup = Setup(
        cfg,
        data,
        protocol.train_labels,
        protocol.test_labels,
        protocol.groups,
        torch.device("cpu"),
        make_augmenter(cfg, data, torch.device("cpu")),
        Reporter(),
    )
    cls = method_class("rm")
    graphed = type(cls.__name__, (cls,), {"uses_graphs": property(lambda self: True)})
    torch.manual_seed(seed)  # the model's initialisation (the loop seeds it so)
    rm = graphed(setup)
    kept = torch.randperm(200, generator=torch.Generator().manual_seed(seed))[:memory]
    rm.memory.replace(kept, protocol.train_labels[kept])
    rm.seen[:] = True
    task = Task(0, kept, 5)
    rm.before_task(task)
    return rm, task


def _memory_epochs(run) -> None:
    rm, task = run
    rm.fit(rm.cfg.epochs, lambda e: rm.shuffled_batches(rm.memory.indices, rm.memory_batch_size), "memory", task)


def _state(run):
    rm, _ = run
    return rm.model.state_dict(), rm.setup.augmenter


@pytest.mark.parametrize("memories", [(40, 40, 40), (40, 40, 20)])
def test_stacked_seeds_train_rms_memory_as_each_seed_alone(memories) -> None:
    """Three seeds' memory epochs, each in its thread, steps stacked: every seed ends with the
    weights it reaches alone (1e-5), having drawn the same augmentation (its generators end in
    the same state). Memories of different sizes take their steps apart, with the same result."""
    alone = [_rm(seed, k) for seed, k in zip((1, 2, 3), memories)]
    for run in alone:
        _memory_epochs(run)
    together = [_rm(seed, k) for seed, k in zip((1, 2, 3), memories)]
    stack = run_stacked([rm for rm, _ in together], lambda rm: _memory_epochs(next(r for r in together if r[0] is rm)))
    for a, t in zip(alone, together):
        (wa, aug_a), (wt, aug_t) = _state(a), _state(t)
        gap = max((wa[k] - wt[k]).abs().max().item() for k in wa if wa[k].is_floating_point())
        assert gap <= 1e-5, gap
        assert aug_a.rng.getstate() == aug_t.rng.getstate()
        assert torch.equal(aug_a.gen.get_state(), aug_t.gen.get_state())
    if len(set(memories)) == 1:
        assert stack.counts.stacked >= 2 * 40 // 8 // 8 and stack.counts.apart == 0, stack.counts
    else:
        why = stack.counts.why_apart
        assert stack.counts.stacked > 0 and {"steps of different shapes", "learning rates differ"} <= set(why), (
            stack.counts
        )


def test_a_failing_seed_stops_without_leaving_the_others_waiting() -> None:
    runs = [_rm(seed, 40) for seed in (1, 2)]

    def work(rm):
        if rm is runs[1][0]:
            raise RuntimeError("seed 2 broke")
        _memory_epochs(runs[0])

    raised: list[BaseException] = []

    def stacked() -> None:
        try:
            run_stacked([r for r, _ in runs], work)
        except RuntimeError as err:
            raised.append(err)

    thread = threading.Thread(target=stacked)
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and "seed 2 broke" in str(raised[0])
    assert runs[0][0].seed_stack is None  # seated no more


def test_a_stack_seats_its_runs_again_for_their_next_task() -> None:
    """One SeedStack over two calls with a new optimiser between them (a run's next task): each
    run keeps its row, the models are stacked anew, and every seed ends as it does alone."""
    from rmconsole.cl.stacked import SeedStack

    def two_tasks(run) -> None:
        _memory_epochs(run)
        run[0].optimizer = run[0].make_optimizer()
        _memory_epochs(run)

    alone = [_rm(seed, 40) for seed in (1, 2)]
    for run in alone:
        two_tasks(run)
    runs = [_rm(seed, 40) for seed in (1, 2)]
    stack = SeedStack()
    for call in range(2):
        run_stacked([r for r, _ in runs], lambda rm: _memory_epochs(next(r for r in runs if r[0] is rm)), stack)
        if call == 0:
            for rm, _ in runs:
                rm.optimizer = rm.make_optimizer()
    assert len(stack.methods) == 2 and stack.counts.stacked == 2 * 2 * 5 and stack.counts.apart == 0, stack.counts
    for a, t in zip(alone, runs):
        wa, wt = a[0].model.state_dict(), t[0].model.state_dict()
        gap = max((wa[k] - wt[k]).abs().max().item() for k in wa if wa[k].is_floating_point())
        assert gap <= 1e-5, gap


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize(
    "model_name,shape,tol",  # float32 ResNet18 on CPU drifted 8e-4 in 2 steps from kernel choice alone
    [("mlp400", (1, 28, 28), 1e-4), ("resnet18", (3, 32, 32), 2e-2)],
)
def test_a_stacked_step_is_captured_on_cuda_and_gives_each_runs_weights(model_name, shape, tol) -> None:
    """On CUDA the stacked step is captured as a graph (not left eager after a failed capture)
    and its replays give every run the weights its own captured steps give (float32; cuDNN and
    cuBLAS may choose other kernels for the stacked shapes)."""
    cuda = torch.device("cuda")
    n, b, k = 4, 8, 2
    alone, stacked, seens = _runs(model_name, shape, n)
    alone, stacked = [m.to(cuda) for m in alone], [m.to(cuda) for m in stacked]
    seens = [s.to(cuda) for s in seens]
    logs: list[str] = []
    steps = [GraphedStep(m, _sgd(m), s, b, shape, False, _no_autocast, logs.append, k) for m, s in zip(alone, seens)]
    models = StackedModels([_Run(m, _sgd(m), s) for m, s in zip(stacked, seens)])
    step = StackedStep(models, seens[0], b, k, shape, _no_autocast, torch.zeros(n, device=cuda), logs.append)
    rng, gen, data = random.Random(3), torch.Generator().manual_seed(3), torch.Generator().manual_seed(5)
    for i in range(6):  # two warm-up calls, the capture, three replays
        xs = [torch.randn(k * b, *shape, generator=data).to(cuda) for _ in range(n)]
        ys = [torch.randint(0, 4, (k * b,), generator=data).to(cuda) for _ in range(n)]
        draws = [
            [draw_cutmix(b, shape[-2], shape[-1], rng, gen) if (i + r + j) % 2 else None for j in range(k)]
            for r in range(n)
        ]
        for r in range(n):
            set_lr(steps[r].optimizer, 0.05 / (1 + i))
            steps[r](xs[r], ys[r], draws[r])
        set_lr(models.optimizers[0], 0.05 / (1 + i))
        step(xs, ys, seens, draws)
    torch.cuda.synchronize()
    assert isinstance(step.graph, torch.cuda.CUDAGraph) and not step.failed and not logs, logs
    gap = _max_gap(alone, stacked)
    assert gap <= tol, gap
