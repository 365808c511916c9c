"""The conformance kit's own parts (rmconsole.testing), in process and without training: how it
compares two runs, what its watch counts, what its guarded splits let through, how it words a
failure. Milliseconds each: the first tests tools/mutation.py runs over the kit (a mutant of
these parts dies here before any run is trained); test_conformance.py trains the broken methods.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import threading

import pytest
import torch

from rmconsole import testing
from rmconsole.cl.events import AnytimePoint, TaskOutcome
from rmconsole.cl.images import TensorImages
from rmconsole.testing import (
    QUICK_PER_CLASS,
    RULES,
    ConformanceError,
    Violation,
    _compare,
    _compare_decisions,
    _difference,
    _fingerprint,
    _first_per_class,
    _guarded_setup,
    _GuardedSplit,
    _is_library,
    _is_timing,
    _kit_data,
    _quiet_torch,
    _Recorder,
    _short,
    _threads,
    _Watch,
    check_method,
    kit_settings,
)

# ------------------------------------------------------------------------------ comparing two runs


def test_difference_finds_the_first_place_two_values_differ() -> None:
    assert _difference(1, 1, "x") is None
    assert _difference(1, 2, "x") == "x: 1 vs 2"
    assert _difference(1, 1.0, "x") == "x: 1 vs 1.0"  # another type is another run
    assert _difference(float("nan"), float("nan"), "x") is None
    assert _difference(float("nan"), 1.0, "x") == "x: nan vs 1.0"
    assert _difference([1, 2], [1, 2, 3], "x") == "x: 2 entries vs 3"
    assert _difference((1, 2), [1, 3], "x") == "x[1]: 2 vs 3"
    assert _difference([[0], [1]], [[0], [2]], "x") == "x[1][0]: 1 vs 2"
    assert _difference({"a": 1}, {"a": 1, "b": 2}, "x") == "x: keys ['b'] in one run only"
    assert _difference({"a": 1, "b": 2}, {"a": 1, "b": 3}, "x") == "x['b']: 2 vs 3"
    assert _difference({"a": 1, "b": 2}, {"b": 2, "a": 1}, "x") is None


def test_difference_leaves_timings_out() -> None:
    assert _is_timing("seconds") and _is_timing("train_seconds") and _is_timing("samples_per_s")
    assert not _is_timing("per_second_count") and not _is_timing(3) and not _is_timing("accuracy")
    assert _difference({"a": 1, "seconds": 1.0}, {"a": 1, "seconds": 2.0}, "x") is None
    assert _difference({"a": 1, "seconds": 1.0}, {"a": 1}, "x") is None  # a timing only one run has
    one = TaskOutcome(0, 50.0, [50.0], None, [0], seconds=1.0)
    assert _difference(one, dataclasses.replace(one, seconds=9.0), "t") is None
    assert _difference(one, dataclasses.replace(one, accuracy=51.0), "t") == "t accuracy: 50.0 vs 51.0"
    assert _difference(one, dataclasses.replace(one, accuracy_row=[50.0, 1.0]), "t") == "t accuracy_row: 1 entries vs 2"


def test_difference_of_tensors_is_bit_for_bit() -> None:
    a = torch.tensor([1.0, float("nan"), 3.0])
    assert _difference(a, a.clone(), "w") is None
    assert (
        _difference(a, torch.tensor([1.0, float("nan"), 3.5]), "w") == "w: 1 of 3 values differ, largest difference 0.5"
    )
    assert _difference(a, torch.tensor([2.0, 0.0, 3.0]), "w") == "w: 2 of 3 values differ, largest difference inf"
    assert _difference(torch.tensor([1, 2]), torch.tensor([1, 3]), "w") == "w: 1 of 2 values differ"
    assert _difference(a, a.double(), "w") == "w: torch.float32 (3,) vs torch.float64 (3,)"
    assert _difference(a, a[:2], "w") == "w: torch.float32 (3,) vs torch.float32 (2,)"
    assert _difference(a, [1.0], "w") == "w: a tensor in one run, list in the other"
    assert _difference(None, a, "w") == "w: a tensor in one run, NoneType in the other"


def _outcome(task: int, accuracy: float) -> TaskOutcome:
    return TaskOutcome(task, accuracy, [accuracy], None, [0], seconds=0.0)


def _recorder(outcomes: list[float], points: list[tuple[int, int, float]] = (), memories=()) -> _Recorder:  # type: ignore[assignment]
    r = _Recorder(_Watch(capacity=50))
    r.outcomes = [_outcome(t, a) for t, a in enumerate(outcomes)]
    r.points = [AnytimePoint(t, s, a, 2) for t, s, a in points]
    r.memories = list(memories)
    return r


def test_compare_names_the_first_difference_after_the_resume_point() -> None:
    a = _recorder([10.0, 20.0, 30.0], [(0, 5, 1.0), (1, 10, 2.0), (2, 15, 3.0)], [(0, [1], 1, {}), (1, [2], 1, {})])
    assert _compare(a, _recorder([10.0, 20.0, 30.0], [(0, 5, 1.0), (1, 10, 2.0), (2, 15, 3.0)], a.memories)) is None
    assert _compare(a, _recorder([10.0, 21.0, 30.0])) == "the evaluation after task 1: accuracy: 20.0 vs 21.0"
    assert _compare(a, _recorder([10.0, 20.0])) == "3 task evaluations vs 2"
    b = _recorder([10.0, 20.0, 30.0], [(0, 5, 1.0), (1, 10, 2.5), (2, 15, 3.0)])
    assert _compare(a, b) == "the anytime evaluation at streamed sample 10: accuracy: 2.0 vs 2.5"
    assert _compare(a, _recorder([10.0, 20.0, 30.0], [(0, 5, 1.0)])) == "3 anytime evaluations vs 1"
    c = _recorder([10.0, 20.0, 30.0], [(0, 5, 1.0), (1, 10, 2.0), (2, 15, 3.0)])
    c.memories = [(0, [1], 1, {}), (1, [3], 1, {})]
    assert _compare(a, c) == "the memory snapshot after task 1 (histogram, slots, info):[0][0]: 2 vs 3"
    c.memories = c.memories[:1]
    assert _compare(a, c) == "2 memory snapshots vs 1"
    # resumed after task 0: run b holds tasks 1 and 2 only
    resumed = _recorder([20.0, 30.0], [(1, 10, 2.0), (2, 15, 3.0)], [(1, [2], 1, {})])
    resumed.outcomes = [_outcome(1, 20.0), _outcome(2, 30.0)]
    assert _compare(a, resumed, after_task=0) is None
    resumed.outcomes[1] = _outcome(2, 31.0)
    assert _compare(a, resumed, after_task=0) == "the evaluation after task 2: accuracy: 30.0 vs 31.0"


def test_compare_reads_the_last_checkpoints_state() -> None:
    def saved(weight: float) -> bytes:
        import io

        buffer = io.BytesIO()
        torch.save({"method": {"w": torch.tensor([weight])}, "augmenter": None, "torch_rng": None, "x": 1}, buffer)
        return buffer.getvalue()

    a, b = _recorder([1.0]), _recorder([1.0])
    a.checkpoints, b.checkpoints = [saved(0.0), saved(1.0)], [saved(0.0), saved(1.0)]
    assert _compare(a, b) is None
    b.checkpoints = [saved(0.0), saved(2.0)]
    assert _compare(a, b) == (
        "the checkpoint after the last task (task 0):['method']['w']: 1 of 1 values differ, largest difference 1"
    )
    b.checkpoints = []
    assert _compare(a, b) is None  # nothing to compare with


def _take(place: str, ids: tuple[int, ...], model: int = 0) -> tuple[str, tuple[int, ...], int]:
    return (place, ids, model)


def test_compare_decisions_stops_where_the_models_already_differ() -> None:
    a = _recorder([1.0, 2.0])
    a.decisions = [(0, [_take("in learn_task", (1, 2)), _take("in learn_task", (3, 4))], [1, 3], 7), (1, [], [5], 8)]
    same = _recorder([1.0])
    same.decisions = [(0, [_take("in learn_task", (1, 2)), _take("in learn_task", (3, 4))], [1, 3], 7)]
    assert _compare_decisions(a, same) is None
    other = _recorder([1.0])
    other.decisions = [(0, [_take("in learn_task", (1, 2)), _take("in learn_task", (4, 3))], [1, 3], 7)]
    assert _compare_decisions(a, other) == (
        "the train images taken in learn_task (take 2 of the task): 2 samples [3, 4] vs 2 samples [4, 3]"
    )
    other.decisions = [(0, [_take("in learn_task", (1, 2)), _take("in learn_task", (4, 3), model=1)], [1, 3], 7)]
    assert _compare_decisions(a, other) is None  # taken from a model that already differs
    other.decisions = [(0, [_take("in learn_task", (1, 2))], [1, 3], 7)]
    assert _compare_decisions(a, other) == "task 0: 2 takes of train images vs 1"
    other.decisions = [(0, [_take("x", (1, 2)), _take("x", (3, 4))], [1, 4], 7)]
    assert _compare_decisions(a, other) == (
        "the memory after task 0: 2 samples in one run only (or the same samples in another order)"
    )
    other.decisions = [(0, [_take("x", (1, 2)), _take("x", (3, 4))], [1, 4], 9)]
    assert _compare_decisions(a, other) is None  # the model differs: the memory may follow from floats
    other.decisions = [(0, [_take("x", (1, 2)), _take("x", (3, 4))], [3, 1], 7)]
    assert "the memory after task 0: 0 samples in one run only" in (_compare_decisions(a, other) or "")
    long = _recorder([1.0])
    long.decisions = [(0, [_take("x", tuple(range(8))), _take("x", (3, 4))], [1, 3], 7)]
    a.decisions[0][1][0] = _take("x", tuple(range(1, 9)))
    assert _compare_decisions(a, long) == (
        "the train images taken x (take 1 of the task): 8 samples [1, 2, 3, 4, 5, 6]... vs 8 samples [0, 1, 2, 3, 4, 5]..."
    )


# ------------------------------------------------------------------------------ the watch


def test_the_watch_counts_past_samples_given_to_the_model_per_task() -> None:
    watch = _Watch(capacity=3, protocol="task")
    watch.reset()
    assert watch.window() == "before the first task"
    watch.task_opened(torch.tensor([10, 11]))
    watch.task, watch.hook = 0, "learn_task"
    watch.train_taken(torch.tensor([10, 11, 1, 2]), sys._getframe())
    watch.train_taken(torch.tensor([[2, 3]]), sys._getframe())  # any shape: its indices
    assert watch.past == {1, 2, 3} and not watch.given  # three past samples: K
    with torch.no_grad():
        watch.train_taken(torch.tensor([4, 5]), sys._getframe())  # looked at, not trained on
    assert watch.past == {1, 2, 3} and not watch.given
    watch.train_taken(torch.tensor([4]), sys._getframe())
    assert watch.given_most == 4
    (first,) = watch.given.values()
    assert re.fullmatch(
        r"4 distinct past samples during task 0 \(in learn_task\), taken by \S*tests/platform/test_conformance_kit\.py:"
        r"\d+ in test_the_watch_counts_past_samples_given_to_the_model_per_task",
        first,
    ), first
    watch.train_taken(torch.tensor([5, 6]), sys._getframe())
    assert watch.given_most == 6 and watch.given["learn_task"].startswith("4 distinct")  # the first is kept
    assert [t[1] for t in watch.takes] == [(10, 11, 1, 2), (2, 3), (4, 5), (4,), (5, 6)]
    assert all(t[0] == "in learn_task (task 0)" for t in watch.takes)
    watch.train_taken("not indices", sys._getframe())  # what it cannot read is not counted
    assert len(watch.takes) == 5
    watch.task_opened(torch.tensor([1]))
    assert watch.past == set() and watch.current == {1}


def test_the_watch_counts_past_samples_per_call_task_free() -> None:
    watch = _Watch(capacity=2, batch=2, protocol="task-free")
    watch.reset()
    for i in (1, 2, 3):
        watch.sample_observed(i)
    assert watch.current == {2, 3}  # the latest batch_size streamed samples
    watch.sample_observed("x")  # unreadable: ignored
    assert watch.current == {2, 3}
    watch.task, watch.hook = 0, "online_observe"
    watch.samples = 3
    watch.train_taken(torch.tensor([1, 2, 3, 7]), sys._getframe())
    assert watch.past == {1, 7} and not watch.given
    assert watch.window() == "in one call of online_observe (streamed sample 3, task 0)"
    watch.hook = None
    assert watch.window() == "in one call of the driver (task 0)"
    watch.hook = "online_task_end"
    assert watch.window() == "in one call of online_task_end (task 0)"
    assert watch.context() == "task 0" and watch.place() == "in online_task_end (task 0)"
    watch.hook = None
    assert watch.place() == "in the driver (task 0)"
    watch.task = None
    assert watch.context() == "before the first task"


def test_the_watch_keeps_the_first_memory_breach_per_hook_and_the_largest_size() -> None:
    watch = _Watch(capacity=2)
    watch.memory_size(2, "after a", "a")
    assert not watch.over and watch.most == 0
    watch.memory_size(3, "after a", "a")
    watch.memory_size(5, "after a, later", "a")
    watch.memory_size(4, "after b", "b")
    assert watch.over == {"a": "3 after a", "b": "4 after b"} and watch.most == 5

    class Holder:
        memory = [1, 2, 3]

    watch.method, watch.task, watch.hook = Holder(), 1, "after_task"
    watch.memory_now("after_task")
    assert watch.over["after_task"] == "3 after after_task (task 1)"
    watch.method = object()  # no memory: nothing to count
    watch.memory_now("before_task")
    assert "before_task" not in watch.over


def test_the_watch_records_decisions_per_task() -> None:
    watch = _Watch(capacity=5)
    watch.reset()
    model = torch.nn.Linear(2, 2)

    class Holder:
        pass

    holder = Holder()
    holder.model = model  # type: ignore[attr-defined]
    holder.memory = type("M", (), {"indices": torch.tensor([4, 2])})()  # type: ignore[attr-defined]
    watch.method = holder
    watch.train_taken(torch.tensor([1]), sys._getframe())
    takes, kept, print_ = watch.decisions()
    assert [t[1] for t in takes] == [(1,)] and kept == [4, 2] and print_ == _fingerprint(model) != 0
    assert takes[0][2] == _fingerprint(model) and watch.takes == []
    holder.memory = None  # type: ignore[attr-defined]
    assert watch.decisions() == ([], None, _fingerprint(model))


def test_the_fingerprint_is_the_models_floats_bit_for_bit() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
    before = _fingerprint(model)
    assert before == _fingerprint(model) and before != 0
    with torch.no_grad():
        model[1].running_mean += 1e-6  # a buffer counts
    assert _fingerprint(model) != before
    after = _fingerprint(model)
    model[1].num_batches_tracked += 1  # an integer buffer does not
    assert _fingerprint(model) == after
    assert _fingerprint(None) == 0 and _fingerprint(torch.nn.ReLU()) == 0


def test_the_watch_says_who_peeked_once_per_place() -> None:
    watch = _Watch(capacity=5)
    watch.reset()
    watch.task, watch.hook = 2, "after_task"
    for n in (32, 8):
        watch.test_taken(n, "took test images", sys._getframe())
    watch.hook = None
    watch.test_taken(None, "read setup.test_labels", sys._getframe())
    (took, read) = watch.peeks.values()
    assert took.endswith(
        "test_the_watch_says_who_peeked_once_per_place took test images in after_task (first in task 2, 32 images)"
    )
    assert took.startswith(_short(__file__) + ":") and len(watch.peeks) == 2
    assert read.endswith("read setup.test_labels in the driver (first in task 2)")


def test_a_watched_hook_tracks_task_hook_samples_and_failures() -> None:
    watch = _Watch(capacity=1, batch=1, protocol="task-free")
    watch.reset()
    seen = []

    class Method:
        memory = [0]

        def online_observe(self, index: int, label: int) -> None:
            seen.append((watch.hook, watch.samples, set(watch.current)))
            watch.past.add(99)

        def online_task_start(self, task: object) -> None:
            seen.append((watch.hook, watch.task, set(watch.past)))
            self.online_observe(5, 0)  # a nested call is one call of the outer hook
            seen.append(set(watch.past))

        def online_task_end(self, task: object) -> None:
            self.memory = [0, 1]
            raise ValueError("boom")

    method = Method()
    watch.attach(method, "task-free")
    task = type("T", (), {"index": 3, "stream": torch.tensor([1])})()
    method.online_observe(7, 1)
    assert seen[-1] == ("online_observe", 1, {7}) and watch.hook is None
    watch.past = {1}
    method.online_task_start(task)
    assert seen[-3] == ("online_task_start", 3, set())  # the driver's call counts past samples afresh
    assert seen[-1] == {99} and watch.samples == 2 and watch.task == 3
    with pytest.raises(ValueError, match="boom"):
        method.online_task_end(task)
    assert watch.failed == "in online_task_end (task 3)" and watch.hook is None
    assert watch.over == {"online_task_end": "2 after online_task_end (task 3)"}  # counted on the way out too
    assert watch.most == 2
    with pytest.raises(ValueError):
        method.online_task_end(task)
    assert watch.failed == "in online_task_end (task 3)"  # the first stays
    watch.reset()
    assert watch.failed is None and watch.task is None and watch.samples == 0 and watch.recent.maxlen == 1


def test_a_watched_task_hook_opens_the_task_once() -> None:
    watch = _Watch(capacity=5, protocol="task")
    watch.reset()

    class Method:
        def before_task(self, task: object) -> None: ...

        def learn_task(self, task: object) -> None: ...

    method = Method()
    watch.attach(method, "task")
    task = type("T", (), {"index": 0, "stream": torch.tensor([1, 2])})()
    method.before_task(task)
    assert watch.current == {1, 2} and watch.task == 0
    watch.past = {9}
    method.learn_task(task)  # the same task: the past samples counted so far stay
    assert watch.past == {9}
    task.index, task.stream = 1, torch.tensor([3])  # type: ignore[attr-defined]
    method.before_task(task)
    assert watch.current == {3} and watch.past == set() and watch.task == 1


# ------------------------------------------------------------------------------ the guarded splits


def _split() -> TensorImages:
    return TensorImages(torch.arange(4 * 4, dtype=torch.uint8).reshape(4, 1, 2, 2), torch.tensor([0, 1, 0, 1]))


def test_the_test_split_reports_every_read_but_its_length_and_shape() -> None:
    watch = _Watch(capacity=5)
    watch.reset()
    test = _GuardedSplit(_split(), watch, "test")
    assert len(test) == 4 and test.shape == (1, 2, 2) and not watch.peeks
    assert test.take(torch.tensor([1, 2])).shape == (2, 1, 2, 2)
    assert next(iter(watch.peeks.values())).endswith(
        "took test images in the driver (first in before the first task, 2 images)"
    )
    assert test.labels.tolist() == [0, 1, 0, 1]  # through the property: labels are test data too
    assert any("read the test split's 'labels'" in v for v in watch.peeks.values())
    test.images  # noqa: B018
    test._inner  # noqa: B018
    assert any("'images'" in k for k in watch.peeks) and any("'_inner'" in k for k in watch.peeks)
    moved = test.to("cpu")
    assert isinstance(moved, _GuardedSplit) and len(moved) == 4
    before = len(watch.peeks)
    for split in (moved, moved):
        split.take(torch.tensor([0]))
    assert len(watch.peeks) == before + 1  # one place, one peek
    assert "took test images" in next(iter(watch.peeks))


def test_the_train_split_counts_takes_and_flags_reads_around_them() -> None:
    watch = _Watch(capacity=5)
    watch.reset()
    train = _GuardedSplit(_split(), watch, "train")
    assert train.labels.tolist() == [0, 1, 0, 1] and not watch.bypass  # labels are free
    train.take(torch.tensor([3]))
    assert [t[1] for t in watch.takes] == [(3,)]
    train.images  # noqa: B018
    (seen,) = watch.bypass.values()
    assert "read the train split's 'images' in the driver (first in before the first task)" in seen
    assert not watch.peeks
    moved = train.to("cpu")
    moved.take(torch.tensor([0, 1]))
    assert [t[1] for t in watch.takes] == [(3,), (0, 1)]


def test_the_setup_copy_guards_only_its_test_labels() -> None:
    @dataclasses.dataclass
    class Setup:
        test_labels: torch.Tensor
        other: int = 1

    watch = _Watch(capacity=5)
    watch.reset()
    setup = Setup(torch.tensor([1, 2]))
    guarded = _guarded_setup(setup, watch)
    assert guarded is not setup and type(guarded).__name__ == "Setup" and isinstance(guarded, Setup)
    assert type(guarded).__qualname__ == Setup.__qualname__ and type(guarded).__module__ == Setup.__module__
    assert guarded.other == 1 and not watch.peeks
    assert guarded.test_labels.tolist() == [1, 2]
    assert any("read setup.test_labels" in v for v in watch.peeks.values())
    guarded.test_labels = torch.tensor([3])
    assert guarded.test_labels.tolist() == [3] and setup.test_labels.tolist() == [1, 2]
    plain = object()
    assert _guarded_setup(plain, watch) is plain  # nothing to guard


# ------------------------------------------------------------------------------ the kit's settings and data


def test_quick_data_is_the_first_images_of_each_class() -> None:
    source = TensorImages(
        torch.arange(8, dtype=torch.uint8).reshape(8, 1, 1, 1), torch.tensor([2, 0, 2, 1, 0, 2, 1, 0])
    )
    small = _first_per_class(source, 2)
    assert small.labels.tolist() == [2, 0, 2, 1, 0, 1] and small.images.reshape(-1).tolist() == [0, 1, 2, 3, 4, 6]
    full, quick = _kit_data(False), _kit_data(True)
    assert full is testing._digits()
    train, test = QUICK_PER_CLASS
    assert torch.bincount(quick.train.labels).tolist() == [train] * 10
    assert torch.bincount(quick.test.labels).tolist() == [test] * 10
    assert quick.class_names == full.class_names and quick.mean == full.mean


def test_kit_settings_are_the_common_ones_and_the_protocols() -> None:
    task, free = kit_settings("er", "task"), kit_settings("er", "task-free")
    assert task["method"] == free["method"] == "er" and task["dataset"] == "digits" and task["n_tasks"] == 5
    assert task["stream"] == "online" and free["stream"] == "iblurry" and free["memory_size"] == 50
    with pytest.raises(ValueError, match=r"^protocol='online': allowed: task, task-free$"):
        kit_settings("er", "online")


def test_threads_and_rng_are_given_back() -> None:
    before = torch.get_num_threads()
    with _threads(before + 1):
        assert torch.get_num_threads() == before + 1
    assert torch.get_num_threads() == before
    torch.manual_seed(3)
    expected = torch.rand(1)
    torch.manual_seed(3)
    with _quiet_torch():
        assert torch.get_num_threads() == 1
        torch.rand(5)
    assert torch.get_num_threads() == before and torch.rand(1) == expected
    with pytest.raises(KeyError), _quiet_torch():
        raise KeyError
    assert torch.get_num_threads() == before


def test_library_and_path_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _is_library(torch.__file__) and _is_library(threading.__file__) and _is_library("<frozen x>")
    assert not _is_library(__file__) and not _is_library(testing.__file__)
    assert not _is_library(pytest.__file__)  # site-packages beside the standard library: not the library
    monkeypatch.chdir(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    assert _short(__file__) == os.path.join(
        "tests", "platform", "test_conformance_kit.py"
    )  # under the working directory
    monkeypatch.chdir(os.path.dirname(os.path.abspath(__file__)))
    assert _short(os.path.abspath(__file__) + "x") == "test_conformance_kit.pyx"
    assert _short("/elsewhere/far/away.py") == "/elsewhere/far/away.py"


# ------------------------------------------------------------------------------ how a failure reads


def test_a_failure_lists_each_rule_once_and_each_violation() -> None:
    err = ConformanceError(
        "m",
        [
            Violation("memory-bound", "task", "seen A", "do A"),
            Violation("memory-bound", "task-free", "seen B", "do B"),
            Violation("known-hooks", None, "seen C", "do C"),
        ],
    )
    assert isinstance(err, AssertionError) and len(err.violations) == 3 and err.method == "m"
    assert str(err) == (
        "method 'm' does not conform (memory-bound, known-hooks):\n"
        "  - [memory-bound] (task protocol) seen A\n      what to do: do A\n"
        "  - [memory-bound] (task-free protocol) seen B\n      what to do: do B\n"
        "  - [known-hooks] seen C\n      what to do: do C"
    )


def test_bad_arguments_are_refused_before_any_run() -> None:
    with pytest.raises(ValueError, match=r"^protocols=\['task-free'\]: 'finetune' declares only task$"):
        check_method("finetune", protocols=["task-free"])
    with pytest.raises(ValueError, match=r"^rules: unknown 'fast', 'slow'; allowed: " + ", ".join(RULES) + "$"):
        check_method("finetune", rules=["fast", "memory-bound", "slow"])
    with pytest.raises(ValueError, match=r"^settings stream='iblurry' is not a task protocol stream$"):
        check_method("er", protocols=["task"], settings={"stream": "iblurry"})
    report = check_method("er", rules=["known-hooks"])  # static: no run
    assert report.runs == 0 and report.protocols == ("task", "task-free") and report.rules == ("known-hooks",)
