import pytest
import torch

from rmconsole.cl import streams
from rmconsole.cl.data import load_digits


def _labels(counts: list[int]) -> torch.Tensor:
    return torch.cat([torch.full((n,), c) for c, n in enumerate(counts)])


MNIST_LIKE = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


@pytest.mark.parametrize("blurry", [10, 30])
def test_blurry_tasks_balanced_classes_equal_sizes_no_duplicates_all_used(blurry: int) -> None:
    labels = _labels([5000] * 10)
    tasks = streams.blurry_tasks(labels, 5, 10, blurry, seed=1)
    assert [len(t) for t in tasks] == [10000] * 5
    everything = torch.cat(tasks)
    assert len(everything) == len(labels) and len(everything.unique()) == len(labels)


@pytest.mark.parametrize("blurry", [10, 30])
def test_blurry_pool_is_dealt_evenly_on_unequal_classes(blurry: int) -> None:
    """MNIST's classes differ in size: every task gets the same number of pool samples and
    keeps (100-M)% of its own classes, so task sizes differ (the authors' MNIST files)."""
    labels = _labels(MNIST_LIKE)
    tasks = streams.blurry_tasks(labels, 5, 10, blurry, seed=1)
    everything = torch.cat(tasks)
    assert len(everything) == len(labels) and len(everything.unique()) == len(labels)
    out = [int(round(n * blurry / 100)) for n in MNIST_LIKE]
    pool = sum(out)
    shares = streams.pool_shares(pool, 5)
    assert shares == [pool // 5 + (t < pool % 5) for t in range(5)] and sum(shares) == pool
    for t, stream in enumerate(tasks):
        own = [2 * t, 2 * t + 1]
        kept = sum(MNIST_LIKE[c] - out[c] for c in own)
        assert len(stream) == kept + shares[t]
        # the pool samples a task holds = its size minus what its own classes kept
        assert len(stream) - kept == shares[t]


def test_pool_shares() -> None:
    assert streams.pool_shares(10, 5) == [2] * 5
    assert streams.pool_shares(12, 5) == [3, 3, 2, 2, 2]
    assert streams.pool_shares(3, 5) == [1, 1, 1, 0, 0]


# The authors' published MNIST Blurry10 files (paper class order): samples per task and the
# minor-class samples among them (counted from collections/mnist/mnist_train_blurry10_rand*).
AUTHORS_MNIST_BLURRY10 = {
    1: ([11916, 11784, 12049, 12906, 11345], [974, 980, 961, 951, 985]),
    2: ([12525, 11409, 12200, 12043, 11819], [948, 966, 955, 973, 970]),
    3: ([11337, 12630, 11880, 12169, 11984], [975, 954, 964, 962, 954]),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mnist_blurry10_matches_the_authors_files(seed: int) -> None:
    """Task sizes within 0.1% of the authors' files; minor counts are a random draw of the same
    law (expected pool share x the other classes' part of the pool, hypergeometric sd ~13)."""
    order = streams.class_order("mnist", 10, seed, "paper")
    labels = streams.remap_labels(_labels(MNIST_LIKE), order)
    tasks = streams.blurry_tasks(labels, 5, 10, 10, seed)
    sizes, minors = AUTHORS_MNIST_BLURRY10[seed]
    pool_of = [int(round(MNIST_LIKE[c] * 0.1)) for c in order]  # by remapped label
    pool = sum(pool_of)
    for t, stream in enumerate(tasks):
        assert abs(len(stream) - sizes[t]) <= 0.001 * sizes[t], (t, len(stream), sizes[t])
        minor = int((labels[stream] // 2 != t).sum())
        expected = streams.pool_shares(pool, 5)[t] * (1 - (pool_of[2 * t] + pool_of[2 * t + 1]) / pool)
        assert abs(minor - expected) < 5 * 13, (t, minor, expected)
        assert abs(sizes[t] - minors[t] - (len(stream) - minor)) < 100  # major counts agree too


# Stream hashes of balanced datasets from before the pool was dealt evenly (CIFAR10-, CIFAR100-
# and Tiny-ImageNet-shaped label vectors): balanced classes must give exactly the same streams.
BALANCED_HASHES = {
    ("cifar10", 10, 1): [
        "d835bc83b30785cb",
        "ec5d8dc92cf161fd",
        "342d09540131ea8e",
        "8f6d25031b87fec1",
        "52bed485a1b08200",
    ],
    ("cifar100", 30, 2): [
        "690cbdcec05e3c8e",
        "5fbe8653a1857ce0",
        "b2195659be850f2b",
        "48e701c789497df6",
        "e65b604bfc00b072",
    ],
    ("tiny", 10, 3): [
        "fadf3d837d02f62f",
        "3c906de3821deb28",
        "d13bd7dde9a2995f",
        "cee0de379980356b",
        "05ca85c1d56bfe64",
        "789685fced6d5763",
        "8fca44b0e5ec872a",
        "8e835b698eb190e2",
        "9bd9a12a6709184f",
        "82bb82d618069b11",
    ],
}
SHAPES = {"cifar10": (5000, 10, 5), "cifar100": (500, 100, 5), "tiny": (500, 200, 10)}


@pytest.mark.parametrize("case", sorted(BALANCED_HASHES))
def test_balanced_stream_hashes_unchanged(case: tuple[str, int, int]) -> None:
    name, blurry, seed = case
    per_class, n_classes, n_tasks = SHAPES[name]
    labels = torch.arange(per_class * n_classes) % n_classes
    tasks = streams.make_tasks(labels, n_tasks, n_classes, blurry, seed)
    assert [streams.stream_hash(t) for t in tasks] == BALANCED_HASHES[case]


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
