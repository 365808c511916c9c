"""The conformance kit: what every continual-learning method must honour, checked from pytest.

A method written in another repository (a plug-in) or in this one checks itself from its own
tests:

    from rmconsole.testing import check_method

    def test_my_method_conforms() -> None:
        check_method("mymethod")

`check_method` runs the method in this process on scikit-learn's bundled 8x8 digits, through
each protocol it declares ("task": the RM paper's tasks; "task-free": the follow-up's i-Blurry
stream), with small settings (`kit_settings`: 5 tasks, one epoch, K=50, two uncertainty views;
a few seconds per protocol on a CPU), and checks the rules in RULES:

    memory-bound        the memory never holds more than memory_size (K) samples: after every
                        hook the protocol calls (every streamed sample, task-free) and in every
                        memory snapshot the method reports; and the model is never given more
                        than K distinct past samples to train on: the train split is guarded,
                        every take() is counted by index, per task (task protocol: past = not in
                        the task's stream) or per call of a hook (task-free: past = not among the
                        latest batch_size streamed samples)
    no-test-peeking     no test data is used outside the protocol's own evaluations (after a
                        task, and every eval_period samples task-free): no test image taken, no
                        attribute of the test split read (its labels included), setup.test_labels
                        not read, neither load_dataset nor a registry loader called, none of the
                        dataset's files opened (an audit hook)
    same-seed-same-run  two runs with the same seed give the same outcomes, anytime points,
                        memory snapshots and final checkpoint, bit for bit
    clock-independent   the second of those runs has its wall clock (time, datetime) 12 hours
                        later; a difference is told from an unseeded draw by a third run
    same-decisions-any-threads
                        a run at 2 torch threads (its first two tasks) takes the same train
                        samples in the same order and batches, and keeps the same memory, as at 1
                        thread, up to the first decision taken on models that already differ
                        (floats may differ between thread counts)
    resume-exact        a run stopped after a task and resumed from its checkpoint (through
                        torch.save / torch.load(weights_only=True), as the worker writes and reads
                        it) in a fresh method object continues bit for bit
    known-hooks         every public method the class defines is a hook one of its protocols
                        calls (base.TASK_HOOKS, taskfree.TASK_FREE_HOOKS), a building block of the
                        base classes, or a helper whose name does not look like a hook

It raises `ConformanceError` (an AssertionError: pytest shows it as the test's failure) listing
every rule broken, each as what was seen and what to do; it returns a `ConformanceReport` when
every rule holds. `check_hooks(name)` is the static rule alone (no training).

How it looks, without changing what it looks at: the method's class is wrapped in a subclass
that only records its instance (same name, same hooks) and hands it a copy of the Setup whose
test_labels are watched; the hooks the driver calls are watched on that instance (the memory's
size after each); both dataset splits are wrapped so a take or an attribute read is recorded
with the code that asked for it, unless the protocol's driver (cl/loop.py, cl/online.py) is
evaluating through cl/inference.py or building its stream.

What it does not see is listed in docs/extending.md ("What the kit does not guarantee"): images
a method caches itself, deliberate introspection, device-only paths (it trains on the CPU).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import difflib
import functools
import inspect
import io
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

from .cl.events import AnytimePoint, Reporter, TaskOutcome

if TYPE_CHECKING:
    from .cl.data import Dataset

__all__ = [
    "QUICK_PER_CLASS",
    "RULES",
    "CheckpointKeeper",
    "ConformanceError",
    "ConformanceReport",
    "Violation",
    "check_hooks",
    "check_method",
    "declared_protocols",
    "kit_settings",
]

RULES: dict[str, str] = {
    "memory-bound": "the memory never holds more than memory_size (K) samples, and the model is never given more "
    "than K distinct past samples between two stream samples",
    "no-test-peeking": "no test data (images, labels, the dataset's loader or files) reaches a method outside the "
    "protocol's evaluations",
    "same-seed-same-run": "two runs with the same seed are the same run, bit for bit",
    "clock-independent": "a run whose wall clock is 12 hours later is the same run, bit for bit",
    "same-decisions-any-threads": "at 1 and 2 torch threads the run takes the same samples, in the same order and "
    "batches, and keeps the same memory",
    "resume-exact": "a run stopped after a task and resumed from its checkpoint continues bit for bit",
    "known-hooks": "every public method the class defines is a hook its protocols call or a building block",
}
RUNS = "runs-to-the-end"  # not a rule to choose: a method that fails to run is reported as such

# What the kit trains: small enough that a protocol takes seconds on a CPU, large enough that
# every hook runs more than once (5 tasks, so a resume after task 2 has three tasks to agree on).
_COMMON: dict[str, Any] = {
    "dataset": "digits",
    "n_tasks": 5,
    "epochs": 1,
    "memory_size": 50,
    "seed": 1,
    "uncertainty_views": 2,
    "augment": "cutmix",
    "device": "cpu",
}
_PROTOCOL_SETTINGS: dict[str, dict[str, Any]] = {
    "task": {"stream": "online", "batch_size": 16},
    "task-free": {
        "stream": "iblurry",
        "batch_size": 8,
        "eval_period": 150,
        "online_iter": 0.25,
        "optimizer": "adam",
        "lr": 3e-4,
        "schedule": "exp_reset",
        "weight_decay": 0.0,
    },
}
_PROTOCOL_NAMES = {"task": "task protocol", "task-free": "task-free protocol"}
# Hooks the driver calls on the method whose return is a moment to look at the memory.
_WATCHED_HOOKS: dict[str, tuple[str, ...]] = {
    "task": ("before_task", "learn_task", "update_memory", "after_task"),
    "task-free": (
        "online_start",
        "online_task_start",
        "online_new_class",
        "online_observe",
        "online_before_eval",
        "online_task_end",
    ),
}
QUICK_PER_CLASS = (16, 8)  # check_method(quick=True): train and test images per class (digits: ~144 and ~36)
_THREAD_TASKS = 2  # the thread check's run trains the first tasks only (decisions show from the first)
_MORE_THREADS = 2
_HOOK_PREFIXES = ("before_", "after_", "on_", "online_")
_TYPO_CUTOFF = 0.8  # difflib ratio above which a name is taken for a misspelt hook ("after_taks")


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Violation:
    """One broken rule: which, under which protocol, what the kit saw, and what to do about it."""

    rule: str
    protocol: str | None
    seen: str
    advice: str

    def __str__(self) -> str:
        where = f" ({_PROTOCOL_NAMES.get(self.protocol, self.protocol)})" if self.protocol else ""
        return f"[{self.rule}]{where} {self.seen}\n      what to do: {self.advice}"


class ConformanceError(AssertionError):
    """A method breaks one or more rules; `violations` lists them, the message says each."""

    def __init__(self, method: str, violations: list[Violation]) -> None:
        self.method = method
        self.violations = list(violations)
        rules = ", ".join(dict.fromkeys(v.rule for v in self.violations))
        lines = [f"method {method!r} does not conform ({rules}):"]
        lines += [f"  - {v}" for v in self.violations]
        super().__init__("\n".join(lines))


@dataclass
class ConformanceReport:
    """What a passing check covered: the protocols, the rules, the runs it trained, its time."""

    method: str
    protocols: tuple[str, ...]
    rules: tuple[str, ...]
    runs: int = 0
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # "protocol: rule (why it could not be checked)"


# --------------------------------------------------------------------------- the method's declaration


def declared_protocols(method: str) -> tuple[str, ...]:
    """The protocols `method` declares ("task", "task-free"): its MethodSpec's, a built-in's or an
    installed plug-in's (ValueError, one line, for a name nobody declares)."""
    from .methods import method_spec

    return tuple(method_spec(method).protocols)


def kit_settings(method: str, protocol: str) -> dict[str, Any]:
    """The run settings (config keys over the embedded digits preset) the kit trains `method` with
    under `protocol`: pass `settings=` to `check_method` to change any of them (an expensive
    parameter of your own method, say)."""
    if protocol not in _PROTOCOL_SETTINGS:
        raise ValueError(f"protocol={protocol!r}: allowed: {', '.join(_PROTOCOL_SETTINGS)}")
    return {**_COMMON, **_PROTOCOL_SETTINGS[protocol], "method": method}


# --------------------------------------------------------------------------- known-hooks (static)


def _hook_tables() -> dict[str, frozenset[str]]:
    from .cl.methods.base import TASK_HOOKS
    from .cl.methods.taskfree import TASK_FREE_HOOKS

    return {"task": frozenset(TASK_HOOKS), "task-free": frozenset(TASK_FREE_HOOKS)}


def _is_function(value: Any) -> bool:
    return inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod))


def _where_defined(value: Any) -> str:
    try:
        func = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        return f" ({_short(inspect.getsourcefile(func) or '?')}:{inspect.getsourcelines(func)[1]})"
    except (OSError, TypeError):
        return ""


def _registered_class(klass: type) -> bool:
    """`klass` is the class of a registered method (by its `name`); plug-ins are not loaded for this."""
    from .cl.methods import REGISTRY, method_class

    name = getattr(klass, "name", None)
    if not isinstance(name, str) or name not in REGISTRY:
        return False
    try:
        return method_class(name) is klass
    except Exception:  # noqa: BLE001 - a registry entry that does not load is not this method's concern
        return False


def check_hooks(method: str) -> list[Violation]:
    """The known-hooks rule alone (nothing is trained): the violations, [] when it holds.

    A public name the method's own classes define (not `Method`, `TaskFree`, nor a registered
    method it extends: those answer for their names under their own protocols) is fine when a
    protocol it declares calls it or when it overrides a building block of a base class. It is
    flagged when it is a hook of a protocol the method does not declare (never called), or when
    it is a function whose name looks like a hook (before_*, after_*, on_*, online_*, or within a
    typo of a hook or a base function) that no protocol calls. Helpers with other names, and any
    name with a leading underscore, are the method's own."""
    from .cl.methods.base import Method
    from .cl.methods.taskfree import TaskFree
    from .methods import method_class

    cls = method_class(method)
    declared = declared_protocols(method)
    tables = _hook_tables()
    called = frozenset().union(*(tables[p] for p in declared if p in tables))
    every_hook = frozenset().union(*tables.values())
    bases = [b for b in (Method, TaskFree) if issubclass(cls, b)]
    base_names = {n for b in bases for n in dir(b) if not n.startswith("_")}
    base_functions = {n for n in base_names if any(_is_function(inspect.getattr_static(b, n, None)) for b in bases)}
    skip = {k for b in (Method, TaskFree) for k in b.__mro__}
    for klass in cls.__mro__[1:]:  # a registered method it extends answers for its own names, under its own protocols
        if _registered_class(klass):
            skip.update(klass.__mro__)
    own: dict[str, tuple[type, Any]] = {}
    for klass in reversed(cls.__mro__):
        if klass in skip or klass.__module__ in ("builtins", "typing", "abc"):
            continue
        for name, value in vars(klass).items():
            if not name.startswith("_"):
                own[name] = (klass, value)
    declared_words = " and ".join(_PROTOCOL_NAMES[p] for p in declared)
    declared_call = (
        f"the {' and '.join(declared)} protocols call"
        if len(declared) > 1
        else f"the {_PROTOCOL_NAMES[declared[0]]} calls"
    )
    calls = sorted(n for n in called if n in base_functions or n.startswith("online_"))
    violations = []
    for name, (klass, value) in sorted(own.items()):
        label = f"{klass.__qualname__}.{name}{_where_defined(value) if _is_function(value) else ''}"
        if name in called:
            continue
        if name in every_hook:
            missing = [p for p, hooks in tables.items() if name in hooks]
            how = " (its class lists TaskFree before Method)" if "task-free" in missing else ""
            violations.append(
                Violation(
                    "known-hooks",
                    None,
                    f"{label} is a hook of the {' and '.join(_PROTOCOL_NAMES[p] for p in missing)}, but {method!r} "
                    f"declares only the {declared_words}, which never calls it.",
                    f"declare the {' and '.join(missing)} protocol for {method!r} in its registry entry{how}, or remove "
                    f"the override.",
                )
            )
            continue
        if name in base_names or not _is_function(value):
            continue  # a building block of the base overridden, or a helper attribute
        close = difflib.get_close_matches(name, sorted(every_hook | base_functions), n=1, cutoff=_TYPO_CUTOFF)
        if not (name.startswith(_HOOK_PREFIXES) or close):
            continue
        guess = f"; did you mean {close[0]!r}?" if close else "."
        violations.append(
            Violation(
                "known-hooks",
                None,
                f"{label} looks like a hook, but no protocol calls it{guess}",
                f"{declared_call}: {', '.join(calls)}. Rename it to the "
                f"hook you mean, or, if it is a helper your own code calls, name it _{name}.",
            )
        )
    return violations


# --------------------------------------------------------------------------- watching a run


_THIS_FILE = os.path.abspath(__file__)


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith(".." + os.sep + "..") else rel


@functools.cache
def _files() -> dict[str, Any]:
    """The files whose frames the guards tell apart."""
    import importlib.util
    import sysconfig

    import torch

    from .cl import data, datasets, images, inference, loop, online, pipeline

    libraries = [os.path.dirname(os.path.abspath(torch.__file__)) + os.sep]
    for name in ("numpy", "sklearn", "scipy"):  # what a method may load files through
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            libraries.append(os.path.dirname(os.path.abspath(spec.origin)) + os.sep)
    return {
        "drivers": {os.path.abspath(loop.__file__), os.path.abspath(online.__file__)},
        "inference": os.path.abspath(inference.__file__),
        "plumbing": {
            os.path.abspath(f)
            for f in (data.__file__, datasets.__file__, images.__file__, pipeline.__file__, inference.__file__)
        }
        | {_THIS_FILE},
        "library": tuple(libraries),
        "stdlib": os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep,
    }


def _is_library(filename: str) -> bool:
    """torch, numpy, scikit-learn and the standard library (not what is installed beside it)."""
    if filename.startswith("<"):  # <frozen importlib._bootstrap>, <string>
        return True
    files = _files()
    path = os.path.abspath(filename)
    return path.startswith(files["library"]) or (path.startswith(files["stdlib"]) and "-packages" not in path)


def _protocol_is_evaluating(frame: FrameType | None) -> bool:
    """True when the stack shows the protocol's driver calling cl/inference.py's evaluate,
    evaluation or validation (directly, through torch's decorators): the protocol's own pass. A
    method that calls `evaluate` itself is not the driver doing it."""
    files = _files()
    callee: FrameType | None = None
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if filename in files["drivers"]:
            return (
                callee is not None
                and os.path.abspath(callee.f_code.co_filename) == files["inference"]
                and callee.f_code.co_name in ("evaluate", "evaluation", "validation")
            )
        if not _is_library(filename):
            callee = frame
        frame = frame.f_back
    return False


def _asking_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost frame outside the data plumbing and the libraries: who asked."""
    files = _files()
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if filename not in files["plumbing"] and not _is_library(filename):
            return frame
        frame = frame.f_back
    return None


def _asker(frame: FrameType | None) -> str:
    """The innermost code outside the data plumbing and the libraries, as file:line in function."""
    found = _asking_frame(frame)
    if found is None:
        return "unknown code"
    return f"{_short(found.f_code.co_filename)}:{found.f_lineno} in {found.f_code.co_name}"


def _driver_asks(frame: FrameType | None) -> bool:
    """The protocol's driver itself (loop.py, online.py) reads the split: building the stream."""
    found = _asking_frame(frame)
    return found is not None and os.path.abspath(found.f_code.co_filename) in _files()["drivers"]


_Take = tuple[str, tuple[int, ...], int]  # where, the train indices taken in order, the model's fingerprint then


def _grad_enabled() -> bool:
    import torch

    return torch.is_grad_enabled()


def _fingerprint(model: Any) -> int:
    """The model's floats (parameters and buffers) as one number: equal when they are bit for bit."""
    import torch

    if not isinstance(model, torch.nn.Module):
        return 0
    with torch.no_grad():
        flat = [
            t.detach().reshape(-1).float() for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()
        ]
        return hash(torch.cat(flat).cpu().numpy().tobytes()) if flat else 0


@dataclass
class _Watch:
    """What one protocol's runs did that a rule forbids, and where the run was at the time."""

    capacity: int
    batch: int = 1  # task-free: the latest streamed samples that are the current stream batch
    protocol: str = "task"
    task: int | None = None
    hook: str | None = None
    samples: int = 0  # streamed samples the method observed (task-free)
    over: dict[str, str] = field(default_factory=dict)  # memory-bound breaches: hook -> the first
    most: int = 0
    given: dict[str, str] = field(default_factory=dict)  # past samples beyond K given the model: hook -> the first
    given_most: int = 0
    bypass: dict[str, str] = field(default_factory=dict)  # train images read around take(): code -> the first
    peeks: dict[str, str] = field(default_factory=dict)  # code and hook -> what was seen, first time
    method: Any = None
    failed: str | None = None  # where the run raised, when it did
    current: set[int] = field(default_factory=set)  # the current stream batch: these are not "past"
    recent: deque[int] = field(default_factory=deque)
    past: set[int] = field(default_factory=set)  # distinct past samples taken since the window opened
    takes: list[_Take] = field(default_factory=list)  # this task's train takes, in order
    loading: int = 0  # inside a dataset loader the kit already flagged (its file reads are that one peek)

    def reset(self) -> None:
        """A new run (the breaches seen so far stay)."""
        self.task, self.hook, self.samples, self.failed = None, None, 0, None
        self.current, self.past, self.takes = set(), set(), []
        self.recent = deque(maxlen=max(1, self.batch))

    def context(self) -> str:
        task = "before the first task" if self.task is None else f"task {self.task}"
        return f"streamed sample {self.samples}, {task}" if self.hook == "online_observe" else task

    def place(self) -> str:
        return f"in {self.hook} ({self.context()})" if self.hook else f"in the driver ({self.context()})"

    def window(self) -> str:
        """The span over which past samples are counted, in words."""
        if self.protocol == "task":
            return "before the first task" if self.task is None else f"during task {self.task} (in {self.hook})"
        return f"in one call of {self.hook or 'the driver'} ({self.context()})"

    def memory_size(self, size: int, when: str, key: str) -> None:
        """A breach is kept the first time per hook (or per report), with the largest size seen."""
        if size > self.capacity:
            self.most = max(self.most, size)
            self.over.setdefault(key, f"{size} {when}")

    def memory_now(self, hook: str) -> None:
        memory: Any = getattr(self.method, "memory", None)
        try:
            size = len(memory)
        except TypeError:
            return  # no memory to count
        self.memory_size(size, f"after {hook} ({self.context()})", hook)

    def task_opened(self, stream: Any) -> None:
        """The task protocol hands a whole task: its stream is the current batch, the rest is past."""
        self.past = set()
        self.current = {int(i) for i in stream.tolist()}

    def sample_observed(self, index: Any) -> None:
        """Task-free: a streamed sample arrived; it and the batch_size before it are current."""
        with contextlib.suppress(TypeError, ValueError):
            self.recent.append(int(index))
        self.current = set(self.recent)

    def train_taken(self, idx: Any, frame: FrameType | None) -> None:
        """Train images taken: the decision record (which samples, in which order and batches)
        and the past samples given to the model since the window opened."""
        if _protocol_is_evaluating(frame):
            return
        try:
            ids = tuple(int(i) for i in idx.reshape(-1).tolist())
        except (AttributeError, TypeError, ValueError):
            return
        self.takes.append((self.place(), ids, _fingerprint(getattr(self.method, "model", None))))
        if not _grad_enabled():  # looked at (uncertainty, scores), not trained on
            return
        self.past.update(i for i in ids if i not in self.current)
        if len(self.past) > self.capacity:
            self.given_most = max(self.given_most, len(self.past))
            self.given.setdefault(
                self.hook or "driver",
                f"{len(self.past)} distinct past samples {self.window()}, taken by {_asker(frame)}",
            )

    def train_read(self, name: str, frame: FrameType | None) -> None:
        """An attribute of the train split read around take(): images the kit cannot count."""
        asking = _asking_frame(frame)
        if asking is None or _driver_asks(frame) or _protocol_is_evaluating(frame):
            return
        key = f"{_asker(frame)} read the train split's {name!r} in {self.hook or 'the driver'}"
        self.bypass.setdefault(key, f"{key} (first in {self.context()})")

    def decisions(self) -> tuple[list[_Take], list[int] | None, int]:
        """The task's train takes, the memory's samples now and the model's fingerprint; the next
        task starts a new record."""
        indices = getattr(getattr(self.method, "memory", None), "indices", None)
        kept = [int(i) for i in indices.tolist()] if indices is not None and hasattr(indices, "tolist") else None
        takes, self.takes = self.takes, []
        return takes, kept, _fingerprint(getattr(self.method, "model", None))

    def test_taken(self, n: int | None, how: str, frame: FrameType | None) -> None:
        """Record a use of test data unless the protocol is evaluating or building its stream:
        once per piece of code and hook, with the first time it happened."""
        if _protocol_is_evaluating(frame) or _driver_asks(frame):
            return
        key = f"{_asker(frame)} {how} {'in ' + self.hook if self.hook else 'in the driver'}"
        if key not in self.peeks:
            first = f"first in {self.context()}" + (f", {n} images" if n is not None else "")
            self.peeks[key] = f"{key} ({first})"

    def attach(self, method: Any, protocol: str) -> None:
        """Watch the hooks the driver calls on this instance (instance attributes: the class and
        what the engine reads of it stay the method's own)."""
        self.method = method
        for hook in _WATCHED_HOOKS[protocol]:
            bound = getattr(method, hook, None)
            if callable(bound):
                setattr(method, hook, self._watched(hook, bound))

    def _watched(self, hook: str, bound: Callable[..., Any]) -> Callable[..., Any]:
        def watched(*args: Any, **kwargs: Any) -> Any:
            task = args[0] if args and hasattr(args[0], "index") and hasattr(args[0], "stream") else None
            if task is not None:
                if self.protocol == "task" and self.task != int(task.index):
                    self.task_opened(task.stream)
                self.task = int(task.index)
            if hook == "online_observe":
                self.samples += 1
                self.sample_observed(args[0] if args else kwargs.get("index"))
            outer, self.hook = self.hook, hook
            if outer is None and self.protocol == "task-free":
                self.past = set()  # a call the driver makes: past samples are counted afresh
            try:
                return bound(*args, **kwargs)
            except BaseException:
                self.failed = self.failed or self.place()  # the innermost hook that raised
                raise
            finally:
                self.memory_now(hook)
                self.hook = outer

        return watched


class _GuardedSplit:
    """A dataset split that tells the watch what is taken from it and what is read of it.

    The test split: every image taken, and every attribute read besides its length and shape
    (its labels, its tensors, this wrapper's own fields), outside the protocol's evaluations and
    its driver. The train split: every take (the decision record, the past samples given to the
    model), and every attribute read besides take, labels, length and shape (images the kit
    could not count)."""

    __slots__ = ("_inner", "_role", "_watch")
    _OPEN = {
        "test": frozenset({"take", "to", "shape", "__class__"}),
        "train": frozenset({"take", "to", "shape", "labels", "__class__"}),
    }

    def __init__(self, inner: Any, watch: _Watch, role: str) -> None:
        self._inner = inner
        self._watch = watch
        self._role = role

    def __getattribute__(self, name: str) -> Any:
        role = object.__getattribute__(self, "_role")
        if name in _GuardedSplit._OPEN[role]:
            return object.__getattribute__(self, name)
        watch: _Watch = object.__getattribute__(self, "_watch")
        value = (
            object.__getattribute__(self, name)
            if name in _GuardedSplit.__slots__
            else getattr(object.__getattribute__(self, "_inner"), name)
        )
        if role == "test":
            watch.test_taken(None, f"read the test split's {name!r}", sys._getframe(1))
        else:
            watch.train_read(name, sys._getframe(1))
        return value

    @property
    def labels(self) -> Any:
        return object.__getattribute__(self, "_inner").labels

    @property
    def shape(self) -> Any:
        return object.__getattribute__(self, "_inner").shape

    def __len__(self) -> int:
        return len(object.__getattribute__(self, "_inner"))

    def take(self, idx: Any) -> Any:
        watch: _Watch = object.__getattribute__(self, "_watch")
        if object.__getattribute__(self, "_role") == "test":
            watch.test_taken(len(idx), "took test images", sys._getframe(1))
        else:
            watch.train_taken(idx, sys._getframe(1))
        return object.__getattribute__(self, "_inner").take(idx)

    def to(self, device: Any) -> _GuardedSplit:
        inner = object.__getattribute__(self, "_inner")
        watch, role = object.__getattribute__(self, "_watch"), object.__getattribute__(self, "_role")
        return _GuardedSplit(inner.to(device), watch, role)


def _guarded_setup(setup: Any, watch: _Watch) -> Any:
    """A copy of the driver's Setup whose `test_labels` tells the watch who reads them."""

    def read(self: Any) -> Any:
        watch.test_taken(None, "read setup.test_labels", sys._getframe(1))
        return self.__dict__["test_labels"]

    def write(self: Any, value: Any) -> None:
        self.__dict__["test_labels"] = value

    cls = type(setup)
    if "test_labels" not in getattr(setup, "__dict__", {}):
        return setup
    guarded = copy.copy(setup)
    guarded.__class__ = type(
        cls.__name__,
        (cls,),
        {"test_labels": property(read, write), "__module__": cls.__module__, "__qualname__": cls.__qualname__},
    )
    return guarded


# Dataset files a kit run opens: any is test data outside the protocol (`_audit`, installed once).
_OPENS: dict[str, Any] = {"watch": None, "files": frozenset(), "dirs": (), "installed": False}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    watch: _Watch | None = _OPENS["watch"]
    if watch is None or event != "open" or not args or isinstance(args[0], int) or watch.loading:
        return
    try:
        path = os.path.abspath(os.fsdecode(args[0]))
    except (TypeError, ValueError):
        return
    if path in _OPENS["files"] or path.startswith(_OPENS["dirs"]):
        _OPENS["watch"] = None  # what recording opens is not recorded
        try:
            watch.test_taken(None, f"opened the dataset's file {_short(path)}", sys._getframe(1))
        finally:
            _OPENS["watch"] = watch


@contextlib.contextmanager
def _sources_watched(watch: _Watch) -> Iterator[None]:
    """Whatever loads a dataset during a run tells the watch: load_dataset (data.py's lookup, so
    a reference bound before the run is caught too), a registry entry's loader, and a read of a
    dataset's files (the kit's dataset's source files, anything under the data root)."""
    from .cl import data as data_module
    from .cl.datasets import DatasetSpec, data_root, lookup

    original_lookup, original_loader = data_module.lookup, DatasetSpec.loader
    plumbing = os.path.abspath(data_module.__file__)

    def watched_lookup(name: str) -> DatasetSpec:
        watch.test_taken(None, f"called load_dataset({name!r})", sys._getframe(1))
        return original_lookup(name)

    def watched_loader(spec: DatasetSpec) -> Any:
        caller = sys._getframe(1)
        if os.path.abspath(caller.f_code.co_filename) != plumbing:  # load_dataset's own call: flagged above
            watch.test_taken(None, f"called dataset {spec.name!r}'s loader from the registry", caller)
        loader = original_loader(spec)

        def loading(*args: Any, **kwargs: Any) -> Any:
            watch.loading += 1
            try:
                return loader(*args, **kwargs)
            finally:
                watch.loading -= 1

        return loading

    def opened_by_load_dataset(*args: Any, **kwargs: Any) -> Any:
        watch.loading += 1
        try:
            return original_load_cached(*args, **kwargs)
        finally:
            watch.loading -= 1

    original_load_cached = data_module.load_cached
    with contextlib.suppress(Exception):  # a data root that cannot be resolved: the files of the dataset alone
        root = data_root()
        _OPENS["dirs"] = (os.path.abspath(root) + os.sep,)
        _OPENS["files"] = frozenset(os.path.abspath(p) for p in lookup("digits").source_paths(root))
    if not _OPENS["installed"]:
        sys.addaudithook(_audit)
        _OPENS["installed"] = True
    data_module.lookup = watched_lookup
    data_module.load_cached = opened_by_load_dataset
    DatasetSpec.loader = watched_loader  # type: ignore[assignment,method-assign]
    _OPENS["watch"] = watch
    try:
        yield
    finally:
        _OPENS["watch"] = None
        data_module.lookup, data_module.load_cached = original_lookup, original_load_cached
        DatasetSpec.loader = original_loader  # type: ignore[method-assign]


_CLOCK_SHIFT_S = 12 * 3600.0  # the second same-seed run's clock: 12 hours later (noon for midnight)


@contextlib.contextmanager
def _clock_shifted(seconds: float, modules: Iterable[ModuleType]) -> Iterator[None]:
    """The wall clock `seconds` later: time.time / time_ns / localtime / gmtime / ctime /
    strftime, datetime.datetime.now / utcnow / today and datetime.date.today, in their modules
    and wherever `modules` (the method's) bound them by name. Monotonic clocks are left alone."""
    import datetime as dt

    real = {name: getattr(time, name) for name in ("time", "time_ns", "localtime", "gmtime", "ctime", "strftime")}
    real_datetime, real_date = dt.datetime, dt.date

    def now_s() -> float:
        return float(real["time"]()) + seconds

    class ShiftedDatetime(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real_datetime.fromtimestamp(now_s(), tz)

        @classmethod
        def utcnow(cls) -> Any:
            return real_datetime.fromtimestamp(now_s(), dt.UTC).replace(tzinfo=None)

        @classmethod
        def today(cls) -> Any:
            return real_datetime.fromtimestamp(now_s())

    class ShiftedDate(dt.date):
        @classmethod
        def today(cls) -> Any:
            return real_date.fromtimestamp(now_s())

    shifted: dict[str, Any] = {
        "time": now_s,
        "time_ns": lambda: int(real["time_ns"]()) + int(seconds * 1e9),
        "localtime": lambda secs=None: real["localtime"](now_s() if secs is None else secs),
        "gmtime": lambda secs=None: real["gmtime"](now_s() if secs is None else secs),
        "ctime": lambda secs=None: real["ctime"](now_s() if secs is None else secs),
        "strftime": lambda fmt, t=None: real["strftime"](fmt, real["localtime"](now_s()) if t is None else t),
    }
    swaps: list[tuple[Any, str, Any]] = [(time, name, fake) for name, fake in shifted.items()]
    swaps += [(dt, "datetime", ShiftedDatetime), (dt, "date", ShiftedDate)]
    by_identity = {id(real[n]): shifted[n] for n in real} | {
        id(real_datetime): ShiftedDatetime,
        id(real_date): ShiftedDate,
    }
    for module in modules:
        for name, value in list(vars(module).items()):
            if id(value) in by_identity and not name.startswith("__"):
                swaps.append((module, name, by_identity[id(value)]))
    undo = [(owner, name, getattr(owner, name)) for owner, name, _ in swaps]
    try:
        for owner, name, fake in swaps:
            setattr(owner, name, fake)
        yield
    finally:
        for owner, name, value in reversed(undo):
            setattr(owner, name, value)


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class _Enough(Exception):
    """The run has trained the tasks the kit asked for (the thread check stops early)."""


class _Recorder(Reporter):
    """The run's events as the worker would keep them; the checkpoints as the bytes it writes;
    after each task, the decisions the method took in it (its train takes, its memory)."""

    def __init__(self, watch: _Watch, stop_after: int | None = None) -> None:
        self.watch = watch
        self.stop_after = stop_after
        self.outcomes: list[TaskOutcome] = []
        self.points: list[AnytimePoint] = []
        self.memories: list[tuple[int, list[int], int, dict[str, Any]]] = []
        self.checkpoints: list[bytes] = []
        self.decisions: list[tuple[int, list[_Take], list[int] | None, int]] = []

    def anytime_evaluated(self, point: AnytimePoint) -> None:
        self.points.append(point)

    def memory_updated(self, task: int, histogram: list[int], slots_per_class: int, info: dict[str, Any]) -> None:
        self.memories.append((task, list(histogram), slots_per_class, dict(info)))
        self.watch.memory_size(sum(histogram), f"in the memory snapshot it reported after task {task}", "report")

    def task_finished(self, outcome: TaskOutcome, checkpoint: dict[str, Any] | None) -> None:
        import torch

        self.outcomes.append(outcome)
        self.decisions.append((outcome.task, *self.watch.decisions()))
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        self.checkpoints.append(buffer.getvalue())
        if self.stop_after is not None and len(self.outcomes) >= self.stop_after:
            raise _Enough


class CheckpointKeeper(Reporter):
    """A reporter for a method's own resume tests: keeps every task checkpoint in `saved`,
    round-tripped through torch.save / torch.load(weights_only=True) as the worker writes and
    reads it (so what it holds is what a resumed run would be given)."""

    def __init__(self) -> None:
        self.saved: list[dict[str, Any]] = []

    def task_finished(self, outcome: TaskOutcome, checkpoint: dict[str, Any] | None) -> None:
        import torch

        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        buffer.seek(0)
        self.saved.append(torch.load(buffer, weights_only=True))


@contextlib.contextmanager
def _instrumented(watch: _Watch, protocol: str) -> Iterator[None]:
    """The drivers build the method through a subclass that hands its instance to `watch`."""
    from .cl import loop, online

    original_loop, original_online = loop.method_class, online.method_class
    made: dict[type, type] = {}

    def watched_class(method: Any) -> type:  # a name or a MethodSpec, as the drivers pass it
        cls = original_loop(method)
        if cls not in made:

            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                if args:  # the Setup the method keeps: its test labels guarded
                    args = (_guarded_setup(args[0], watch), *args[1:])
                elif "setup" in kwargs:
                    kwargs["setup"] = _guarded_setup(kwargs["setup"], watch)
                cls.__init__(self, *args, **kwargs)
                watch.attach(self, protocol)

            made[cls] = type(
                cls.__name__,
                (cls,),
                {
                    "__init__": __init__,
                    "__module__": cls.__module__,
                    "__qualname__": cls.__qualname__,
                    "__doc__": cls.__doc__,
                },
            )
        return made[cls]

    loop.method_class = online.method_class = watched_class
    try:
        yield
    finally:
        loop.method_class, online.method_class = original_loop, original_online


@functools.lru_cache(maxsize=1)
def _digits() -> Dataset:
    from .cl.data import load_dataset

    return load_dataset("digits")


def _kit_data(quick: bool) -> Dataset:
    """Digits, or with `quick` its first QUICK_PER_CLASS train and test images of each class."""
    data = _digits()
    if not quick:
        return data
    train, test = QUICK_PER_CLASS
    return dataclasses.replace(data, train=_first_per_class(data.train, train), test=_first_per_class(data.test, test))


def _first_per_class(source: Any, n: int) -> Any:
    """The first `n` images of each class of an in-memory split, in the split's order."""
    import torch

    from .cl.images import TensorImages

    labels = source.labels
    keep = torch.zeros(len(labels), dtype=torch.bool)
    for c in labels.unique().tolist():
        keep[torch.nonzero(labels == c).reshape(-1)[:n]] = True
    idx = torch.nonzero(keep).reshape(-1)
    return TensorImages(source.take(idx), labels[idx])


def _run(
    cfg: Any,
    watch: _Watch,
    protocol: str,
    resume: dict[str, Any] | None = None,
    *,
    clock_shift: float = 0.0,
    threads: int | None = None,
    tasks: int | None = None,
    modules: Iterable[ModuleType] = (),
    quick: bool = False,
) -> _Recorder:
    """One run of the protocol with the splits guarded and the hooks watched; `clock_shift`
    seconds on the wall clock, `threads` torch threads, stopped after `tasks` tasks."""
    import torch

    from .cl.loop import run_protocol

    data = _kit_data(quick)
    guarded = dataclasses.replace(
        data, train=_GuardedSplit(data.train, watch, "train"), test=_GuardedSplit(data.test, watch, "test")
    )
    recorder = _Recorder(watch, stop_after=tasks)
    watch.reset()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_instrumented(watch, protocol))
        if threads is not None:
            stack.enter_context(_threads(threads))
        if clock_shift:
            stack.enter_context(_clock_shifted(clock_shift, modules))
        stack.enter_context(_sources_watched(watch))
        with contextlib.suppress(_Enough):
            run_protocol(cfg, guarded, torch.device("cpu"), recorder, resume=resume)
    return recorder


# --------------------------------------------------------------------------- comparing two runs


def _is_timing(key: Any) -> bool:
    """Wall-clock figures differ between any two runs: they are not part of "the same run"."""
    return isinstance(key, str) and ("seconds" in key or key.endswith("_per_s"))


def _difference(a: Any, b: Any, path: str) -> str | None:
    """Where `a` and `b` first differ (bit for bit, timings aside), as a phrase; None if nowhere."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: a tensor in one run, {type(b if isinstance(a, torch.Tensor) else a).__name__} in the other"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}"
        a, b = a.detach().cpu(), b.detach().cpu()
        if a.is_floating_point():
            same = (a == b) | (a.isnan() & b.isnan())
        else:
            same = a == b
        if bool(same.all()):
            return None
        n = int((~same).sum())
        detail = ""
        if a.is_floating_point():
            detail = f", largest difference {float((a - b)[~same].abs().nan_to_num(math.inf).max()):.3g}"
        return f"{path}: {n} of {a.numel()} values differ{detail}"
    if dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) is type(b):
        for f in dataclasses.fields(a):
            if not _is_timing(f.name):
                found = _difference(getattr(a, f.name), getattr(b, f.name), f"{path} {f.name}")
                if found:
                    return found
        return None
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        keys_a, keys_b = {k for k in a if not _is_timing(k)}, {k for k in b if not _is_timing(k)}
        if keys_a != keys_b:
            return f"{path}: keys {sorted(map(str, keys_a ^ keys_b))} in one run only"
        for k in a:
            if k in keys_a:
                found = _difference(a[k], b[k], f"{path}[{k!r}]")
                if found:
                    return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: {len(a)} entries vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            found = _difference(x, y, f"{path}[{i}]")
            if found:
                return found
        return None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return None
    if type(a) is not type(b) or a != b:
        return f"{path}: {a!r} vs {b!r}"
    return None


def _load(checkpoint: bytes) -> dict[str, Any]:
    import torch

    return torch.load(io.BytesIO(checkpoint), map_location="cpu", weights_only=True)


def _final_state(checkpoint: bytes) -> dict[str, Any]:
    """The run's state in its last checkpoint; one the worker would refuse (an object weights_only
    does not load) is read in full here: the resume check reports it, the runs are still compared."""
    import torch

    try:
        state = _load(checkpoint)
    except Exception:  # noqa: BLE001 - pickle's and torch's errors for what weights_only refuses
        state = torch.load(io.BytesIO(checkpoint), map_location="cpu", weights_only=False)
    return {k: state.get(k) for k in ("method", "augmenter", "torch_rng")}


def _compare(a: _Recorder, b: _Recorder, after_task: int = -1) -> str | None:
    """The first difference between run `a` (its part after `after_task`) and run `b`."""
    outcomes = [o for o in a.outcomes if o.task > after_task]
    for mine, theirs in zip(outcomes, b.outcomes):
        found = _difference(mine, theirs, f"the evaluation after task {mine.task}:")
        if found:
            return found
    if len(outcomes) != len(b.outcomes):
        return f"{len(outcomes)} task evaluations vs {len(b.outcomes)}"
    points = [p for p in a.points if p.task > after_task]
    if len(points) != len(b.points):
        return f"{len(points)} anytime evaluations vs {len(b.points)}"
    for point, other in zip(points, b.points):
        found = _difference(point, other, f"the anytime evaluation at streamed sample {point.samples}:")
        if found:
            return found
    memories = [m for m in a.memories if m[0] > after_task]
    for memory, others in zip(memories, b.memories):
        found = _difference(
            memory[1:], others[1:], f"the memory snapshot after task {memory[0]} (histogram, slots, info):"
        )
        if found:
            return found
    if len(memories) != len(b.memories):
        return f"{len(memories)} memory snapshots vs {len(b.memories)}"
    if a.checkpoints and b.checkpoints:
        return _difference(
            _final_state(a.checkpoints[-1]),
            _final_state(b.checkpoints[-1]),
            f"the checkpoint after the last task (task {a.outcomes[-1].task}):",
        )
    return None


# --------------------------------------------------------------------------- the check


@contextlib.contextmanager
def _quiet_torch() -> Iterator[None]:
    """One thread (tiny tensors; a loaded CPU), and the caller's torch RNG given back after."""
    import torch

    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)


def _compare_decisions(a: _Recorder, b: _Recorder) -> str | None:
    """The first decision (a train take: which samples, in which order and batch; the memory's
    samples at a task's end) in which run `b` differs from run `a`, over the tasks `b` trained,
    while the two models are still the same bit for bit (floats may differ between thread counts;
    a decision made from floats that already differ, an uncertainty or a score, may then differ too)."""
    for (task, takes, memory, model), (_, others, other_memory, other_model) in zip(a.decisions, b.decisions):
        for n, ((place, ids, before), (_, theirs, other_before)) in enumerate(zip(takes, others)):
            if before != other_before:
                return None  # the floats differ from here: what follows may follow from them
            if ids != theirs:
                return (
                    f"the train images taken {place} (take {n + 1} of the task): {len(ids)} samples "
                    f"{list(ids[:6])}{'...' if len(ids) > 6 else ''} vs {len(theirs)} samples "
                    f"{list(theirs[:6])}{'...' if len(theirs) > 6 else ''}"
                )
        if len(takes) != len(others):
            return f"task {task}: {len(takes)} takes of train images vs {len(others)}"
        if model != other_model:
            return None
        if memory != other_memory:
            differ = len(set(memory or []) ^ set(other_memory or []))
            return (
                f"the memory after task {task}: {differ} samples in one run only (or the same samples in another order)"
            )
    return None


def _check_protocol(
    method: str,
    protocol: str,
    settings: Mapping[str, Any],
    rules: tuple[str, ...],
    resume_after: int | None,
    quick: bool = False,
) -> tuple[list[Violation], int, list[str]]:
    """One protocol's runs and rules: (violations, runs trained, rules it could not check and why)."""
    from .cl.protocols import protocol_of
    from .config import load_config
    from .methods import method_class

    over = {**kit_settings(method, protocol), **settings}
    if protocol_of(str(over.get("stream"))) != protocol:
        raise ValueError(f"settings stream={over.get('stream')!r} is not a {_PROTOCOL_NAMES[protocol]} stream")
    _, cfg = load_config(None, over)
    watch = _Watch(capacity=int(cfg.memory_size), batch=int(cfg.batch_size), protocol=protocol)
    modules = [sys.modules[k.__module__] for k in method_class(method).__mro__ if k.__module__ in sys.modules]
    violations: list[Violation] = []
    skipped: list[str] = []
    runs = 0

    def run(what: str, resume: dict[str, Any] | None = None, **how: Any) -> _Recorder:
        nonlocal runs
        runs += 1
        try:
            return _run(cfg, watch, protocol, resume, modules=modules, quick=quick, **how)
        except Exception as err:
            detail = " ".join(str(err).split())[:300]
            raise ConformanceError(
                method,
                violations
                + _watched(watch, protocol, rules)
                + [
                    Violation(
                        RUNS,
                        protocol,
                        f"the {what} failed {watch.failed or watch.place()}: {type(err).__name__}: {detail}",
                        f"see the traceback above this error; the kit's settings are kit_settings({method!r}, "
                        f"{protocol!r}) with your settings= over them.",
                    )
                ],
            ) from err

    full = run("run")
    n_tasks = len(full.outcomes)
    same_seed, clock = "same-seed-same-run" in rules, "clock-independent" in rules
    if same_seed or clock:
        shift = _CLOCK_SHIFT_S if clock else 0.0
        found = _compare(
            full,
            run("second run with the same seed" + (", the clock 12 hours later" if clock else ""), clock_shift=shift),
        )
        if found and clock and same_seed:  # the clock, or an unseeded draw? a third run on the first's clock tells
            unshifted = _compare(full, run("third run with the same seed, on the first run's clock"))
            clock, found = unshifted is None, unshifted or found
        elif found:
            clock = not same_seed
        if found and clock:
            violations.append(
                Violation(
                    "clock-independent",
                    protocol,
                    f"a run with seed {cfg.seed} whose wall clock (time.time, datetime.now) is 12 hours later differs "
                    f"from the first at {found}, and a run on the first run's clock does not.",
                    "let no decision or number depend on the date or time of day: draw from the run's seeded "
                    "generators, and keep wall-clock readings to timings (perf_counter) that nothing else reads.",
                )
            )
        elif found:
            violations.append(
                Violation(
                    "same-seed-same-run",
                    protocol,
                    f"two runs with seed {cfg.seed} differ at {found}.",
                    "draw every random number from a generator the run seeds (self.gen, torch's global RNG that "
                    "the protocol seeds, or a random.Random(self.cfg.seed + n)), never from an unseeded one "
                    "(random.Random(), random.random(), numpy's global RNG), and let nothing depend on the clock, "
                    "id() or set order.",
                )
            )
    differs = any(v.rule in ("same-seed-same-run", "clock-independent") for v in violations)
    if "same-decisions-any-threads" in rules:
        if differs:
            skipped.append(f"{protocol}: same-decisions-any-threads (two runs at one thread already differ)")
        else:
            tasks = min(_THREAD_TASKS, n_tasks)
            found = _compare_decisions(
                full, run(f"run at {_MORE_THREADS} threads (first {tasks} tasks)", threads=_MORE_THREADS, tasks=tasks)
            )
            if found:
                violations.append(
                    Violation(
                        "same-decisions-any-threads",
                        protocol,
                        f"at {_MORE_THREADS} torch threads the run decides differently than at 1: {found}.",
                        "let no decision (which samples to keep, draw, order or batch) depend on "
                        "torch.get_num_threads(), os.cpu_count() or the float noise of a threaded reduction: "
                        "decide from seeded generators and counts, and break ties in scores by index.",
                    )
                )
    if "resume-exact" not in rules:
        return violations + _watched(watch, protocol, rules), runs, skipped
    k = min(2, n_tasks - 2) if resume_after is None else resume_after
    if n_tasks >= 2 and not 0 <= k < n_tasks - 1:
        raise ValueError(f"resume_after={resume_after}: the run has {n_tasks} tasks; allowed: 0 to {n_tasks - 2}")
    try:
        checkpoint = _load(full.checkpoints[max(k, 0) if n_tasks >= 2 else -1])
    except Exception as err:  # noqa: BLE001 - pickle's and torch's errors for what weights_only refuses
        violations.append(
            Violation(
                "resume-exact",
                protocol,
                f"the checkpoint does not load as the worker loads it (torch.load(weights_only=True)): "
                f"{type(err).__name__}: {' '.join(str(err).split())[:200]}",
                "keep state_dict() to tensors, numbers, strings, None and lists / tuples / dicts of them "
                "(a generator as generator.get_state(), an object as its fields).",
            )
        )
        return violations + _watched(watch, protocol, rules), runs, skipped
    if n_tasks < 2:
        skipped.append(f"{protocol}: resume-exact (the run is one task: no task follows a checkpoint)")
    elif differs:
        skipped.append(f"{protocol}: resume-exact (two runs from the start already differ)")
    else:
        found = _compare(full, run(f"run resumed after task {k}", checkpoint), after_task=k)
        if found:
            violations.append(
                Violation(
                    "resume-exact",
                    protocol,
                    f"stopped after task {k} and resumed from its checkpoint (in a fresh method object), the run "
                    f"differs from the uninterrupted one at {found}.",
                    "everything that shapes later tasks (counters, running statistics, old models, generators, "
                    "per-sample state) must be saved by state_dict() and put back by load_state_dict(); extend "
                    "both with super() and a key of your own.",
                )
            )
    return violations + _watched(watch, protocol, rules), runs, skipped


def _watched(watch: _Watch, protocol: str, rules: tuple[str, ...]) -> list[Violation]:
    """The breaches the watch saw in any of the protocol's runs, one violation per rule."""
    found = []
    if "memory-bound" in rules and (watch.over or watch.given or watch.bypass):
        seen = []
        if watch.over:
            seen.append(
                f"the memory held more than memory_size K={watch.capacity} samples (up to {watch.most}), first "
                + next(iter(watch.over.values()))
            )
        if watch.given:
            seen.append(
                f"the model was given more than K={watch.capacity} distinct past samples to train on (beyond the "
                f"current stream batch) {'in one task' if protocol == 'task' else 'in one call of a hook'} (up to "
                f"{watch.given_most}), first " + next(iter(watch.given.values()))
            )
        if watch.bypass:
            seen.append(
                "train images were read around take(), where the kit cannot count them: "
                + "; ".join(list(watch.bypass.values())[:3])
            )
        found.append(
            Violation(
                "memory-bound",
                protocol,
                "; ".join(seen) + ".",
                "keep len(self.memory) <= cfg.memory_size at every moment, inside a hook too: build the memory with "
                "that capacity (or less: a temp batch or a held-out set counts against K), evict before adding, "
                "and train on past samples only from the memory (never a larger set kept for a while, and never "
                "images cached outside it); take images through self.images_of(indices).",
            )
        )
    if "no-test-peeking" in rules and watch.peeks:
        shown = list(watch.peeks.values())
        found.append(
            Violation(
                "no-test-peeking",
                protocol,
                "test data was used outside the protocol's evaluations: "
                + "; ".join(shown[:3])
                + (f"; and in {len(shown) - 3} more places" if len(shown) > 3 else "")
                + ".",
                "learn from the train split only (self.images_of(indices), self.labels_of(indices)); the test "
                "split, its labels, the dataset's loader (load_dataset, the registry) and its files belong to the "
                "protocol, which evaluates after each task and, task-free, every eval_period samples. A method "
                "that looks at test data reports figures no other method can match.",
            )
        )
    return found


def check_method(
    method: str,
    *,
    protocols: Iterable[str] | None = None,
    settings: Mapping[str, Any] | None = None,
    rules: Iterable[str] | None = None,
    resume_after: int | None = None,
    quick: bool = False,
) -> ConformanceReport:
    """Check `method` (a registered name: built-in or plug-in) against RULES under each protocol it
    declares (or `protocols`, a subset of them), on digits with `kit_settings` updated by
    `settings`; `rules` picks some of RULES (known-hooks alone trains nothing); `resume_after`
    is the task whose checkpoint the resume check starts from (default 2, the middle of 5);
    `quick` trains on the first QUICK_PER_CLASS train and test images of each digit class instead
    of all of digits (the same runs and rules at about a third of the cost: what a method's CI can
    afford; the full data exercises more of a method's memory and schedule).

    Raises ConformanceError naming every broken rule; returns what was checked otherwise."""
    started = time.perf_counter()
    declared = declared_protocols(method)
    chosen = tuple(declared if protocols is None else protocols)
    undeclared = [p for p in chosen if p not in declared]
    if undeclared:
        raise ValueError(f"protocols={list(chosen)}: {method!r} declares only {', '.join(declared)}")
    picked = tuple(RULES if rules is None else rules)
    unknown = [r for r in picked if r not in RULES]
    if unknown:
        raise ValueError(f"rules: unknown {', '.join(map(repr, unknown))}; allowed: {', '.join(RULES)}")
    violations = check_hooks(method) if "known-hooks" in picked else []
    runs, skipped = 0, []
    if any(r != "known-hooks" for r in picked):
        with _quiet_torch():
            for protocol in chosen:
                found, n, not_checked = _check_protocol(
                    method, protocol, dict(settings or {}), picked, resume_after, quick
                )
                violations += found
                runs += n
                skipped += not_checked
    if violations:
        raise ConformanceError(method, violations)
    return ConformanceReport(method, chosen, picked, runs, round(time.perf_counter() - started, 2), skipped)
