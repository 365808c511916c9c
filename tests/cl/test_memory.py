from types import SimpleNamespace

import pytest
import torch

from rmconsole.cl import memory as M


def test_step_positions_span_the_ranking() -> None:
    pos = M.step_positions(19, 10)
    # Algorithm 1: D_c[j n / k], j = 1..k (1-based) -> 0-based floor(j * 19 / 10) - 1
    assert pos.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 16, 18]
    assert M.step_positions(10, 5).tolist() == [1, 3, 5, 7, 9]  # the least certain sample is kept
    assert M.step_positions(10, 3).tolist() == [2, 5, 9]
    assert M.step_positions(5, 10).tolist() == [0, 1, 2, 3, 4]


def test_uncertainty_select_is_class_balanced_and_spans_uncertainty() -> None:
    gen = torch.Generator().manual_seed(0)
    labels = torch.arange(3).repeat_interleave(100)
    candidates = torch.arange(300) + 1000
    uncertainty = torch.rand(300, generator=gen)
    chosen = M.uncertainty_select(candidates, labels, uncertainty, 30, [0, 1, 2], gen)
    assert len(chosen) == 30 and len(chosen.unique()) == 30
    chosen_labels = labels[chosen - 1000]
    assert torch.bincount(chosen_labels).tolist() == [10, 10, 10]
    for c in range(3):
        u = uncertainty[chosen[chosen_labels == c] - 1000]
        class_u = uncertainty[labels == c]
        assert u.max() == class_u.max()  # the least certain sample is kept (Alg. 1, j = k)
        assert u.min() <= torch.quantile(class_u, 0.15)  # and picks reach the robust end


def test_uncertainty_select_fills_leftover_slots() -> None:
    gen = torch.Generator().manual_seed(1)
    labels = torch.tensor([0] * 3 + [1] * 50)  # class 0 has fewer candidates than slots
    candidates = torch.arange(53)
    chosen = M.uncertainty_select(candidates, labels, torch.rand(53, generator=gen), 20, [0, 1], gen)
    assert len(chosen) == 20 and len(chosen.unique()) == 20
    assert set(range(3)) <= set(chosen.tolist())  # all of the rare class is kept


def test_class_balanced_select() -> None:
    gen = torch.Generator().manual_seed(2)
    labels = torch.arange(4).repeat_interleave(50)
    chosen = M.class_balanced_select(torch.arange(200), labels, 40, [0, 1, 2, 3], gen)
    assert torch.bincount(labels[chosen]).tolist() == [10, 10, 10, 10]


def _reservoir_reference(memory: list[int], stream: list[int], seen: int, capacity: int, slots: torch.Tensor):
    """The textbook sequential loop with the same slot draws."""
    memory = list(memory)
    k = 0
    for x in stream:
        if len(memory) < capacity:
            memory.append(x)
        else:
            j = int(slots[k])
            k += 1
            if j < capacity:
                memory[j] = x
        seen += 1
    return memory, seen


def test_reservoir_equals_sequential_algorithm() -> None:
    capacity = 20
    stream = torch.arange(500)
    memory, seen = M.reservoir_update(
        torch.empty(0, dtype=torch.long), stream, 0, capacity, torch.Generator().manual_seed(5)
    )
    gen = torch.Generator().manual_seed(5)
    tail = len(stream) - capacity
    counts = capacity + torch.arange(tail, dtype=torch.float64) + 1
    slots = (torch.rand(tail, generator=gen, dtype=torch.float64) * counts).floor().long()
    ref, ref_seen = _reservoir_reference([], stream.tolist(), 0, capacity, slots)
    assert memory.tolist() == ref and seen == ref_seen == 500


def test_reservoir_is_uniform_over_the_stream() -> None:
    hits = torch.zeros(100)
    for s in range(300):
        memory, _ = M.reservoir_update(
            torch.empty(0, dtype=torch.long), torch.arange(100), 0, 10, torch.Generator().manual_seed(s)
        )
        hits[memory] += 1
    # every position is kept with probability K/N = 0.1: 30 of 300 on average
    assert hits[:10].mean() < 45 and hits[-10:].mean() > 15


def test_herding_whole_pick_order_on_a_hand_checked_example() -> None:
    """Class 0: phi = (0,1), (.6,.8), (.8,-.6), (.6,-.8) (unit vectors, given at other lengths so
    the L2 normalisation matters), mu = (.5, .1). Squared distances of the running mean to mu:
    pick 1: 1.06, .50, .58, .82 -> sample 1; pick 2 ((phi1 + phi)/2): .68, -, .04, .02 -> sample 3;
    pick 3 ((phi1 + phi3 + phi)/3): .0644, -, .1178, - -> sample 0; pick 4: sample 2.
    (With mu normalised to unit length, as before the fix, the order is 1, 2, 3, 0: only the
    first pick agrees.) Class 1 (three samples, two slots) checks classes are herded apart."""
    phi = torch.tensor([[0, 1], [0.6, 0.8], [0.8, -0.6], [0.6, -0.8]], dtype=torch.float32)
    features = phi * torch.tensor([[3.0], [0.5], [2.0], [7.0]])
    assert M.herding_order(features, 4).tolist() == [1, 3, 0, 2]
    assert M.herding_order(features, 2).tolist() == [1, 3]
    # two classes: candidates 10..13 are class 0, 20..22 class 1 ((1,0), (0,1), (.6,.8): mu =
    # (.533, .6); pick 1 is (.6,.8) (distance^2 .0489); then (phi2 + (1,0))/2 = (.8,.4): .111 vs
    # (0.3, 0.9): .144 -> (1,0))
    candidates = torch.tensor([10, 11, 12, 13, 20, 21, 22])
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    feats = torch.cat([features, torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.6, 0.8]])])
    chosen = M.herding_select(candidates, labels, feats, 4, [0, 1], torch.Generator().manual_seed(0))
    assert chosen.tolist() == [11, 13, 22, 20]


def _icarl_reference_herding(features: torch.Tensor, k: int) -> list[int]:
    """The iCaRL authors' formulation (Welling's herding, as in their code): w <- mu; repeatedly
    take the unchosen sample maximising <w, phi>, then w <- w + mu - phi(pick)."""
    phi = features.double() / features.double().norm(dim=1, keepdim=True)
    mu = phi.mean(0)
    w = mu.clone()
    picks: list[int] = []
    for _ in range(k):
        score = phi @ w
        if picks:
            score[torch.tensor(picks)] = -float("inf")
        i = int(score.argmax())
        picks.append(i)
        w += mu - phi[i]
    return picks


def test_herding_agrees_with_icarls_formulation_on_relu_features() -> None:
    """On 400-d ReLU features (an MLP400's), all 50 picks equal the iCaRL authors' herding."""
    gen = torch.Generator().manual_seed(7)
    for trial in range(3):
        features = torch.relu(torch.randn(300, 400, generator=gen) + 0.3 * torch.randn(1, 400, generator=gen))
        assert M.herding_order(features, 50).tolist() == _icarl_reference_herding(features, 50), trial


def test_memory_histogram_and_capacity() -> None:
    mem = M.Memory(5)
    mem.replace(torch.tensor([1, 2, 3]), torch.tensor([0, 0, 2]))
    assert mem.histogram(3) == [2, 0, 1]
    try:
        mem.replace(torch.arange(6), torch.zeros(6, dtype=torch.long))
    except ValueError:
        pass
    else:
        raise AssertionError("over capacity accepted")


def test_step_positions_are_even_over_the_ranking() -> None:
    """i_j = floor(j n / k) - 1, j = 1..k: k distinct ranks, gaps of floor or ceil of n/k, the
    last the least certain, the first within one step of the most certain end."""
    for n in (11, 19, 20, 57, 100, 1000, 1001):
        for k in (1, 3, 10, 50):
            if n <= k:
                continue
            pos = M.step_positions(n, k)
            gaps = pos.diff()
            assert len(pos) == k and pos[-1] == n - 1 and bool((gaps > 0).all())
            assert set(gaps.tolist()) <= {n // k, -(-n // k)}
            assert n // k - 1 == pos[0]


def test_uncertainty_select_takes_one_sample_per_stratum_of_the_ranking() -> None:
    """With n = 100 candidates and k = 10 slots, exactly one pick in each tenth of the ranking."""
    gen = torch.Generator().manual_seed(3)
    uncertainty = torch.rand(100, generator=gen)
    chosen = M.uncertainty_select(torch.arange(100), torch.zeros(100, dtype=torch.long), uncertainty, 10, [0], gen)
    rank = torch.argsort(torch.argsort(uncertainty))  # 0 = most certain
    assert sorted((rank[chosen] // 10).tolist()) == list(range(10))


def test_class_balanced_select_keeps_rare_classes_whole_and_fills_to_capacity() -> None:
    gen = torch.Generator().manual_seed(4)
    labels = torch.tensor([0] * 5 + [1] * 100 + [2] * 100)
    chosen = M.class_balanced_select(torch.arange(205), labels, 60, [0, 1, 2], gen)
    counts = torch.bincount(labels[chosen], minlength=3).tolist()
    assert len(chosen) == 60 and len(chosen.unique()) == 60
    assert counts[0] == 5 and counts[1] >= 20 and counts[2] >= 20  # k_c = 20 each, 15 spare slots filled


def test_random_select_is_a_uniform_subset() -> None:
    hits = torch.zeros(50)
    for s in range(400):
        hits[M.random_select(torch.arange(50), 10, torch.Generator().manual_seed(s))] += 1
    assert hits.sum() == 4000 and hits.min() > 40 and hits.max() < 125  # expectation 80 each


def test_reservoir_over_several_tasks_counts_everything_seen() -> None:
    gen = torch.Generator().manual_seed(6)
    memory, seen = torch.empty(0, dtype=torch.long), 0
    for t in range(4):
        memory, seen = M.reservoir_update(memory, torch.arange(t * 100, (t + 1) * 100), seen, 30, gen)
        assert len(memory) == 30 and len(memory.unique()) == 30
    assert seen == 400 and (memory >= 300).sum() < 20  # the last task does not take over the memory


# ---------------------------------------------------------------- any method, any policy


def _setup(overrides: dict):
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup
    from rmconsole.config import load_config

    _, cfg = load_config(None, {"epochs": 1, **overrides})
    data = load_digits()
    proto = build_protocol(cfg, data)
    setup = Setup(
        cfg,
        data,
        proto.train_labels,
        proto.test_labels,
        proto.groups,
        torch.device("cpu"),
        make_augmenter(cfg, data, torch.device("cpu")),
    )
    return setup, proto


def _methods() -> list[str]:
    from rmconsole.cl.methods import METHODS, REGISTRY

    return sorted(
        cls.name
        for name, cls in METHODS.items()  # (the RM paper's protocol: its methods)
        if not cls.single_task and "task" in REGISTRY[name].protocols and cls.name == name
    )


def test_each_method_has_a_paper_default_policy() -> None:
    from rmconsole.cl.methods import METHODS

    for name, cls in METHODS.items():
        assert cls.default_memory_policy in M.MEMORY_POLICIES, name
    assert METHODS["rm"].default_memory_policy == "uncertainty"
    assert METHODS["finetune"].default_memory_policy == "random"


@pytest.mark.parametrize("policy", M.MEMORY_POLICIES)
@pytest.mark.parametrize("method", _methods())
def test_every_policy_is_selectable_for_every_method(method: str, policy: str) -> None:
    """Disjoint digits, K=200: after task 1 the memory is full, holds no duplicates, comes from
    what was streamed, and (for the class-balanced policies) has K/4 of each seen class (BiC's
    training memory is K less its 10% validation set: 180)."""
    from rmconsole.cl.methods import Task, method_class

    setup, proto = _setup({"method": method, "memory_policy": policy, "blurry": 0})
    learner = method_class(method)(setup)
    assert learner.memory_policy == policy
    streamed = []
    for t in range(2):
        task = Task(t, proto.tasks[t], 5)
        learner.before_task(task)
        learner.update_memory(task)
        streamed.append(task.stream)
        assert learner.memory_info["policy"] == policy
    mem = learner.memory
    k = 180 if method == "bic" or method == "bic_star" else 200
    assert mem.capacity == k and len(mem) == k and len(mem.indices.unique()) == k
    assert bool(torch.isin(mem.indices, torch.cat(streamed)).all())
    hist = mem.histogram(10)
    assert sum(hist[4:]) == 0  # only classes seen so far
    if policy in ("uncertainty", "class_balanced", "prototype"):
        assert hist[:4] == [k // 4] * 4
    if policy == "reservoir":
        assert mem.seen == len(proto.tasks[0]) + len(proto.tasks[1])
    if policy == "uncertainty":
        assert learner.memory_info["measure"] == "randaug" and sum(learner.memory_info["chosen_uncertainty"]) == k


# ---------------------------------------------------------------- the policy registry


def test_the_policy_registry_is_what_the_config_accepts() -> None:
    from rmconsole.cl import catalog

    assert set(M.POLICIES) == set(catalog.MEMORY_POLICIES)
    assert all(policy.name == name for name, policy in M.POLICIES.items())


def _candidates(task: int = 1, n_memory: int = 20, n_stream: int = 40, capacity: int = 30, **asked) -> M.Candidates:
    """Labels 0-3 cycled; uncertainty and features only when the test allows them."""

    def refuse(what: str):
        def call(idx):
            raise AssertionError(f"{what} computed for a policy that does not need it")

        return call

    memory = M.Memory(capacity)
    memory.replace(torch.arange(n_memory), torch.arange(n_memory) % 4)
    stream = torch.arange(100, 100 + n_stream)
    indices = torch.cat([memory.indices, stream])
    return M.Candidates(
        indices,
        torch.cat([memory.labels, stream % 4]),
        memory,
        stream,
        [0, 1, 2, 3],
        task,
        torch.Generator().manual_seed(0),
        SimpleNamespace(uncertainty="randaug", uncertainty_views=4),
        asked.get("score", refuse("uncertainty")),
        asked.get("embed", refuse("features")),
        {},
    )


def test_policies_ask_for_uncertainty_or_features_only_when_they_use_them() -> None:
    for name in ("random", "class_balanced", "reservoir", "greedy_balanced"):
        assert len(M.policy_named(name).select(_candidates())) == 30, name
    assert len(M.policy_named("uncertainty").select(_candidates(task=0))) == 30  # task 0: no scoring
    scored = _candidates(score=lambda idx: (idx % 5).float() / 4)
    chosen = M.policy_named("uncertainty").select(scored)
    assert len(chosen) == 30 and scored.info["measure"] == "randaug" and sum(scored.info["chosen_uncertainty"]) == 30
    herded = _candidates(embed=lambda idx: torch.nn.functional.one_hot(idx % 7, 7).float())
    assert len(M.policy_named("prototype").select(herded)) == 30
    small = _candidates(n_memory=5, n_stream=10)  # fewer candidates than slots: all are kept, nothing scored
    assert torch.equal(M.policy_named("uncertainty").select(small), small.indices)
    with pytest.raises(ValueError, match="unknown memory policy 'nope'"):
        M.policy_named("nope")


def test_a_new_policy_is_one_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register a policy and a method uses it: no other code changes."""
    from rmconsole.cl.methods import Task, method_class

    monkeypatch.setattr(M, "POLICIES", dict(M.POLICIES))

    @M.memory_policy
    class Newest(M.PoolPolicy):
        name = "newest"

        def choose(self, c: M.Candidates) -> torch.Tensor:
            return c.indices[-c.capacity :]

    setup, proto = _setup({"method": "finetune", "blurry": 0})
    learner = method_class("finetune")(setup)
    learner.memory_policy = "newest"
    task = Task(0, proto.tasks[0], 5)
    learner.before_task(task)
    learner.update_memory(task)
    assert torch.equal(learner.memory.indices, task.stream[-200:]) and learner.memory_info["policy"] == "newest"


def test_a_full_selection_is_not_topped_up_and_leaves_the_generator_alone() -> None:
    """No slot left: no random fill, and no draw from the generator (the run's later memory and
    batch draws depend on its state)."""
    gen = torch.Generator().manual_seed(3)
    before = gen.get_state()
    chosen = torch.tensor([4, 1, 7])
    out = M._fill_rest(chosen, torch.arange(10), 3, gen)
    assert torch.equal(out, chosen) and torch.equal(gen.get_state(), before)


def test_herding_with_no_slot_gives_an_empty_index() -> None:
    """A class with no slot (more classes than memory slots): zero picks, still an index tensor."""
    picks = M.herding_order(torch.rand(5, 3, generator=torch.Generator().manual_seed(0)), 0)
    assert picks.dtype == torch.long and torch.arange(5)[picks].tolist() == []
