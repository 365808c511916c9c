"""How the conformance kit turns what it saw into violations, in process and without training:
`_watched` (the watch's breaches, worded) and `_check_protocol`'s decisions (which runs it trains
with which clock, threads, tasks and checkpoint; which rule a difference breaks; what it skips)
over scripted runs that stand in for `_run`. Milliseconds each; tools/mutation.py runs these
before the kit's trained checks (test_conformance.py).
"""

from __future__ import annotations

import decimal
import io
from typing import Any

import pytest
import torch

from rmconsole import testing
from rmconsole.cl.events import TaskOutcome
from rmconsole.testing import RULES, ConformanceError, _check_protocol, _Recorder, _Watch, _watched

# ------------------------------------------------------------------------------ the watch's breaches, worded


def _seen(found: list[Any]) -> list[tuple[str, str | None, str]]:
    return [(v.rule, v.protocol, v.seen) for v in found]


def test_watched_words_each_breach_once_per_rule() -> None:
    watch = _Watch(capacity=2)
    assert _watched(watch, "task", tuple(RULES)) == []  # nothing seen: nothing to say
    watch.over, watch.most = {"a": "3 after a (task 0)", "b": "5 after b (task 1)"}, 5
    assert _seen(_watched(watch, "task", tuple(RULES))) == [
        (
            "memory-bound",
            "task",
            "the memory held more than memory_size K=2 samples (up to 5), first 3 after a (task 0).",
        )
    ]
    watch.over = {}
    watch.given, watch.given_most = {"learn_task": "4 past", "after_task": "5 past"}, 5
    assert _seen(_watched(watch, "task-free", ("memory-bound",))) == [
        (
            "memory-bound",
            "task-free",
            "the model was given more than K=2 distinct past samples to train on (beyond the current stream batch) in "
            "one call of a hook (up to 5), first 4 past.",
        )
    ]
    watch.given = {}
    watch.bypass = {f"k{i}": f"read {i}" for i in range(5)}
    (bypass,) = _watched(watch, "task", ("memory-bound",))
    assert (
        bypass.seen == "train images were read around take(), where the kit cannot count them: read 0; read 1; read 2."
    )
    assert bypass.advice.startswith("keep len(self.memory) <= cfg.memory_size at every moment")
    watch.over, watch.most, watch.given, watch.given_most = {"a": "3 after a"}, 3, {"h": "4 past"}, 4
    (both,) = _watched(watch, "task", ("memory-bound", "no-test-peeking"))
    assert both.seen == (
        "the memory held more than memory_size K=2 samples (up to 3), first 3 after a; the model was given more than "
        "K=2 distinct past samples to train on (beyond the current stream batch) in one task (up to 4), first 4 past; "
        "train images were read around take(), where the kit cannot count them: read 0; read 1; read 2."
    )
    assert _watched(watch, "task", ("no-test-peeking", "resume-exact")) == []  # a rule not chosen is not checked


def test_watched_shows_three_peeks_and_counts_the_rest() -> None:
    watch = _Watch(capacity=2)
    watch.peeks = {f"k{i}": f"peek {i}" for i in range(3)}
    (three,) = _watched(watch, "task", ("no-test-peeking",))
    assert (three.rule, three.protocol) == ("no-test-peeking", "task")
    assert three.seen == "test data was used outside the protocol's evaluations: peek 0; peek 1; peek 2."
    assert three.advice.startswith("learn from the train split only")
    watch.peeks["k3"] = "peek 3"
    watch.peeks["k4"] = "peek 4"
    (five,) = _watched(watch, "task-free", ("no-test-peeking",))
    assert five.seen == (
        "test data was used outside the protocol's evaluations: peek 0; peek 1; peek 2; and in 2 more places."
    )
    assert _watched(watch, "task", ("memory-bound",)) == []
    del watch.peeks["k4"]
    (four,) = _watched(watch, "task", ("no-test-peeking",))
    assert four.seen.endswith("peek 2; and in 1 more places.")


# ------------------------------------------------------------------------------ _check_protocol over scripted runs


def _checkpoint(task: int, **extra: Any) -> bytes:
    buffer = io.BytesIO()
    method = {"w": torch.tensor([float(task)]), **extra}
    torch.save({"task": task, "method": method, "augmenter": None, "torch_rng": None}, buffer)
    return buffer.getvalue()


class Runs:
    """Stands in for testing._run: records each call's arguments and returns a run of `n_tasks`
    tasks (from the checkpoint's task on when resumed, the first `tasks` when asked), whose
    accuracy `accuracy(call)` and taken samples `taken(call)` script."""

    def __init__(self, n_tasks: int = 5, accuracy: Any = None, taken: Any = None, fail: Any = None) -> None:
        self.n_tasks, self.calls = n_tasks, []  # type: ignore[var-annotated]
        self.accuracy = accuracy or (lambda call: 50.0)
        self.taken = taken or (lambda call: (1, 2))
        self.fail = fail
        self.checkpoint = _checkpoint

    def __call__(self, cfg: Any, watch: _Watch, protocol: str, resume: Any = None, **how: Any) -> _Recorder:
        call = {"resume": resume, **how}
        self.calls.append(call)
        assert (watch.capacity, watch.protocol) == (cfg.memory_size, protocol) and watch.batch == cfg.batch_size
        if self.fail is not None and self.fail(call):
            watch.failed = "in after_task (task 1)"
            raise RuntimeError("x" * 400)
        recorder = _Recorder(watch)
        first = 0 if resume is None else int(resume["task"]) + 1
        for t in range(first, self.n_tasks if how.get("tasks") is None else how["tasks"]):
            recorder.outcomes.append(TaskOutcome(t, self.accuracy(call), [50.0], None, [0]))
            recorder.checkpoints.append(self.checkpoint(t))
            recorder.decisions.append((t, [("in learn_task", self.taken(call), 7)], [t], 8))
        return recorder


def check(
    monkeypatch: pytest.MonkeyPatch,
    runs: Runs,
    rules: tuple[str, ...] = tuple(RULES),
    resume_after: int | None = None,
    protocol: str = "task",
) -> tuple[list[tuple[str, str | None, str]], int, list[str]]:
    monkeypatch.setattr(testing, "_run", runs)
    found, n, skipped = _check_protocol("er", protocol, {}, rules, resume_after, quick=True)
    assert n == len(runs.calls)
    assert all(
        c["quick"] is True and testing.sys.modules["rmconsole.cl.methods.er"] in c["modules"] for c in runs.calls
    )
    return _seen(found), n, skipped


def _how(call: dict[str, Any]) -> tuple[Any, ...]:
    resume = call["resume"]
    return (
        None if resume is None else resume["task"],
        call.get("clock_shift", 0.0),
        call.get("threads"),
        call.get("tasks"),
    )


def test_a_conforming_run_is_trained_four_times_each_the_way_its_rule_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs()
    assert check(monkeypatch, runs) == ([], 4, [])
    assert [_how(c) for c in runs.calls] == [
        (None, 0.0, None, None),  # the run
        (None, 12 * 3600.0, None, None),  # the same seed, its clock 12 hours later
        (None, 0.0, 2, 2),  # at 2 threads, the first two tasks
        (2, 0.0, None, None),  # resumed from the checkpoint after task 2 (of 0-4)
    ]
    runs = Runs(n_tasks=3)
    assert check(monkeypatch, runs, resume_after=0)[1] == 4 and _how(runs.calls[-1])[0] == 0
    runs = Runs(n_tasks=3)
    assert check(monkeypatch, runs)[1] == 4 and _how(runs.calls[-1])[0] == 1  # the middle: min(2, tasks - 2)
    runs = Runs()
    assert check(monkeypatch, runs, rules=("memory-bound",)) == ([], 1, [])  # the other rules train nothing more
    runs = Runs()
    assert check(monkeypatch, runs, rules=("same-seed-same-run",)) == ([], 2, [])
    assert [_how(c)[1] for c in runs.calls] == [0.0, 0.0]  # the clock stays when its rule is not chosen
    runs = Runs()
    assert check(monkeypatch, runs, rules=("same-decisions-any-threads", "resume-exact"))[1:] == (3, [])


def test_a_difference_on_the_shifted_clock_alone_is_the_clocks(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs(accuracy=lambda call: 60.0 if call.get("clock_shift") else 50.0)
    found, n, skipped = check(monkeypatch, runs)
    assert found == [
        (
            "clock-independent",
            "task",
            "a run with seed 1 whose wall clock (time.time, datetime.now) is 12 hours later differs from the first at "
            "the evaluation after task 0: accuracy: 50.0 vs 60.0, and a run on the first run's clock does not.",
        )
    ]
    assert n == 3 and [_how(c)[1] for c in runs.calls] == [0.0, 12 * 3600.0, 0.0]  # a third run tells
    assert skipped == [
        "task: same-decisions-any-threads (two runs at one thread already differ)",
        "task: resume-exact (two runs from the start already differ)",
    ]
    runs = Runs(accuracy=lambda call: 60.0 if call.get("clock_shift") else 50.0)
    found, n, _ = check(monkeypatch, runs, rules=("clock-independent",))  # no seed rule: no third run to tell
    assert [f[0] for f in found] == ["clock-independent"] and n == 2


def test_a_difference_on_the_same_clock_is_an_unseeded_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs(accuracy=lambda call: 50.0 + len(runs.calls))
    found, n, skipped = check(monkeypatch, runs)
    assert found == [
        (
            "same-seed-same-run",
            "task",
            "two runs with seed 1 differ at the evaluation after task 0: accuracy: 51.0 vs 53.0.",
        )
    ]
    assert n == 3 and len(skipped) == 2
    runs = Runs(accuracy=lambda call: 50.0 + len(runs.calls))
    found, n, skipped = check(monkeypatch, runs, rules=("same-seed-same-run", "resume-exact"))
    assert found == [
        (
            "same-seed-same-run",
            "task",
            "two runs with seed 1 differ at the evaluation after task 0: accuracy: 51.0 vs 52.0.",
        )
    ]
    assert n == 2 and skipped == ["task: resume-exact (two runs from the start already differ)"]


def test_decisions_that_differ_at_two_threads_break_their_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs(taken=lambda call: (2, 1) if call.get("threads") else (1, 2))
    found, n, skipped = check(monkeypatch, runs)
    assert found == [
        (
            "same-decisions-any-threads",
            "task",
            "at 2 torch threads the run decides differently than at 1: the train images taken in learn_task (take 1 "
            "of the task): 2 samples [1, 2] vs 2 samples [2, 1].",
        )
    ]
    assert n == 4 and skipped == []


def test_a_resumed_run_that_differs_breaks_resume_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs(accuracy=lambda call: 40.0 if call["resume"] is not None else 50.0)
    found, n, skipped = check(monkeypatch, runs, resume_after=1)
    assert found == [
        (
            "resume-exact",
            "task",
            "stopped after task 1 and resumed from its checkpoint (in a fresh method object), the run differs from "
            "the uninterrupted one at the evaluation after task 2: accuracy: 50.0 vs 40.0.",
        )
    ]
    assert n == 4 and skipped == [] and _how(runs.calls[-1])[0] == 1


def test_a_checkpoint_that_does_not_load_breaks_resume_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs()
    runs.checkpoint = lambda task: _checkpoint(task, extra=decimal.Decimal(task))  # an object weights_only refuses
    found, n, skipped = check(monkeypatch, runs)
    ((rule, protocol, seen),) = found
    assert (rule, protocol, n, skipped) == ("resume-exact", "task", 3, [])  # no resumed run
    assert seen.startswith("the checkpoint does not load as the worker loads it (torch.load(weights_only=True)): ")


def test_one_task_has_no_resume_and_a_bad_resume_point_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = Runs(n_tasks=1)
    assert check(monkeypatch, runs) == (
        [],
        3,
        ["task: resume-exact (the run is one task: no task follows a checkpoint)"],
    )
    runs = Runs(n_tasks=2)
    assert check(monkeypatch, runs)[1:] == (4, [])  # two tasks: resumed after the first
    assert _how(runs.calls[-1]) == (0, 0.0, None, None) and _how(runs.calls[2]) == (None, 0.0, 2, 2)
    for bad in (-1, 4, 5):
        with pytest.raises(ValueError, match=rf"^resume_after={bad}: the run has 5 tasks; allowed: 0 to 3$"):
            check(monkeypatch, Runs(), resume_after=bad)
    assert check(monkeypatch, Runs(), resume_after=3)[1] == 4
    with pytest.raises(ValueError, match=r"^resume_after=1: the run has 2 tasks; allowed: 0 to 0$"):
        check(monkeypatch, Runs(n_tasks=2), resume_after=1)
    runs = Runs()
    assert check(monkeypatch, runs, protocol="task-free") == ([], 4, [])  # the watch is the protocol's (Runs checks)
    with pytest.raises(ValueError, match=r"^settings stream='online' is not a task-free protocol stream$"):
        monkeypatch.setattr(testing, "_run", Runs())
        _check_protocol("er", "task-free", {"stream": "online"}, tuple(RULES), None)


def test_a_run_that_fails_is_one_violation_after_what_was_already_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    def peeked(call: dict[str, Any]) -> bool:
        return call.get("threads") is not None

    with pytest.raises(ConformanceError) as err:
        check(monkeypatch, Runs(fail=peeked))
    assert [v.rule for v in err.value.violations] == ["runs-to-the-end"]
    (failed,) = err.value.violations
    assert (
        failed.seen == "the run at 2 threads (first 2 tasks) failed in after_task (task 1): RuntimeError: " + "x" * 300
    )
    assert failed.advice == (
        "see the traceback above this error; the kit's settings are kit_settings('er', 'task') with your settings= "
        "over them."
    )
    assert isinstance(err.value.__cause__, RuntimeError)
    runs = Runs(fail=lambda call: call.get("clock_shift"))
    monkeypatch.setattr(testing, "_Watch", _PeekedWatch)
    with pytest.raises(ConformanceError) as err:
        check(monkeypatch, runs)
    assert [v.rule for v in err.value.violations] == ["no-test-peeking", "runs-to-the-end"]
    assert err.value.violations[1].seen.startswith(
        "the second run with the same seed, the clock 12 hours later failed in after_task (task 1)"
    )


class _PeekedWatch(_Watch):
    """A watch that has already seen a peek (what a failing run reports besides its failure)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.peeks = {"k": "peek"}
