"""No training step waits for the host (issue 43): every method, under every protocol it declares,
makes 0 host synchronisations per update, apart from the syncs its class declares
(`declared_syncs`: where, how many per update, why; docs/performance.md lists them).

A tiny MLP on the 8x8 synthetic digits stream; `StepAudit` counts the syncs (cl/step_audit.py).
Task-free: the driver's per-sample code (`online.feed`: the new-class check, the method's
observe: its memory, its updates), plus the training a method does at an evaluation or at a task
boundary (GDumb's fresh model, RM's memory epochs), counted inside its steps. Task protocol:
every `train.Stepper` call of one task's `learn_task`."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from support.online_helpers import built, method_model, tiny_data
from torch import Tensor

from rmconsole.cl import train
from rmconsole.cl.learner import Task
from rmconsole.cl.methods import REGISTRY, Setup, method_class
from rmconsole.cl.online import feed
from rmconsole.cl.step_audit import Capturable, NotCapturable, StepAudit, graphable

# the default suite audits a few methods (the CI budget), the slow tests every one
FAST = {"task-free": {"er", "er_ace", "ewcpp", "clib"}, "task": {"bic", "icarl"}}


def methods_under(protocol: str) -> list[Any]:
    untrained = pytest.mark.skip(reason="knn trains nothing (a frozen backbone's features): no step to audit")
    return [
        name
        if name in FAST[protocol]
        else pytest.param(name, marks=[pytest.mark.slow, *([untrained] if name == "knn" else [])])
        for name, spec in REGISTRY.items()
        if spec.runs_under(protocol)
    ]


TASK_FREE = methods_under("task-free")
TASK = methods_under("task")


@contextlib.contextmanager
def counting_steps(audit: StepAudit, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Inside: the audit counts only inside `train.Stepper` calls; yields [steps so far]."""
    steps = [0]
    step = train.Stepper.__call__

    def counted(self: Any, *args: Any) -> Any:
        audit.active = True
        try:
            return step(self, *args)
        finally:
            audit.active = False
            steps[0] += 1

    with monkeypatch.context() as m:
        m.setattr(train.Stepper, "__call__", counted)
        audit.active = False
        with audit:
            yield steps
        audit.active = True


def allowed(method: Any, updates: int) -> dict[str, float]:
    return {d.where: d.per_update(method) * updates for d in type(method).declared_syncs}


def check(audit: StepAudit, method: Any, updates: int) -> None:
    assert updates > 0
    limits = allowed(method, updates)
    counts: dict[str, int] = {}
    for where, n in audit.where.items():
        key = where.rsplit(":", 1)[0]
        counts[key] = counts.get(key, 0) + n
    unexpected = {k: n for k, n in counts.items() if k not in limits}
    assert not unexpected, f"{method.name}: host syncs in its step over {updates} updates: {dict(audit.where)}"
    for key, n in counts.items():
        assert n <= math.ceil(limits[key]), (
            f"{method.name}: {key} {n} times in {updates} updates (declared {limits[key]})"
        )


def audited_stream(m: Any, proto: Any, warm: int, counted: int) -> tuple[StepAudit, int]:
    """Stream `warm` samples of the digits stream unaudited, then `counted` more under a
    StepAudit of the method: (the audit, the updates it saw)."""
    stream = torch.cat(proto.tasks)
    indices, labels = stream.tolist(), proto.train_labels[stream].tolist()
    for i, y in zip(indices[:warm], labels[:warm]):
        feed(m, i, y)
    audit = StepAudit().mark_method(m)
    before = m.online_steps
    with audit:
        for i, y in zip(indices[warm : warm + counted], labels[warm : warm + counted]):
            feed(m, i, y)
    return audit, m.online_steps - before


@pytest.mark.parametrize("name", TASK_FREE)
def test_task_free_updates_make_no_host_sync(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # RM's iblurry variant: the paper variant's steps are the same, its uncertainty scoring is slow
    extra = {"rm_variant": "iblurry"} if name == "rm" else {}
    extra.update(method_model(name))  # the prompt methods on the small ViT
    m, proto, _ = built(name, augment="cutmix", eval_period=1000, epochs=1, uncertainty_views=2, **extra)
    audit, updates = audited_stream(m, proto, warm=16, counted=16)  # warm: the memory fills, first allocations
    if updates:
        check(audit, m, updates)
    # training a method does at an evaluation or a task boundary (GDumb, RM), counted in its steps
    audit = StepAudit().mark_method(m)
    with counting_steps(audit, monkeypatch) as steps:
        m.online_before_eval()
        m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    if steps[0]:
        audit.mark_method(m)
        check(audit, m, steps[0])
    assert updates or steps[0], f"{name} trained nothing"


@pytest.mark.parametrize("name", TASK)
def test_task_protocol_steps_make_no_host_sync(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rmconsole.cl.loop import build_protocol
    from rmconsole.cl.resume import make_augmenter
    from rmconsole.config import load_config

    cfg = load_config(
        None,
        {
            "method": name,
            "epochs": 1,
            "memory_size": 20,
            "batch_size": 8,
            "n_tasks": 2,
            "augment": "cutmix",
            "uncertainty_views": 2,
        },
    )[1]
    data, cpu = tiny_data(per_class=12, test_per_class=2, n_classes=4), torch.device("cpu")
    torch.manual_seed(0)
    proto = build_protocol(cfg, data)
    setup = Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
    m = method_class(name)(setup)
    total = 0
    for t in range(len(proto.tasks)):  # the second task has old classes (distillation, penalties)
        task = Task(t, proto.tasks[t], len(proto.tasks))
        m.before_task(task)
        audit = StepAudit().mark_method(m)
        with counting_steps(audit, monkeypatch) as steps:
            m.learn_task(task)
        m.after_task(task)
        if steps[0]:
            check(audit, m, steps[0])
        total += steps[0]
    assert total, f"{name} took no step"


def test_the_audit_counts_a_sync_put_back_into_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests above bite: an `.item()` of the loss in every step is one sync per update."""
    step = train.Stepper.__call__

    def with_item(self: Any, *args: Any) -> Any:
        loss = step(self, *args)
        self.last_loss = loss.item()
        return loss

    monkeypatch.setattr(train.Stepper, "__call__", with_item)
    m, proto, _ = built("er", augment="cutmix", eval_period=1000)
    stream = torch.cat(proto.tasks)
    audit = StepAudit().mark_method(m)
    with audit:
        for i in stream[:24].tolist():
            feed(m, i, int(proto.train_labels[i]))
    assert m.online_steps and audit.where
    with pytest.raises(AssertionError, match="host syncs in its step"):
        check(audit, m, m.online_steps)
    assert audit.syncs["Tensor.item"] == m.online_steps


def test_the_audit_tells_device_data_from_host_values() -> None:
    device_value = torch.ones(3)
    audit = StepAudit().mark(device_value)
    with audit:
        host = torch.tensor([1, 2, 3])
        host.tolist(), int(host[0]), bool(host.sum() > 0)  # the host's own values: no sync
        derived = device_value * 2
        assert not audit.syncs
        derived.tolist()
        bool(derived[0])
        derived[derived > 1]
        derived.nonzero()
        float(derived.sum())
    assert audit.syncs == {"Tensor.tolist": 1, "Tensor.__bool__": 1, "index": 1, "nonzero": 1, "Tensor.__float__": 1}


def test_the_audit_counts_launches_on_device_data_and_the_hosts_arithmetic_apart() -> None:
    """A GPU launches a kernel for an operator on device data, and copies first a host tensor that
    meets device data; an operator on host tensors alone (a draw's arithmetic) is host work, no
    launch. On CPU the dispatcher sees "cpu" either way, so naming the training device
    (`device=`, `.to(device)`) is what makes a result the device's, and the copy a GPU makes is
    counted even where the CPU skips it (`.to("cpu")` returns its tensor)."""
    weight = torch.ones(4)
    audit = StepAudit().mark(weight)
    with audit:
        draw = torch.rand(4) * 2 + 1  # host: rand, mul, add
        named = torch.zeros(4, device="cpu") + 1  # the device's: zeros, add
        moved = torch.arange(4.0).to("cpu")  # host arange, then one copy to the device
        (weight * moved).sum()  # mul, sum on device data
        weight[torch.tensor([0, 2])]  # index on device data, its host index copied first
        with graphable():
            weight.mul(2)  # inside a graph's body: neither
    assert audit.host_ops == {"rand": 1, "mul": 1, "add": 1, "arange": 1}
    assert audit.outside_ops == {
        "zeros": 1,
        "add": 1,
        "_to_copy": 1,
        "mul": 1,
        "sum": 1,
        "index": 1,
        "_to_copy (a host operand)": 1,
    }
    assert audit.kernels_outside == 7 and audit.graphable_ops == 1
    assert audit.tags.has(named) and audit.tags.has(moved) and not audit.tags.has(draw)
    host = torch.ones(2)  # made outside (inside a region an allocation is the graph's)
    with audit, pytest.raises(NotCapturable, match="host to device"), Capturable(audit):
        host.to("cpu")


def test_the_audit_counts_nothing_on_the_meta_device() -> None:
    """A forward on the meta device (graphs.ModuleWork's count of a model's module calls: shapes,
    no arithmetic) launches nothing anywhere, even from the device's own tensors."""
    weight = torch.ones(4, 4)
    audit = StepAudit().mark(weight)
    with audit:
        shadow = torch.empty_like(weight, device="meta")
        (shadow @ torch.empty(4, 2, device="meta")).relu()
        weight.sum()  # a device launch beside them, counted
    assert audit.outside_ops == {"sum": 1} and not audit.host_ops and audit.n_dispatch_ops == 1


def test_a_capturable_region_refuses_syncs_copies_and_new_shapes() -> None:
    weight = torch.ones(4)
    audit = StepAudit().mark(weight)
    region = Capturable(audit)
    with audit:
        for _ in range(2):
            with region:
                weight.mul_(0.5).add_(torch.zeros(4))  # an allocation inside the region is the graph's
        assert region.entries == 2 and region.ops >= 4
        with pytest.raises(NotCapturable, match="changed"), region:
            weight[:2].mul_(0.5)
        with pytest.raises(NotCapturable, match="host sync"), Capturable(audit):
            float(weight.sum())
        host = torch.arange(4.0)
        with pytest.raises(NotCapturable, match="host tensor"), Capturable(audit):
            weight.add_(host)


def test_the_head_state_restarted_in_place_steps_as_a_dropped_one() -> None:
    """A new class restarts Adam's head state in place (a captured step keeps its tensors): the
    next update is the one a dropped state (the follow-up's new fc) gives, bit for bit."""
    pair = [built("er", eval_period=1000) for _ in range(2)]
    m, other = pair[0][0], pair[1][0]
    proto = pair[0][1]
    for learner in (m, other):
        torch.manual_seed(0)  # a new class's head row is drawn from the global generator
        for i in torch.cat(proto.tasks)[:24].tolist():
            feed(learner, i, int(proto.train_labels[i]))
    new = m.n_seen
    for learner, drop in ((m, False), (other, True)):
        torch.manual_seed(1)
        learner.online_new_class(new)
        if drop:
            for p in (learner.model.fc.weight, learner.model.fc.bias):
                del learner.optimizer.state[p]
        learner.model.train()
        x, y = torch.rand(6, 1, 8, 8), torch.tensor([0, 1, new, 0, 1, new])
        learner.optimizer.zero_grad()
        torch.nn.functional.cross_entropy(learner.model(x), y).backward()
        learner.optimizer.step()
    for a, b in zip(m.model.parameters(), other.model.parameters()):
        assert torch.equal(a, b)


def _graph_body_updates(m: Any, proto: Any, n: int, audit: StepAudit | None) -> list[torch.Tensor]:
    """n task-free ER updates through the captured step's body (`GraphedStep`: load, then the
    step a CUDA graph replays), a new class arriving half-way; under `audit` the body is a
    `Capturable` region. Returns the parameters after."""
    import contextlib

    from rmconsole.cl.graphs import GraphedStep, graph_ready_optimizer, set_lr

    assert m.optimizer is not None
    graph_ready_optimizer(m.optimizer)
    aug, (h, w) = m.setup.augmenter, m.setup.data.image_shape[-2:]
    step = GraphedStep(m.model, m.optimizer, m.seen, 8, m.setup.data.image_shape, False, contextlib.nullcontext)
    region = None
    if audit is not None:  # the step's static buffers and the tensor lr are the device's
        audit.mark(m.optimizer, *[v for v in vars(step).values() if isinstance(v, torch.Tensor)])
        region = Capturable(audit)
    stream = torch.cat(proto.tasks)[24:].tolist()
    m.model.train()
    for k in range(n):
        if k == n // 2:
            m.online_new_class(m.n_seen)  # the head's row and its Adam state restart in place
        batch = torch.tensor(stream[8 * k : 8 * k + 8])
        x, y = aug.train(m.images_of(batch)), m.labels_of(batch)
        set_lr(m.optimizer, m.step_lr())
        m.lr_steps += 1
        step.load(x, y, aug.draw_mix(8, h, w))
        with region if region is not None else contextlib.nullcontext():
            step._eager()
    return [p.detach().clone() for p in m.model.parameters()]


def test_a_task_free_update_is_capturable() -> None:
    """The body a CUDA graph replays for a task-free update (forward, CutMix as data, loss,
    backward, Adam with its lr and state on the device) runs on CPU under the checker: no host
    sync, no host<->device copy, the same operators on the same shapes from update to update,
    across a new class (the head restarted in place) and a changing learning rate."""
    m, proto, _ = built("er", augment="cutmix", eval_period=1000)
    for i in torch.cat(proto.tasks)[:24].tolist():
        feed(m, i, int(proto.train_labels[i]))
    audit = StepAudit().mark_method(m)
    with audit:
        _graph_body_updates(m, proto, 6, audit)
    assert not audit.syncs


def checked_calls(audit: StepAudit, m: Any, monkeypatch: pytest.MonkeyPatch) -> dict[int, Capturable]:
    """Every `graphs.CapturedCall` body run from now on (eagerly on CPU, as its replay) runs inside
    a `Capturable` region of its own (by call), with the device state it reads marked as the
    device's: the method's, the call's static inputs, the augmenter's normalisation and maps.
    Returns the regions, by id of their call."""
    from rmconsole.cl import graphs

    regions: dict[int, Capturable] = {}
    body = graphs.CapturedCall._eager
    aug = m.setup.augmenter

    def checked(call: graphs.CapturedCall) -> None:
        maps = [table.maps for table in aug._tables.values()]
        audit.mark_method(m).mark(call.inputs, aug.mean, aug.std, *maps)
        with regions.setdefault(id(call), Capturable(audit)):
            body(call)

    monkeypatch.setattr(graphs.CapturedCall, "_eager", checked)
    return regions


# kernel-launching operators on device data an MIR update leaves outside a graph on this stream
# (measured 16.5: the candidates' raw images and labels, the chosen's, the batch's assembly, the
# copies into the graphs' inputs, the draws' blocks; 36.5 when the host's arithmetic, the draws, was counted too)
MIR_OUTSIDE = 18


def test_mir_retrieval_is_capturable_and_leaves_little_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """MIR's retrieval (look-ahead forward/backward, virtual step, the candidates' two scoring
    forwards, argsort: `MIR.scores_order`) is a region of its own: (1) on CPU it is counted as a
    graph's body, so few kernels are left outside an update; (2) replayed through its graph
    (graphs.CapturedCall, run eagerly on CPU) every retrieval passes the checker: no sync, no
    host<->device copy, the same operators on the same shapes, across a new class and an lr that
    changes every step (exp_reset: an lr baked in as a host number would be caught)."""
    from rmconsole.cl import graphs

    m, proto, _ = built("mir", augment="cutmix", eval_period=1000, mir_candidates=6)
    audit, updates = audited_stream(m, proto, warm=12, counted=8)  # warm: the memory holds the candidates
    stream = torch.cat(proto.tasks)
    indices, labels = stream.tolist(), proto.train_labels[stream].tolist()
    outside = audit.kernels_outside / updates
    assert updates and not audit.syncs
    assert outside <= MIR_OUTSIDE, (outside, audit.outside_ops.most_common(8))

    graphs.graph_ready_optimizer(m.optimizer)  # as on a CUDA run: the steps and the retrieval graphed
    m.stepper.graphs = True
    audit = StepAudit().mark_method(m)
    regions = checked_calls(audit, m, monkeypatch)
    seen, before = m.n_seen, m.online_steps
    with audit:
        for i, y in zip(indices[28:44], labels[28:44]):
            feed(m, i, y)
    assert not audit.syncs, audit.where
    assert m.n_seen > seen, "no new class arrived"
    assert m.retrievals and all(g.graph is not None for g in m.retrievals.values())
    retrievals = [regions[id(g)] for g in m.retrievals.values() if id(g) in regions]
    assert sum(r.entries for r in retrievals) == m.online_steps - before > 0  # every update
    # the lr filled once an update: the retrieval reads the optimiser's, which step_on then leaves
    assert audit.outside_ops["fill_"] <= m.online_steps - before, audit.outside_ops["fill_"]
    assert max(r.entries for r in retrievals) >= 2, "no retrieval replayed twice"


def test_a_graphed_mir_retrieval_steps_virtually_at_the_updates_own_rate(monkeypatch: pytest.MonkeyPatch) -> None:
    """The graphed retrieval reads the lr from the optimiser's tensor, so `retrieve` must set it to
    this update's rate first: without that it would step virtually at the previous update's rate
    (exp_reset changes it every step), a different theta' whose choice is rarely different, so
    the weights alone do not show it."""
    from rmconsole.cl import graphs
    from rmconsole.cl.methods.mir import MIR

    m, proto, _ = built("mir", augment="cutmix", eval_period=1000, mir_candidates=6)
    stream = torch.cat(proto.tasks)
    indices, labels = stream.tolist(), proto.train_labels[stream].tolist()
    for i, y in zip(indices[:12], labels[:12]):
        feed(m, i, y)
    graphs.graph_ready_optimizer(m.optimizer)
    m.stepper.graphs = True
    asked: list[float] = []  # the update's rate, as retrieve begins
    used: list[float] = []  # the rate the virtual step took
    retrieve, scores_order = MIR.retrieve, MIR.scores_order

    def recorded_retrieve(self: Any, *args: Any) -> Tensor:
        asked.append(float(self.step_lr()))
        return retrieve(self, *args)

    def recorded_scores_order(
        self: Any, x_s: Tensor, y_s: Tensor, images_c: Tensor, y_c: Tensor, lr: Any, k: int
    ) -> Tensor:
        used.append(float(lr))
        return scores_order(self, x_s, y_s, images_c, y_c, lr, k)

    monkeypatch.setattr(MIR, "retrieve", recorded_retrieve)
    monkeypatch.setattr(MIR, "scores_order", recorded_scores_order)
    for i, y in zip(indices[12:28], labels[12:28]):
        feed(m, i, y)
    assert m.retrievals and len(used) == len(asked) >= 4
    assert len(set(asked)) > 1, "the rate did not change between updates: nothing to tell apart"
    assert used == pytest.approx(asked, rel=1e-6)


# kernel-launching operators on device data an ER update with AutoAugment + CutMix leaves outside
# its graphs on this stream (measured 4.6: the batch's images and labels, the copies into the
# graphs' inputs; 36.8 when the host's arithmetic was counted too; 82.8 before the augmentation
# was a graph of its own)
AUGMENTED_ER_OUTSIDE = 6


def test_the_augmentation_is_a_captured_region_and_leaves_little_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """An update's AutoAugment + crop/flip (`TaskFree.augmented`: the draw as data, `apply_static`)
    is a region of its own: (1) on CPU under an audit it takes the GPU's path, counted as a
    graph's body, so few kernels are left outside an update; (2) replayed through its graph
    (graphs.CapturedCall, run eagerly on CPU) every call passes the checker: no sync, no
    host<->device copy, the same operators on the same shapes, across a new class."""

    m, proto, _ = built("er", augment=["autoaug", "cutmix"], eval_period=1000)
    audit, updates = audited_stream(m, proto, warm=16, counted=16)
    outside = audit.kernels_outside / updates
    assert updates and not audit.syncs
    assert m.augment_graphs, "the audited updates did not take the captured augmentation"
    assert outside <= AUGMENTED_ER_OUTSIDE, (outside, audit.outside_ops.most_common(8))

    audit = StepAudit().mark_method(m)
    regions = checked_calls(audit, m, monkeypatch)
    stream = torch.cat(proto.tasks)
    indices, labels = stream.tolist(), proto.train_labels[stream].tolist()
    seen = m.n_seen
    with audit:
        for i, y in zip(indices[32:56], labels[32:56]):
            feed(m, i, y)
    assert not audit.syncs, audit.where
    assert m.n_seen > seen, "no new class arrived"
    augmentations = [regions[id(g)] for g in m.augment_graphs.values() if id(g) in regions]
    assert max(r.entries for r in augmentations) >= 2, "no augmentation replayed twice"


@pytest.mark.parametrize("name", ["mir", "clib"])
def test_the_graphs_path_trains_the_eager_paths_weights(name: str) -> None:
    """Under an audit a CPU run takes the GPU's path (the augmentation as data, replayed through
    its CapturedCalls; MIR's stream and chosen batches held at once under two roles; CLIB's
    iterations and importance pass): the weights after a stretch of the stream are the unaudited
    run's, bit for bit. A shared role, a static apply that differs from the grouped one, or a
    draw made twice would part them."""
    extra = {"mir_candidates": 6} if name == "mir" else {"memory_size": 12}
    weights = []
    for audited in (False, True):
        m, proto, _ = built(name, augment=["autoaug", "cutmix"], eval_period=1000, batch_size=8, **extra)
        stream = torch.cat(proto.tasks)
        with StepAudit().mark_method(m) if audited else contextlib.nullcontext():
            for i, y in zip(stream[:40].tolist(), proto.train_labels[stream[:40]].tolist()):
                feed(m, i, y)
        assert bool(m.augment_graphs) is audited
        weights.append([p.detach().clone() for p in m.model.parameters()])
    for a, b in zip(*weights, strict=True):
        assert torch.equal(a, b)


def test_clib_importance_pass_is_capturable_and_counted_inside(monkeypatch: pytest.MonkeyPatch) -> None:
    """CLIB's importance pass over a full memory (`chunk_losses`: normalise, eval forward, the
    per-sample loss) is a region of its own: on CPU its kernels are counted as a graph's body, and
    replayed through its graph (graphs.CapturedCall, run eagerly on CPU) every pass passes the
    checker (no sync, no copy, the same operators on the same shapes) across a new class; its one
    read of the losses stays outside, the sync CLIB declares."""
    from rmconsole.cl import graphs

    m, proto, _ = built("clib", augment="cutmix", eval_period=1000, memory_size=12)
    stream = torch.cat(proto.tasks)
    indices, labels = stream.tolist(), proto.train_labels[stream].tolist()
    for i, y in zip(indices[:16], labels[:16]):
        feed(m, i, y)
    assert m.online_memory.full
    audit = StepAudit().mark_method(m)
    passes, inside = [0], [0]  # the passes, and the kernel ops counted as graph bodies within them
    losses = type(m).chunk_losses

    def counted(self: Any, raw: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        start = audit.graphable_ops
        out = losses(self, raw, y)
        passes[0] += 1
        inside[0] += audit.graphable_ops - start
        return out

    monkeypatch.setattr(type(m), "chunk_losses", counted)
    before = m.update_counter
    with audit:
        for i, y in zip(indices[16:24], labels[16:24]):
            feed(m, i, y)
    assert passes[0] >= 8
    assert inside[0] >= passes[0] * 3, (inside, passes)  # each pass's forward counted as a graph's body
    check(audit, m, m.update_counter - before)

    graphs.graph_ready_optimizer(m.optimizer)  # as on a CUDA run: the steps and the pass graphed
    m.stepper.graphs = True
    audit = StepAudit().mark_method(m)
    regions = checked_calls(audit, m, monkeypatch)
    seen = m.n_seen
    with audit:
        for i, y in zip(indices[24:48], labels[24:48]):
            feed(m, i, y)
    assert m.n_seen > seen, "no new class arrived"
    assert m.importance_graphs and all(g.graph is not None for g in m.importance_graphs.values())
    assert max(regions[id(g)].entries for g in m.importance_graphs.values()) >= 2, "no pass replayed twice"


@pytest.mark.parametrize("name", ["er", "clib", "mir", "rm", "gdumb"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graphed_task_free_updates_give_the_eager_weights(name: str) -> None:
    """On CUDA a task-free method's default updates are replayed as CUDA graphs (cuda_graphs):
    the weights after a stretch of the stream are the eager run's (Adam's tensor-lr kernel may
    round apart in the last bits: a tolerance)."""
    from support.online_helpers import config

    from rmconsole.cl.loop import make_augmenter
    from rmconsole.cl.online import build_online_protocol

    data, cuda = tiny_data().to("cuda"), torch.device("cuda")
    weights = []
    for graphs in (True, False):
        extra = {"mir_candidates": 8} if name == "mir" else {}  # the memory holds them: its retrieval graphed
        cfg = config(
            method=name, augment="cutmix", eval_period=1000, epochs=2, cuda_graphs=graphs, device="cuda", **extra
        )
        torch.manual_seed(cfg.seed)
        proto = build_online_protocol(cfg, data)
        setup = Setup(
            cfg,
            data,
            proto.train_labels.to(cuda),
            proto.test_labels.to(cuda),
            proto.groups,
            cuda,
            make_augmenter(cfg, data, cuda),
        )
        m = method_class(name)(setup)
        m.online_start()
        assert m.uses_graphs is graphs
        stream = torch.cat(proto.tasks)
        for i, y in zip(stream[:120].tolist(), proto.train_labels[stream[:120]].tolist()):
            feed(m, i, y)
        m.online_before_eval()
        if graphs and name not in ("gdumb",):
            assert m.graphs and any(g.graph is not None for g in m.graphs.values()), "no update was graphed"
        if graphs:  # the updates' crop + flip a graph of its own (`TaskFree.augmented`), every capture made
            assert m.augment_graphs and all(g.graph is not None and not g.failed for g in m.augment_graphs.values())
        if graphs and name == "clib":  # its importance pass over the full memory a graph of its own
            assert m.importance_graphs and all(
                g.graph is not None and not g.failed for g in m.importance_graphs.values()
            )
        if graphs and name == "mir":  # its retrieval a graph of its own, every capture made
            assert m.retrievals and all(g.graph is not None and not g.failed for g in m.retrievals.values())
        weights.append([p.detach().float().cpu() for p in m.model.parameters()])
    for a, b in zip(*weights):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)
