"""Exact pins of the science core (cl/streams, memory, uncertainty, metrics, schedule) against
independent reference computations: what `tools/mutation.py` needs so that a changed
operator, constant or argument in these modules makes a test fail. Fast: pure tensor code.
"""

from __future__ import annotations

import math

import pytest
import torch

from rmconsole.cl import augment as A
from rmconsole.cl import memory as M
from rmconsole.cl import metrics, schedule, streams
from rmconsole.cl import uncertainty as U


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------- uncertainty: the views


def _imgs(n: int, side: int, seed: int = 0, low: int = 1) -> torch.Tensor:
    return torch.randint(low, 256, (n, 3, side, side), dtype=torch.uint8, generator=_gen(seed))


@pytest.mark.parametrize("side", [4, 8, 32])
def test_vr_cutout_sizes_scale_with_the_image(side: int) -> None:
    """cutout N on a side x side image zeroes a square of round(N * side / 32) (at least 1) pixels
    at a per-sample centre: the largest zeroed area over many samples is exactly that square."""
    images = _imgs(200, side)
    for size_32 in (8, 16, 24, 32):
        size = max(1, round(size_32 * side / 32))
        view = U._vr_view(f"cutout{size_32}", images, _gen(1))
        zeroed = (view == 0).all(1).flatten(1).sum(1)
        assert int(zeroed.max()) <= min(size, side) ** 2 and int(zeroed.min()) >= 1
        if size <= side // 2:  # some centre lies far enough inside for the whole square
            assert int(zeroed.max()) == size**2
        assert torch.equal(view, A.cutout(images, size, _gen(1)))


def test_vr_flips_follow_the_generator_and_the_axis() -> None:
    images = _imgs(64, 8)
    for name, axis in (("hflip", 3), ("vflip", 2)):
        expected_flip = torch.rand(64, generator=_gen(5)) < 0.5
        view = U._vr_view(name, images, _gen(5))
        for i in range(64):
            assert torch.equal(view[i], images[i].flip(axis - 1) if expected_flip[i] else images[i]), (name, i)


def test_vr_rotations_draw_uniform_angles_in_the_named_range(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = {}
    monkeypatch.setattr(A, "rotate_per_sample", lambda images, degrees: seen.setdefault("deg", degrees) * 0 + 1)
    images = _imgs(50, 8)
    for name, limit in (("rotate45", 45.0), ("rotate90", 90.0)):
        seen.clear()
        U._vr_view(name, images, _gen(6))
        expected = (torch.rand(50, generator=_gen(6), dtype=torch.float64) * 2 - 1) * limit
        assert seen["deg"].dtype == torch.float64 and torch.equal(seen["deg"], expected), name


def test_vr_invert_and_solarize_thresholds() -> None:
    images = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16)
    assert torch.equal(U._vr_view("invert", images, _gen(0)), 255 - images)
    for t in (128, 64, 32):
        view = U._vr_view(f"solarize{t}", images, _gen(0)).flatten()
        assert view[t - 1] == t - 1 and view[t] == 255 - t and view[255] == 0
    with pytest.raises(ValueError, match=r"^blur$"):
        U._vr_view("blur", images, _gen(0))


def test_perturbed_views_are_independent_draws_of_the_named_ops() -> None:
    images = _imgs(6, 8)
    for measure, op in (("randaug", A.randaugment), ("autoaug", A.autoaugment)):
        views = U.perturbed_views(images, measure, 5, _gen(2))
        assert views.shape == (5, 6, 3, 8, 8)
        assert torch.equal(views, op(images.repeat(5, 1, 1, 1), _gen(2)).view(5, 6, 3, 8, 8))
    views = U.perturbed_views(images, "vr", 14, _gen(3))
    gen = _gen(3)
    for v in range(14):
        assert torch.equal(views[v], U._vr_view(U.VR_VIEWS[v % 12], images, gen)), v
    with pytest.raises(ValueError, match="unknown uncertainty measure 'x'; allowed: randaug, autoaug, vr, none"):
        U.perturbed_views(images, "x", 2, _gen(0))


def _reference_votes(predict, images, measure, n_views, gen, per_chunk):
    us, votes = [], []
    for start in range(0, len(images), per_chunk):
        part = images[start : start + per_chunk]
        views = U.perturbed_views(part, measure, n_views, gen)
        top = predict(views.flatten(0, 1).float() / 255).argmax(-1).view(n_views, len(part))
        best = torch.stack([torch.bincount(top[:, i], minlength=10).max() for i in range(len(part))])
        votes.append(best)
        us.append(1 - best.float() / n_views)
    return torch.cat(us), torch.cat(votes)


@pytest.mark.parametrize("chunk_images", [10, 24, 1000])
def test_vote_uncertainty_equals_a_reference_count(chunk_images: int) -> None:
    """u = 1 - (largest vote count) / A per candidate, chunked by chunk_images // A candidates."""
    images = _imgs(23, 8, seed=4, low=0)
    weights = torch.randn(3 * 64, 10, generator=_gen(9))

    def predict(x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1) @ weights

    u, votes = U.vote_uncertainty(
        predict,
        lambda idx: images[idx],
        torch.arange(23),
        "randaug",
        5,
        _gen(8),
        lambda x: x.float() / 255,
        chunk_images=chunk_images,
    )
    ref_u, ref_votes = _reference_votes(predict, images, "randaug", 5, _gen(8), max(1, chunk_images // 5))
    assert torch.equal(votes, ref_votes) and torch.allclose(u, ref_u)
    assert u.dtype == torch.float32 and votes.dtype == torch.long


def test_vote_uncertainty_none_chunks_by_single_views() -> None:
    images = _imgs(9, 4, low=0)
    logits = torch.randn(9, 4, generator=_gen(1))
    calls = []

    def predict(x: torch.Tensor) -> torch.Tensor:
        calls.append(len(x))
        return logits[: len(x)] if len(x) == 9 else logits[torch.arange(len(x))]

    u, votes = U.vote_uncertainty(
        predict, lambda idx: images[idx], torch.arange(9), "none", 12, _gen(0), lambda x: x.float(), chunk_images=4
    )
    assert calls == [4, 4, 1] and votes is None  # 4 candidates per chunk, one view each
    expected = torch.cat(
        [
            1 - logits[:4].softmax(-1).max(-1).values,
            1 - logits[:4].softmax(-1).max(-1).values,
            1 - logits[:1].softmax(-1).max(-1).values,
        ]
    )
    assert torch.allclose(u, expected)
    with pytest.raises(ValueError, match="unknown uncertainty measure 'z'; allowed: randaug, autoaug, vr, none"):
        U.vote_uncertainty(predict, lambda idx: images[idx], torch.arange(9), "z", 2, _gen(0), lambda x: x.float())
    with pytest.raises(ValueError, match="uncertainty needs at least one view, got 0"):
        U.vote_uncertainty(predict, lambda idx: images[idx], torch.arange(9), "vr", 0, _gen(0), lambda x: x.float())


def test_vote_uncertainty_chunk_smaller_than_the_views_scores_one_candidate_at_a_time() -> None:
    images = _imgs(3, 4, low=0)
    sizes = []

    def predict(x: torch.Tensor) -> torch.Tensor:
        sizes.append(len(x))
        return torch.zeros(len(x), 2)

    u, votes = U.vote_uncertainty(
        predict, lambda idx: images[idx], torch.arange(3), "vr", 12, _gen(0), lambda x: x.float(), chunk_images=5
    )
    assert sizes == [12, 12, 12] and votes.tolist() == [12, 12, 12] and u.tolist() == [0.0, 0.0, 0.0]


# ---------------------------------------------------------------------- schedule


def test_cosine_restarts_lr_by_hand() -> None:
    base, low = 0.05, 0.0005
    # cycle 0: step 0 (T=1); cycle 1: steps 1-2 (T=2); cycle 2: steps 3-6 (T=4)
    expected = {
        0: base,
        1: base,
        2: low + (base - low) * (1 + math.cos(math.pi / 2)) / 2,
        3: base,
        4: low + (base - low) * (1 + math.cos(math.pi / 4)) / 2,
        6: low + (base - low) * (1 + math.cos(3 * math.pi / 4)) / 2,
        7: base,
    }
    for steps, lr in expected.items():
        assert schedule.cosine_restarts_lr(steps, base, low) == pytest.approx(lr, rel=1e-12), steps
    assert schedule.cosine_restarts_lr(-3, base, low) == base


def test_epoch_lr_warm_up_and_schedules() -> None:
    assert schedule.epoch_lr(0, 0.2) == pytest.approx(0.02) and schedule.epoch_lr(-1, 0.2, "step") == pytest.approx(
        0.02
    )
    assert schedule.epoch_lr(1, 0.2) == pytest.approx(0.2)
    assert schedule.epoch_lr(3, 0.2) == pytest.approx(0.002 + 0.198 * (1 + math.cos(math.pi / 2)) / 2)
    steps = {1: 1.0, 30: 1.0, 31: 0.1, 61: 0.01, 81: 0.001, 90: 0.001, 91: 0.0001}
    for epoch, factor in steps.items():
        assert schedule.epoch_lr(epoch, 0.2, "step") == pytest.approx(0.2 * factor), epoch
    assert schedule.STEP_MILESTONES == (30, 60, 80, 90)
    assert schedule.epoch_lr(7, 0.2, "constant") == 0.2
    with pytest.raises(ValueError, match="unknown schedule 'linear'"):
        schedule.epoch_lr(2, 0.2, "linear")


# ---------------------------------------------------------------------- metrics


def test_metrics_by_hand() -> None:
    labels = torch.tensor([0, 0, 0, 2, 2])
    preds = torch.tensor([0, 1, 0, 2, 1])
    assert metrics.per_class_accuracy(preds, labels, 3) == [pytest.approx(200 / 3), None, 50.0]
    assert metrics.accuracy(preds, labels) == pytest.approx(60.0)
    assert math.isnan(metrics.accuracy(torch.tensor([], dtype=torch.long), torch.tensor([], dtype=torch.long)))
    assert math.isnan(metrics.hit_rate(torch.tensor([], dtype=torch.bool)))
    assert metrics.task_accuracy_row([10.0, None, 30.0, None], [[0, 1], [2], [3]]) == [10.0, 30.0, None]
    assert metrics.summarize([], []) == {"A_last": None, "A_avg": None, "F_last": None}
    assert metrics.summarize([50.0], [[50.0]]) == {"A_last": 50.0, "A_avg": 50.0, "F_last": None}
    assert metrics.intransigence(90.0, float("nan")) is None and metrics.intransigence(90.0, None) is None
    assert metrics.intransigence(90.0, 85.5) == 4.5
    assert metrics.forgetting([[None, 5.0], [None, 4.0], [3.0, 2.0]]) == pytest.approx(3.0)  # task 0 has no before
    assert metrics.forgetting([[1.0, 2.0], [None, None]]) is None
    assert metrics.per_class_hit_rate(torch.tensor([True, False, True]), torch.tensor([1, 1, 0]), 3) == [
        100.0,
        50.0,
        None,
    ]


# ---------------------------------------------------------------------- streams


def test_streams_by_hand() -> None:
    assert streams.seeded_class_order(5, 3) == torch.randperm(5, generator=_gen(3)).tolist()
    assert streams.class_order("digits", 4, 2) == streams.seeded_class_order(4, 2)
    assert streams.class_order("digits", 4, 2, "identity") == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="no paper class order for cifar100 seed 1"):
        streams.class_order("cifar100", 100, 1, "paper")
    assert streams.remap_labels(torch.tensor([2, 0, 1, 2]), [2, 0, 1]).tolist() == [0, 1, 2, 0]
    assert streams.task_classes(6, 3) == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(ValueError, match="7 classes cannot be split into 3 equal tasks"):
        streams.task_classes(7, 3)
    for bad in (-1, 101):
        with pytest.raises(ValueError, match=f"blurry must be in 0..100, got {bad}"):
            streams.blurry_tasks(torch.arange(10) % 2, 2, 2, bad, 0)
    labels = torch.tensor([0, 1, 1, 0, 2, 2, 2])
    assert streams.composition(labels, torch.tensor([0, 4, 5]), 4) == [1, 0, 2, 0]
    stream = torch.tensor([3, 1, 2])
    import hashlib

    assert streams.stream_hash(stream) == hashlib.sha1(stream.numpy().astype("int64").tobytes()).hexdigest()[:16]
    scope = streams.EvalScope(False, [[0, 1], [2, 3], [4]])
    assert scope.classes_after(0) == [0, 1] and scope.classes_after(2) == [0, 1, 2, 3, 4]


def _reference_blurry(labels: torch.Tensor, n_tasks: int, n_classes: int, blurry: int, seed: int) -> list[torch.Tensor]:
    """The construction written out step by step, with the same generator draws."""
    gen = _gen(seed)
    per = n_classes // n_tasks
    kept, pool = [], []
    for t in range(n_tasks):
        own = []
        for c in range(t * per, (t + 1) * per):
            idx = (labels == c).nonzero().flatten()
            idx = idx[torch.randperm(len(idx), generator=gen)]
            n_out = int(round(len(idx) * blurry / 100))
            pool.append(idx[:n_out])
            own.append(idx[n_out:])
        own_all = torch.cat(own)
        kept.append(own_all[torch.randperm(len(own_all), generator=gen)])
    if blurry == 0:
        return kept
    shared = torch.cat(pool)
    shared = shared[torch.randperm(len(shared), generator=gen)]
    out, start = [], 0
    for t in range(n_tasks):
        share = len(shared) // n_tasks + (1 if t < len(shared) % n_tasks else 0)
        task = torch.cat([kept[t], shared[start : start + share]])
        out.append(task[torch.randperm(len(task), generator=gen)])
        start += share
    return out


@pytest.mark.parametrize("blurry", [0, 10, 30, 100])
def test_blurry_tasks_equal_the_construction_written_out(blurry: int) -> None:
    labels = torch.cat([torch.full((n,), c) for c, n in enumerate([13, 7, 22, 9, 15, 11])])
    labels = labels[torch.randperm(len(labels), generator=_gen(1))]
    got = streams.make_tasks(labels, 3, 6, blurry, 4)
    ref = _reference_blurry(labels, 3, 6, blurry, 4)
    assert len(got) == 3 and all(torch.equal(a, b) for a, b in zip(got, ref))
    assert streams.disjoint_tasks(labels, 3, 6, 4)[1].tolist() == _reference_blurry(labels, 3, 6, 0, 4)[1].tolist()


# ---------------------------------------------------------------------- memory


def test_memory_state_round_trip_and_capacity() -> None:
    mem = M.Memory(4)
    assert len(mem) == 0 and mem.indices.dtype == torch.long and mem.labels.dtype == torch.long and mem.seen == 0
    mem.replace(torch.tensor([5, 6, 7], dtype=torch.int32), torch.tensor([1, 0, 1], dtype=torch.int32))
    assert mem.indices.dtype == torch.long and mem.labels.dtype == torch.long and len(mem) == 3
    mem.seen = 11
    state = mem.state_dict()
    assert state["capacity"] == 4 and state["seen"] == 11 and state["indices"].tolist() == [5, 6, 7]
    other = M.Memory(1)
    other.load_state_dict(state)
    assert (other.capacity, other.seen, other.indices.tolist(), other.labels.tolist()) == (4, 11, [5, 6, 7], [1, 0, 1])
    mem.replace(torch.arange(4), torch.zeros(4, dtype=torch.long))  # exactly full is fine
    with pytest.raises(ValueError, match="memory over capacity: 5 > 4"):
        mem.replace(torch.arange(5), torch.zeros(5, dtype=torch.long))
    assert M.slots_per_class(10, 3) == 3 and M.slots_per_class(10, 0) == 10 and M.slots_per_class(9, 10) == 0


def test_fill_rest_and_random_select() -> None:
    chosen = torch.tensor([3, 4])
    filled = M._fill_rest(chosen, torch.arange(10), 5, _gen(0))
    unchosen = torch.tensor([0, 1, 2, 5, 6, 7, 8, 9])
    assert filled[:2].tolist() == [3, 4]
    assert filled[2:].tolist() == unchosen[torch.randperm(8, generator=_gen(0))[:3]].tolist()
    assert M._fill_rest(torch.arange(5), torch.arange(10), 5, _gen(0)).tolist() == [0, 1, 2, 3, 4]
    assert M._fill_rest(torch.arange(6), torch.arange(10), 5, _gen(0)).tolist() == [0, 1, 2, 3, 4, 5]
    got = M.random_select(torch.arange(20) + 100, 4, _gen(1))
    assert got.tolist() == (torch.arange(20) + 100)[torch.randperm(20, generator=_gen(1))[:4]].tolist()


def test_class_balanced_select_draws() -> None:
    labels = torch.tensor([0, 1, 0, 1, 0, 1, 0, 2])
    candidates = torch.arange(8) + 10
    got = M.class_balanced_select(candidates, labels, 5, [0, 1], _gen(2))
    gen = _gen(2)
    zeros, ones = candidates[labels == 0], candidates[labels == 1]
    picked = torch.cat([zeros[torch.randperm(4, generator=gen)[:2]], ones[torch.randperm(3, generator=gen)[:2]]])
    assert got.tolist() == M._fill_rest(picked, candidates, 5, gen).tolist()
    assert (
        M.class_balanced_select(candidates, labels, 3, [], _gen(0)).tolist()
        == candidates[torch.randperm(8, generator=_gen(0))[:3]].tolist()
    )


def test_uncertainty_select_by_hand() -> None:
    """Class 0: 6 candidates, k = 3 -> ranks 1, 3, 5 of the sort by u (most certain first)."""
    candidates = torch.tensor([10, 11, 12, 13, 14, 15, 20, 21])
    labels = torch.tensor([0, 0, 0, 0, 0, 0, 1, 1])
    u = torch.tensor([0.5, 0.1, 0.9, 0.3, 0.2, 0.7, 0.4, 0.4])
    got = M.uncertainty_select(candidates, labels, u, 6, [0, 1], _gen(0))
    # class 0 sorted: 11 (.1), 14 (.2), 13 (.3), 10 (.5), 15 (.7), 12 (.9) -> ranks 1, 3, 5 = 14, 10, 12
    assert got.tolist()[:5] == [14, 10, 12, 20, 21]  # class 1 has 2 <= 3 candidates: all kept, stable order
    assert len(got) == 6 and len(set(got.tolist())) == 6
    assert (
        M.uncertainty_select(candidates, labels, u, 6, [], _gen(0)).tolist()
        == candidates[torch.randperm(8, generator=_gen(0))[:6]].tolist()
    )


def test_reservoir_small_cases_by_hand() -> None:
    memory, seen = M.reservoir_update(torch.tensor([1, 2]), torch.tensor([7, 8]), 2, 3, _gen(0))
    draws = (torch.rand(1, generator=_gen(0), dtype=torch.float64) * torch.tensor([4.0], dtype=torch.float64)).floor()
    expected = [1, 2, 7]
    if int(draws[0]) < 3:
        expected[int(draws[0])] = 8
    assert memory.tolist() == expected and seen == 4
    memory, seen = M.reservoir_update(torch.tensor([1, 2, 3]), torch.tensor([], dtype=torch.long), 9, 3, _gen(0))
    assert memory.tolist() == [1, 2, 3] and seen == 9
    original = torch.tensor([1, 2, 3])
    M.reservoir_update(original, torch.tensor([9, 9, 9, 9]), 3, 3, _gen(0))
    assert original.tolist() == [1, 2, 3]  # the old memory is not modified in place


def _greedy_reference(memory, labels, stream, stream_labels, capacity, gen):
    """GDumb's sampler as a plain loop: classes in order of first sight, each with the list of its
    slots; a full memory takes a sample of a class under its quota K / (classes seen) by evicting
    a random slot of the (first) largest class."""
    slots, lab = list(memory), list(labels)
    members: dict[int, list[int]] = {}
    for pos, y in enumerate(lab):
        members.setdefault(y, []).append(pos)
    draws = torch.rand(len(stream), generator=gen, dtype=torch.float64).tolist()
    for x, y, d in zip(stream, stream_labels, draws):
        members.setdefault(y, [])
        if len(slots) < capacity:
            members[y].append(len(slots))
            slots.append(x)
            lab.append(y)
            continue
        if len(members[y]) >= capacity // len(members):
            continue
        largest = max(members, key=lambda c: len(members[c]))
        pos = members[largest].pop(int(d * len(members[largest])))
        slots[pos], lab[pos] = x, y
        members[y].append(pos)
    return slots


def test_greedy_balanced_equals_a_reference_loop() -> None:
    stream = list(range(100, 160))
    stream_labels = [0] * 30 + [1] * 20 + [2] * 10
    got = M.greedy_balanced_update(
        torch.tensor([1, 2]), torch.tensor([0, 0]), torch.tensor(stream), torch.tensor(stream_labels), 12, _gen(3)
    )
    assert got.dtype == torch.long
    ref = _greedy_reference([1, 2], [0, 0], stream, stream_labels, 12, _gen(3))
    assert got.tolist() == ref
    labels_of = {1: 0, 2: 0, **dict(zip(stream, stream_labels))}
    assert sorted(torch.bincount(torch.tensor([labels_of[i] for i in got.tolist()])).tolist()) == [4, 4, 4]


def test_uncertainty_histogram_bins() -> None:
    u = torch.tensor([0.0, 0.26, 0.24, 1.0, 0.5, 0.74])
    assert M.uncertainty_histogram(u, 4) == [1, 2, 1, 1, 1]


def test_policy_registry_and_pool_policy() -> None:
    with pytest.raises(
        ValueError,
        match="unknown memory policy 'zz'; known: uncertainty, random, reservoir, "
        "prototype, class_balanced, greedy_balanced",
    ):
        M.policy_named("zz")
    assert M.policy_named("random") is M.POLICIES["random"] and M.POLICIES["random"].name == "random"
    with pytest.raises(NotImplementedError):
        M.MemoryPolicy().select(None)
    with pytest.raises(NotImplementedError):
        M.PoolPolicy().choose(None)


def _cands(task: int, n_memory: int, n_stream: int, capacity: int, score=None, embed=None) -> M.Candidates:
    from types import SimpleNamespace

    memory = M.Memory(capacity)
    memory.replace(torch.arange(n_memory), torch.arange(n_memory) % 2)
    stream = torch.arange(100, 100 + n_stream)
    indices = torch.cat([memory.indices, stream])
    return M.Candidates(
        indices,
        torch.cat([memory.labels, stream % 2]),
        memory,
        stream,
        [0, 1],
        task,
        _gen(0),
        SimpleNamespace(uncertainty="vr", uncertainty_views=4),
        score,
        embed,
        {},
    )


def test_policies_by_hand() -> None:
    c = _cands(0, 4, 8, 6)
    assert c.capacity == 6
    assert (
        M.policy_named("uncertainty").select(c).tolist()
        == M.class_balanced_select(c.indices, c.labels, 6, [0, 1], _gen(0)).tolist()
    )
    assert c.info == {"note": "task 0: class-balanced random (authors' code)"}
    u_of = lambda idx: (idx % 4).float() / 4  # noqa: E731
    c = _cands(1, 4, 8, 6, score=u_of)
    assert torch.equal(c.uncertainty(), u_of(c.indices))
    chosen = M.policy_named("uncertainty").select(c)
    assert chosen.tolist() == M.uncertainty_select(c.indices, c.labels, u_of(c.indices), 6, [0, 1], _gen(0)).tolist()
    assert c.info["measure"] == "vr" and c.info["views"] == 4
    assert c.info["candidates_uncertainty"] == M.uncertainty_histogram(u_of(c.indices), 4)
    assert c.info["chosen_uncertainty"] == M.uncertainty_histogram(u_of(chosen), 4)
    feats = lambda idx: torch.stack([idx.float(), (idx % 3).float() + 1], 1)  # noqa: E731
    c = _cands(1, 4, 8, 6, embed=feats)
    assert torch.equal(c.features(), feats(c.indices))
    assert (
        M.policy_named("prototype").select(c).tolist()
        == M.herding_select(c.indices, c.labels, feats(c.indices), 6, [0, 1], _gen(0)).tolist()
    )
    c = _cands(1, 4, 8, 6)
    assert (
        M.policy_named("class_balanced").select(c).tolist()
        == M.class_balanced_select(c.indices, c.labels, 6, [0, 1], _gen(0)).tolist()
    )
    assert (
        M.policy_named("random").select(_cands(1, 4, 8, 6)).tolist()
        == M.random_select(_cands(1, 4, 8, 6).indices, 6, _gen(0)).tolist()
    )
    c = _cands(1, 4, 8, 6)
    c.memory.seen = 4
    res = M.policy_named("reservoir").select(c)
    ref, seen = M.reservoir_update(torch.arange(4), torch.arange(100, 108), 4, 6, _gen(0))
    assert res.tolist() == ref.tolist() and c.memory.seen == seen == 12
    c = _cands(1, 4, 8, 6)
    assert (
        M.policy_named("greedy_balanced").select(c).tolist()
        == M.greedy_balanced_update(
            torch.arange(4), torch.arange(4) % 2, torch.arange(100, 108), torch.arange(100, 108) % 2, 6, _gen(0)
        ).tolist()
    )
    small = _cands(1, 2, 3, 6)  # 5 candidates <= 6 slots: kept as they are, nothing scored
    assert torch.equal(M.policy_named("uncertainty").select(small), small.indices)
    exact = _cands(1, 2, 4, 6)
    assert torch.equal(M.policy_named("random").select(exact), exact.indices)


def test_herding_select_keeps_small_classes_and_fills() -> None:
    candidates = torch.tensor([1, 2, 3, 4, 5, 6, 7])
    labels = torch.tensor([0, 0, 0, 0, 0, 1, 1])
    feats = torch.randn(7, 5, generator=_gen(0))
    got = M.herding_select(candidates, labels, feats, 6, [0, 1], _gen(1))
    order = M.herding_order(feats[:5], 3)
    assert got[:3].tolist() == candidates[:5][order].tolist() and got[3:5].tolist() == [6, 7]
    assert len(got) == 6 and len(set(got.tolist())) == 6
    assert M.herding_order(feats[:2], 5).tolist() in ([0, 1], [1, 0])
    assert (
        M.herding_select(candidates, labels, feats, 3, [], _gen(1)).tolist()
        == candidates[torch.randperm(7, generator=_gen(1))[:3]].tolist()
    )


def test_greedy_balanced_quota_rounds_down_and_keeps_long_indices() -> None:
    """10 slots, 3 classes: the quota is 10 // 3 = 3, so a class holding 3 takes no more."""
    stream = list(range(100, 140))
    stream_labels = [0] * 12 + [1] * 12 + [2] * 16
    for seed in range(4):
        got = M.greedy_balanced_update(
            torch.empty(0, dtype=torch.long),
            torch.empty(0, dtype=torch.long),
            torch.tensor(stream),
            torch.tensor(stream_labels),
            10,
            _gen(seed),
        )
        assert got.tolist() == _greedy_reference([], [], stream, stream_labels, 10, _gen(seed)), seed
    empty = M.greedy_balanced_update(
        torch.empty(0, dtype=torch.long),
        torch.empty(0, dtype=torch.long),
        torch.empty(0, dtype=torch.long),
        torch.empty(0, dtype=torch.long),
        5,
        _gen(0),
    )
    assert empty.dtype == torch.long and len(empty) == 0


def test_reservoir_first_tail_sample_replaces_its_slot() -> None:
    """A full memory that has seen nothing (seen = 0): the first streamed sample is the 1st ever,
    draws slot floor(u * 1) = 0 and replaces it."""
    memory, seen = M.reservoir_update(torch.tensor([1, 2, 3]), torch.tensor([9]), 0, 3, _gen(0))
    assert memory.tolist() == [9, 2, 3] and seen == 1


def test_herding_select_reorders_a_full_class_and_fills_with_the_runs_draws() -> None:
    """k = 3 slots: a class with exactly 3 candidates is kept whole in its given order; a larger
    class is herded; the one slot left (capacity 7) is drawn with the run's generator."""
    candidates = torch.tensor([10, 11, 12, 13, 14, 20, 21, 22])
    labels = torch.tensor([0, 0, 0, 0, 0, 1, 1, 1])
    feats = torch.tensor(
        [[1.0, 0.0], [0.0, 1.0], [0.7, 0.7], [0.9, 0.1], [0.2, 0.9], [1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]
    )
    assert M.herding_order(feats[5:], 3).tolist() != [0, 1, 2]  # herding would reorder class 1
    got = M.herding_select(candidates, labels, feats, 7, [0, 1], _gen(3))
    picked = torch.cat([candidates[:5][M.herding_order(feats[:5], 3)], candidates[5:]])
    assert got.tolist() == M._fill_rest(picked, candidates, 7, _gen(3)).tolist()
    assert got[3:6].tolist() == [20, 21, 22]


def test_policies_pass_the_runs_generator() -> None:
    """GDumb's sampler evicting (a third class arrives) and herding filling a spare slot: both
    draw from the run's generator, so the same generator gives the same memory."""
    from types import SimpleNamespace

    memory = M.Memory(7)
    memory.replace(torch.arange(6), torch.tensor([0, 0, 0, 1, 1, 1]))
    stream = torch.arange(100, 109)
    stream_labels = torch.tensor([2] * 9)
    indices = torch.cat([memory.indices, stream])
    labels = torch.cat([memory.labels, stream_labels])
    feats = lambda idx: torch.stack([idx.float() % 5 + 1, idx.float() % 3 + 1], 1)  # noqa: E731

    def cands(seed: int) -> M.Candidates:
        return M.Candidates(
            indices, labels, memory, stream, [0, 1, 2], 1, _gen(seed), SimpleNamespace(), None, feats, {}
        )

    greedy = M.policy_named("greedy_balanced").select(cands(5))
    assert (
        greedy.tolist()
        == M.greedy_balanced_update(memory.indices, memory.labels, stream, stream_labels, 7, _gen(5)).tolist()
    )
    proto = M.policy_named("prototype").select(cands(6))
    assert proto.tolist() == M.herding_select(indices, labels, feats(indices), 7, [0, 1, 2], _gen(6)).tolist()
