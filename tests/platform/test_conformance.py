"""The conformance kit (rmconsole.testing): every built-in method passes it under each protocol
it declares, and each deliberately broken method below fails it, by the rule it breaks and only
that rule, with a message that names the rule, what was seen and what to do.

The broken methods are registered for one test each by `register` (a MethodSpec in the
built-ins' registry); each is experience replay with one fault.
"""

from __future__ import annotations

import datetime
import gzip
import random
import re
import sys
import time
from datetime import datetime as wall_clock  # bound by name, as a plug-in may: the kit shifts it too
from typing import Any

import pytest
import torch
from support.online_helpers import method_model

from rmconsole.cl.data import load_dataset
from rmconsole.cl.datasets import LoadOptions, data_root, lookup
from rmconsole.cl.methods import REGISTRY, MethodSpec
from rmconsole.cl.methods import base as base_module
from rmconsole.cl.methods import taskfree as taskfree_module
from rmconsole.cl.methods.base import TASK_HOOKS, Method
from rmconsole.cl.methods.er import ER
from rmconsole.cl.methods.taskfree import TASK_FREE_HOOKS, TaskFree
from rmconsole.cl.settings import MethodParams
from rmconsole.testing import (
    RULES,
    ConformanceError,
    _clock_shifted,
    check_hooks,
    check_method,
    declared_protocols,
)

_MODULE = "_conformance_test_methods"  # the name this file is registered under, inside rmconsole.cl.methods


def register(monkeypatch: pytest.MonkeyPatch, cls: type, protocols: str = "both") -> str:
    """Make `cls` (its `name`) a registered method for one test."""
    monkeypatch.setitem(sys.modules, f"rmconsole.cl.methods.{_MODULE}", sys.modules[__name__])
    declared = ("task", "task-free") if protocols == "both" else (protocols,)
    monkeypatch.setitem(
        REGISTRY,
        cls.name,
        MethodSpec(
            cls.name,
            f"rmconsole.cl.methods.{_MODULE}:{cls.__name__}",  # type: ignore[attr-defined]
            MethodParams,
            declared,
        ),
    )
    return cls.name  # type: ignore[attr-defined,no-any-return]


def broken_rules(err: pytest.ExceptionInfo[ConformanceError]) -> set[str]:
    return {v.rule for v in err.value.violations}


# ------------------------------------------------------------------------------ the hook tables


def _docstring_names(doc: str, heading: str) -> list[str]:
    section = doc.split(heading, 1)[1].split("\n\n", 2)[1]
    return [m.group(1) for m in re.finditer(r"^    (\w+)", section, re.M)]


def test_the_hook_tables_are_the_documented_hooks() -> None:
    """TASK_HOOKS is base.py's table of hooks; TASK_FREE_HOOKS holds taskfree.py's driver hooks
    and the engine's shared ones; every name is something the base classes define."""
    assert list(TASK_HOOKS) == _docstring_names(base_module.__doc__ or "", "Hooks a method may override")
    driver = _docstring_names(taskfree_module.__doc__ or "", "stream order:")
    assert driver == [h for h in TASK_FREE_HOOKS if h.startswith("online_") or h == "memory_report"]
    assert all(hasattr(Method, h) for h in TASK_HOOKS)
    assert all(hasattr(TaskFree, h) or hasattr(Method, h) for h in TASK_FREE_HOOKS)
    shared = set(TASK_FREE_HOOKS) - set(driver)
    assert shared <= set(TASK_HOOKS), shared - set(TASK_HOOKS)


# ------------------------------------------------------------------------------ the built-ins pass

# The default run checks a subset that covers both protocols, the uncertainty memory, a fresh
# model per evaluation, a full-capacity memory, exemplar means and a single-task run (about 25 s of
# CPU); `-m slow` checks every built-in method under every protocol it declares on the quick data (about a minute of
# CPU, several on a loaded machine).
FAST = {
    ("er", "task"),
    ("er", "task-free"),
    ("rm", "task-free"),
    ("gdumb", "task"),
    ("gdumb", "task-free"),
    ("icarl", "task"),
    ("joint", "task"),
}
BUILT_IN = [
    pytest.param(name, protocol, id=f"{name}-{protocol}", marks=() if (name, protocol) in FAST else pytest.mark.slow)
    for name in REGISTRY
    for protocol in declared_protocols(name)
]


@pytest.mark.parametrize("method,protocol", BUILT_IN)
def test_every_built_in_method_conforms(method: str, protocol: str) -> None:
    """The default run's subset on the whole of digits, as a plug-in author's check_method runs;
    the rest (`-m slow`) on the quick data (check_method(quick=True): the same runs and rules on
    16 + 8 images a class, the same verdict on every broken method below, a fifth of the CPU)."""
    quick = (method, protocol) not in FAST
    report = check_method(method, protocols=[protocol], settings=method_model(method), quick=quick)
    assert report.protocols == (protocol,) and set(report.rules) == set(RULES)
    assert report.runs == (3 if report.skipped else 4)


@pytest.mark.slow
@pytest.mark.parametrize(
    "method,option",
    [("mir", {"mir_score_mode": "train"}), ("scr", {"scr_views": "recipe"}), ("er", {"pool_order": "dataset"})],
    ids=["mir-train-mode-scoring", "scr-recipe-views", "er-dataset-pool-order"],
)
def test_each_deviation_option_conforms(method: str, option: dict[str, str]) -> None:
    """The follow-up's-code side of each labelled deviation (docs/anytime.md) keeps every rule too:
    train-mode scoring updates batch-norm statistics, the recipe draws its own views."""
    report = check_method(method, settings=option, quick=True)
    assert set(report.rules) == set(RULES) and report.runs >= 3


def test_a_conforming_method_passes_every_rule_on_quick_data() -> None:
    """The kit's quick data (check_method(quick=True)) under both protocols: every rule checked, no
    run skipped (the broken methods below fail it by the same rules as on all of digits)."""
    report = check_method("er", quick=True)
    assert report.protocols == ("task", "task-free") and report.rules == tuple(RULES)
    assert report.runs == 8 and report.skipped == [] and report.seconds > 0


def test_no_built_in_method_defines_an_unknown_hook() -> None:
    assert {name: check_hooks(name) for name in REGISTRY} == {name: [] for name in REGISTRY}


# ------------------------------------------------------------------------------ broken methods


class Peeker(ER):
    """Looks at test images after each task and before each anytime evaluation ("calibration")."""

    name = "peeker"

    def _calibrate(self) -> None:
        images = self.setup.data.test.take(torch.arange(32))
        self.model.eval()
        with torch.no_grad():
            self.model(self.setup.augmenter.test(images))

    def after_task(self, task: Any) -> None:
        self._calibrate()

    def online_before_eval(self) -> None:
        self._calibrate()


class Overfiller(ER):
    """Keeps 20 samples more than K: a larger reservoir task-free, extra stream samples per task."""

    name = "overfiller"

    @property
    def online_capacity(self) -> int:
        return self.cfg.memory_size + 20

    def update_memory(self, task: Any) -> None:
        super().update_memory(task)
        kept = torch.cat([self.memory.indices, task.stream[:20]])
        self.memory.capacity = len(kept)
        self.memory.replace(kept, self.labels_of(kept).cpu())


class Forgetful(ER):
    """Scales its loss down by the task boundaries it has passed, a count it never checkpoints."""

    name = "forgetful"

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.boundaries = 0

    def after_task(self, task: Any) -> None:
        self.boundaries += 1

    def online_task_end(self, task: Any) -> None:
        self.boundaries += 1

    def step_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return super().step_loss(x, y) / (1 + self.boundaries)


class Unseeded(ER):
    """Shuffles its batches and draws its replay samples with an unseeded random.Random()."""

    name = "unseeded"

    def _shuffled(self, idx: torch.Tensor) -> torch.Tensor:
        order = list(range(len(idx)))
        random.Random().shuffle(order)
        return idx[torch.tensor(order, dtype=torch.long)]

    def memory_draw(self, n: int) -> torch.Tensor:
        if n <= 0 or len(self.memory) == 0:
            return torch.empty(0, dtype=torch.long)
        picks = random.Random().sample(range(len(self.memory)), min(n, len(self.memory)))
        return self.memory.indices[torch.tensor(picks, dtype=torch.long)]


class GlobalDraws(ER):
    """Shuffles with torch's global generator: the protocol seeds it and checkpoints it, so this
    is reproducible and resumable (not a violation)."""

    name = "global_draws"

    def _shuffled(self, idx: torch.Tensor) -> torch.Tensor:
        return idx[torch.randperm(len(idx))]


class Crasher(ER):
    """Fails in its first task."""

    name = "crasher"

    def after_task(self, task: Any) -> None:
        raise RuntimeError("shape mismatch in my bookkeeping")


class Pickled(ER):
    """Checkpoints an object of its own, which the worker's torch.load(weights_only=True) refuses."""

    name = "pickled"

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "bookkeeping": Crasher}


class Misnamed(ER):
    """Two hooks no protocol calls, next to helpers that are fine."""

    name = "misnamed"

    def after_taks(self, task: Any) -> None:  # a typo of after_task
        ...

    def after_epoch(self) -> None:  # no protocol has epochs hooks
        ...

    def _after_epoch_bookkeeping(self) -> None:  # private: the method's own
        ...

    def sharpen(self, logits: torch.Tensor) -> torch.Tensor:  # a helper that does not look like a hook
        return logits * 2


class TaskFreeOnly(ER):
    """Declares the task-free protocol only, but overrides a task-protocol hook."""

    name = "task_free_only"

    def learn_task(self, task: Any) -> None:
        super().learn_task(task)


class TaskOnly(Method):
    """Declares the task protocol only (no TaskFree), but defines a task-free hook."""

    name = "task_only"

    def online_observe(self, index: int, label: int) -> None: ...


def test_a_method_peeking_at_test_data_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, Peeker)
    with pytest.raises(ConformanceError) as err:
        check_method(name, quick=True)
    assert broken_rules(err) == {"no-test-peeking"}
    message = str(err.value)
    assert "[no-test-peeking] (task protocol)" in message and "[no-test-peeking] (task-free protocol)" in message
    assert re.search(
        r"test_conformance\.py:\d+ in _calibrate took test images in after_task \(first in task 0, "
        r"32 images\)",
        message,
    )
    assert re.search(r"in _calibrate took test images in online_before_eval \(first in task \d, 32 images\)", message)
    assert "learn from the train split only" in message


def test_a_method_overfilling_its_memory_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, Overfiller)
    with pytest.raises(ConformanceError) as err:
        check_method(name, quick=True)
    assert broken_rules(err) == {"memory-bound"}
    message = str(err.value)
    assert "more than memory_size K=50" in message
    assert "first 52 after update_memory (task 0)" in message  # task protocol: at the first update
    assert "first 52 after online_observe (streamed sample 52, task 1)" in message  # task-free: mid-stream
    assert "keep len(self.memory) <= cfg.memory_size" in message


def test_a_method_keeping_state_outside_its_checkpoint_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, Forgetful)
    with pytest.raises(ConformanceError) as err:
        check_method(name, quick=True)
    assert broken_rules(err) == {"resume-exact"}
    assert {v.protocol for v in err.value.violations} == {"task", "task-free"}
    message = str(err.value)
    assert "stopped after task 2 and resumed from its checkpoint" in message
    assert "must be saved by state_dict()" in message


def test_a_non_deterministic_method_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, Unseeded)
    with pytest.raises(ConformanceError) as err:
        check_method(name, quick=True)
    assert broken_rules(err) == {"same-seed-same-run"}  # resume is not judged on a run that differs from itself
    assert {v.protocol for v in err.value.violations} == {"task", "task-free"}
    message = str(err.value)
    assert "two runs with seed 1 differ at" in message and "never from an unseeded one" in message


def test_draws_from_the_generator_the_protocol_seeds_conform(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.randperm without a generator draws from torch's global RNG, which the protocol seeds
    and checkpoints: reproducible and resumable, so the kit passes it (the rules bite where the
    run really differs)."""
    name = register(monkeypatch, GlobalDraws)
    assert check_method(name, protocols=["task"], quick=True).runs == 4


def test_a_hook_no_protocol_calls_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, Misnamed)
    with pytest.raises(ConformanceError) as err:
        check_method(name, rules=["known-hooks"])  # static: nothing is trained
    flagged = {re.search(r"Misnamed\.(\w+)", v.seen).group(1) for v in err.value.violations}  # type: ignore[union-attr]
    assert flagged == {"after_taks", "after_epoch"}
    message = str(err.value)
    assert re.search(r"Misnamed\.after_taks \(\S*test_conformance\.py:\d+\) looks like a hook", message)
    assert "did you mean 'after_task'?" in message and "name it _after_epoch" in message
    assert "online_observe" in message  # the hooks its protocols do call are listed


def test_a_hook_of_a_protocol_the_method_does_not_declare_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    free = register(monkeypatch, TaskFreeOnly, "task-free")
    task = register(monkeypatch, TaskOnly, "task")
    (learn,) = check_hooks(free)
    assert learn.rule == "known-hooks" and "TaskFreeOnly.learn_task" in learn.seen
    assert "hook of the task protocol, but 'task_free_only' declares only the task-free protocol" in learn.seen
    (observe,) = check_hooks(task)
    assert "TaskOnly.online_observe" in observe.seen and "declares only the task protocol" in observe.seen


def test_bad_arguments_are_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"^protocols=\['task-free'\]: 'finetune' declares only task$"):
        check_method("finetune", protocols=["task-free"])
    with pytest.raises(ValueError, match=r"^rules: unknown 'fast'; allowed: memory-bound, "):
        check_method("finetune", rules=["fast"])
    with pytest.raises(ValueError, match=r"^unknown method 'nope'; known: "):
        check_method("nope")


def test_a_method_that_fails_to_run_is_reported_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, Crasher)
    with pytest.raises(ConformanceError) as err:
        check_method(name, protocols=["task"], quick=True)
    assert broken_rules(err) == {"runs-to-the-end"}
    assert "the run failed in after_task (task 0): RuntimeError: shape mismatch in my bookkeeping" in str(err.value)
    assert isinstance(err.value.__cause__, RuntimeError)  # pytest prints the method's own traceback above
    from rmconsole.cl import loop, methods, online

    assert loop.method_class is methods.method_class and online.method_class is methods.method_class  # restored


def test_a_checkpoint_the_worker_cannot_load_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, Pickled)
    with pytest.raises(ConformanceError) as err:
        check_method(name, protocols=["task"], rules=["resume-exact"], quick=True)
    assert broken_rules(err) == {"resume-exact"}
    assert "does not load as the worker loads it (torch.load(weights_only=True))" in str(err.value)


# ------------------------------------------------------------------------------ the boundaries a fault must cross


def _fine_tune(method: ER, images: torch.Tensor, labels: torch.Tensor) -> None:
    """A few SGD steps on (test) images: what a peeking method gains from them."""
    method.model.train()
    optimizer = torch.optim.SGD(method.model.parameters(), lr=0.05)
    x = method.setup.augmenter.test(images)
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(method.model(x), labels).backward()
        optimizer.step()


class SelfLoader(ER):
    """The review's example: loads the dataset itself and fine-tunes on 200 test images after each task."""

    name = "self_loader"

    def after_task(self, task: Any) -> None:
        test = load_dataset("digits").test
        idx = torch.arange(200)
        _fine_tune(self, test.take(idx), test.labels[idx])


class RegistryLoader(ER):
    """Loads the test split through the dataset registry's loader, around load_dataset."""

    name = "registry_loader"

    def after_task(self, task: Any) -> None:
        spec = lookup("digits")
        test = spec.loader()(spec, data_root(), LoadOptions()).test
        _fine_tune(self, test.take(torch.arange(50)), test.labels[:50])


class AttributePeeker(ER):
    """Reaches the test tensors through the split's wrapper fields the kit hands it."""

    name = "attribute_peeker"

    def after_task(self, task: Any) -> None:
        inner = self.setup.data.test._inner
        _fine_tune(self, inner.images[:50], inner.labels[:50])


class LabelPeeker(ER):
    """Weights its loss by the test set's class frequencies: the test labels, twice over."""

    name = "label_peeker"

    def before_task(self, task: Any) -> None:
        super().before_task(task)
        counts = torch.bincount(self.setup.test_labels, minlength=self.n_classes).float()
        counts += torch.bincount(self.setup.data.test.labels, minlength=self.n_classes).float()
        self.weights = counts.max() / counts.clamp(min=1)

    def step_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return super().step_loss(x, y) * self.weights[y].mean()


class FileReader(ER):
    """Reads the dataset's own file (scikit-learn's digits.csv.gz) after each task."""

    name = "file_reader"

    def after_task(self, task: Any) -> None:
        (path,) = lookup("digits").source_paths(data_root())
        with gzip.open(path, "rt") as f:
            rows = [[float(v) for v in f.readline().split(",")] for _ in range(20)]
        pixels = torch.tensor(rows)[:, :64].reshape(-1, 1, 8, 8) * (255 / 16)
        _fine_tune(self, pixels.round().to(torch.uint8), torch.tensor(rows)[:, 64].long())


class Balloon(ER):
    """The review's example: grows its memory to 341 samples (K=50; as many as there are on the
    kit's quick data) inside one hook, trains on them, and shrinks back before the hook returns
    (every hook exit sees <= K)."""

    name = "balloon"
    SIZE = 341

    def __init__(self, setup: Any) -> None:
        super().__init__(setup)
        self.streamed: list[int] = []  # every stream index so far (indices: "only bookkeeping")

    def before_task(self, task: Any) -> None:
        super().before_task(task)
        self.streamed += task.stream.tolist()

    def after_task(self, task: Any) -> None:
        super().after_task(task)
        past = torch.tensor([i for i in self.streamed if i not in set(task.stream.tolist())][: self.SIZE])
        if len(past) > self.cfg.memory_size:
            self._inflated(task, past)

    def online_observe(self, index: int, label: int) -> None:
        super().online_observe(index, label)
        self.streamed.append(index)

    def online_task_end(self, task: Any) -> None:
        past = torch.tensor(self.streamed[-(self.SIZE + self.cfg.batch_size) : -self.cfg.batch_size])
        if len(past) > self.cfg.memory_size:
            self._inflated(task, past)

    def _inflated(self, task: Any, past: torch.Tensor) -> None:
        kept, labels, capacity = self.memory.indices, self.memory.labels, self.memory.capacity
        self.memory.capacity = len(past)
        self.memory.replace(past, self.labels_of(past).cpu())
        self.memory_epochs(task, 1, 16) if self.task_free else self.fit(
            1, lambda e: self.shuffled_batches(self.memory.indices, 16), "balloon", task
        )
        self.memory.capacity = capacity
        self.memory.replace(kept, labels)


class TrainReader(ER):
    """Reads the train images around take(), where the kit cannot count them."""

    name = "train_reader"

    def after_task(self, task: Any) -> None:
        images = self.setup.data.train.images[:200]
        _fine_tune(self, images, self.setup.data.train.labels[:200])


class ThreadCounter(ER):
    """Replays fewer samples per batch when torch has more threads."""

    name = "thread_counter"

    def stream_batches(self, task: Any) -> list[torch.Tensor]:
        return [b[: len(b) - torch.get_num_threads() + 1] for b in super().stream_batches(task)]


class NightOwl(ER):
    """Trains on its batches in reverse order in the afternoon (datetime, bound by name)."""

    name = "night_owl"

    def stream_batches(self, task: Any) -> list[torch.Tensor]:
        batches = super().stream_batches(task)
        return batches[::-1] if wall_clock.now().hour >= 12 else batches


@pytest.mark.parametrize(
    "cls,route",
    [
        (SelfLoader, r"in after_task called load_dataset\('digits'\) in after_task \(first in task 0\)"),
        pytest.param(
            RegistryLoader,
            r"in after_task called dataset 'digits''s loader from the registry in after_task",
        ),
        pytest.param(AttributePeeker, r"in after_task read the test split's '_inner' in after_task"),
        (
            LabelPeeker,
            r"in before_task read setup\.test_labels in before_task.*in before_task read the test split's 'labels'",
        ),
        pytest.param(FileReader, r"in after_task opened the dataset's file \S*digits\.csv\.gz in after_task"),
    ],
    ids=["load_dataset", "registry", "attributes", "test-labels", "files"],
)
def test_each_route_to_test_data_is_caught(monkeypatch: pytest.MonkeyPatch, cls: type, route: str) -> None:
    name = register(monkeypatch, cls, "task")
    with pytest.raises(ConformanceError) as err:
        check_method(name, rules=["no-test-peeking"], quick=True)
    assert broken_rules(err) == {"no-test-peeking"}
    (violation,) = err.value.violations
    assert re.search(r"test_conformance\.py:\d+ " + route, violation.seen), violation.seen
    assert "load_dataset, the registry) and its files belong to the protocol" in violation.advice
    if cls is SelfLoader:  # one peek for one call: the loader and file reads under it are that call
        assert "loader from the registry" not in violation.seen and "opened" not in violation.seen


def test_a_memory_grown_inside_one_hook_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, Balloon)
    with pytest.raises(ConformanceError) as err:
        check_method(name, rules=["memory-bound"], quick=True)
    assert broken_rules(err) == {"memory-bound"}
    assert {v.protocol for v in err.value.violations} == {"task", "task-free"}
    task, free = err.value.violations
    assert "memory held more than" not in task.seen + free.seen  # every hook exit saw <= K
    assert re.search(
        r"given more than K=50 distinct past samples to train on \(beyond the current stream batch\) in one task "
        r"\(up to \d{3}\), first \d{2} distinct past samples during task 2 \(in after_task\), taken by",
        task.seen,
    ), task.seen
    assert re.search(
        r"in one call of a hook \(up to \d{3}\), first \d{2} distinct past samples in one call of "
        r"online_task_end \(task 1\)",
        free.seen,
    ), free.seen
    assert "train on past samples only from the memory" in task.advice


def test_train_images_read_around_take_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, TrainReader, "task")
    with pytest.raises(ConformanceError) as err:
        check_method(name, rules=["memory-bound"], quick=True)
    (violation,) = err.value.violations
    assert re.search(
        r"test_conformance\.py:\d+ in after_task read the train split's 'images' in after_task "
        r"\(first in task 0\)",
        violation.seen,
    ), violation.seen


def test_a_decision_that_depends_on_the_thread_count_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, ThreadCounter, "task")
    with pytest.raises(ConformanceError) as err:
        check_method(name, rules=["same-decisions-any-threads"], quick=True)
    (violation,) = err.value.violations
    assert violation.rule == "same-decisions-any-threads"
    assert "at 2 torch threads the run decides differently than at 1: the train images taken in learn_task " in (
        violation.seen
    )
    assert "torch.get_num_threads()" in violation.advice


def test_a_method_that_reads_the_clock_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    name = register(monkeypatch, NightOwl, "task")
    with pytest.raises(ConformanceError) as err:
        check_method(name, rules=["same-seed-same-run", "clock-independent"], quick=True)
    assert broken_rules(err) == {"clock-independent"}  # the third run, on the first's clock, tells it from chance
    assert err.value.violations[0].seen.startswith("a run with seed 1 whose wall clock (time.time, datetime.now) is 12")
    assert "keep wall-clock readings to timings" in err.value.violations[0].advice


def test_the_clock_is_shifted_everywhere_a_method_reads_it() -> None:
    module = sys.modules[__name__]
    before_time, before_now = time.time(), datetime.datetime.now()
    with _clock_shifted(12 * 3600.0, [module]):
        assert abs(time.time() - before_time - 43200) < 60
        assert abs(time.time_ns() / 1e9 - before_time - 43200) < 60
        assert abs((wall_clock.now() - before_now).total_seconds() - 43200) < 60  # bound by name
        assert abs((datetime.datetime.now() - before_now).total_seconds() - 43200) < 60
        assert (
            abs(
                (
                    datetime.datetime.utcnow()
                    - datetime.datetime.fromtimestamp(before_time, datetime.UTC).replace(tzinfo=None)
                ).total_seconds()
                - 43200
            )
            < 60
        )
        assert abs((datetime.datetime.today() - before_now).total_seconds() - 43200) < 60
        assert datetime.date.today() == datetime.date.fromtimestamp(before_time + 43200)
        assert time.localtime().tm_hour == time.localtime(before_time + 43200).tm_hour
        assert time.gmtime().tm_hour == time.gmtime(before_time + 43200).tm_hour
        assert time.strftime("%H") == time.strftime("%H", time.localtime(before_time + 43200))
        assert time.ctime()[11:13] == time.ctime(before_time + 43200)[11:13]
        assert time.localtime(0) == time.localtime(0) and time.ctime(0) == time.ctime(0)  # an argument is kept
    assert abs(time.time() - before_time) < 60 and wall_clock is datetime.datetime  # put back
    assert abs((wall_clock.now() - before_now).total_seconds()) < 60
