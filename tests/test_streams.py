import pytest
import torch

from rmconsole.cl import streams
from rmconsole.cl.data import load_digits


def _labels(counts: list[int]) -> torch.Tensor:
    return torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])


MNIST_LIKE = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


@pytest.mark.parametrize("blurry", [10, 30])
def test_blurry_tasks_equal_sizes_no_duplicates_all_used(blurry: int) -> None:
    labels = _labels(MNIST_LIKE)
    tasks = streams.blurry_tasks(labels, 5, 10, blurry, seed=1)
    sizes = [len(t) for t in tasks]
    assert max(sizes) - min(sizes) <= 1
    everything = torch.cat(tasks)
    assert len(everything) == len(labels)
    assert len(everything.unique()) == len(labels)


@pytest.mark.parametrize("blurry", [10, 30])
def test_blurry_own_task_share(blurry: int) -> None:
    """A class keeps about (100-M) + M/T percent of its samples in its own task."""
    labels = _labels([5000] * 10)  # CIFAR10-like: balanced
    tasks = streams.blurry_tasks(labels, 5, 10, blurry, seed=3)
    expected = (100 - blurry) + blurry / 5
    for t, stream in enumerate(tasks):
        counts = torch.bincount(labels[stream], minlength=10)
        for c in streams.task_classes(10, 5)[t]:
            share = 100 * counts[c].item() / 5000
            assert abs(share - expected) < 1.0, (t, c, share, expected)


def test_blurry_every_class_in_task_zero() -> None:
    labels = _labels(MNIST_LIKE)
    tasks = streams.blurry_tasks(labels, 5, 10, 10, seed=2)
    composition = streams.composition(labels, tasks[0], 10)
    assert all(n > 0 for n in composition)
    # the major classes dominate: two classes hold ~92% of their samples here
    assert composition[0] > 5000 and composition[1] > 5000
    assert max(composition[2:]) < 200


def test_disjoint_tasks_hold_only_their_classes() -> None:
    labels = _labels(MNIST_LIKE)
    tasks = streams.disjoint_tasks(labels, 5, 10, seed=1)
    for t, stream in enumerate(tasks):
        assert set(labels[stream].unique().tolist()) == {2 * t, 2 * t + 1}
    assert sum(len(t) for t in tasks) == len(labels)


def test_tasks_are_deterministic_by_seed() -> None:
    labels = _labels(MNIST_LIKE)
    a = streams.blurry_tasks(labels, 5, 10, 10, seed=7)
    b = streams.blurry_tasks(labels, 5, 10, 10, seed=7)
    c = streams.blurry_tasks(labels, 5, 10, 10, seed=8)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert streams.stream_hash(a[0]) == streams.stream_hash(b[0]) != streams.stream_hash(c[0])


def test_paper_class_orders_and_remap() -> None:
    order = streams.class_order("cifar10", 10, 1, "paper")
    assert order == [9, 1, 6, 0, 3, 2, 5, 7, 4, 8]  # truck, automobile | frog, airplane | ...
    assert streams.class_order("mnist", 10, 2, "paper")[:2] == [4, 1]
    labels = torch.tensor([9, 1, 6, 0])
    assert streams.remap_labels(labels, order).tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        streams.class_order("digits", 10, 1, "paper")
    seeded = streams.class_order("digits", 10, 1, "seed")
    assert sorted(seeded) == list(range(10)) and seeded == streams.class_order("digits", 10, 1, "seed")


def test_eval_scope() -> None:
    groups = streams.task_classes(10, 5)
    assert streams.EvalScope(True, groups).classes_after(0) == list(range(10))
    assert streams.EvalScope(False, groups).classes_after(1) == [0, 1, 2, 3]


def test_digits_split_is_fixed() -> None:
    data = load_digits()
    assert len(data.train) == 1437 and len(data.test) == 360
    assert data.train.images.dtype == torch.uint8 and data.train.images.shape[1:] == (1, 8, 8)
    again = load_digits()
    assert torch.equal(data.test.labels, again.test.labels)
