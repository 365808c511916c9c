"""The validation hold-out of a run (issue 30): exact sizes, the derived seed, determinism.

Tiny label tensors, no training: these pin `validation_seed`, `validation_sizes`, `hold_out`,
`HeldOut` and `validation_info` in rmconsole/cl/streams.py (issue 29, mutation testing).
"""

import torch

from rmconsole.cl import streams


def _labels(counts: list[int], first: int = 0) -> torch.Tensor:
    """Class first+i repeated counts[i] times, classes interleaved so index order != class order."""
    per = [torch.full((n,), first + i) for i, n in enumerate(counts)]
    out = torch.cat(per)
    return out[torch.argsort(torch.arange(len(out)) % 3, stable=True)]


def test_validation_seed_is_the_documented_formula() -> None:
    # (seed * 1_000_003 + 0x5EED_0FF1CE) mod (2**63 - 1): values written out so the formula is pinned
    assert streams.VALIDATION_SALT == 0x5EED_0FF1CE == 407704170958
    assert streams.validation_seed(0) == 407704170958
    assert streams.validation_seed(1) == 407705170961
    assert streams.validation_seed(7) == 407711170979
    # a large seed wraps at the modulus 2**63 - 1 (a valid torch seed)
    assert streams.validation_seed(2**62) == 4611686426132058863
    assert streams.validation_seed(2**63) == (2**63 * 1_000_003 + 407704170958) % (2**63 - 1) == 407705170961
    for s in (0, 1, 7, 2**62):
        v = streams.validation_seed(s)
        assert isinstance(v, int) and 0 <= v < 2**63 - 1
        assert v != s  # never the run seed's own generator stream


def test_validation_draw_is_not_the_run_seed_stream() -> None:
    labels = _labels([40, 40])
    held = streams.hold_out(labels, 0.25, seed=3)
    gen = torch.Generator().manual_seed(3)  # what the run's own seed would draw
    same_seed = [streams._shuffled((labels == c).nonzero().flatten(), gen)[:10] for c in (0, 1)]
    assert not torch.equal(held.validation, torch.cat(same_seed).sort().values)
    gen = torch.Generator().manual_seed(streams.validation_seed(3))
    derived = [streams._shuffled((labels == c).nonzero().flatten(), gen)[:10] for c in (0, 1)]
    assert torch.equal(held.validation, torch.cat(derived).sort().values)


def test_sizes_are_round_half_even_per_class() -> None:
    # 0.25 * [2, 6, 10, 7, 0] = [0.5, 1.5, 2.5, 1.75, 0] -> Python's round: [0, 2, 2, 2, 0]
    assert streams.validation_sizes([2, 6, 10, 7, 0], 0.25) == [0, 2, 2, 2, 0]
    assert streams.validation_sizes([3, 4], 0.0) == [0, 0]


def test_hold_out_exact_per_class_counts_with_an_absent_class() -> None:
    # class 2 absent from the labels; class 1 rounds at .5 (0.25 * 6 = 1.5 -> 2), class 3 at 2.5 -> 2
    counts = [8, 6, 0, 10]
    labels = _labels(counts)
    held = streams.hold_out(labels, 0.25, seed=5)
    per_class = torch.bincount(labels[held.validation], minlength=4).tolist()
    assert per_class == [2, 2, 0, 2]
    assert torch.bincount(labels[held.train], minlength=4).tolist() == [6, 4, 0, 8]
    assert held.validation.dtype == torch.int64 and held.train.dtype == torch.int64


def test_hold_out_when_the_smallest_class_is_not_zero() -> None:
    # labels 3..5 only: the classes are counted up to the largest label, not the smallest
    labels = _labels([4, 8, 12], first=3)
    held = streams.hold_out(labels, 0.25, seed=2)
    assert torch.bincount(labels[held.validation], minlength=6).tolist() == [0, 0, 0, 1, 2, 3]
    assert len(held.train) + len(held.validation) == len(labels)


def test_hold_out_is_deterministic_disjoint_sorted_and_complete() -> None:
    labels = _labels([20, 13, 7])
    a = streams.hold_out(labels, 0.3, seed=11)
    b = streams.hold_out(labels, 0.3, seed=11)
    assert torch.equal(a.train, b.train) and torch.equal(a.validation, b.validation)
    assert not a.empty
    assert set(a.train.tolist()).isdisjoint(a.validation.tolist())
    assert sorted(a.train.tolist() + a.validation.tolist()) == list(range(len(labels)))
    assert a.train.tolist() == sorted(a.train.tolist())
    assert a.validation.tolist() == sorted(a.validation.tolist())
    other = streams.hold_out(labels, 0.3, seed=12)
    assert not torch.equal(a.validation, other.validation)


def test_fraction_zero_keeps_everything_as_train_in_order() -> None:
    labels = _labels([5, 3, 4])
    held = streams.hold_out(labels, 0.0, seed=1)
    assert held.train.tolist() == list(range(len(labels)))
    assert held.validation.tolist() == [] and held.validation.dtype == torch.int64
    assert held.empty
    tasks = [torch.tensor([2, 0]), torch.tensor([1])]
    assert held.restrict(tasks) is tasks


def test_a_fraction_too_small_for_any_class_holds_nothing_out() -> None:
    # 0.1 * [4, 3] = [0.4, 0.3] -> no sample held out: the same as fraction 0
    held = streams.hold_out(_labels([4, 3]), 0.1, seed=1)
    assert held.empty and held.train.tolist() == list(range(7))
    assert held.validation.dtype == torch.int64


def test_restrict_maps_task_positions_to_train_indices() -> None:
    held = streams.HeldOut(torch.tensor([0, 2, 5, 7]), torch.tensor([1, 3]))
    out = held.restrict([torch.tensor([3, 0]), torch.tensor([1, 2])])
    assert [t.tolist() for t in out] == [[7, 0], [2, 5]]


def test_validation_info_records_fraction_size_per_class_and_hash() -> None:
    labels = _labels([8, 4])
    held = streams.hold_out(labels, 0.25, seed=4)
    info = streams.validation_info(held, 0.25, labels, 3)
    assert info == {
        "fraction": 0.25,
        "samples": 3,
        "per_class": [2, 1, 0],
        "hash": streams.stream_hash(held.validation),
    }
