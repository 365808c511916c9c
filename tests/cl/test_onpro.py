"""OnPro (issue 40; Wei et al., ICCV 2023): each mechanism pinned on its own — the 16 rotations,
OCM's instance-wise loss, OPE's prototype loss, APF's pair weights and mixing — then the step
that composes them in the first task and after it, the batches, the head and the checkpoint."""

from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as nnf
from support.online_helpers import built, feed

from rmconsole.cl.compute import ledger_of
from rmconsole.cl.learner import Task
from rmconsole.cl.methods import onpro as op

SMALL = {"onpro_memory_batch": 8, "onpro_projection": 16}  # the tests' cost (the mechanics are the same)


def test_onpro_rotations_are_the_four_half_turns_under_the_four_quarter_turns() -> None:
    x = torch.arange(2 * 16, dtype=torch.float32).view(2, 1, 4, 4)
    r = op.rotations(x)
    assert r.shape == (32, 1, 4, 4)
    left_turned = x.clone()
    left_turned[..., :2] = x[..., :2].flip(-1).flip(-2)  # the left half turned by 180 degrees in place
    right_turned = x.clone()
    right_turned[..., 2:] = x[..., 2:].flip(-1).flip(-2)
    both = left_turned.clone()
    both[..., 2:] = right_turned[..., 2:]
    halves = [x, left_turned, both, right_turned]
    for q, k in enumerate((0, 2, 1, 3)):  # 0, 180, 90, 270 degrees
        for h, base in enumerate(halves):
            block = r[(4 * q + h) * 2 : (4 * q + h + 1) * 2]
            assert torch.equal(block, torch.rot90(base, k, (2, 3))), (q, h)
    assert len({tuple(b.flatten().tolist()) for b in r[::2]}) == 16  # 16 different views
    y = torch.tensor([3.0, 7.0])
    labels = op.rotation_labels(y, 10)
    assert labels.tolist() == [v + 10 * rr for rr in range(16) for v in (3.0, 7.0)]


def _nt_xent_by_hand(sim: torch.Tensor, labels: torch.Tensor, t: float, without_self: bool) -> float:
    n = len(sim)
    b = n // 2
    both = labels.tolist() * 2
    total = 0.0
    nll = [[0.0] * n for _ in range(n)]
    for i in range(n):
        m = max(float(v) for v in sim[i])
        e = [0.0 if (without_self and i == j) else math.exp((float(sim[i, j]) - m) / t) for j in range(n)]
        den = sum(e)
        for j in range(n):
            nll[i][j] = -math.log(e[j] / (den + 1e-8) + 1e-8)
    for i in range(n):
        same = [j for j in range(n) if both[j] == both[i]]
        total += sum(nll[i][j] for j in same) / (len(same) + 1e-8)
    loss = total / (2 * b)
    if not without_self:
        return loss
    return 2 * loss + sum(nll[i][i + b] + nll[i + b][i] for i in range(b)) / (2 * b)


@pytest.mark.parametrize("without_self", [True, False])
def test_onpro_instance_loss_is_ocms_nt_xent(without_self: bool) -> None:
    torch.manual_seed(0)
    sim = torch.randn(6, 6)
    labels = torch.tensor([1.0, 2.0, 1.0])
    got = op.instance_loss(sim, labels, 0.5, without_self)
    assert float(got) == pytest.approx(_nt_xent_by_hand(sim, labels, 0.5, without_self), rel=1e-5)
    other = op.instance_loss(sim, labels, 0.25, without_self)
    assert float(other) != pytest.approx(float(got), rel=1e-3)  # the temperature counts


def test_onpro_similarity_is_projection_self_plus_cut_features() -> None:
    torch.manual_seed(1)
    z, f = torch.randn(5, 3), torch.randn(5, 8)
    sim = op.similarity(z, f, 2, 0.5)
    assert torch.allclose(sim, 0.5 * (z @ f[:, 2:5].T + z @ z.T))


def _ope_by_hand(z1: torch.Tensor, z2: torch.Tensor, y: list[int], t: float) -> float:
    classes = sorted(set(y))
    protos = []
    for view in (z1, z2):
        for c in classes:
            rows = [i for i, v in enumerate(y) if v == c]
            protos.append(nnf.normalize(view[rows].mean(0), dim=0))
    k = len(classes)
    loss = 0.0
    for i in range(2 * k):
        pos = (i + k) % (2 * k)
        den = sum(math.exp(float(protos[i] @ protos[j]) / t) for j in range(2 * k) if j != i)
        loss -= float(protos[i] @ protos[pos]) / t - math.log(den)
    return loss / (2 * k)


def test_onpro_prototype_loss_contrasts_the_present_classes_prototypes_across_views() -> None:
    torch.manual_seed(2)
    z1, z2 = nnf.normalize(torch.randn(7, 4), dim=1), nnf.normalize(torch.randn(7, 4), dim=1)
    y = [4, 1, 4, 2, 1, 1, 4]  # classes 1, 2, 4 of 6 present
    loss, mean, present = op.prototype_loss(z1, z2, torch.tensor(y), 6, 0.5)
    assert float(loss) == pytest.approx(_ope_by_hand(z1, z2, y, 0.5), rel=1e-5)
    assert present.tolist() == [False, True, True, False, True, False]
    rows = [0, 2, 6]
    assert torch.allclose(mean[4], (z1[rows].mean(0) + z2[rows].mean(0)) / 2, atol=1e-6)
    assert torch.all(mean[[0, 3, 5]] == 0)
    assert float(op.prototype_loss(z1, z2, torch.tensor(y), 6, 0.1)[0]) != pytest.approx(float(loss), rel=1e-3)
    one, _, _ = op.prototype_loss(z1[:2], z2[:2], torch.tensor([3, 3]), 6, 0.5)
    assert float(one) == pytest.approx(0.0, abs=1e-6)  # one class: its prototypes' only other is the positive
    aligned, _, _ = op.prototype_loss(torch.eye(3), torch.eye(3), torch.tensor([0, 1, 2]), 3, 0.5)
    crossed, _, _ = op.prototype_loss(torch.eye(3), torch.eye(3)[[1, 2, 0]], torch.tensor([0, 1, 2]), 3, 0.5)
    assert float(aligned) < float(crossed)  # equilibrium: a class's two views pulled together


def test_onpro_pair_logits_weigh_close_prototypes_up_among_present_classes() -> None:
    protos = torch.tensor([[0.0, 0.0], [1.0, 0.0], [9.0, 9.0], [0.0, 4.0]])
    present = torch.tensor([True, True, False, True])
    logits = op.pair_logits(protos, present)
    expected = torch.full((4, 4), float("-inf"))
    expected[0, 1], expected[0, 3], expected[1, 3] = 1.0, 0.25, 1 / math.sqrt(17)
    assert torch.allclose(logits, expected)
    alone = op.pair_logits(protos, torch.tensor([False, True, False, False]))
    itself = torch.full((4, 4), float("-inf"))
    itself[1, 1] = 0.0
    assert torch.equal(alone, itself)  # one class: mixed with itself


def _draws(n_memory: int, n_classes: int, **over: torch.Tensor) -> op.FeedbackDraws:
    cfg = op.OnProParams(onpro_mixup_base_rate=0.5)
    d = op.draw_feedback(n_memory, cfg, n_classes, torch.Generator().manual_seed(0), random.Random(0))
    for key, value in over.items():
        setattr(d, key, value)
    return d


def test_onpro_feedback_mixes_the_base_share_with_partners_and_the_rest_by_class_pairs() -> None:
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    x1 = torch.arange(6, dtype=torch.float32).view(6, 1, 1, 1) * 10
    x2 = x1 + 1
    protos = torch.tensor([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0]])
    present = torch.tensor([True, True, True])
    d = _draws(
        6,
        3,
        partner=torch.tensor([2, 0, 1]),
        base_coin=torch.tensor([0.1, 0.9, 0.1]),
        base_weight=torch.tensor([0.3, 0.4, 0.5]),
        pair_coin=torch.zeros(9),
        pair_weight=torch.tensor([0.25, 0.5, 0.75]),
    )
    m1, m2, y_a, y_b, lam = op.feedback_mix((x1, x2), y, protos, present, d, 0.6)
    assert lam[:3].tolist() == pytest.approx([0.3, 0.0, 0.5])  # the coin: row 1 not mixed
    assert y_a[:3].tolist() == [0, 1, 2] and y_b[:3].tolist() == [2, 0, 1]
    assert float(m1[0]) == pytest.approx(0.7 * 0 + 0.3 * 20) and float(m2[0]) == pytest.approx(0.7 * 1 + 0.3 * 21)
    assert float(m1[1]) == pytest.approx(10.0)
    assert lam[3:].tolist() == pytest.approx([0.25, 0.5, 0.75])
    for i in range(3, 6):  # a sample of class a mixed with one of class b, a < b, both present
        assert int(y_a[i]) < int(y_b[i])
        a_rows = [j for j in range(6) if int(y[j]) == int(y_a[i])]
        b_rows = [j for j in range(6) if int(y[j]) == int(y_b[i])]
        assert any(
            float(m1[i]) == pytest.approx((1 - float(lam[i])) * float(x1[ra]) + float(lam[i]) * float(x1[rb]))
            for ra in a_rows
            for rb in b_rows
        )
    off = _draws(6, 3, pair_coin=torch.ones(9))
    assert torch.all(op.feedback_mix((x1, x2), y, protos, present, off, 0.6)[4][3:] == 0)  # the pair's coin


def test_onpro_feedback_draws_pairs_by_softmax_of_inverse_distance() -> None:
    protos = torch.tensor([[0.0, 0.0], [0.5, 0.0], [0.0, 2.0]])
    present = torch.tensor([True, True, True])
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    x = torch.zeros(6, 1, 1, 1)
    d = op.draw_feedback(
        1500, op.OnProParams(onpro_mixup_base_rate=0.0), 3, torch.Generator().manual_seed(3), random.Random(3)
    )
    d.row_a, d.row_b = torch.rand(1500, 6), torch.rand(1500, 6)
    _, _, y_a, y_b, _ = op.feedback_mix((x, x), y, protos, present, d, 0.6)
    inv = torch.tensor([1 / 0.5, 1 / 2.0, 1 / math.sqrt(4.25)])  # pairs (0,1), (0,2), (1,2)
    expected = torch.softmax(inv, 0)
    pairs = y_a * 3 + y_b
    freq = torch.tensor([float((pairs == k).float().mean()) for k in (1, 2, 5)])
    assert torch.allclose(freq, expected, atol=0.04)
    assert float(freq.sum()) == pytest.approx(1.0)


def test_onpro_draws_have_the_authors_ranges() -> None:
    cfg = op.OnProParams(onpro_mixup_upper=0.6, onpro_mixup_alpha=0.4, onpro_mixup_base_rate=0.75)
    d = op.draw_feedback(64, cfg, 5, torch.Generator().manual_seed(0), random.Random(0))
    assert len(d.partner) == 48 and sorted(d.partner.tolist()) == list(range(48))
    assert d.pair_noise.shape == (16, 25) and d.row_a.shape == (16, 64) and d.pair_coin.shape == (25,)
    assert float(d.base_weight.min()) >= 0 and float(d.base_weight.max()) <= 0.6
    big = op.draw_feedback(1500, op.OnProParams(onpro_mixup_base_rate=0.0), 2, torch.Generator(), random.Random(1))
    w = big.pair_weight
    assert float(w.mean()) == pytest.approx(0.5, abs=0.03)  # Beta(0.4, 0.4): symmetric, U-shaped
    assert float(((w < 0.1) | (w > 0.9)).float().mean()) > 0.35


def test_onpro_instance_loss_in_float64_keeps_the_authors_eps_in_the_positives_count() -> None:
    """In float64 the authors' count + eps (1e-8) shows: their NT-Xent to the last digits."""
    torch.manual_seed(6)
    sim = torch.randn(6, 6, dtype=torch.float64)
    labels = torch.tensor([1.0, 2.0, 1.0], dtype=torch.float64)
    for without_self in (True, False):
        got = float(op.instance_loss(sim, labels, 0.5, without_self))
        assert got == pytest.approx(_nt_xent_by_hand(sim, labels, 0.5, without_self), rel=1e-12, abs=0.0)


def test_onpro_class_prototypes_are_each_present_class_mean_in_the_projections_dtype() -> None:
    z = torch.tensor([[1.0, 2.0], [3.0, 6.0], [5.0, -1.0], [0.5, 0.5]], dtype=torch.float64)
    y = torch.tensor([2, 2, 0, 3])  # class 0 and 3 a single sample, class 1 absent
    means, present = op.class_prototypes(z, y, 4)
    assert means.dtype == torch.float64
    assert means.tolist() == [[5.0, -1.0], [0.0, 0.0], [2.0, 4.0], [0.5, 0.5]]
    assert present.tolist() == [True, False, True, True]


def test_onpro_pair_logits_are_inverse_distances_below_one_and_finite_for_equal_prototypes() -> None:
    protos = torch.tensor([[0.0, 0.0], [0.5, 0.0], [0.0, 0.0]])  # classes 0 and 2 at the same point
    logits = op.pair_logits(protos, torch.tensor([True, True, True]))
    assert float(logits[0, 1]) == pytest.approx(2.0) and float(logits[1, 2]) == pytest.approx(2.0)
    assert float(logits[0, 2]) == pytest.approx(1e12)  # the distance floored at 1e-12, not an infinite weight


def test_onpro_feedback_draws_come_from_the_methods_own_generators_only() -> None:
    cfg = op.OnProParams()
    draws = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)  # the global generator must not matter
        random.seed(global_seed)
        draws.append(op.draw_feedback(12, cfg, 3, torch.Generator().manual_seed(9), random.Random(9)))
    for field in op.FeedbackDraws.__dataclass_fields__:
        assert torch.equal(getattr(draws[0], field), getattr(draws[1], field)), field


def test_onpro_feedback_mixes_only_where_the_coin_is_strictly_below_mixup_p() -> None:
    """The authors' `random() < p`: a coin equal to p leaves the sample (the pair) unmixed."""
    y = torch.tensor([0, 1, 0, 1])
    x = torch.arange(4, dtype=torch.float32).view(4, 1, 1, 1)
    present = torch.tensor([True, True])
    d = _draws(4, 2, base_coin=torch.tensor([0.6, 0.5]), pair_coin=torch.full((4,), 0.6))
    lam = op.feedback_mix((x, x), y, torch.eye(2), present, d, 0.6)[4]
    assert float(lam[0]) == 0.0 and float(lam[1]) > 0.0
    assert lam[2:].tolist() == [0.0, 0.0]
    d.pair_coin = torch.full((4,), 0.59)
    assert torch.equal(op.feedback_mix((x, x), y, torch.eye(2), present, d, 0.6)[4][2:], d.pair_weight)


def test_onpro_feedback_pair_draw_is_a_gumbel_max_so_the_closest_pair_gets_its_softmax_share() -> None:
    """Four classes, one pair much closer than the rest: the reversed noise (max of l - G) would
    give it about 0.89 instead of its softmax share of about 0.80 (with two or three pairs the two
    draws agree too closely to tell)."""
    protos = torch.tensor([[0.0, 0.0], [0.25, 0.0], [0.0, 1.0], [1.0, 0.0]])
    y = torch.arange(4).repeat(2)
    x = torch.zeros(8, 1, 1, 1)
    d = op.draw_feedback(
        1500, op.OnProParams(onpro_mixup_base_rate=0.0), 4, torch.Generator().manual_seed(5), random.Random(5)
    )
    d.row_a, d.row_b = torch.rand(1500, 8), torch.rand(1500, 8)
    _, _, y_a, y_b, _ = op.feedback_mix((x, x), y, protos, torch.ones(4, dtype=torch.bool), d, 0.6)
    i, j = torch.triu_indices(4, 4, 1)
    expected = torch.softmax(1 / (protos[i] - protos[j]).norm(dim=1), 0)
    freq = torch.stack([((y_a == a) & (y_b == b)).float().mean() for a, b in zip(i.tolist(), j.tolist())])
    assert float(expected[0]) == pytest.approx(0.80, abs=0.01)
    assert torch.allclose(freq, expected, atol=0.035)


def test_onpro_memory_batches_follow_the_first_task_then_the_seen_classes() -> None:
    m, proto, _ = built("onpro", onpro_memory_batch=30, onpro_memory_per_class=2)
    batches: list[tuple[list[int], int]] = []
    m.train_batches = lambda b, counts=None, lr=None: batches.extend(zip([x.tolist() for x in b], counts))
    for i, label in [(100, 0), (101, 1), (102, 2), (103, 0)] * 3:
        m.online_store(i, label)
    m.seen[:3] = True
    m.online_train(torch.tensor([7, 8]), 2)
    assert len(batches) == 2 and all(n == 2 for _, n in batches)
    ((batch, _), _) = batches
    assert batch[:2] == [7, 8] and len(batch) == 2 * (2 + 12)  # the first task: min(30, |memory| 12)
    assert batch[: len(batch) // 2] == batch[len(batch) // 2 :]  # two views of the same samples
    m.online_task_start(Task(1, proto.tasks[1], 5))
    batches.clear()
    m.online_train(torch.tensor([7, 8]), 1)
    assert len(batches[0][0]) == 2 * (2 + 2 * 3)  # later: 2 per seen class (3 seen)


def _fixed_step(m, x, y, n_s):  # type: ignore[no-untyped-def]
    """(the step's loss, the same step's parts recomputed from the pure functions)."""
    gen, rng = m.onpro_gen.get_state(), m.onpro_rng.getstate()
    m.stream_count = n_s
    got = m.step_loss(x, y)
    m.onpro_gen.set_state(gen)
    m.onpro_rng.setstate(rng)
    p, c, n = m.params, m.n_classes, len(x) // 2
    n_m, later = n - n_s, m.task_index > 0
    scale = p.onpro_sim_scale if later else 1.0

    def contrast(v1, v2, labels, without_self):  # type: ignore[no-untyped-def]
        f = m.model.features(torch.cat([op.rotations(v1), op.rotations(v2)]))
        z = nnf.normalize(m.projection(f), dim=1)
        off = m.onpro_rng.randrange(max(m.model.feature_dim - z.shape[1], 1))
        sim = op.similarity(z, nnf.normalize(f, dim=1), off, scale)
        return op.instance_loss(sim, op.rotation_labels(labels, c), p.onpro_ins_temperature, without_self), f, z

    parts = {}
    ins, f, z = contrast(x[:n_s], x[n : n + n_s], y[:n_s].float(), True)
    b = 16 * n_s
    parts["ins_stream"] = ins
    parts["ope_new"] = op.prototype_loss(z[:n_s], z[b : b + n_s], y[:n_s], c, p.onpro_proto_temperature)[0]
    zm = nnf.normalize(m.projection(m.model.features(torch.cat([x[n_s:n], x[n + n_s :]]))), dim=1)
    seen, protos, present = op.prototype_loss(zm[:n_m], zm[n_m:], y[n_s:n], c, p.onpro_proto_temperature)
    parts["ope_seen"] = seen
    if not later:
        parts["ce_stream"] = nnf.cross_entropy(m.mask_unseen(m.model.fc(f[b : b + n_s])), y[:n_s])
        return got, parts
    d = op.draw_feedback(n_m, p, c, m.onpro_gen, m.onpro_rng)
    m1, m2, y_a, y_b, lam = op.feedback_mix((x[n_s:n], x[n + n_s :]), y[n_s:n], protos, present, d, p.onpro_mixup_p)
    ins_m, fm, _ = contrast(m1, m2, (1 - lam) * y_a + lam * y_b, False)
    parts["ins_memory"] = ins_m
    logits = m.mask_unseen(m.model.fc(fm[16 * n_m : 17 * n_m]))
    ce = (1 - lam) * nnf.cross_entropy(logits, y_a, reduction="none") + lam * nnf.cross_entropy(
        logits, y_b, reduction="none"
    )
    parts["ce_memory"] = ce.mean()
    return got, parts


def test_onpro_step_in_the_first_task_is_stream_ce_plus_contrast_plus_both_opes() -> None:
    m, proto, _ = built("onpro", **SMALL)
    feed(m, proto, 12)
    torch.manual_seed(4)
    x, y = torch.randn(10, 1, 8, 8), torch.tensor([0, 1, 2, 0, 1] * 2)  # 2 stream + 3 memory, two views
    before = dict(ledger_of(m).counts)
    got, parts = _fixed_step(m, x, y, 2)
    assert set(parts) == {"ins_stream", "ope_new", "ope_seen", "ce_stream"}
    assert all(math.isfinite(float(v.detach())) and float(v.detach()) > 0 for v in parts.values())
    assert float(got) == pytest.approx(float(sum(parts.values())), rel=1e-5)
    added = {k: v - before.get(k, 0) for k, v in ledger_of(m).counts.items() if v != before.get(k, 0)}
    assert added == {("train", (32 * 2 + 2 * 3 - 10, 1, 8, 8)): 1}  # the passes beyond the step's own 2n


def test_onpro_step_after_the_first_task_trains_the_mixed_memory_not_the_stream() -> None:
    m, proto, _ = built("onpro", **SMALL)
    feed(m, proto, 12)
    m.online_task_start(Task(1, proto.tasks[1], 5))
    m.seen[:4] = True  # the batch's classes (a memory sample's class is always seen)
    torch.manual_seed(5)
    x, y = torch.randn(14, 1, 8, 8), torch.tensor([3, 1, 0, 1, 2, 0, 1] * 2)
    before = dict(ledger_of(m).counts)
    got, parts = _fixed_step(m, x, y, 2)
    assert set(parts) == {"ins_stream", "ope_new", "ope_seen", "ins_memory", "ce_memory"}
    assert all(math.isfinite(float(v.detach())) and float(v.detach()) > 0 for v in parts.values())
    assert float(got) == pytest.approx(float(sum(parts.values())), rel=1e-5)
    added = {k: v - before.get(k, 0) for k, v in ledger_of(m).counts.items() if v != before.get(k, 0)}
    assert added == {("train", (32 * 2 + 34 * 5 - 14, 1, 8, 8)): 1}
    m.params = op.OnProParams(**{**m.params.__dict__, "onpro_sim_scale": 1.0})
    assert float(_fixed_step(m, x, y, 2)[0]) != pytest.approx(float(got), rel=1e-4)  # the scale counts after task 0


def test_onpro_caps_its_head_at_the_feature_width_and_seeds_its_generators_from_the_run() -> None:
    m, _, _ = built("onpro", onpro_memory_batch=8, onpro_projection=10_000, seed=4)
    d = m.model.feature_dim
    assert m.projection.out_features == d and built("onpro", **SMALL)[0].projection.out_features == 16
    assert m.onpro_gen.initial_seed() == 6_113 * 5
    assert m.onpro_rng.getstate() == random.Random(4 + 17).getstate()
    assert {m.offset(d) for _ in range(30)} == {0}  # no slack: the features are cut at 0
    assert {m.offset(d - 3) for _ in range(200)} == {0, 1, 2}  # every offset with a full slice


def test_onpro_later_task_step_mixes_a_single_memory_sample_and_without_memory_is_the_first_tasks() -> None:
    m, proto, _ = built("onpro", **SMALL)
    m.online_task_start(Task(1, proto.tasks[1], 5))
    m.seen[:4] = True
    torch.manual_seed(7)
    x, y = torch.randn(6, 1, 8, 8), torch.tensor([3, 1, 2] * 2)  # 2 stream + 1 memory sample, two views
    got, parts = _fixed_step(m, x, y, 2)
    assert set(parts) == {"ins_stream", "ope_new", "ope_seen", "ins_memory", "ce_memory"}
    assert float(got.detach()) == pytest.approx(float(sum(parts.values()).detach()), rel=1e-5)
    stream_only = torch.cat([x[:2], x[3:5]])  # no memory sample: the stream's cross-entropy, the later scale
    m.params = op.OnProParams(**{**m.params.__dict__, "onpro_sim_scale": 1.0})
    gen, rng = m.onpro_gen.get_state(), m.onpro_rng.getstate()
    later = m.step_loss(stream_only, y[[0, 1, 0, 1]])
    m.onpro_gen.set_state(gen)
    m.onpro_rng.setstate(rng)
    m.task_index = 0
    assert torch.equal(later, m.step_loss(stream_only, y[[0, 1, 0, 1]]))


def test_onpro_memory_contrast_pairs_rows_by_their_mixed_labels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mixed sample's label in the memory's contrast is (1 - lam) a + lam b: rows (and their
    rotations, label + 10 r) are positives where those agree. The draws are fixed so that every
    other blend of a, b and lam (a - lam b, (1 + lam) a, lam / b, ...) pairs the rows otherwise."""
    m, proto, _ = built("onpro", **SMALL, onpro_mixup_base_rate=1.0)
    m.online_task_start(Task(1, proto.tasks[1], 5))
    m.seen[:4] = True
    fixed = op.FeedbackDraws(
        torch.tensor([3, 0, 5, 2, 1, 4]),  # each memory row's partner
        torch.zeros(6),  # every coin below mixup_p: all mixed
        torch.tensor([0.75, 0.5, 0.25, 0.5, 0.25, 0.25]),
        torch.zeros(0, 100),
        torch.zeros(0, 6),
        torch.zeros(0, 6),
        torch.ones(100),
        torch.zeros(0),
    )
    monkeypatch.setattr(op, "draw_feedback", lambda *args: fixed)
    torch.manual_seed(8)
    x, y = torch.randn(16, 1, 8, 8), torch.tensor([1, 3, 3, 0, 2, 2, 0, 2] * 2)  # 2 stream + 6 memory
    got, parts = _fixed_step(m, x, y, 2)
    assert float(got.detach()) == pytest.approx(float(sum(parts.values()).detach()), rel=1e-5)


def test_onpro_trains_the_projection_keeps_an_arriving_row_and_checkpoints_its_state() -> None:
    m, proto, _ = built("onpro", **SMALL)
    assert any(p is m.projection.weight for g in m.optimizer.param_groups for p in g["params"])
    proj = m.projection.weight.detach().clone()
    feed(m, proto, 16)
    assert not torch.equal(m.projection.weight, proj)  # the projection head learns
    unseen = int((~m.seen).nonzero()[0])
    row = m.model.fc.weight[unseen].detach().clone()
    m.online_new_class(unseen)
    assert torch.equal(m.model.fc.weight[unseen], row)  # the authors' head: every row from the start
    m.online_task_start(Task(2, proto.tasks[2], 5))
    m.onpro_rng.random(), torch.rand(3, generator=m.onpro_gen)
    state = m.state_dict()
    fresh, _, _ = built("onpro", **SMALL)
    fresh.load_state_dict(state)
    assert fresh.task_index == 2
    assert torch.equal(fresh.projection.weight, m.projection.weight)
    assert fresh.onpro_rng.random() == m.onpro_rng.random()
    assert torch.equal(torch.rand(3, generator=fresh.onpro_gen), torch.rand(3, generator=m.onpro_gen))


def test_onpro_feedback_steps_make_no_host_sync() -> None:
    """test_step_syncs audits the first task; APF runs after it: its steps audited here."""
    from rmconsole.cl.online import feed as drive
    from rmconsole.cl.step_audit import StepAudit

    m, proto, _ = built("onpro", **SMALL)
    feed(m, proto, 12)
    m.online_task_start(Task(1, proto.tasks[1], 5))
    stream = proto.tasks[1][:8]
    pairs = list(zip(stream.tolist(), proto.train_labels[stream].tolist()))
    for i, y in pairs[:4]:
        drive(m, i, y)
    audit = StepAudit().mark_method(m)
    before = m.online_steps
    with audit:
        for i, y in pairs[4:]:
            drive(m, i, y)
    assert m.online_steps > before and m.task_index == 1
    assert dict(audit.where) == {}
