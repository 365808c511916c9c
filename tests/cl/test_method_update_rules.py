"""Pins of the methods' science (cl/methods/*, cl/methods/quadratic.py) at values where a wrong
rule shows: momentum != 0, EWC++'s alpha != 0.5 (issue 29; tools/mutation.py). Pure, on tiny
tensors: no training."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rmconsole.cl.methods import ewcpp as ewcpp_module
from rmconsole.cl.methods.ewc_params import EWCParams
from rmconsole.cl.methods.ewcpp import EWCpp
from rmconsole.cl.methods.ewcpp_params import EWCppParams
from rmconsole.cl.methods.quadratic import QuadraticPenalty, Regularised


def regularised(momentum: float, lr: float = 0.1, scale: float = 2.0, proximal: bool = True) -> Any:
    """A bare Regularised (EWC's and Rwalk's mixin) over one 4-vector parameter, its penalty
    active with weights w and centres c."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 3.0]))
    r: Any = Regularised.__new__(Regularised)
    r.params = EWCParams()
    r.default_reg_weight = 100.0
    r.quadratic = QuadraticPenalty([p], proximal=proximal)
    r.quadratic.weights[0].copy_(torch.tensor([0.5, 1.0, 2.0, 0.0]))
    r.quadratic.centres[0].copy_(torch.tensor([0.0, 1.0, -1.0, 5.0]))
    r.quadratic.scale = scale
    r.quadratic.active = True
    r.optimizer = torch.optim.SGD([p], lr=lr, momentum=momentum)
    r.p = p
    return r


def test_proximal_ewc_step_uses_lr_over_one_minus_momentum() -> None:
    """(issue 29 c) The proximal step's size is t = lr / (1 - momentum): with lr 0.1 and momentum
    0.9, t = 1, theta <- (theta + 2 t s w c) / (1 + 2 t s w), exactly."""
    r = regularised(momentum=0.9)
    theta = r.p.detach().clone()
    w, c, s = r.quadratic.weights[0], r.quadratic.centres[0], 2.0
    r.penalty_step()
    t = 0.1 / (1 - 0.9)
    expected = (theta + 2 * t * s * w * c) / (1 + 2 * t * s * w)
    assert torch.allclose(r.p.detach(), expected, atol=1e-6)
    wrong = (theta + 2 * 0.1 * s * w * c) / (1 + 2 * 0.1 * s * w)  # t = lr, momentum ignored
    assert not torch.allclose(r.p.detach(), wrong, atol=1e-3)
    assert r.p[3].item() == 3.0  # w = 0: untouched


def test_proximal_step_without_momentum_and_when_off() -> None:
    r = regularised(momentum=0.0, lr=0.25, scale=1.0)
    theta = r.p.detach().clone()
    w, c = r.quadratic.weights[0], r.quadratic.centres[0]
    r.penalty_step()
    assert torch.allclose(r.p.detach(), (theta + 0.5 * w * c) / (1 + 0.5 * w), atol=1e-6)
    g = regularised(momentum=0.9, proximal=False)  # the gradient way: penalty_step leaves theta alone
    before = g.p.detach().clone()
    g.penalty_step()
    assert torch.equal(g.p.detach(), before)
    inactive = regularised(momentum=0.9)
    inactive.quadratic.active = False
    inactive.penalty_step()
    assert torch.equal(inactive.p.detach(), before)


def test_quadratic_penalty_gradient_value_and_observer() -> None:
    """The gradient way adds 2 s w (theta - c) to the loss's gradient (after the observer saw the
    loss's own); value() is s (sum w (theta - c)^2 + constant)."""
    r = regularised(momentum=0.0, scale=3.0, proximal=False)
    q, p = r.quadratic, r.p
    seen: list[torch.Tensor] = []
    q.observer = lambda i, grad: seen.append(grad.clone())
    (p * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    w, c = q.weights[0], q.centres[0]
    assert torch.allclose(seen[0], torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert torch.allclose(p.grad, torch.tensor([1.0, 2.0, 3.0, 4.0]) + 2 * 3.0 * w * (p.detach() - c))
    q.constant = 0.5
    expected = 3.0 * (float((w * (p.detach() - c) ** 2).sum()) + 0.5)
    assert float(q.value()) == pytest.approx(expected, rel=1e-6)
    r.consolidated = 1
    assert r.penalty_value() == pytest.approx(expected, rel=1e-6)
    r.consolidated = 0
    assert r.penalty_value() == 0.0
    assert r.reg_weight == 100.0
    r.params = EWCParams(reg_weight=7.0)
    assert r.reg_weight == 7.0
    q.remove()
    p.grad = None
    (p * 1.0).sum().backward()
    assert torch.equal(p.grad, torch.ones(4))  # the hooks are gone


def bare_ewcpp(alpha: float, *more: torch.nn.Parameter) -> Any:
    """An EWC++ over a parameter p of 3 elements (and `more`): its state as `online_start` makes it."""
    m: Any = EWCpp.__new__(EWCpp)
    m.params = EWCppParams(ewcpp_alpha=alpha, ewcpp_weight=10.0)
    m.device = torch.device("cpu")
    p = torch.nn.Parameter(torch.zeros(3))
    m._track([p, *more])
    return m, p


def test_ewcpp_running_average_weights_the_newest_gradient_by_alpha() -> None:
    """(issue 29 d) F <- (1 - alpha) F + alpha g^2 with alpha = 0.2: the newest squared gradient
    weighs 0.2 and the running average 0.8 (the other orientation is invisible at alpha 0.5)."""
    m, p = bare_ewcpp(0.2)
    g1, g2, g3 = torch.tensor([1.0, 2.0, 0.0]), torch.tensor([3.0, 0.0, 1.0]), torch.tensor([0.0, 1.0, 2.0])
    p.grad = g1.clone()
    m.after_step()
    assert torch.allclose(m.fisher[0], g1**2)  # the first gradient sets F
    p.grad = g2.clone()
    m.after_step()
    f2 = 0.8 * g1**2 + 0.2 * g2**2
    assert torch.allclose(m.fisher[0], f2)
    assert not torch.allclose(m.fisher[0], 0.2 * g1**2 + 0.8 * g2**2)
    p.grad = torch.tensor([float("nan"), 0.0, 0.0])  # a non-finite gradient leaves F alone
    m.after_step()
    assert torch.allclose(m.fisher[0], f2)
    p.grad = g3.clone()
    m.after_step()
    assert torch.allclose(m.fisher[0], 0.8 * f2 + 0.2 * g3**2)


@pytest.mark.parametrize("flat", [False, True], ids=["per-tensor", "flat"])
def test_ewcpp_device_rule_is_bit_identical_to_the_host_rule(flat: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sync-free Fisher update (a parameter's first update by torch.where; later ones blended
    one tensor at a time, a CPU's form, or over the flat buffer, a GPU's, taken on a CPU under an
    audit) gives the very floats of the host-decided rule: a first gradient with a NaN, an inf
    later, a finite one whose square overflows, a missing gradient, a channels_last weight (the
    flat buffer in its memory order), alpha 0.5."""
    monkeypatch.setattr(ewcpp_module, "auditing", lambda: flat)
    q = torch.nn.Parameter(torch.zeros(5))
    w = torch.nn.Parameter(torch.zeros(4, 3, 2, 2).to(memory_format=torch.channels_last))
    m, p = bare_ewcpp(0.5, q, w)
    assert m.fisher[2].stride() == w.stride()
    ref, started = [torch.zeros(3), torch.zeros(5), torch.zeros(4, 3, 2, 2)], [False, False, False]
    gen = torch.Generator().manual_seed(0)
    for k in range(7):
        grads: list[Any] = [torch.randn(r.shape, generator=gen) * 3 for r in ref]
        grads[2] = grads[2].to(memory_format=torch.channels_last)
        if k == 0:
            grads[1][2] = float("nan")  # q's first gradient: skipped, its next one sets F
        if k == 3:
            grads[0][1] = float("inf")
            grads[2][1, 2, 0, 1] = float("nan")
        if k == 4:
            grads[1][:2] = 3e38  # finite, g^2 = inf: F becomes inf (though its 1-norm overflows)
        if k == 5:
            grads[1] = None  # q without a gradient: its F stays, the others are updated
        for i, g in enumerate(grads):
            if g is not None and bool(torch.isfinite(g).all()):
                ref[i] = ref[i].mul(0.5).add(g.pow(2), alpha=0.5) if started[i] else g.pow(2)
                started[i] = True
        p.grad, q.grad, w.grad = (None if g is None else g.clone(memory_format=torch.preserve_format) for g in grads)
        m.after_step()
        assert all(torch.equal(a, b) for a, b in zip(m.fisher, ref)), k
    assert m.started.tolist() == [True, True, True]
    assert ("segment" in vars(m)) is flat  # the form asked for ran (the flat one's index is made by its first update)
    # the loop's buffer: every later update on a CPU, and the flat form's with q's missing gradient
    assert "scratch" in vars(m)


def test_ewcpp_later_update_on_a_cpu_allocates_nothing_parameter_sized() -> None:
    """A CPU pays page faults for every fresh parameter-sized tensor (they took a third of EWC++'s
    update): a later update of the per-tensor loop writes g x 0 and g^2 into one scratch buffer,
    the largest parameter's size, made once."""
    from torch.profiler import ProfilerActivity, profile

    big = torch.nn.Parameter(torch.zeros(256, 1024))
    m, p = bare_ewcpp(0.5, big)
    for _ in range(3):
        p.grad, big.grad = torch.randn(3), torch.randn(256, 1024)
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            m.after_step()
    largest = max(e.cpu_memory_usage for e in prof.events())
    assert 0 <= largest < big.numel() * big.element_size() // 4, largest
    assert m.scratch.numel() == big.numel()


def test_ewcpp_penalty_is_weight_times_fisher_weighted_squared_distance() -> None:
    m, p = bare_ewcpp(0.2)
    assert float(m.penalty()) == 0.0
    m.anchor = [torch.tensor([1.0, 0.0, -1.0])]
    m.importance = [torch.tensor([2.0, 3.0, 0.5])]
    with torch.no_grad():
        p.copy_(torch.tensor([2.0, 2.0, 1.0]))
    # 10 * (2 * 1 + 3 * 4 + 0.5 * 4) = 160
    assert float(m.penalty()) == pytest.approx(160.0)


def test_proximal_step_of_an_optimiser_without_momentum_key_uses_lr() -> None:
    """Adam's groups have no "momentum": t = lr."""
    r = regularised(momentum=0.0, lr=0.25, scale=1.0)
    r.optimizer = torch.optim.Adam([r.p], lr=0.25)
    theta = r.p.detach().clone()
    w, c = r.quadratic.weights[0], r.quadratic.centres[0]
    r.penalty_step()
    assert torch.allclose(r.p.detach(), (theta + 0.5 * w * c) / (1 + 0.5 * w), atol=1e-6)


def test_a_fresh_penalty_is_inactive_unscaled_and_its_centres_are_detached() -> None:
    p = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    q = QuadraticPenalty([p])
    assert q.scale == 0.0 and q.constant == 0.0 and q.active is False
    assert not q.centres[0].requires_grad and torch.equal(q.centres[0], p.detach())
    q.weights[0].fill_(1.0)
    q.centres[0].zero_()
    q.scale = 2.0  # scaled but not active: the gradient is the loss's alone
    (p * 1.0).sum().backward()
    assert torch.equal(p.grad, torch.ones(2))
    assert float(q.value()) == pytest.approx(2.0 * (1.0 + 4.0))  # no constant unless set
    prox = QuadraticPenalty([p], proximal=True)
    prox.weights[0].fill_(1.0)
    prox.scale, prox.active = 2.0, True
    p.grad = None
    (p * 1.0).sum().backward()  # proximal: the hook leaves the gradient to the step
    assert torch.equal(p.grad, torch.ones(2))


@pytest.mark.parametrize("flat", [False, True], ids=["per-tensor", "flat"])
def test_ewcpp_first_update_sets_f_to_g_squared_exactly_and_a_resumed_one_blends(
    flat: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At alpha 0.3 (not a power of 2): a parameter's first finite gradient sets F = g^2 exactly
    (torch.where, not the later blend's alpha x (g^2 / alpha)); after a resume, whose first update
    of each parameter takes that path again with F started, F <- 0.7 F + 0.3 g^2."""
    monkeypatch.setattr(ewcpp_module, "auditing", lambda: flat)
    q = torch.nn.Parameter(torch.zeros(400))
    m, p = bare_ewcpp(0.3, q)
    gen = torch.Generator().manual_seed(3)
    grads = [torch.randn(3, generator=gen) * 3, torch.randn(400, generator=gen) * 3]
    p.grad, q.grad = (g.clone() for g in grads)
    m.after_step()
    assert all(torch.equal(f, g.pow(2)) for f, g in zip(m.fisher, grads))
    m.updated = set()  # as load_state_dict leaves it: started, F kept
    fisher = [f.clone() for f in m.fisher]
    grads = [torch.randn(3, generator=gen), torch.randn(400, generator=gen)]
    p.grad, q.grad = (g.clone() for g in grads)
    m.after_step()
    assert all(torch.equal(f, f0.mul(1 - 0.3).add(g.pow(2), alpha=0.3)) for f, f0, g in zip(m.fisher, fisher, grads))


def test_ewcpp_skips_parameters_without_a_gradient_and_goes_on() -> None:
    q = torch.nn.Parameter(torch.zeros(2))
    m, p = bare_ewcpp(0.2, q)
    q.grad = torch.tensor([2.0, 3.0])  # p has no gradient: skipped, q still updated
    m.after_step()
    assert torch.equal(m.fisher[0], torch.zeros(3)) and m.started.tolist() == [False, True]
    assert torch.allclose(m.fisher[1], torch.tensor([4.0, 9.0]))


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, message: str) -> None:
        self.lines.append(message)


def test_ewcpp_snapshot_anchors_detached_copies_and_pulls_back_with_the_fisher() -> None:
    """At a boundary theta* and F are copied (later steps change neither); the penalty's gradient
    is 2 weight F (theta - theta*), added by `after_backward` as autograd computes it; the next
    boundary replaces the snapshot in the same tensors (a captured step reads them)."""
    m, p = bare_ewcpp(0.2)
    log = _Log()
    m.setup = type("S", (), {"reporter": log})()
    with torch.no_grad():
        p.copy_(torch.tensor([1.0, 2.0, 3.0]))
    m.fisher[0].copy_(torch.tensor([0.5, 1.0, 2.0]))
    from rmconsole.cl.learner import Task

    m.online_task_end(Task(0, torch.zeros(0, dtype=torch.long), 5))
    assert log.lines and "snapshot" in log.lines[0] and "mean F 1.17;" in log.lines[0]  # (0.5 + 1 + 2) / 3
    m.fisher[0].add_(10.0)
    with torch.no_grad():
        p.add_(torch.tensor([1.0, -1.0, 0.5]))
    assert torch.equal(m.anchor[0], torch.tensor([1.0, 2.0, 3.0]))
    assert torch.equal(m.importance[0], torch.tensor([0.5, 1.0, 2.0]))
    assert not m.anchor[0].requires_grad
    m.penalty().backward()
    assert torch.allclose(p.grad, 2 * 10.0 * torch.tensor([0.5, 1.0, 2.0]) * torch.tensor([1.0, -1.0, 0.5]))
    by_autograd = p.grad
    p.grad = None
    m.after_backward()  # the gradient added without autograd: autograd's floats
    assert torch.equal(p.grad, by_autograd)
    p.grad = torch.tensor([0.25, -3.0, 7.0])
    m.after_backward()
    assert torch.equal(p.grad, torch.tensor([0.25, -3.0, 7.0]) + by_autograd)
    held = m.anchor[0], m.importance[0], m.weighted[0], m.pull[0]
    m.online_task_end(Task(1, torch.zeros(0, dtype=torch.long), 5))  # the next snapshot replaces it, in place
    assert all(a is b for a, b in zip(held, (m.anchor[0], m.importance[0], m.weighted[0], m.pull[0])))
    with torch.no_grad():
        p.sub_(torch.tensor([2.0, 0.0, 1.0]))
    p.grad = None
    m.penalty().backward()
    by_autograd = p.grad
    assert torch.allclose(by_autograd, 2 * 10.0 * torch.tensor([10.5, 11.0, 12.0]) * torch.tensor([-2.0, 0.0, -1.0]))
    p.grad = None
    m.after_backward()
    assert torch.equal(p.grad, by_autograd)


def test_ewcpp_checkpoint_round_trip() -> None:
    from support.online_helpers import built

    m, _, _ = built("ewcpp", ewcpp_alpha=0.2)
    for f in m.fisher:
        f.uniform_()
    m.started.copy_(torch.arange(len(m.started)) % 2 == 0)
    fresh, _, _ = built("ewcpp", ewcpp_alpha=0.2)
    fresh.load_state_dict(m.state_dict())  # before a boundary: no anchor, no importance
    assert all(torch.equal(a, b) for a, b in zip(fresh.fisher, m.fisher))
    assert fresh.started.tolist() == m.started.tolist() and fresh.anchor is None and fresh.importance is None
    m.anchor = [p.detach().clone() + 1 for p in m.penalised]
    m.importance = [f.clone() * 2 for f in m.fisher]
    state = m.state_dict()
    assert set(state["ewcpp"]) == {"fisher", "started", "anchor", "importance"}
    again, _, _ = built("ewcpp", ewcpp_alpha=0.2)
    again.load_state_dict(state)
    assert all(torch.equal(a, b) for a, b in zip(again.anchor, m.anchor))
    assert all(torch.equal(a, b) for a, b in zip(again.importance, m.importance))
    assert all(torch.equal(a, b) for a, b in zip(again.fisher, m.fisher))
    assert all(torch.equal(a, b) for a, b in zip(again.model.state_dict().values(), m.model.state_dict().values()))


# ------------------------------------------------------------------ MIR's iterations


def _mir(**over: Any) -> Any:
    from support.online_helpers import built

    m, proto, _ = built("mir", **over)
    stream = torch.cat(proto.tasks)
    for label in m.labels_of(stream[:40]).unique().tolist():
        m.online_new_class(int(label))
    return m, stream


def test_mir_trains_on_the_stream_alone_while_the_memory_is_empty() -> None:
    """Every iteration is a step, on the stream batch alone, until the memory holds samples."""
    m, stream = _mir(mir_candidates=10)
    steps, cost = m.online_steps, m.cost
    m.online_train(stream[:4], 3)
    assert m.online_steps == steps + 3 and m.cost == cost + 3 * 3 * 4


def test_mir_retrieves_nothing_when_the_stream_fills_the_batch() -> None:
    """batch_size stream samples leave no room: no retrieval (no scoring cost), a plain step."""
    m, stream = _mir(mir_candidates=10)
    for i in stream[:30].tolist():
        m.online_store(i, int(m.labels_of(torch.tensor([i]))[0]))
    assert len(m.memory) > 0
    steps, cost = m.online_steps, m.cost
    m.online_train(stream[30 : 30 + m.cfg.batch_size], 2)
    assert m.online_steps == steps + 2 and m.cost == cost + 2 * 3 * m.cfg.batch_size


def test_mir_steps_in_train_mode_after_an_evaluation() -> None:
    """After an anytime evaluation left the model in eval mode, a step whose retrieval is a no-op
    (no more candidates than slots) still trains in train mode (batch-norm statistics move)."""
    m, stream = _mir(mir_candidates=4)
    for i in stream[:30].tolist():
        m.online_store(i, int(m.labels_of(torch.tensor([i]))[0]))
    modes: list[bool] = []
    original = m.step_on

    def spy(x: torch.Tensor, y: torch.Tensor, n_stream: Any = None, lr: Any = None) -> None:
        modes.append(m.model.training)
        original(x, y, n_stream, lr)

    m.step_on = spy
    m.model.eval()
    m.online_train(stream[30:34], 1)
    assert modes == [True]


def test_mir_look_ahead_in_train_mode_scores_in_eval_mode_and_leaves_train_mode() -> None:
    """The virtual step's gradient is taken in train mode (even right after an evaluation), the
    candidates are scored in eval mode (batch-norm statistics untouched), and training resumes
    in train mode; its cost: 3 passes per stream image, 2 per candidate."""
    m, stream = _mir(mir_candidates=10)
    for i in stream[:30].tolist():
        m.online_store(i, int(m.labels_of(torch.tensor([i]))[0]))
    modes: list[bool] = []
    handle = m.model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    x_s = m.setup.augmenter.train(m.images_of(stream[30:34]))
    y_s = m.labels_of(stream[30:34])
    stats = {n: b.clone() for n, b in m.model.named_buffers()}
    m.model.eval()
    cost = m.cost
    chosen = m.retrieve(x_s, y_s, m.memory.indices[:10].clone(), 4)
    handle.remove()
    assert modes == [True, False, False] and m.model.training
    assert len(chosen) == 4 and m.cost == cost + 3 * 4 + 2 * 10
    assert all(torch.equal(stats[n], b) for n, b in m.model.named_buffers())
    few = m.memory.indices[:4].clone()  # no more candidates than slots: all of them, unscored
    assert torch.equal(m.retrieve(x_s, y_s, few, 4), few) and m.cost == cost + 3 * 4 + 2 * 10


# ------------------------------------------------------------------ SCR


def test_supervised_contrastive_loss_against_a_loop_with_uneven_positives() -> None:
    """Khosla et al.'s L_out by hand: anchors with 2, 1 and 0 positives (the last is left out)."""
    from rmconsole.cl.methods.scr import supervised_contrastive_loss

    g = torch.Generator().manual_seed(0)
    z = torch.nn.functional.normalize(torch.randn(6, 3, generator=g), dim=1)
    y = torch.tensor([0, 0, 0, 1, 1, 2])
    t = 0.3
    per_anchor = []
    for i in range(6):
        others = [j for j in range(6) if j != i]
        positives = [j for j in others if y[j] == y[i]]
        if not positives:
            continue
        denom = torch.logsumexp(torch.stack([z[i] @ z[j] / t for j in others]), 0)
        per_anchor.append(-sum(float(z[i] @ z[p] / t - denom) for p in positives) / len(positives))
    expected = sum(per_anchor) / len(per_anchor)
    assert float(supervised_contrastive_loss(z, y, t)) == pytest.approx(expected, rel=1e-5)
    assert float(supervised_contrastive_loss(z[:3], torch.tensor([0, 1, 2]), t)) == 0.0  # no positives at all


def test_scr_predicts_in_eval_mode_from_cached_means_and_checkpoints_its_projection() -> None:
    from support.online_helpers import built, feed

    m, proto, _ = built("scr")
    feed(m, proto, 80)
    x = m.setup.augmenter.test(m.images_of(torch.cat(proto.tasks)[80:100]))
    first = m.predict(x)
    m.model.train()  # the class means are cached: predict itself must switch to eval mode
    assert torch.equal(m.predict(x), first) and not m.model.training
    with torch.no_grad():
        for p in m.projection.parameters():
            p.add_(0.5)
    again, _, _ = built("scr")
    again.load_state_dict(m.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(again.projection.parameters(), m.projection.parameters()))


def test_scr_with_one_class_in_memory_predicts_it_and_with_none_predicts_label_0() -> None:
    from support.online_helpers import built

    m, proto, _ = built("scr")
    stream = torch.cat(proto.tasks)
    x = m.setup.augmenter.test(m.images_of(stream[:6]))
    empty = m.predict(x)
    assert empty.dtype == torch.long and empty.tolist() == [0] * 6
    labels = m.labels_of(stream)
    ones = stream[labels == 1][:5]
    m.online_new_class(0)
    m.online_new_class(1)
    for i in ones.tolist():
        m.online_store(i, 1)
    assert m.predict(x).tolist() == [1] * 6


# ------------------------------------------------------------------ CLIB's per-sample driver


def test_clib_stores_every_sample_and_counts_its_iterations_and_ticks() -> None:
    """Each observed sample enters the memory (until it is full), then online_iter steps run; the
    adaptive LR ticks once per imp_update_period steps."""
    from support.online_helpers import built, feed

    m, proto, _ = built("clib", online_iter=1.0, imp_update_period=2, lr_period=1000)
    feed(m, proto, 30)
    assert len(m.memory) == 30 and m.online_memory.seen == 30
    assert m.update_counter == 30 and m.ticks == 15
    assert m.online_steps == 30 - 1  # a step needs two samples in memory: the first sample alone takes none


def test_mir_retrieves_from_a_memory_of_one_into_a_batch_with_one_free_slot() -> None:
    """The edges of 'retrieve at all': one sample in memory is retrieved; one free slot is filled."""
    m, stream = _mir(mir_candidates=10)
    sizes: list[int] = []
    original = m.step_on

    def spy(x: torch.Tensor, y: torch.Tensor, n_stream: Any = None, lr: Any = None) -> None:
        sizes.append(len(x))
        original(x, y, n_stream, lr)

    m.step_on = spy
    first = int(stream[0])
    m.online_store(first, int(m.labels_of(torch.tensor([first]))[0]))
    assert len(m.memory) == 1
    m.online_train(stream[30:34], 1)
    m.online_train(stream[30 : 30 + m.cfg.batch_size - 1], 1)
    assert sizes == [5, m.cfg.batch_size]


CLIB_STATE = (
    "importance",
    "loss",
    "drawn",
    "replaced_since_update",
    "replaced_since_switch",
    "update_counter",
    "ticks",
    "prev_loss",
    "lr_is_high",
    "high_lr",
    "low_lr",
    "high_records",
    "low_records",
    "current_lr",
)


def test_clib_checkpoint_carries_every_piece_of_its_state() -> None:
    from support.online_helpers import built, feed

    m, proto, _ = built("clib", online_iter=1.0, imp_update_period=2, lr_period=1000)
    feed(m, proto, 30)
    m.ticks, m.lr_is_high, m.high_records, m.low_records = 7, not m.lr_is_high, [0.5], [0.25]
    m.high_lr, m.low_lr, m.current_lr, m.prev_loss = 0.3, 0.1, 0.3, torch.ones(3, dtype=torch.float64)
    state = m.state_dict()
    assert set(state["clib"]) == set(CLIB_STATE)
    again, _, _ = built("clib", online_iter=1.0, imp_update_period=2, lr_period=1000)
    again.load_state_dict(state)
    for key in CLIB_STATE:
        a, b = getattr(again, key), getattr(m, key)
        assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, key


# ------------------------------------------------------------------ ER-ACE


def test_er_ace_loss_with_a_stream_only_batch_and_the_steps_stream_count() -> None:
    from rmconsole.cl.methods.er_ace import asymmetric_cross_entropy

    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.1, 1.0, 0.3, 0.0], [0.0, 0.2, 1.5, 0.7]])
    y = torch.tensor([0, 1, 2])
    seen = torch.tensor([True, True, True, False])
    # every row is stream: one CE over the classes present (0, 1, 2), no memory term
    alone = asymmetric_cross_entropy(logits, y, 3, seen)
    assert float(alone) == pytest.approx(float(torch.nn.functional.cross_entropy(logits[:, :3], y)), rel=1e-6)
    from support.online_helpers import built

    m, _, _ = built("er_ace")
    m.seen[:3] = True
    x = torch.randn(3, 1, 8, 8)
    m.stream_count = 2  # the step's split: 2 stream rows, 1 memory row
    with torch.no_grad():
        out = m.model(x)
        expected = asymmetric_cross_entropy(out, y, 2, m.seen)
        assert float(m.step_loss(x, y)) == pytest.approx(float(expected), rel=1e-5)
