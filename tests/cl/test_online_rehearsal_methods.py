"""The online rehearsal methods of 2022-2023 (issue 40): PCR, each pinned on its defining mechanism."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as nnf
from support.online_helpers import Recorder, built, config, feed, tiny_data

from rmconsole.cl.loop import run_protocol

# ------------------------------------------------------------------------------ PCR


def test_pcr_loss_contrasts_each_anchor_with_the_proxies_of_the_batch_only() -> None:
    from rmconsole.cl.methods.pcr import proxy_contrastive_loss

    torch.manual_seed(0)
    features = torch.randn(5, 3)
    proxies = torch.randn(6, 3, requires_grad=True)  # 6 classes; the batch holds 0, 0, 2, 2, 4
    y = torch.tensor([0, 0, 2, 4, 2])
    tau = 0.5
    loss = proxy_contrastive_loss(features, proxies, y, tau)
    # by hand: anchor i against the proxy of every sample j (a class once per sample of it)
    z = features / features.norm(dim=1, keepdim=True)
    w = proxies.detach() / proxies.detach().norm(dim=1, keepdim=True)
    expected = 0.0
    for i in range(5):
        terms = [math.exp(float(z[i] @ w[int(y[j])]) / tau) for j in range(5)]
        expected -= math.log(math.exp(float(z[i] @ w[int(y[i])]) / tau) / sum(terms))
    assert float(loss.detach()) == pytest.approx(expected / 5, rel=1e-5)
    loss.backward()
    assert proxies.grad is not None
    assert torch.all(proxies.grad[[1, 3, 5]] == 0)  # classes absent from the batch: neither pushed nor pulled
    assert torch.all(proxies.grad[[0, 2, 4]].abs().sum(1) > 0)
    scale = proxy_contrastive_loss(features, proxies.detach() * 3.0, y, tau)
    assert float(scale) == pytest.approx(float(loss.detach()), rel=1e-5)  # cosine: the proxies' norms do not count


def test_pcr_loss_falls_as_features_align_with_their_proxy() -> None:
    from rmconsole.cl.methods.pcr import proxy_contrastive_loss

    proxies = torch.eye(3)
    y = torch.tensor([0, 1, 2])
    aligned = proxy_contrastive_loss(torch.eye(3) * 4.0, proxies, y, 0.1)
    swapped = proxy_contrastive_loss(torch.eye(3)[[1, 2, 0]], proxies, y, 0.1)
    assert float(aligned) < 1e-3 < float(swapped)
    # temperature: a lower one sharpens (aligned loss even smaller, misaligned larger)
    assert float(proxy_contrastive_loss(torch.eye(3)[[1, 2, 0]], proxies, y, 0.05)) > float(swapped)


def test_pcr_predicts_the_nearest_proxy_by_cosine_among_seen_classes() -> None:
    m, proto, _ = built("pcr")
    feed(m, proto, 48)
    x = m.setup.augmenter.test(m.images_of(torch.cat(proto.tasks)[48:80]))
    with torch.no_grad():
        m.model.fc.bias.copy_(torch.linspace(-50, 50, m.n_classes))  # the bias is not PCR's classifier
    pred = m.predict(x)
    m.model.eval()
    with torch.no_grad():
        f = nnf.normalize(m.model.features(x), dim=1)
        w = nnf.normalize(m.model.fc.weight, dim=1)
        scores = (f @ w.T).masked_fill(~m.seen, -1e9)
    assert pred.tolist() == scores.argmax(1).tolist()
    assert set(pred.tolist()) <= set(m.seen.nonzero().flatten().tolist())
    scaled = m.class_scores(x)
    assert torch.allclose(scaled[:, m.seen], (f @ w.T)[:, m.seen] / m.params.pcr_temperature, atol=1e-4)


def test_pcr_trains_two_views_of_stream_plus_memory_and_keeps_a_new_class_proxy() -> None:
    m, proto, _ = built("pcr")
    steps = []
    original = m.step_loss

    def spy(x, y):  # type: ignore[no-untyped-def]
        steps.append(len(x))
        assert torch.equal(y[: len(y) // 2], y[len(y) // 2 :])  # each sample twice
        return original(x, y)

    m.step_loss = spy
    before = m.model.fc.weight.detach().clone()
    stream = feed(m, proto, 40)
    assert steps[0] == 8 and steps[-1] == 16  # 4 stream (x2) while the memory is empty, then 4 + 4 (x2)
    assert not torch.equal(m.model.fc.weight, before)  # the proxies learn
    unseen = int((~m.seen).nonzero()[0])
    row = m.model.fc.weight[unseen].detach().clone()
    assert torch.equal(row, before[unseen])  # a class no batch has held: its proxy untouched
    m.online_new_class(unseen)
    assert torch.equal(m.model.fc.weight[unseen], row)  # and kept as it is at its arrival
    assert len(stream) == 40


@pytest.mark.slow  # a whole task-free run (6-9 s); the mechanics above are the default suite's
def test_pcr_runs_the_protocol_to_its_end() -> None:
    rec = Recorder()
    outcomes = run_protocol(config(method="pcr", eval_period=60), tiny_data(per_class=16), torch.device("cpu"), rec)
    assert len(outcomes) == 5 and rec.points and all(0 <= p.accuracy <= 100 for p in rec.points)
    assert rec.points[-1].accuracy > 30  # it learns: chance on 10 classes is 10


# ------------------------------------------------------------------------------ GSA


def test_gsa_weight_is_its_gradient_ratio_through_the_authors_sigmoid() -> None:
    from rmconsole.cl.methods.gsa import gsa_class_weights

    count = torch.tensor([4.0, 2.0, 3.0])
    positive = torch.tensor([3.0, 1.0, 0.0])  # sum of p_c over class c's samples
    negative = torch.tensor([1.0, 2.0, 1.5])  # sum of p_c over the other classes' samples
    w = gsa_class_weights(count, positive, negative)
    ant = torch.tensor([1.0, 0.5, 2.0])  # (N - pos) / neg
    assert torch.allclose(w, 2 / (1 + torch.exp(1 - ant)))
    assert float(w[0]) == pytest.approx(1.0) and float(w[1]) < 1.0 < float(w[2])
    small = gsa_class_weights(torch.tensor([1.0, 1.0]), torch.tensor([0.5, 0.5]), torch.tensor([0.25, 0.0]))
    assert float(small[0]) == pytest.approx(2 / (1 + math.exp(1 - 2.0)))  # a negative sum under 1 is used as is
    assert float(small[1]) == pytest.approx(2.0)  # none: the ratio is huge, the weight its bound 2


def test_gsa_new_class_loss_touches_only_the_new_classes_and_their_rows() -> None:
    from rmconsole.cl.methods.gsa import new_class_loss

    new = torch.tensor([False, False, True, True, False])
    logits = torch.randn(4, 5, requires_grad=True)
    y = torch.tensor([2, 3, 0, 2])  # row 2 is an earlier class (a blurry minority sample)
    loss = new_class_loss(logits, y, new)
    loss.backward()
    g = logits.grad
    assert g is not None
    assert torch.all(g[:, [0, 1, 4]] == 0)  # the earlier classes' logits are never pushed
    assert torch.all(g[2] == 0)  # nor trained on from a row of an earlier class
    rows = torch.tensor([0, 1, 3])
    expected = nnf.cross_entropy(logits.detach()[rows][:, 2:4], y[rows] - 2)
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    one = new_class_loss(logits.detach(), torch.tensor([3, 0, 1, 4]), new)  # one row of a new class
    assert float(one) == pytest.approx(float(nnf.cross_entropy(logits.detach()[:1, 2:4], torch.tensor([1]))), rel=1e-5)
    none = new_class_loss(logits.detach(), torch.tensor([0, 1]).repeat(2), new)
    assert float(none) == 0.0  # no row of a new class: no loss (and no division by zero)


def test_gsa_replay_loss_weights_each_target_by_its_class() -> None:
    from rmconsole.cl.methods.gsa import weighted_replay_loss

    logits = torch.randn(3, 4)
    y = torch.tensor([0, 2, 2])
    w = torch.tensor([0.5, 9.0, 1.5, 9.0])
    log_p = nnf.log_softmax(logits, dim=1)
    expected = -(0.5 * log_p[0, 0] + 1.5 * log_p[1, 2] + 1.5 * log_p[2, 2]) / 3
    assert float(weighted_replay_loss(logits, y, w)) == pytest.approx(float(expected), rel=1e-5)


def test_gsa_step_accumulates_the_gradient_statistics_and_weights_after_the_warm_up() -> None:
    m, proto, _ = built("gsa", gsa_warmup_steps=1)
    feed(m, proto, 24)
    m.count.zero_(), m.positive.zero_(), m.negative.zero_()
    m.seen[:4] = True
    m.new.zero_()
    m.new[2:4] = True
    m.task_steps = 0
    torch.manual_seed(1)
    x = torch.randn(7, 1, 8, 8)
    y = torch.tensor([2, 3, 2, 0, 1, 3, 0])  # A = 3 rows, B = 4 rows
    m.stream_count = 3

    def expected(weight: torch.Tensor) -> float:
        with torch.no_grad():
            logits = m.model(x)
            mixed = m.mask_unseen(logits[3:])
            log_p = nnf.log_softmax(mixed, dim=1)[torch.arange(4), y[3:]]
            l_p = nnf.cross_entropy(logits[:3, 2:4], y[:3] - 2)
        return float(2 * -(weight[y[3:]] * log_p).mean() + l_p)

    m.step_key(x, y)  # the step's host side (train.Stepper calls it before each step)
    first = m.step_loss(x, y)  # warm-up: weight 1
    assert float(first.detach()) == pytest.approx(expected(torch.ones(m.n_classes)), rel=1e-4)
    with torch.no_grad():
        p = torch.softmax(m.mask_unseen(m.model(x)[3:]), dim=1)
    onehot = nnf.one_hot(y[3:], m.n_classes).float()
    assert torch.allclose(m.count, onehot.sum(0))
    assert torch.allclose(m.positive, (p * onehot).sum(0), atol=1e-6)
    assert torch.allclose(m.negative, (p * (1 - onehot)).sum(0), atol=1e-6)
    m.step_key(x, y)
    second = m.step_loss(x, y)  # past the warm-up: the ratio's weights over both steps' sums
    ant = (2 * onehot.sum(0) - 2 * (p * onehot).sum(0)) / (2 * (p * (1 - onehot)).sum(0)).clamp_min(1e-12)
    weight = 2 / (1 + torch.exp(1 - ant))
    assert float(second.detach()) == pytest.approx(expected(weight), rel=1e-4)
    assert m.task_steps == 2
    m.stream_count = 7
    with torch.no_grad():
        alone = nnf.cross_entropy(m.model(x)[[0, 1, 2, 5]][:, 2:4], y[[0, 1, 2, 5]] - 2)
    m.step_key(x, y)
    assert float(m.step_loss(x, y).detach()) == pytest.approx(float(alone), rel=1e-4)  # A alone: L_p only
    assert float(m.count.sum()) == 8.0


def test_gsa_batches_are_current_task_data_then_the_mixed_batch() -> None:
    m, proto, _ = built("gsa", gsa_current_memory=3, gsa_mixed_batch=6)
    from rmconsole.cl.learner import Task

    seen_batches: list[tuple[list[int], list[int]]] = []
    original = m.train_batches

    def spy(b, stream_counts=None, lr=None):  # type: ignore[no-untyped-def]
        seen_batches.extend((x.tolist(), [n]) for x, n in zip(b, stream_counts))
        return original(b, stream_counts, lr)

    m.train_batches = spy
    feed(m, proto, 4)
    assert seen_batches[0] == (torch.cat(proto.tasks)[:4].tolist(), [4])  # the memory empty: A = the stream
    feed(m, proto, 36)
    m.online_task_end(Task(0, proto.tasks[0], 5))
    m.online_task_start(Task(1, proto.tasks[1], 5))
    assert m.new_host == set() and not bool(m.new.any())
    earlier = set(m.memory.indices.tolist())
    assert all(t == 0 for t in m.slot_task)
    seen_batches.clear()
    stream = proto.tasks[1][:4].tolist()
    for index in stream:
        label = int(proto.train_labels[index])
        if not bool(m.seen[label]):
            m.online_new_class(label)
        m.online_observe(index, label)
    (batch, (n_a,)) = seen_batches[0]
    n_seen, n_new = int(m.seen.sum()), len(m.new_host)
    rate = n_new / n_seen
    assert n_a == 4 and batch[:4] == stream  # no memory sample of task 1 yet
    prev, cur = batch[4 : 4 + int(6 * (1 - rate))], batch[4 + int(6 * (1 - rate)) :]
    assert set(prev) <= earlier and len(prev) == int(6 * (1 - rate))
    assert cur == stream[: int(6 * rate)]
    assert all(t in (0, 1) for t in m.slot_task) and 1 in m.slot_task  # the newcomers tagged with task 1


def test_gsa_online_train_composes_its_two_parts_from_the_task_tags() -> None:
    from rmconsole.cl.learner import Task

    m, proto, _ = built("gsa", gsa_current_memory=1, gsa_mixed_batch=6)
    m.task_steps = 7
    m.online_task_start(Task(1, proto.tasks[1], 5))
    assert m.task_index == 1 and m.task_steps == 0 and m.new_host == set()
    for label in (0, 1):  # seen in task 0
        m.seen_set.add(label)
    m.task_index = 0
    for index, label in [(100, 0), (101, 0), (102, 1), (103, 1)]:
        m.online_store(index, label)
    m.task_index = 1
    m.online_new_class(2)
    assert bool(m.new[2]) and m.new_host == {2} and m.seen_set == {0, 1, 2} and int(m.new.sum()) == 1
    m.online_store(104, 2)
    assert m.slot_task == [0, 0, 0, 0, 1]
    batches: list[tuple[list[int], int]] = []
    m.train_batches = lambda b, counts=None, lr=None: batches.extend(zip([x.tolist() for x in b], counts))
    state = m.gen.get_state()
    m.online_train(torch.tensor([200, 201, 202, 203]), 1)
    assert not torch.equal(m.gen.get_state(), state)  # the draws come from the method's generator
    ((batch, n_a),) = batches
    assert n_a == 5 and batch[:5] == [200, 201, 202, 203, 104]  # A: the stream + 1 current-task sample
    rate = 1 / 3  # one new class of three seen
    assert sorted(batch[5 : 5 + int(6 * (1 - rate))]) == [100, 101, 102, 103]  # B: 4 of the earlier tasks
    assert batch[5 + int(6 * (1 - rate)) :] == [200, 201]  # and int(6 r) = 2 of A
    # one class seen, new in this task, one memory sample (of task 0): B is the current data alone
    m2, _, _ = built("gsa", gsa_current_memory=0, gsa_mixed_batch=6)
    m2.task_index = 0
    m2.online_store(100, 0)
    m2.task_index = 1
    m2.online_new_class(0)
    batches.clear()
    m2.train_batches = lambda b, counts=None, lr=None: batches.extend(zip([x.tolist() for x in b], counts))
    m2.online_train(torch.tensor([200, 201, 202]), 2)
    assert batches == [([200, 201, 202, 200, 201, 202], 3)] * 2  # rate 1: no earlier sample, A[:6]


def test_gsa_state_round_trips_through_a_checkpoint() -> None:
    from rmconsole.cl.learner import Task

    m, proto, _ = built("gsa")
    feed(m, proto, 40)
    m.online_task_start(Task(1, proto.tasks[1], 5))
    stream = proto.tasks[1][:12].tolist()
    for index in stream:
        label = int(proto.train_labels[index])
        if not bool(m.seen[label]):
            m.online_new_class(label)
        m.online_observe(index, label)
    state = m.state_dict()
    fresh, _, _ = built("gsa")
    fresh.load_state_dict(state)
    for key in ("count", "positive", "negative", "new"):
        assert torch.equal(getattr(fresh, key), getattr(m, key)), key
    assert float(m.count.sum()) > 0 and bool(m.new.any())
    assert fresh.new_host == m.new_host and fresh.seen_set == m.seen_set
    assert fresh.slot_task == m.slot_task and 1 in fresh.slot_task
    assert (fresh.task_index, fresh.task_steps) == (m.task_index, m.task_steps) == (1, m.task_steps)
    assert m.task_steps > 0


@pytest.mark.slow  # a whole task-free run (6-9 s); the mechanics above are the default suite's
def test_gsa_runs_the_protocol_to_its_end() -> None:
    rec = Recorder()
    outcomes = run_protocol(config(method="gsa", eval_period=60), tiny_data(per_class=16), torch.device("cpu"), rec)
    assert len(outcomes) == 5 and rec.points and all(0 <= p.accuracy <= 100 for p in rec.points)
    assert rec.points[-1].accuracy > 30
