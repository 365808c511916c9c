"""OCM (issue 40; Guo et al., ICML 2022), pinned on each mechanism: its 16 transformed copies and
their labels, its similarity, its three InfoNCE losses against the authors' formulas, the step's
composition before and after the first task boundary, the previous model, the compute counted."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as nnf
from support.online_helpers import Recorder, built, config, feed, tiny_data

from rmconsole.cl.learner import Task
from rmconsole.cl.loop import run_protocol
from rmconsole.cl.methods.ocm import (
    N_TRANSFORMS,
    new_data_infonce,
    ocm_similarity,
    ocm_transforms,
    supervised_infonce,
    transform_labels,
)

EPS = 1e-8  # the authors' eps inside their logarithms


def test_the_16_copies_turn_halves_then_the_whole_image() -> None:
    x = torch.arange(2 * 1 * 4 * 6, dtype=torch.float).reshape(2, 1, 4, 6)[:, :, :, :4]  # two 4x4 images
    x = x + torch.tensor([0.0, 100.0])[:, None, None, None]
    copies = ocm_transforms(x)
    assert copies.shape == (16 * 2, 1, 4, 4)
    left, right = x[..., :2], x[..., 2:]
    turn = lambda t: torch.rot90(t, 2, (-2, -1))  # noqa: E731
    inner = [
        x,
        torch.cat([turn(left), right], -1),
        torch.cat([turn(left), turn(right)], -1),
        torch.cat([left, turn(right)], -1),
    ]
    for r in range(4):
        for h in range(4):
            t = 4 * r + h
            assert torch.equal(copies[2 * t : 2 * t + 2], torch.rot90(inner[h], r, (-2, -1))), (r, h)
    assert len({tuple(c.flatten().tolist()) for c in copies}) == 32  # every copy differs
    odd = ocm_transforms(torch.arange(9.0).reshape(1, 1, 3, 3))  # an odd width keeps its middle column
    assert torch.equal(odd[1, 0, :, 1], torch.tensor([1.0, 4.0, 7.0]))
    assert torch.equal(odd[1, 0, :, 0], torch.tensor([6.0, 3.0, 0.0]))


def test_each_copy_is_labelled_by_class_and_transform() -> None:
    y = torch.tensor([3, 0, 3])
    labels = transform_labels(y, 10)
    assert labels.tolist() == [c + 10 * t for t in range(N_TRANSFORMS) for c in (3, 0, 3)]


def test_the_similarity_mixes_projection_cosines_with_a_feature_slice() -> None:
    torch.manual_seed(0)
    z, f = torch.randn(5, 3), torch.randn(5, 8)
    zn, fn = z / z.norm(dim=1, keepdim=True), f / f.norm(dim=1, keepdim=True)
    for offset in (0, 4):
        expected = 0.5 * zn @ zn.T + 0.5 * zn @ fn[:, offset : offset + 3].T
        assert torch.allclose(ocm_similarity(z, f, offset), expected, atol=1e-6)
    assert not torch.allclose(ocm_similarity(z, f, 0), ocm_similarity(z, f, 4))


def _authors_uni(sim: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, tau: float) -> float:
    """Supervised_NT_xent_uni / _pre as their paper code computes them (eps included), by loops."""
    n = len(sim)
    total = 0.0
    for i in range(n):
        top = max(float(v) for v in sim[i])
        e = [math.exp((float(v) - top) / tau) for v in sim[i]]
        pos = [j for j in range(sim.shape[1]) if rows[i] == cols[j]]
        total += sum(-math.log(e[j] / (sum(e) + EPS) + EPS) for j in pos) / (len(pos) + EPS)
    return total / n


def _authors_n(sim: torch.Tensor, labels: torch.Tensor, tau: float) -> float:
    """Supervised_NT_xent_n by loops: the diagonal's exp zeroed, so its -log term is -log(eps)."""
    n, m = len(sim), len(sim) // 2
    loss = [[0.0] * n for _ in range(n)]
    for i in range(n):
        top = max(float(v) for v in sim[i])
        e = [0.0 if j == i else math.exp((float(sim[i, j]) - top) / tau) for j in range(n)]
        for j in range(n):
            loss[i][j] = -math.log(e[j] / (sum(e) + EPS) + EPS)
    supervised = 0.0
    for i in range(n):
        pos = [j for j in range(n) if labels[i] == labels[j]]
        supervised += sum(loss[i][j] for j in pos) / (len(pos) + EPS)
    pair = sum(loss[i][m + i] + loss[m + i][i] for i in range(m)) / n
    return pair + 2 * supervised / n


def test_the_memory_and_previous_model_losses_are_the_authors_supervised_infonce() -> None:
    torch.manual_seed(1)
    sim = torch.randn(6, 6)
    rows = torch.tensor([0, 1, 0, 2, 1, 0])
    cols = torch.tensor([0, 1, 0, 5, 1, 0])  # row 3's label 2 has no column: it adds 0
    for tau in (0.07, 0.5):
        assert float(supervised_infonce(sim, rows, cols, tau)) == pytest.approx(
            _authors_uni(sim, rows, cols, tau), rel=1e-4
        )
    # the row itself is a positive and in the denominator (nothing excluded)
    diag = supervised_infonce(torch.eye(3) * 5, torch.arange(3), torch.arange(3), 1.0)
    assert float(diag) == pytest.approx(-math.log(math.exp(5) / (math.exp(5) + 2)), rel=1e-5)


def test_the_new_data_loss_is_the_authors_without_its_constant_self_term() -> None:
    torch.manual_seed(2)
    labels = torch.tensor([0, 1, 0, 3, 0, 1, 0, 3])  # two views of four rows
    sim = torch.randn(8, 8, requires_grad=True)
    for tau in (0.07, 0.5):  # at 0.07 a row's excluded maximum leaves eps-limited values (their numerics)
        ours = new_data_infonce(sim, labels, tau)
        count = (labels[:, None] == labels[None, :]).sum(1).float()
        constant = 2 * float((-math.log(EPS) / count).mean())  # their diagonal's -log(eps), without gradient
        assert float(ours.detach()) + constant == pytest.approx(_authors_n(sim.detach(), labels, tau), rel=1e-4)
    ours.backward()
    assert sim.grad is not None and torch.all(sim.grad.diagonal() == 0)  # the self-pair takes no part
    # the pair term: a row's other view is its positive even with a label of its own
    lone = torch.tensor([0, 1, 2, 3, 4, 5])
    pair_only = new_data_infonce(torch.eye(6)[[3, 4, 5, 0, 1, 2]] * 10, lone, 1.0)
    assert float(pair_only) < 1e-3


def test_before_the_first_boundary_a_step_is_the_stream_alone_with_its_cross_entropy() -> None:
    m, proto, _ = built("ocm", ocm_memory_batch=6, online_iter=0.25)
    steps = []
    original = m.step_loss

    def spy(x, y):  # type: ignore[no-untyped-def]
        steps.append((len(x), m.stream_count))
        return original(x, y)

    m.step_loss = spy
    feed(m, proto, 24)
    assert m.previous is None and m.memory_count() == 0 and len(m.memory) > 0
    assert steps and all(s == (8, 4) for s in steps)  # 4 stream samples, clean + augmented, no memory
    m.offset = lambda: 7  # type: ignore[method-assign]
    x = m.accel.prepare(m.setup.augmenter.test(m.images_of(proto.tasks[0][:4])))
    y = m.labels_of(proto.tasks[0][:4])
    x2, y2 = torch.cat([x, x.flip(-1)]), torch.cat([y, y])
    m.stream_count = 4
    torch.manual_seed(0)
    loss = original(x2, y2)
    copies = torch.cat([ocm_transforms(x), ocm_transforms(x.flip(-1))])
    f = m.model.features(copies)
    z = m.projection(f)
    ce = nnf.cross_entropy(m.mask_unseen(m.model.fc(f[64:68])), y)  # the augmented view, untransformed
    l_new = new_data_infonce(ocm_similarity(z, f, 7), transform_labels(y, m.n_classes).repeat(2), 0.07)
    assert float(loss) == pytest.approx(float(ce + l_new), rel=1e-4)


def test_after_a_boundary_the_step_adds_memory_infonce_previous_model_mi_and_memory_cross_entropy() -> None:
    m, proto, _ = built("ocm", ocm_memory_batch=6, ocm_memory_per_class=1, online_iter=0.25)
    feed(m, proto, 24)
    m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    assert m.previous is not None
    assert m.memory_count() == min(6, m.n_seen)  # min(ocm_memory_batch, per class x classes seen)
    old = [p.clone() for p in m.previous[0].parameters()]
    steps = []
    original = m.step_loss

    def spy(x, y):  # type: ignore[no-untyped-def]
        steps.append((len(x), m.stream_count, m.memory_count(), min(6, m.n_seen)))
        return original(x, y)

    m.step_loss = spy
    feed(m, proto, 40)
    assert steps and all(s == (2 * (4 + k), 4, k, k) for s in steps for k in [s[2]])
    assert all(torch.equal(a, b) for a, b in zip(old, m.previous[0].parameters()))  # frozen
    assert not torch.equal(old[0], next(m.model.parameters()))  # the model moved
    # the loss, term by term
    m.offset = lambda: 3  # type: ignore[method-assign]
    idx = torch.cat([proto.tasks[0][:4], m.memory.indices[:3]])
    x = m.accel.prepare(m.setup.augmenter.test(m.images_of(idx)))
    y = m.labels_of(idx)
    v = x.flip(-1)
    m.stream_count = 4
    loss = original(torch.cat([x, v]), torch.cat([y, y]))
    tr, lab = ocm_transforms, lambda t: transform_labels(t, m.n_classes)
    f = m.model.features(torch.cat([tr(x[:4]), tr(v[:4]), tr(x[4:]), tr(v[4:])]))
    z = m.projection(f)
    a, b = 16 * 4, 16 * 3
    l_new = new_data_infonce(ocm_similarity(z[: 2 * a], f[: 2 * a], 3), lab(y[:4]).repeat(2), 0.07)
    l_mem = supervised_infonce(
        ocm_similarity(z[2 * a :], f[2 * a :], 3), lab(y[4:]).repeat(2), lab(y[4:]).repeat(2), 0.07
    )
    old_model, old_head = m.previous
    with torch.no_grad():
        z_old = old_head(old_model.features(tr(x[4:])))
    l_pre = supervised_infonce(
        nnf.normalize(z[2 * a : 2 * a + b], dim=1) @ nnf.normalize(z_old, dim=1).T, lab(y[4:]), lab(y[4:]), 0.07
    )
    ce = nnf.cross_entropy(m.mask_unseen(m.model.fc(f[2 * a + b : 2 * a + b + 3])), y[4:])
    assert float(loss) == pytest.approx(float(l_new + l_mem + l_pre + ce), rel=1e-4)
    assert float(l_pre) > 0 and float(l_mem) > 0


def test_the_copies_and_the_previous_model_are_counted_as_compute() -> None:
    from rmconsole.cl.compute import ledger_of

    m, proto, _ = built("ocm", ocm_memory_batch=6, ocm_memory_per_class=1, online_iter=0.25)
    feed(m, proto, 8)  # steps of 4 stream samples, clean + augmented
    counts = dict(ledger_of(m).counts)
    shape = tuple(m.setup.data.image_shape)
    assert counts[("train", (8, *shape))] == counts[("train", (16 * 8 - 8, *shape))] == m.online_steps > 0
    m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    before = m.online_steps
    feed(m, proto, 4)
    n_mem, steps = m.memory_count(), m.online_steps - before
    counts = dict(ledger_of(m).counts)
    assert counts[("forward", (16 * n_mem, *shape))] == steps > 0  # the previous model on the memory's copies
    assert counts[("train", (32 * (4 + n_mem) - 2 * (4 + n_mem), *shape))] == steps


def test_the_head_keeps_a_new_class_row_and_the_projection_learns() -> None:
    m, proto, _ = built("ocm", online_iter=0.25)
    head = m.projection.weight.detach().clone()
    feed(m, proto, 8)
    assert not torch.equal(head, m.projection.weight)
    unseen = int((~m.seen).nonzero()[0])
    row = m.model.fc.weight[unseen].detach().clone()
    m.online_new_class(unseen)
    assert torch.equal(m.model.fc.weight[unseen], row)


def test_the_state_round_trips_with_its_previous_model() -> None:
    m, proto, _ = built("ocm", ocm_memory_batch=4, online_iter=0.25)
    state = m.state_dict()
    fresh, _, _ = built("ocm", ocm_memory_batch=4, online_iter=0.25)
    fresh.load_state_dict(state)
    assert fresh.previous is None
    feed(m, proto, 8)
    m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    feed(m, proto, 4)
    fresh.load_state_dict(m.state_dict())
    assert fresh.previous is not None and m.previous is not None
    for mine, theirs in [(m.projection, fresh.projection), *zip(m.previous, fresh.previous)]:
        assert all(torch.equal(a, b) for a, b in zip(mine.state_dict().values(), theirs.state_dict().values()))
    assert not any(p.requires_grad for p in fresh.previous[0].parameters())


def test_its_shape_requirements_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="ocm_projection 400 must be below the model's feature width 400"):
        built("ocm", ocm_projection=400)


@pytest.mark.slow  # a whole task-free run; the mechanics above are the default suite's
def test_ocm_runs_the_protocol_to_its_end() -> None:
    rec = Recorder()
    cfg = config(method="ocm", eval_period=60, ocm_memory_batch=8)
    outcomes = run_protocol(cfg, tiny_data(per_class=16), torch.device("cpu"), rec)
    assert len(outcomes) == 5 and rec.points and all(0 <= p.accuracy <= 100 for p in rec.points)
    assert rec.points[-1].accuracy > 30


def test_its_replay_steps_make_no_host_sync() -> None:
    """test_step_syncs.py audits steps before the first boundary; this one those after it (the
    memory's copies, the previous model, the feature-slice offsets drawn on the host)."""
    from rmconsole.cl.online import feed as driver_feed
    from rmconsole.cl.step_audit import StepAudit

    m, proto, _ = built("ocm", ocm_memory_batch=6, online_iter=0.25)
    feed(m, proto, 16)
    m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    feed(m, proto, 4)  # the first replay step allocates
    stream = torch.cat(proto.tasks)[20:28]
    pairs = list(zip(stream.tolist(), proto.train_labels[stream].tolist()))
    audit = StepAudit().mark_method(m)
    before = m.online_steps
    with audit:
        for index, label in pairs:
            driver_feed(m, index, label)
    assert m.online_steps - before == 2 and m.memory_count() > 0
    assert not audit.syncs, dict(audit.where)


def test_the_copies_turn_every_channel_alike() -> None:
    x = torch.rand(2, 3, 4, 4)
    copies = ocm_transforms(x)
    for c in range(3):
        assert torch.equal(copies[:, c : c + 1], ocm_transforms(x[:, c : c + 1]))


def test_the_feature_slice_offsets_are_the_methods_own_draws_over_their_whole_range() -> None:
    m, _, _ = built("ocm", ocm_projection=396)  # offsets in [0, 4)
    state = m.gen.get_state()
    torch.manual_seed(0)
    first = [m.offset() for _ in range(40)]
    m.gen.set_state(state)
    torch.manual_seed(1)  # the global generator plays no part
    assert [m.offset() for _ in range(40)] == first
    assert set(first) == {0, 1, 2, 3}


def test_steps_train_in_train_mode_after_an_evaluation_and_the_previous_model_too() -> None:
    m, proto, _ = built("ocm", ocm_memory_batch=4, online_iter=0.25)
    feed(m, proto, 8)
    m.model.eval()  # an evaluation, then the task boundary's snapshot
    m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    modes = []
    original = m.step_loss

    def spy(x, y):  # type: ignore[no-untyped-def]
        loss = original(x, y)
        modes.append((m.model.training, m.previous[0].training))
        return loss

    m.step_loss = spy
    feed(m, proto, 4)
    assert modes == [(True, True)]  # batch statistics in both, as the authors' copies run


def test_after_a_boundary_a_step_without_memory_samples_is_the_streams_loss() -> None:
    m, proto, _ = built("ocm", ocm_memory_batch=4, online_iter=0.25)
    feed(m, proto, 8)
    m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    m.offset = lambda: 2  # type: ignore[method-assign]
    x = m.accel.prepare(m.setup.augmenter.test(m.images_of(proto.tasks[0][:4])))
    y = m.labels_of(proto.tasks[0][:4])
    m.stream_count = 4
    loss = m.step_loss(torch.cat([x, x.flip(-1)]), torch.cat([y, y]))
    f = m.model.features(torch.cat([ocm_transforms(x), ocm_transforms(x.flip(-1))]))
    z = m.projection(f)
    ce = nnf.cross_entropy(m.mask_unseen(m.model.fc(f[64:68])), y)
    l_new = new_data_infonce(ocm_similarity(z, f, 2), transform_labels(y, m.n_classes).repeat(2), 0.07)
    assert torch.isfinite(loss) and float(loss) == pytest.approx(float(ce + l_new), rel=1e-4)


def test_a_captured_step_reads_its_offsets_as_data_and_keeps_its_previous_models_tensors() -> None:
    """Inside a CUDA graph the feature slice's offset is a device tensor (the same columns as the
    host's int), and a later boundary writes the previous model into the tensors a graph captured."""
    zn, fn = nnf.normalize(torch.randn(6, 4), dim=1), nnf.normalize(torch.randn(6, 10), dim=1)
    for offset in (0, 3, 6):
        assert torch.allclose(
            ocm_similarity(zn, fn, torch.tensor(offset)), ocm_similarity(zn, fn, offset), rtol=0, atol=1e-6
        )
    m, proto, _ = built("ocm", ocm_memory_batch=4, online_iter=0.25)
    feed(m, proto, 8)
    m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    assert m.previous is not None
    kept = [t for module in m.previous for t in module.state_dict().values()]
    feed(m, proto, 8)
    m.online_task_end(Task(1, proto.tasks[1], len(proto.tasks)))
    now = [t for module in m.previous for t in module.state_dict().values()]
    assert all(a is b or a.data_ptr() == b.data_ptr() for a, b in zip(kept, now))
    theirs = [*m.model.state_dict().values(), *m.projection.state_dict().values()]
    assert all(torch.equal(a, b) for a, b in zip(now, theirs, strict=True))


def test_a_step_slices_at_the_offsets_its_step_key_drew_and_draws_no_more() -> None:
    """`step_key` draws the step's offsets (stream block, memory block) before the step; the eager
    step slices at exactly those and draws nothing itself (an extra draw would shift every later
    step's offsets away from the graphed run's)."""
    m, proto, _ = built("ocm", ocm_memory_batch=4, online_iter=0.25)
    feed(m, proto, 8)
    m.online_task_end(Task(0, proto.tasks[0], len(proto.tasks)))
    idx = torch.cat([proto.tasks[0][:4], m.memory.indices[:3]])
    x = m.accel.prepare(m.setup.augmenter.test(m.images_of(idx)))
    y = m.labels_of(idx)
    batch = (torch.cat([x, x.flip(-1)]), torch.cat([y, y]))
    m.stream_count = 4
    state = m.gen.get_state()
    expected = [m.offset() for _ in range(3)]  # the step's two, then the next step's first
    m.gen.set_state(state)
    m.step_key(*batch)
    held = [m.offsets.at(i, graphed=False) for i in range(len(m.offsets))]
    assert held == expected[:2] and m.offsets.data.tolist() == expected[:2]
    used = []
    original = m.step_offset

    def spy(i):  # type: ignore[no-untyped-def]
        used.append(original(i))
        return used[-1]

    m.step_offset = spy  # type: ignore[method-assign]
    m.step_loss(*batch)
    assert used == expected[:2]
    assert len(m.offsets) == 0  # used up: a direct call of step_loss draws afresh
    assert m.offset() == expected[2]  # the step drew nothing beyond step_key's two
