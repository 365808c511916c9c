"""Who the conformance kit's guards blame, in process: the stack walks (`_protocol_is_evaluating`,
`_asking_frame`, `_driver_asks`) over call chains compiled under made-up file names that the kit's
file table is told are the drivers, cl/inference.py, the data plumbing or a library; the frame each
guard hands on (the reader, not its caller); and the audit hook that flags a dataset file opened.
Milliseconds each; tools/mutation.py runs these before the kit's trained checks.
"""

from __future__ import annotations

import dataclasses
import decimal
import io
import os
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

import pytest
import torch

from rmconsole import testing
from rmconsole.cl.images import TensorImages
from rmconsole.testing import (
    _asking_frame,
    _audit,
    _driver_asks,
    _guarded_setup,
    _GuardedSplit,
    _is_library,
    _protocol_is_evaluating,
    _Watch,
)

KIT = os.path.abspath("/kit-made-up")  # no such directory: files named for the frames of a chain
DRIVER, INFERENCE, PLUMBING, METHOD = (os.path.join(KIT, f) for f in ("loop.py", "inference.py", "data.py", "er.py"))
LIBRARY = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "made_up_decorator.py")


@pytest.fixture
def table(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kit's file table with the made-up driver, inference and plumbing files (libraries as they are)."""
    real = testing._files()
    monkeypatch.setattr(
        testing,
        "_files",
        lambda: {**real, "drivers": {DRIVER}, "inference": INFERENCE, "plumbing": {PLUMBING, INFERENCE}},
    )


def through(chain: list[tuple[str, str]], probe: Callable[[Any], Any]) -> Any:
    """Call through functions compiled as `chain`'s (file, name), outermost first; the innermost
    hands its own frame to `probe`."""
    ns: dict[str, Any] = {"probe": probe, "sys": sys}
    path, name = chain[-1]
    exec(compile(f"def {name}():\n    return probe(sys._getframe())\n", path, "exec"), ns)
    inner = ns[name]
    for path, name in reversed(chain[:-1]):
        ns = {"inner": inner}
        exec(compile(f"def {name}():\n    return inner()\n", path, "exec"), ns)
        inner = ns[name]
    return inner()


def test_the_protocol_evaluates_only_when_its_driver_calls_inference_itself(table: None) -> None:
    def evaluating(*chain: tuple[str, str]) -> bool:
        return bool(through(list(chain), _protocol_is_evaluating))

    assert evaluating((DRIVER, "run"), (INFERENCE, "evaluate"), (PLUMBING, "take"))
    assert evaluating((DRIVER, "run"), (LIBRARY, "decorate_context"), (INFERENCE, "evaluation"), (METHOD, "x"))
    assert evaluating((DRIVER, "run"), (INFERENCE, "validation"), (LIBRARY, "wrapper"))
    assert not evaluating((DRIVER, "run"), (METHOD, "after_task"), (INFERENCE, "evaluate"))  # the method asks
    assert not evaluating((DRIVER, "run"), (INFERENCE, "predict_all"))  # not an evaluation
    assert not evaluating((DRIVER, "run"), (METHOD, "learn_task"))
    assert not evaluating((DRIVER, "run"), (LIBRARY, "wrapper"))  # nothing of ours inside the driver
    assert not evaluating((METHOD, "learn_task"), (INFERENCE, "evaluate"))  # no driver on the stack
    assert not _protocol_is_evaluating(None)


def test_the_asker_is_the_innermost_code_outside_the_plumbing_and_libraries(table: None) -> None:
    found = through([(DRIVER, "run"), (METHOD, "after_task"), (LIBRARY, "wrapper"), (PLUMBING, "take")], _asking_frame)
    assert (found.f_code.co_filename, found.f_code.co_name) == (METHOD, "after_task")
    assert not through([(DRIVER, "run"), (METHOD, "after_task"), (PLUMBING, "take")], _driver_asks)
    assert through([(DRIVER, "stream"), (LIBRARY, "wrapper"), (PLUMBING, "take")], _driver_asks)
    assert not _driver_asks(None)


def test_is_library_leaves_out_what_is_installed_beside_the_standard_library() -> None:
    stdlib = sysconfig.get_paths()["stdlib"]
    assert _is_library(os.path.join(stdlib, "json", "decoder.py"))
    assert not _is_library(os.path.join(stdlib, "site-packages", "plugin", "method.py"))
    assert not _is_library(os.path.join(stdlib, "dist-packages", "plugin", "method.py"))


# ------------------------------------------------------------------------------ the reader, not its caller


def _split() -> TensorImages:
    return TensorImages(torch.zeros(4, 1, 2, 2, dtype=torch.uint8), torch.tensor([0, 1, 0, 1]))


def read_test_labels(split: Any) -> Any:
    return split.labels


def take_train(split: Any, idx: torch.Tensor) -> Any:
    return split.take(idx)


def read_train_images(split: Any) -> Any:
    return split.images


def read_setup_labels(setup: Any) -> Any:
    return setup.test_labels


def test_each_guard_blames_the_code_that_read(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = _Watch(capacity=1)
    watch.reset()
    read_test_labels(_GuardedSplit(_split(), watch, "test"))
    (peek,) = watch.peeks
    assert " in read_test_labels read the test split's 'labels' in the driver" in peek, peek
    train = _GuardedSplit(_split(), watch, "train")
    take_train(train, torch.tensor([0, 1, 2]))
    (given,) = watch.given.values()
    assert given.endswith(" in take_train"), given
    read_train_images(train)
    (bypass,) = watch.bypass
    assert " in read_train_images read the train split's 'images'" in bypass, bypass

    class Setup:
        def __init__(self) -> None:
            self.test_labels = torch.tensor([1])

    watch.peeks.clear()
    read_setup_labels(_guarded_setup(Setup(), watch))
    (peek,) = watch.peeks
    assert " in read_setup_labels read setup.test_labels" in peek, peek


# ------------------------------------------------------------------------------ a dataset file opened


def test_the_audit_hook_flags_a_dataset_file_opened_outside_a_loader(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    watch = _Watch(capacity=1)
    watch.reset()
    data_file, root = tmp_path / "digits.csv", tmp_path / "root"
    seen_during: list[Any] = []
    recorded = watch.test_taken

    def test_taken(*args: Any) -> None:
        seen_during.append(testing._OPENS["watch"])  # what recording opens is not recorded
        recorded(*args)

    monkeypatch.setattr(watch, "test_taken", test_taken)
    monkeypatch.setitem(testing._OPENS, "files", frozenset({str(data_file)}))
    monkeypatch.setitem(testing._OPENS, "dirs", (str(root) + os.sep,))
    monkeypatch.setitem(testing._OPENS, "watch", None)
    _audit("open", (str(data_file), "r", 0))
    assert not watch.peeks  # no run watched
    monkeypatch.setitem(testing._OPENS, "watch", watch)
    for event, args in [
        ("exec", (str(data_file),)),
        ("open", ()),
        ("open", (3, "r", 0)),  # a file descriptor: its path was checked when it was opened
        ("open", (str(tmp_path / "other.csv"), "r", 0)),
        ("open", (str(root), "r", 0)),  # the root itself: nothing under it
    ]:
        _audit(event, args)
    assert not watch.peeks
    watch.loading = 1
    _audit("open", (str(data_file), "r", 0))  # inside a loader the kit already flagged
    assert not watch.peeks
    watch.loading = 0
    _audit("open", (os.fsencode(str(data_file)), 5))
    _audit("open", (str(root / "digits" / "test.npz"), None, 0))
    assert [k.split(" opened ")[1] for k in watch.peeks] == [
        f"the dataset's file {testing._short(str(data_file))} in the driver",
        f"the dataset's file {testing._short(str(root / 'digits' / 'test.npz'))} in the driver",
    ]
    assert all(k.startswith(testing._short(__file__) + ":") for k in watch.peeks)  # who opened it: this test
    assert seen_during == [None, None] and testing._OPENS["watch"] is watch


# ------------------------------------------------------------------------------ load_dataset and the registry, watched


def call_lookup() -> Any:
    from rmconsole.cl import data

    return data.lookup("digits")


def call_loader(spec: Any) -> Any:
    return spec.loader()


def test_load_dataset_and_the_registry_are_watched_while_a_run_is(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmconsole.cl import data
    from rmconsole.cl.datasets import DatasetSpec, data_root, lookup

    watch = _Watch(capacity=1)
    watch.reset()
    hooks: list[Any] = []
    monkeypatch.setattr(sys, "addaudithook", hooks.append)
    monkeypatch.setitem(testing._OPENS, "installed", False)
    monkeypatch.setitem(testing._OPENS, "files", frozenset())
    monkeypatch.setitem(testing._OPENS, "dirs", ())
    monkeypatch.setattr(DatasetSpec, "loader", lambda spec: lambda *args, **kwargs: watch.loading)  # the loading depth
    monkeypatch.setattr(data, "load_cached", lambda *args, **kwargs: watch.loading)
    real = lookup, DatasetSpec.loader, data.load_cached
    with testing._sources_watched(watch):
        assert testing._OPENS["watch"] is watch and hooks == [_audit] and testing._OPENS["installed"] is True
        root = data_root()
        assert testing._OPENS["dirs"] == (os.path.abspath(root) + os.sep,)
        assert testing._OPENS["files"] == {os.path.abspath(p) for p in lookup("digits").source_paths(root)} != set()
        spec = call_lookup()
        assert spec is lookup("digits")
        assert call_loader(spec)() == 1 and watch.loading == 0  # inside the loader: its file reads are that peek
        assert data.load_cached() == 1 and watch.loading == 0
        ns: dict[str, Any] = {"spec": spec}
        exec(compile("def load():\n    return spec.loader()\n", data.__file__, "exec"), ns)
        ns["load"]()  # load_dataset's own call of the loader: flagged as load_dataset already
    assert [k.split(":", 1)[1].split(" ", 1)[1] for k in watch.peeks] == [
        "in call_lookup called load_dataset('digits') in the driver",
        "in call_loader called dataset 'digits''s loader from the registry in the driver",
    ]
    assert testing._OPENS["watch"] is None
    assert (data.lookup, DatasetSpec.loader, data.load_cached) == (real[0], real[1], real[2])
    with testing._sources_watched(watch):
        assert hooks == [_audit]  # installed once


# ------------------------------------------------------------------------------ the clock, shifted exactly


def test_the_clock_is_shifted_exactly_and_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    import datetime as dt
    import time
    import types

    base = 1_000_000.0  # a fixed wall clock under the shift: every reading is exact
    monkeypatch.setattr(time, "time", lambda: base)
    monkeypatch.setattr(time, "time_ns", lambda: int(base) * 10**9)
    fixed_time, fixed_ns = time.time, time.time_ns
    localtime, gmtime, ctime, strftime = time.localtime, time.gmtime, time.ctime, time.strftime
    real_datetime, real_date = dt.datetime, dt.date
    module = types.ModuleType("method_module")
    module.t, module.D, module.__t__ = time.time, dt.datetime, time.time  # type: ignore[attr-defined]
    shifted = base + 43200
    with testing._clock_shifted(43200.0, [module]):
        assert time.time() == shifted and module.t() == shifted  # type: ignore[attr-defined]
        assert module.__t__ is fixed_time  # type: ignore[attr-defined]  # a dunder name is left alone
        assert time.time_ns() == int(base) * 10**9 + 43200 * 10**9
        assert time.localtime() == localtime(shifted) and time.localtime(5) == localtime(5)
        assert time.gmtime() == gmtime(shifted) and time.gmtime(5) == gmtime(5)
        assert time.ctime() == ctime(shifted) and time.ctime(5) == ctime(5)
        assert time.strftime("%Y %j %H") == strftime("%Y %j %H", localtime(shifted))
        assert time.strftime("%Y %j %H", gmtime(5)) == strftime("%Y %j %H", gmtime(5))
        assert dt.datetime.now() == real_datetime.fromtimestamp(shifted) == module.D.now()  # type: ignore[attr-defined]
        assert dt.datetime.now(dt.UTC) == real_datetime.fromtimestamp(shifted, dt.UTC)
        utc = dt.datetime.utcnow()
        assert utc.tzinfo is None and utc == real_datetime.fromtimestamp(shifted, dt.UTC).replace(tzinfo=None)
        assert dt.datetime.today() == real_datetime.fromtimestamp(shifted)
        assert dt.date.today() == real_date.fromtimestamp(shifted)
    assert (time.time, time.time_ns, time.localtime, time.gmtime, time.ctime, time.strftime) == (
        fixed_time,
        fixed_ns,
        localtime,
        gmtime,
        ctime,
        strftime,
    )
    assert (dt.datetime, dt.date, module.t, module.D) == (real_datetime, real_date, fixed_time, real_datetime)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------ what a run reports, kept


def test_the_recorder_keeps_what_the_run_reports_and_stops_after_its_tasks() -> None:
    import pickle

    from rmconsole.cl.events import AnytimePoint, TaskOutcome

    watch = _Watch(capacity=50)
    watch.reset()
    holder = type("Holder", (), {})()
    holder.memory = type("M", (), {"indices": torch.tensor([3, 1])})()  # type: ignore[attr-defined]
    watch.method = holder
    recorder = testing._Recorder(watch, stop_after=2)
    point = AnytimePoint(0, 10, 50.0, 2)
    recorder.anytime_evaluated(point)
    recorder.memory_updated(1, [30, 25], 5, {"a": 1})
    assert recorder.points == [point] and recorder.memories == [(1, [30, 25], 5, {"a": 1})]
    assert watch.over == {"report": "55 in the memory snapshot it reported after task 1"}
    watch.takes = [("in learn_task (task 0)", (1, 2), 0)]
    first = TaskOutcome(0, 50.0, [50.0], None, [0])
    recorder.task_finished(first, {"w": torch.tensor([1.5])})
    assert recorder.outcomes == [first] and recorder.decisions == [
        (0, [("in learn_task (task 0)", (1, 2), 0)], [3, 1], 0)
    ]
    assert torch.load(io.BytesIO(recorder.checkpoints[0]), weights_only=True)["w"].tolist() == [1.5]
    with pytest.raises(testing._Enough):
        recorder.task_finished(TaskOutcome(1, 50.0, [50.0], None, [0]), None)
    assert len(recorder.outcomes) == len(recorder.checkpoints) == 2
    endless = testing._Recorder(watch)
    for t in range(3):
        endless.task_finished(TaskOutcome(t, 50.0, [50.0], None, [0]), None)
    assert len(endless.outcomes) == 3
    keeper = testing.CheckpointKeeper()
    keeper.task_finished(first, {"w": torch.tensor([2.0])})
    assert len(keeper.saved) == 1 and keeper.saved[0]["w"].tolist() == [2.0]
    with pytest.raises(pickle.UnpicklingError):  # as the worker reads it: weights only
        keeper.task_finished(first, {"w": decimal.Decimal(1)})


def test_the_drivers_build_the_method_through_a_watched_subclass(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmconsole.cl import loop, online

    class Plain:
        """A method."""

        def __init__(self, setup: Any, extra: Any = None) -> None:
            self.setup, self.extra = setup, extra

        def before_task(self, task: Any) -> None: ...

    class Setup:
        def __init__(self) -> None:
            self.test_labels = torch.tensor([1])

    monkeypatch.setattr(loop, "method_class", lambda name: Plain)
    real_online = online.method_class
    watch = _Watch(capacity=1)
    watch.reset()
    with testing._instrumented(watch, "task"):
        made = loop.method_class("plain")
        assert online.method_class("plain") is made and issubclass(made, Plain) and made is not Plain
        assert (made.__name__, made.__module__, made.__qualname__, made.__doc__) == (
            "Plain",
            Plain.__module__,
            Plain.__qualname__,
            "A method.",
        )
        method = made(Setup(), 7)
        assert method.extra == 7 and watch.method is method and "before_task" in vars(method)
        assert method.setup.test_labels.tolist() == [1] and len(watch.peeks) == 1  # the Setup it keeps is guarded
        by_name = made(setup=Setup())
        assert watch.method is by_name and by_name.setup.test_labels.tolist() == [1] and len(watch.peeks) == 2
        watch.peeks.clear()
        by_name.setup.test_labels  # noqa: B018
        assert len(watch.peeks) == 1
    assert loop.method_class("plain") is Plain and online.method_class is real_online


def test_difference_of_a_container_and_something_else_is_their_values() -> None:
    assert testing._difference({"a": 1}, [1], "x") == "x: {'a': 1} vs [1]"
    assert testing._difference([1], "ab", "x") == "x: [1] vs 'ab'"


# ------------------------------------------------------------------------------ one run, everything in place


def test_a_run_is_the_protocol_with_every_guard_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from rmconsole.cl import data, loop
    from rmconsole.cl.events import TaskOutcome

    seen: list[dict[str, Any]] = []
    real_method_class, real_lookup, before = loop.method_class, data.lookup, time.time()

    def run_protocol(cfg: Any, dataset: Any, device: Any, reporter: Any, resume: Any = "missing") -> None:
        seen.append(
            {
                "roles": [object.__getattribute__(s, "_role") for s in (dataset.train, dataset.test)],
                "resume": resume,
                "threads": torch.get_num_threads(),
                "shift": round((time.time() - before) / 3600),
                "task": watch.task,
                "watched": (loop.method_class is not real_method_class, data.lookup is not real_lookup),
                "train": len(dataset.train),
            }
        )
        for t in range(3):
            reporter.task_finished(TaskOutcome(t, 50.0, [50.0], None, [0]), None)

    monkeypatch.setattr(loop, "run_protocol", run_protocol)
    quick_asked: list[bool] = []

    def kit_data(quick: bool) -> Any:  # the kit's data, small (digits is read by other tests)
        quick_asked.append(quick)
        return Tiny(_split(), _split())

    monkeypatch.setattr(testing, "_kit_data", kit_data)
    watch = _Watch(capacity=1)
    watch.task = 4
    threads = torch.get_num_threads()
    quick = testing._run(None, watch, "task", {"task": 0}, clock_shift=7200.0, threads=threads + 1, tasks=2, quick=True)
    assert len(quick.outcomes) == 2  # stopped after the tasks asked for
    full = testing._run(None, watch, "task")
    assert len(full.outcomes) == 3
    assert seen == [
        {
            "roles": ["train", "test"],
            "resume": {"task": 0},
            "threads": threads + 1,
            "shift": 2,
            "task": None,
            "watched": (True, True),
            "train": 4,
        },
        {
            "roles": ["train", "test"],
            "resume": None,
            "threads": threads,
            "shift": 0,
            "task": None,
            "watched": (True, True),
            "train": 4,
        },
    ]
    assert (
        torch.get_num_threads() == threads and loop.method_class is real_method_class and quick_asked == [True, False]
    )


@dataclasses.dataclass
class Tiny:
    train: Any
    test: Any


def test_the_kit_trains_at_one_thread_and_gives_the_callers_back() -> None:
    with testing._threads(2):
        with testing._quiet_torch():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2


def test_what_the_driver_reads_to_build_its_stream_is_not_flagged(table: None) -> None:
    watch = _Watch(capacity=1)
    watch.reset()
    through([(DRIVER, "stream"), (PLUMBING, "take")], lambda f: watch.train_read("images", f))
    through([(DRIVER, "stream"), (PLUMBING, "take")], lambda f: watch.test_taken(None, "read labels", f))
    assert not watch.bypass and not watch.peeks
    through([(DRIVER, "run"), (METHOD, "learn_task"), (PLUMBING, "take")], lambda f: watch.train_read("images", f))
    through([(DRIVER, "run"), (METHOD, "learn_task"), (PLUMBING, "take")], lambda f: watch.test_taken(None, "x", f))
    assert len(watch.bypass) == 1 and len(watch.peeks) == 1
    holder = type("Holder", (), {})()
    holder.memory = type("M", (), {"indices": [1, 2]})()  # type: ignore[attr-defined]  # no tolist: not recorded
    watch.method = holder
    assert watch.decisions() == ([], None, 0)
