"""Methods with their own step, captured as CUDA graphs (issue 43; `Method.capturable_step`,
graphs.MethodStep): the step's host side runs first (`step_key`: CutMix drawn, per-step host
decisions into device tensors), then its body (the method's loss, backward, the optimiser, its
`after_step`) is what a graph replays.

On CPU: the body, as the graph replays it, runs under `step_audit.Capturable` (no host sync, no
host<->device copy, the same operators on the same shapes from update to update, per key), across
a new class and a task boundary; and the kernel-launching operators an update leaves outside the
graphed body stay pinned. On CUDA (`gpu`): graphed and eager updates give the same weights.
A tiny MLP on the 8x8 digits stream, CutMix on."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from support.online_helpers import built, tiny_data

from rmconsole.cl import graphs
from rmconsole.cl.learner import Task
from rmconsole.cl.online import feed
from rmconsole.cl.step_audit import Capturable, NotCapturable, StepAudit

CAPTURED = ["er_ace", "bic", "bic_star", "ewcpp", "scr", "pcr", "gsa", "ocm", "onpro"]
# kernel-launching operators on device data outside the graphed body, per update, on this stream
# (step_audit: the host's own arithmetic, a draw, is not a launch). Measured 2026-11-28: er_ace 1.9,
# bic 3.2, bic_star 1.8, ewcpp 1.9, scr 1.7, pcr 1.7, gsa 1.9 (the batch's gather, the copies into
# the graphs' inputs), ocm 14.2, onpro 16.7 (their two-view batches assembled outside); 13-42 when
# the host's arithmetic was counted as launches too
OUTSIDE = {
    "er_ace": 3,
    "bic": 4,
    "bic_star": 3,
    "ewcpp": 3,
    "scr": 3,
    "pcr": 3,
    "gsa": 3,
    "ocm": 16,
    "onpro": 19,
}


def _stream(m: Any, proto: Any, lo: int, hi: int) -> None:
    """Stream samples lo..hi (their labels are the host's: the driver knows them)."""
    stream = torch.cat(proto.tasks)
    labels = getattr(proto, "host_labels", None) or proto.train_labels[stream].tolist()
    proto.host_labels = labels
    for i, y in zip(stream[lo:hi].tolist(), labels[lo:hi]):
        feed(m, i, y)


def _second_task(m: Any, proto: Any) -> None:
    """A task boundary: EWC++'s snapshot (its penalty from here on), BiC's distillation."""
    m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    m.online_task_start(Task(1, proto.tasks[1], len(proto.tasks)))


# the default suite checks one method (the CI budget: about 5 s), the slow tests every one
FAST = {"ewcpp"}  # CutMix as data, a penalty after the boundary, the Fisher update in after_step
METHODS = [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in CAPTURED]


@pytest.mark.parametrize("name", METHODS)
def test_a_captured_method_step_is_capturable_and_leaves_little_outside(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(1) The benchmark's "kernel ops outside" of the method's CPU updates on the digits stream,
    pinned (the eager step runs inside `step_audit.graphable`: the body a GPU replays); (2) every
    update through its captured step's body (graphs.MethodStep, replayed eagerly on CPU), each
    body under the checker of its graph (one per key), across a task boundary."""
    extra = {"gsa_warmup_steps": 2} if name == "gsa" else {}  # both sides of the warm-up
    m, proto, _ = built(name, augment="cutmix", eval_period=1000, **extra)
    assert m.captured_step and not m.plain_step
    _stream(m, proto, 0, 16)
    _second_task(m, proto)
    audit = StepAudit().mark_method(m)
    before = m.online_steps
    with audit:
        _stream(m, proto, 16, 32)
    updates = m.online_steps - before
    outside = audit.kernels_outside / updates
    assert updates and audit.graphable_ops and not audit.syncs
    assert outside <= OUTSIDE[name], (outside, audit.outside_ops.most_common(8))
    assert 3 * outside <= audit.graphable_ops / updates + outside, "not a third of the update's kernels"

    graphs.graph_ready_optimizer(m.optimizer)  # the lr a device tensor, Adam capturable
    m.stepper.capture = True  # as on a CUDA run: the Stepper replays MethodSteps
    audit = StepAudit().mark_method(m)
    regions: dict[int, Capturable] = {}
    watched: list[graphs.MethodStep] = []
    body = graphs.MethodStep._eager

    def checked(step: graphs.MethodStep) -> None:
        audit.mark_method(m).mark(*[v for v in vars(step).values() if isinstance(v, torch.Tensor)])
        if step.work is None:  # its first body, watched (ModuleWork): on CUDA a warm-up, never captured
            watched.append(step)
            body(step)
            return
        audit.mark(*step.work.copies)  # (made on the device, as the weights)
        with regions.setdefault(id(step), Capturable(audit)):
            body(step)

    monkeypatch.setattr(graphs.MethodStep, "_eager", checked)
    before = m.online_steps
    with audit:
        _stream(m, proto, 32, 48)
    assert not audit.syncs, audit.where
    assert m.graphs and all(isinstance(g, graphs.MethodStep) for g in m.graphs.values())
    assert sum(r.entries for r in regions.values()) + len(watched) == m.online_steps - before > 0  # every update
    assert all(step.work is not None for step in m.graphs.values())
    assert max(r.entries for r in regions.values()) >= 2, "no graph replayed twice"


def _run(name: str, captured: bool, take_over: bool = True, **over: Any) -> tuple[Any, list[Any]]:
    """40 updates of the method across a task boundary, CutMix on, on the captured path (its
    MethodSteps' bodies, replayed eagerly on CPU) or the eager one, the learning rates device
    tensors either way: (the method, its steps' ModuleWorks)."""
    extra = {"gsa_warmup_steps": 2} if name == "gsa" else {}
    graphs.MethodStep.take_over_module_work = take_over
    try:
        m, proto, _ = built(name, eval_period=1000, **{"augment": "cutmix", **extra, **over})
        graphs.graph_ready_optimizer(m.optimizer)
        m.stepper.capture = captured
        _stream(m, proto, 0, 16)
        _second_task(m, proto)
        graphs.graph_ready_optimizer(m.optimizer)
        _stream(m, proto, 16, 40)
    finally:
        graphs.MethodStep.take_over_module_work = True
    return m, [g.work for g in m.graphs.values() if isinstance(g, graphs.MethodStep)]


def _same_state(a: Any, b: Any) -> None:
    assert a.online_steps == b.online_steps > 0
    for (key, x), y in zip(a.model.state_dict().items(), b.model.state_dict().values(), strict=True):
        assert torch.equal(x, y), key


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("augment", ["cutmix", "none"])
def test_the_captured_path_trains_the_eager_paths_weights(name: str, augment: str) -> None:
    """The method's own step as its graph runs it (graphs.MethodStep: the batch and its CutMix
    draw as data, the box a mask) gives the eager step's weights and buffers, bit for bit."""
    eager, _ = _run(name, captured=False, augment=augment)
    captured, _ = _run(name, captured=True, augment=augment)
    assert not eager.graphs and captured.graphs
    _same_state(eager, captured)


@pytest.mark.parametrize("name", METHODS)
def test_a_method_steps_module_work_gives_the_autocast_steps_weights(name: str) -> None:
    """Under bf16 each captured method's own step does autocast's weight casts and its norms'
    counters a launch for all (graphs.ModuleWork, decided on the step's watched first call):
    its weights and buffers after 40 updates across a task boundary are those of the steps left
    to autocast, bit for bit (EWC++'s penalty reads every weight beside its module's call)."""
    plain, _ = _run(name, captured=True, take_over=False, amp="bf16")
    taken, works = _run(name, captured=True, take_over=True, amp="bf16")
    assert works and all(w is not None and w.weights for w in works)
    _same_state(plain, taken)


@pytest.mark.parametrize("name", CAPTURED)
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graphed_method_steps_give_the_eager_weights(name: str) -> None:
    """On CUDA the method's own updates are replayed as CUDA graphs: the weights after a stretch
    of the stream across a task boundary are the eager run's (Adam's tensor-lr kernel may round
    apart in the last bits: a tolerance)."""
    from support.online_helpers import config

    from rmconsole.cl.loop import make_augmenter
    from rmconsole.cl.methods import Setup, method_class
    from rmconsole.cl.online import build_online_protocol

    data, cuda = tiny_data().to("cuda"), torch.device("cuda")
    weights = []
    for graphed in (True, False):
        cfg = config(method=name, augment="cutmix", eval_period=1000, cuda_graphs=graphed, device="cuda")
        torch.manual_seed(cfg.seed)
        proto = build_online_protocol(cfg, data)
        labels = (proto.train_labels.to(cuda), proto.test_labels.to(cuda))
        setup = Setup(cfg, data, *labels, proto.groups, cuda, make_augmenter(cfg, data, cuda))
        m = method_class(name)(setup)
        m.online_start()
        assert m.uses_graphs is graphed
        _stream(m, proto, 0, 60)
        _second_task(m, proto)
        _stream(m, proto, 60, 140)
        if graphed:  # every graph captured: a failed capture trains eagerly, as fast as no graph
            assert m.graphs and all(g.graph is not None and not g.failed for g in m.graphs.values()), [
                (k, g.failed) for k, g in m.graphs.items()
            ]
        weights.append([p.detach().float().cpu() for p in m.model.parameters()])
    for a, b in zip(*weights):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)


def test_a_capturable_region_refuses_a_tensor_made_from_host_values() -> None:
    """A mask built on the host inside the step (`torch.tensor(list)`) would be frozen at capture:
    refused. So is a literal written by indexing (`mask[i] = True`): on CUDA index_put_ copies
    the host scalar to the device, which a capture refuses (ER-ACE's step fell back to eager on
    the H100 and H200 this way); index_fill_ writes the same mask in a kernel and passes."""
    seen = torch.zeros(4, dtype=torch.bool)
    labels = torch.tensor([1, 2])
    audit = StepAudit().mark(seen, labels)
    with audit:
        with Capturable(audit):
            seen.logical_or_(torch.zeros(4, dtype=torch.bool).index_fill_(0, labels, True))
        with pytest.raises(NotCapturable, match="host values"), Capturable(audit):
            seen.logical_or_(torch.tensor([True, False, False, True]))
        with pytest.raises(NotCapturable, match="indexed assignment of a Python scalar"), Capturable(audit):
            present = torch.zeros(4, dtype=torch.bool)
            present[labels] = True
    assert seen.tolist() == [False, True, True, False]


def test_a_step_is_made_anew_when_its_optimiser_or_seen_mask_is_replaced() -> None:
    """`train.graphed_step` and `train.method_step` keep a step per batch size (and key) and make
    it anew when the method's optimiser (a new task's), model or seen-classes mask is not the one
    it was made with: a graph replaying a dropped optimiser would train nothing the run keeps."""
    from rmconsole.cl import train

    for name, make in (("er", lambda m: train.graphed_step(m, 8)), ("er_ace", lambda m: train.method_step(m, 8, ()))):
        m, _, _ = built(name)
        first = make(m)
        assert make(m) is first and graphs.made_for(first, m)
        m.optimizer = m.make_optimizer()
        second = make(m)
        assert second is not first and graphs.made_for(second, m) and not graphs.made_for(first, m)
        m.seen = m.seen.clone()
        assert make(m) is not second


def test_a_taskwise_run_of_a_captured_step_reports_the_eager_runs_epoch_losses(monkeypatch: pytest.MonkeyPatch) -> None:
    """BiC's own step is captured under the task-wise protocol too, where each epoch's loss is
    read from what its graphs add up (`MethodStep.loss_sum`, one read an epoch): the captured
    path reports the eager path's epoch losses (float32 sums in another order) and its
    accuracies."""
    from rmconsole.cl import train
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.events import Reporter
    from rmconsole.cl.loop import run_protocol
    from rmconsole.config import load_config

    class Epochs(Reporter):
        def __init__(self) -> None:
            self.losses: list[float | None] = []
            self.outcomes: list[Any] = []

        def epoch_finished(self, stats: Any) -> None:
            self.losses.append(stats.loss)

        def task_finished(self, outcome: Any, checkpoint: Any) -> None:
            self.outcomes.append((outcome.accuracy, outcome.accuracy_row, outcome.class_accuracy))

    plain_init = train.Stepper.__init__

    def captured_init(self: Any, method: Any) -> None:
        plain_init(self, method)
        self.capture = self.captured  # as on a CUDA run: the method's own steps are MethodSteps

    _, cfg = load_config(None, {"method": "bic", "epochs": 2, "memory_size": 40, "uncertainty_views": 2, "n_tasks": 2})
    runs = []
    for captured in (False, True):
        if captured:
            monkeypatch.setattr(train.Stepper, "__init__", captured_init)
        epochs = Epochs()
        run_protocol(cfg, load_digits(), torch.device("cpu"), epochs)
        runs.append(epochs)
    eager, graphed = runs
    assert eager.losses and len(eager.losses) == len(graphed.losses)
    assert graphed.losses == pytest.approx(eager.losses, rel=1e-5)
    assert len(eager.outcomes) == 2 and graphed.outcomes == eager.outcomes
