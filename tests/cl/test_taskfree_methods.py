"""Each method of the follow-up's protocol, tested on its defining behaviour (PROTOCOL §9.4-9.5)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as nnf
from support.online_helpers import Recorder, built, config, feed, tiny_data

from rmconsole.cl.loop import run_protocol

# ------------------------------------------------------------------------------ EWC++


def test_ewcpp_fisher_is_an_ema_of_squared_gradients_and_the_penalty_starts_at_a_boundary() -> None:
    m, proto, _ = built("ewcpp", ewcpp_alpha=0.5, ewcpp_weight=100.0)
    p = m.penalised[0]
    assert all(not n.startswith("fc.") for n, q in m.model.named_parameters() if any(q is r for r in m.penalised))
    assert len(m.penalised) == len([n for n, _ in m.model.named_parameters()]) - 2  # every parameter but fc
    g1, g2 = torch.randn_like(p), torch.randn_like(p)
    p.grad = g1
    m.after_step()
    assert torch.allclose(m.fisher[0], g1**2)  # the first gradient sets F
    p.grad = g2
    m.after_step()
    assert torch.allclose(m.fisher[0], 0.5 * g1**2 + 0.5 * g2**2)
    assert float(m.penalty()) == 0.0 and m.anchor is None  # task 0: no penalty
    from rmconsole.cl.learner import Task

    m.online_task_end(Task(0, torch.zeros(0, dtype=torch.long), 5))
    with torch.no_grad():
        p.add_(1.0)  # move one parameter by 1 from its anchor
    expected = 100.0 * float(m.importance[0].sum())  # weight x sum F (theta - theta*)^2, theta - theta* = 1
    assert m.penalty().item() == pytest.approx(expected, rel=1e-5)
    x, y = torch.randn(6, 1, 8, 8), torch.tensor([0, 1, 0, 1, 0, 1])
    m.seen[:2] = True
    m.setup.augmenter.names = ()
    # the step's gradient is that of cross-entropy + penalty, autograd's floats, added after backward
    m.model.zero_grad(set_to_none=True)  # (a step's gradients start from None)
    both = copy.deepcopy(m)
    (both.step_loss(x, y) + both.penalty()).backward()
    m.step_loss(x, y).backward()
    m.after_backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(m.model.parameters(), both.model.parameters()))
    without = copy.deepcopy(both)
    without.model.zero_grad(set_to_none=True)
    without.step_loss(x, y).backward()  # the penalty moves the gradient of the parameter it pulls back
    assert not torch.equal(p.grad, without.penalised[0].grad)


# ------------------------------------------------------------------------------ MIR


def test_mir_retrieves_the_candidates_whose_loss_rises_most() -> None:
    m, proto, data = built("mir", mir_candidates=20, augment="none")
    feed(m, proto, 120)
    stream = torch.cat(proto.tasks)[120:124]
    x_s = m.setup.augmenter.train(m.images_of(stream))
    y_s = m.labels_of(stream)
    candidates = m.memory.indices[:20].clone()
    chosen = m.retrieve(x_s, y_s, candidates, 4)
    # independently: a deep copy takes the SGD step by hand, both score the clean candidates
    model = copy.deepcopy(m.model)
    model.train()
    stats = {n: b.clone() for n, b in model.named_buffers()}
    loss = nnf.cross_entropy(m.mask_unseen(model(x_s)), y_s)
    loss.backward()
    lr = m.step_lr()
    after = copy.deepcopy(model)
    with torch.no_grad():
        for q, g in zip(after.parameters(), model.parameters()):
            q -= lr * g.grad
        for n, b in after.named_buffers():
            b.copy_(stats[n])
        for n, b in model.named_buffers():
            b.copy_(stats[n])
    model.eval(), after.eval()
    x_c, y_c = m.setup.augmenter.test(m.images_of(candidates)), m.labels_of(candidates)
    with torch.no_grad():
        rise = nnf.cross_entropy(m.mask_unseen(after(x_c)), y_c, reduction="none") - nnf.cross_entropy(
            m.mask_unseen(model(x_c)), y_c, reduction="none"
        )
    top = candidates[torch.topk(rise, 4).indices]
    assert sorted(chosen.tolist()) == sorted(top.tolist())
    assert rise[torch.isin(candidates, chosen)].min() >= rise[~torch.isin(candidates, chosen)].max()


def test_mir_copies_a_models_buffers_as_clones_would() -> None:
    """`copies` (one multi-tensor copy per dtype): the buffers' values, dtypes and layouts in
    tensors of their own, so the look-ahead's statistics never move the model's."""
    from rmconsole.cl.methods.mir import copies

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.BatchNorm1d(2))
    model.train()
    model[1](torch.randn(5, 4, 6, 6))  # statistics moved, num_batches_tracked 1
    live = dict(model.named_buffers())
    live["layout"] = torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last)
    out = copies(live)
    assert list(out) == list(live)
    for name, b in live.items():
        c = out[name]
        assert torch.equal(c, b) and c.dtype == b.dtype and c.stride() == b.stride(), name
        assert c.untyped_storage().data_ptr() != b.untyped_storage().data_ptr(), name
    out["1.running_mean"].add_(1.0)
    assert not torch.equal(out["1.running_mean"], live["1.running_mean"])


def test_mir_virtual_step_is_theta_minus_lr_g_whichever_memory_it_writes() -> None:
    """`stepped_away`: theta - lr x g as `p - lr * g` rounds it, bit for bit, for the CPU's form
    written over the gradients and for the allocating form (a GPU's; a CPU under an audit); the
    CPU writes over the gradients only where each is a storage of its own: one gradient handed
    to two parameters, or an expanded one, is left as it was."""
    from rmconsole.cl import step_audit
    from rmconsole.cl.methods.mir import own_memory, stepped_away

    gen = torch.Generator().manual_seed(3)
    params = [torch.randn(7, 5, generator=gen, requires_grad=True), torch.randn(5, generator=gen, requires_grad=True)]
    grads = [torch.randn(5, 7, generator=gen).t(), torch.randn(5, generator=gen) * 1e30]  # a transposed fresh product
    grads[1][0], grads[1][1] = float("inf"), float("nan")
    params[0].data[0, 0] = -0.0
    grads[0][0, 0] = 0.0
    lr = 0.37
    expected = [(p - lr * g).detach() for p, g in zip(params, grads)]
    same = lambda a, b: torch.equal(a.nan_to_num(7.0), b.nan_to_num(7.0)) and torch.equal(a.signbit(), b.signbit())  # noqa: E731
    kept = [g.clone() for g in grads]
    with step_audit.StepAudit():  # the GPU's path: new tensors, the gradients kept
        moved = stepped_away(params, grads, lr)
    assert all(same(m, e) for m, e in zip(moved, expected))
    assert all(same(g, k) for g, k in zip(grads, kept))
    assert own_memory(grads)
    moved = stepped_away(params, grads, lr)  # the CPU's: over the gradients
    assert all(m is g for m, g in zip(moved, grads))
    assert all(same(m, e) for m, e in zip(moved, expected))
    # one gradient for two parameters (autograd's add passes it to both), and an expanded one
    shared = torch.randn(5, generator=gen)
    for grads in ([shared, shared], [torch.randn(5, generator=gen), torch.ones(()).expand(5)]):
        pair = [torch.randn(5, generator=gen, requires_grad=True) for _ in range(2)]
        kept = [g.clone() for g in grads]
        expected = [(p - lr * g).detach() for p, g in zip(pair, grads)]
        assert not own_memory(grads)
        moved = stepped_away(pair, grads, lr)
        assert all(torch.equal(m, e) for m, e in zip(moved, expected))
        assert all(torch.equal(g, k) for g, k in zip(grads, kept))


def test_mir_look_ahead_keeps_a_parameter_the_loss_does_not_reach() -> None:
    """A model may hold a parameter its forward never uses: it has no gradient, the virtual step
    leaves it where it is, and the retrieval is the one the model makes without it."""
    m, proto, _ = built("mir", mir_candidates=20, augment="none")
    feed(m, proto, 120)
    stream = torch.cat(proto.tasks)[120:124]
    x_s, y_s = m.setup.augmenter.train(m.images_of(stream)), m.labels_of(stream)
    candidates = m.memory.indices[:20].clone()
    plain = m.retrieve(x_s, y_s, candidates, 4)
    m.model.register_parameter("unused", torch.nn.Parameter(torch.ones(3)))
    assert torch.equal(m.retrieve(x_s, y_s, candidates, 4), plain)
    assert torch.equal(m.model.unused, torch.ones(3))


def test_mir_batches_are_stream_plus_retrieved() -> None:
    m, proto, _ = built("mir", mir_candidates=10)
    seen_batches = []
    original = m.step_on

    def spy(x, y, n_stream=None, lr=None):  # type: ignore[no-untyped-def]
        seen_batches.append((len(x), n_stream))
        return original(x, y, n_stream, lr)

    m.step_on = spy
    feed(m, proto, 40)
    assert seen_batches and all(n == 4 for _, n in seen_batches)
    assert seen_batches[-1][0] == 8  # 4 stream + 4 retrieved once the memory has them


# ------------------------------------------------------------------------------ ER-ACE


def test_er_ace_spares_the_logits_of_classes_absent_from_the_incoming_batch() -> None:
    from rmconsole.cl.methods.er_ace import asymmetric_cross_entropy

    seen = torch.tensor([True] * 5 + [False] * 5)
    logits = torch.randn(6, 10, requires_grad=True)
    y = torch.tensor([3, 4, 3, 0, 1, 2])  # incoming: classes 3, 4; memory: 0, 1, 2
    loss = asymmetric_cross_entropy(logits, y, 3, seen)
    loss.backward()
    g = logits.grad
    assert torch.all(g[:3, [0, 1, 2]] == 0)  # incoming rows never push old classes down
    assert torch.all(g[:3, 5:] == 0) and torch.all(g[3:, 5:] == 0)  # unseen classes: nothing
    assert torch.all(g[3:, :5] != 0)  # memory rows: every seen class
    expected = nnf.cross_entropy(logits[:3, 3:5], y[:3] - 3) + nnf.cross_entropy(logits[3:, :5], y[3:])
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def test_er_ace_trains_with_its_split() -> None:
    m, proto, _ = built("er_ace")
    counts = []
    original = m.step_loss

    def spy(x, y):  # type: ignore[no-untyped-def]
        counts.append((len(x), m.stream_count))
        return original(x, y)

    m.step_loss = spy
    feed(m, proto, 40)
    assert counts and all(n == 4 for _, n in counts) and counts[-1][0] == 8


# ------------------------------------------------------------------------------ SCR


def test_supervised_contrastive_loss_hand_case() -> None:
    from rmconsole.cl.methods.scr import supervised_contrastive_loss

    z = nnf.normalize(torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]), dim=1)
    y = torch.tensor([0, 0, 1, 1])
    t = 0.5
    # anchor 0: positive 1 (sim 1), others 2, 3 (sim 0): -log(e^2 / (e^2 + 2))
    expected = -torch.log(torch.exp(torch.tensor(2.0)) / (torch.exp(torch.tensor(2.0)) + 2))
    assert float(supervised_contrastive_loss(z, y, t)) == pytest.approx(float(expected), rel=1e-6)
    # pulling same-class embeddings apart raises the loss
    worse = nnf.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.1], [0.1, 1.0]]), dim=1)
    assert supervised_contrastive_loss(worse, y, t) > supervised_contrastive_loss(z, y, t)


def test_scr_predicts_the_nearest_class_mean_of_its_memory() -> None:
    m, proto, _ = built("scr")
    feed(m, proto, 80)
    feats = nnf.normalize(m.features_of(m.memory.indices).float(), dim=1)
    labels = m.memory.labels
    x = m.setup.augmenter.test(m.images_of(torch.cat(proto.tasks)[80:100]))
    pred = m.predict(x)
    m.model.eval()
    with torch.no_grad():
        q = nnf.normalize(m.model.features(x).float(), dim=1)
    classes = labels.unique()
    means = nnf.normalize(torch.stack([feats[labels == c].mean(0) for c in classes]), dim=1)
    assert pred.tolist() == classes[(q @ means.T).argmax(1)].tolist()
    assert set(pred.tolist()) <= set(classes.tolist())  # only classes the memory holds


def test_scr_trains_two_views_of_every_sample() -> None:
    m, proto, _ = built("scr")
    sizes = []
    original = m.step_loss

    def spy(x, y):  # type: ignore[no-untyped-def]
        sizes.append(len(x))
        assert torch.equal(y[: len(y) // 2], y[len(y) // 2 :])
        return original(x, y)

    m.step_loss = spy
    feed(m, proto, 40)
    assert sizes[-1] == 16


# ------------------------------------------------------------------------------ CLIB


def test_clib_evicts_the_least_important_sample_of_the_largest_class() -> None:
    m, proto, _ = built("clib", memory_size=10, online_iter=1e-9)  # (no training: memory rules only)
    for i, label in enumerate([0, 0, 0, 1, 1, 2, 2, 2, 2, 3]):  # fill: class 2 is the largest
        m.store(100 + i, label)
    assert m.memory.full and m.memory.capacity == 10  # CLIB keeps all K slots
    m.importance = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.2, 0.7, -0.4, 0.6, 0.8, 0.0], dtype=torch.float64)
    m.store(200, 3)  # class 2 (4 samples) is the largest: its lowest H (slot 6, -0.4) leaves
    assert int(m.memory.indices[6]) == 200 and int(m.memory.labels[6]) == 3
    assert float(m.importance[6]) == pytest.approx(0.0)  # the mean H of class 3's other sample (slot 9)
    m.store(201, 0)  # now classes 0 and 2 hold 3, class 0 counts +1 for the newcomer: class 0 loses slot 1
    assert int(m.memory.indices[1]) == 201
    assert float(m.importance[1]) == pytest.approx((0.5 + 0.9) / 2)
    m.store(202, 9)  # class 9 is new: alone in its class -> the whole memory's mean H
    assert int(m.memory.labels[m.memory.by_class[9][0]]) == 9


def test_clib_importance_update_is_the_follow_ups_formula() -> None:
    m, proto, _ = built("clib", memory_size=10, online_iter=1e-9)
    for i, label in enumerate([0, 1, 0, 1, 0, 1]):
        m.store(10 + i, label)
    m.seen[:2] = True
    m.loss = m.memory_losses() + 0.5  # pretend the loss was 0.5 higher at the last update
    m.replaced_since_update = [5]  # slot 5 was replaced since: left out of dL
    m.importance = torch.tensor([0.2, 0.4, 0.0, 0.0, 0.6, 0.0], dtype=torch.float64)
    m.drawn = [0, 1, 4]
    now = m.memory_losses()
    m.update_importance()
    delta = float((now[:5] - (now[:5] + 0.5)).mean())  # = -0.5
    difference = delta - (0.2 + 0.4 + 0.6) / 3 / 3
    expected = torch.tensor([0.2, 0.4, 0.0, 0.0, 0.6, 0.0], dtype=torch.float64)
    expected[[0, 1, 4]] -= 0.1 * difference
    assert torch.allclose(m.importance, expected)
    assert m.drawn == [] and m.replaced_since_update == []


def test_clib_adaptive_lr_moves_towards_the_better_rate() -> None:
    m, _, _ = built("clib", lr=0.1, lr_step=0.5, lr_length=3, lr_period=1, imp_update_period=1)
    m.loss = torch.zeros(4, dtype=torch.float64)
    m.ticks = 100  # past the warm-up
    # the low lr decreases the loss much more than the high one, every phase
    for k in range(8):
        m.prev_loss = torch.full((4,), 1.0, dtype=torch.float64)
        m.loss = torch.full((4,), 0.0 if not m.lr_is_high else 0.9, dtype=torch.float64) + 0.01 * k
        m.update_counter += 1
        m.adapt_lr()
    assert m.high_lr == pytest.approx(0.05)  # both rates moved down by lr_step
    assert m.low_lr == pytest.approx(0.025)


def test_clib_trains_on_memory_only() -> None:
    m, proto, _ = built("clib")
    batches = []
    original = m.train_batches

    def spy(b, stream_counts=None, lr=None):  # type: ignore[no-untyped-def]
        batches.extend(x.tolist() for x in b)
        return original(b, stream_counts, lr)

    m.train_batches = spy
    feed(m, proto, 60)
    for batch in batches:
        assert len(batch) <= 8 and set(batch) <= set(m.memory.indices.tolist()) | set(range(10_000))


# ------------------------------------------------------------------------------ GDumb


def test_gdumb_balanced_memory_and_a_fresh_model_per_evaluation() -> None:
    m, proto, _ = built("gdumb", memory_size=20, epochs=1, optimizer="sgd", lr=0.05, schedule="constant")
    feed(m, proto, 150)
    assert len(m.memory) == 20 and m.memory.capacity == 20
    counts = [len(v) for v in m.memory.by_class.values()]
    assert max(counts) - min(counts) <= 1  # the largest class always gives way
    first = m.model
    m.online_before_eval()
    assert m.model is not first and m.fresh_models == 1
    m.online_before_eval()  # nothing new since: the same model
    assert m.fresh_models == 1
    x = m.setup.augmenter.test(m.images_of(torch.cat(proto.tasks)[:50]))
    assert set(m.predict(x).tolist()) <= set(m.memory.labels.tolist())


def test_balanced_rule_counts_the_incoming_sample() -> None:
    from rmconsole.cl.online_memory import OnlineMemory

    mem = OnlineMemory(4)
    for i, y in enumerate([0, 0, 1, 1]):
        mem.balanced(i, y, lambda slots: slots[0])
    mem.balanced(9, 1, lambda slots: slots[0])  # classes tie at 2; class 1 counts 3 with the newcomer
    assert sorted(mem.labels.tolist()) == [0, 0, 1, 1] and 2 not in mem.indices.tolist()
    mem.balanced(10, 2, lambda slots: slots[0])  # a tie of 2 and 2: the earliest class (0) gives way
    assert sorted(mem.labels.tolist()) == [0, 1, 1, 2]


# ------------------------------------------------------------------------------ RM, twice


def test_rm_port_rebuilds_the_head_trains_stream_only_and_balances_memory() -> None:
    m, proto, _ = built("rm", rm_variant="iblurry", optimizer="sgd", lr=0.05, schedule="constant", epochs=1)
    assert m.head_rule == "rebuild" and m.memory.capacity == 36
    batches = []
    original = m.train_batches

    def spy(b, stream_counts=None, lr=None):  # type: ignore[no-untyped-def]
        batches.extend((x.tolist(), lr) for x in b)
        return original(b, stream_counts, lr)

    m.train_batches = spy
    stream = feed(m, proto, 64)
    online = [b for b, lr in batches if lr is None]
    assert online == [stream[k : k + 8] for k in range(0, 64, 8)]  # one step per batch_size samples, stream only
    head, optimizer = m.model.fc, m.optimizer
    m.online_new_class(int(m.seen.sum()))
    assert m.model.fc is not head and m.optimizer is not optimizer  # a new head and a new optimiser


def test_rm_paper_variant_keeps_the_head_and_rebuilds_memory_by_uncertainty() -> None:
    m, proto, _ = built("rm", optimizer="sgd", lr=0.05, schedule="constant", epochs=1, uncertainty_views=2)
    assert m.head_rule == "extend" and m.memory.capacity == 40
    feed(m, proto, len(proto.tasks[0]))
    assert len(m.memory) == 0  # RM updates its memory at the task's end, not per sample
    head = m.model.fc
    from rmconsole.cl.learner import Task

    rec = Recorder()
    m.setup.reporter = rec
    m.online_task_end(Task(0, proto.tasks[0], 5))
    assert len(m.memory) == min(40, len(proto.tasks[0])) and m.model.fc is head
    assert rec.memories and rec.memories[-1][3]["policy"] == "uncertainty"
    m.online_new_class(int(m.seen.sum()))
    assert m.model.fc is head


@pytest.mark.parametrize("method", ["ewcpp", "mir", "er_ace", "scr", "clib", "gdumb", "rm", "bic"])
def test_every_task_free_method_runs_the_protocol_to_its_end(method: str) -> None:
    over = {"epochs": 1}
    if method in ("gdumb", "rm"):
        over.update(optimizer="sgd", lr=0.05, schedule="constant")
    rec = Recorder()
    outcomes = run_protocol(
        config(method=method, eval_period=60, **over), tiny_data(per_class=16), torch.device("cpu"), rec
    )
    assert len(outcomes) == 5 and rec.points and all(0 <= p.accuracy <= 100 for p in rec.points)


# ------------------------------------------------------------------------------ BiC


def _next_task(m, proto, t):  # type: ignore[no-untyped-def]
    from rmconsole.cl.learner import Task

    m.online_task_end(Task(t - 1, proto.tasks[t - 1], len(proto.tasks)))
    m.online_task_start(Task(t, proto.tasks[t], len(proto.tasks)))


def test_bic_holds_out_a_shrinking_share_per_class_and_never_trains_on_it() -> None:
    m, proto, _ = built("bic", memory_size=128)  # K - batch/2 = 124: V = 12, memory 112
    assert m.online_val_capacity == 12 and m.memory.capacity == 112
    trained, went_to_validation = [], []
    train_batches, hold_out_sample = m.train_batches, m.hold_out_sample

    def spy(b, stream_counts=None, lr=None):  # type: ignore[no-untyped-def]
        trained.extend(i for x in b for i in x.tolist())
        return train_batches(b, stream_counts, lr)

    def spy_hold(index, label):  # type: ignore[no-untyped-def]
        taken = hold_out_sample(index, label)
        if taken:
            went_to_validation.append(index)
        return taken

    m.train_batches, m.hold_out_sample = spy, spy_hold
    stream = feed(m, proto, 120)
    held = [i for v in m.held_out.values() for i in v]
    n_seen = int(m.seen.sum())
    assert n_seen > 1 and m.held_out_share == 12 // n_seen > 0
    assert all(len(v) <= m.held_out_share for v in m.held_out.values())
    assert m.held_out_full == (len(held) == m.held_out_share * n_seen)
    assert held and set(held) <= set(went_to_validation)
    assert not set(went_to_validation) & set(trained) and not set(went_to_validation) & set(m.memory.indices.tolist())
    assert stream[0] in went_to_validation  # one class seen: its share is all of V
    labels = proto.train_labels
    assert all(int(labels[i]) == y for y, v in m.held_out.items() for i in v)
    # every other stream sample was trained on, as stream, once its temp batch filled
    assert set(stream) - set(went_to_validation) - set(m.temp) <= set(trained)


def test_bic_distils_from_a_snapshot_taken_at_each_new_class() -> None:
    m, proto, _ = built("bic", memory_size=48, augment="none")
    feed(m, proto, len(proto.tasks[0]))
    _next_task(m, proto, 1)
    before = {k: v.clone() for k, v in m.model.state_dict().items()}
    n_old = int(m.seen.sum())
    new_label = n_old
    m.online_new_class(new_label)
    assert m.teacher is not None and m.teacher_classes == n_old
    assert all(torch.equal(before[k], v) for k, v in m.teacher.state_dict().items())  # the model before the new row
    # a loss that distils: the student's old logits pulled to the teacher's (corrected by the previous task's layer)
    shown = torch.cat(proto.tasks[:2])
    shown = shown[proto.train_labels[shown] <= new_label][:8]  # classes the head has
    x, y = m.setup.augmenter.test(m.images_of(shown)), m.labels_of(shown)
    m.model.train()
    with torch.no_grad():
        m.task_layers[0] = (1.5, 0.3)  # an earlier task's layer only reaches the teacher through task 0 here
        m.task_classes[0] = [0]
        teacher_logits = m.teacher(x)[:, :n_old].clone()
        teacher_logits[:, 0] = teacher_logits[:, 0] * 1.5 + 0.3
        logits = m.model(x)
    ce = nnf.cross_entropy(m.mask_unseen(logits), y)
    soft = torch.softmax(teacher_logits / 2.0, dim=1)
    kd = -(soft * torch.log_softmax(logits[:, :n_old] / 2.0, dim=1)).sum(1).mean()
    assert kd.item() > 0.1 * ce.item()
    assert m.step_loss(x, y).item() == pytest.approx((ce + kd).item(), rel=1e-5)
    star, proto_s, _ = built("bic_star", memory_size=48, augment="none")
    assert not star.distill
    # a checkpoint (taken at a task end, where the teacher is the model) brings the teacher back
    from rmconsole.cl.learner import Task

    m.online_task_end(Task(1, proto.tasks[1], len(proto.tasks)))
    resumed, _, _ = built("bic", memory_size=48, augment="none")
    resumed.load_state_dict(copy.deepcopy(m.state_dict()))
    assert resumed.teacher is not None and resumed.teacher_classes == m.teacher_classes == int(m.seen.sum())
    with torch.no_grad():
        assert torch.equal(resumed.teacher(x), m.teacher(x))


def test_bic_refits_the_current_tasks_bias_layer_before_every_evaluation() -> None:
    m, proto, _ = built(
        "bic", tiny_data(per_class=60), memory_size=128, augment="none", bic_anytime_passes=64
    )  # V = 12: one per class once 7 are seen
    feed(m, proto, len(proto.tasks[0]))
    m.online_before_eval()
    assert m.task_layers[0] == (1.0, 0.0) and not m.anytime_fits  # task 0: never fitted
    _next_task(m, proto, 1)
    feed_rest = proto.tasks[1]
    for index in feed_rest.tolist():
        label = int(proto.train_labels[index])
        if not bool(m.seen[label]):
            m.online_new_class(label)
        m.online_observe(index, label)
    assert m.task_classes[1] and m.held_out_full
    new = m.task_classes[1]
    with torch.no_grad():  # make the task's classes over-confident: the layer must learn to shrink them
        m.model.fc.bias[new] += 5.0
    m.online_before_eval()
    alpha, beta = m.task_layers[1]
    assert len(m.anytime_fits) == 1 and beta < 0
    assert torch.allclose(m.alpha[new], torch.tensor(alpha)) and torch.allclose(m.beta[new], torch.tensor(beta))
    others = [c for c in range(m.n_classes) if c not in new]
    assert torch.all(m.alpha[others] == 1) and torch.all(m.beta[others] == 0)
    # the held-out loss fell, and a second evaluation fits afresh from (1, 0): the same layer again
    idx = m.held_out_indices()
    m.model.eval()
    with torch.no_grad():
        raw = m.model(m.setup.augmenter.test(m.images_of(idx)))
    y = m.labels_of(idx)
    assert nnf.cross_entropy(m.mask_unseen(raw * m.alpha + m.beta), y) < nnf.cross_entropy(m.mask_unseen(raw), y)
    m.gen.manual_seed(5)
    m.online_before_eval()
    first = m.task_layers[1]
    m.gen.manual_seed(5)
    m.online_before_eval()
    assert m.task_layers[1] == first


def test_the_kept_stepper_follows_a_replaced_model_and_optimiser() -> None:
    """Task-free methods keep one `train.Stepper` across steps (its MLP step holds the model's
    tensors): when the method's model and optimiser are replaced (GDumb's fresh model per
    evaluation), the next step must train the new model, never the old one's tensors."""
    import copy

    m, proto, _ = built("er", optimizer="sgd", lr=0.05, schedule="constant")
    feed(m, proto, 40)  # some steps: the stepper is set up for the first model
    assert m.stepper.mlp is not None  # the MLP step without autograd is what runs here
    old = m.model
    old_state = {k: v.clone() for k, v in old.state_dict().items()}
    m.model = copy.deepcopy(old)
    m.optimizer = m.make_optimizer()
    new_before = {k: v.clone() for k, v in m.model.state_dict().items()}
    idx = torch.cat(proto.tasks)[:16]
    m.model.train()
    m.step_on(m.setup.augmenter.test(m.images_of(idx)), m.labels_of(idx))
    assert all(torch.equal(v, old_state[k]) for k, v in old.state_dict().items())  # the old model untouched
    moved = [k for k, v in m.model.state_dict().items() if not torch.equal(v, new_before[k])]
    assert "fc.weight" in moved and "features.1.weight" in moved, moved
