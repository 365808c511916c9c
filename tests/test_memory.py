import torch

from rmconsole.cl import memory as M


def test_step_positions_span_the_ranking() -> None:
    pos = M.step_positions(19, 10)
    assert pos[0] == 0 and pos[-1] >= 17  # reaches the uncertain end, unlike floor(n/k) steps
    assert len(pos.unique()) == 10
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
        assert u.min() == class_u.min()  # the most certain sample is kept
        assert u.max() >= torch.quantile(class_u, 0.85)  # and picks reach the fragile end


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
    memory, seen = M.reservoir_update(torch.empty(0, dtype=torch.long), stream, 0, capacity,
                                      torch.Generator().manual_seed(5))
    gen = torch.Generator().manual_seed(5)
    tail = len(stream) - capacity
    counts = capacity + torch.arange(tail, dtype=torch.float64) + 1
    slots = (torch.rand(tail, generator=gen, dtype=torch.float64) * counts).floor().long()
    ref, ref_seen = _reservoir_reference([], stream.tolist(), 0, capacity, slots)
    assert memory.tolist() == ref and seen == ref_seen == 500


def test_reservoir_is_uniform_over_the_stream() -> None:
    hits = torch.zeros(100)
    for s in range(300):
        memory, _ = M.reservoir_update(torch.empty(0, dtype=torch.long), torch.arange(100), 0, 10,
                                       torch.Generator().manual_seed(s))
        hits[memory] += 1
    # every position is kept with probability K/N = 0.1: 30 of 300 on average
    assert hits[:10].mean() < 45 and hits[-10:].mean() > 15


def test_herding_picks_samples_near_the_class_mean_first() -> None:
    gen = torch.Generator().manual_seed(0)
    features = torch.randn(100, 8, generator=gen)
    features[7] = features.mean(0) * 5  # in direction of the mean
    labels = torch.zeros(100, dtype=torch.long)
    chosen = M.herding_select(torch.arange(100), labels, features, 5, [0], gen)
    assert chosen[0] == 7 and len(chosen.unique()) == 5


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
