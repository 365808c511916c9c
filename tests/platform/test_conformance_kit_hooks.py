"""The conformance kit's static rule (known-hooks) and the file table its guards read, in process:
each message pinned word for word on small classes of this file, which `check_hooks` is handed
through a patched `method_class` / `method_spec` (nothing registered, nothing trained).
Milliseconds each; tools/mutation.py runs these first over rmconsole.testing.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import sys
import sysconfig
from types import SimpleNamespace
from typing import Any

import numpy
import pytest
import torch

import rmconsole.cl.methods as cl_methods
import rmconsole.methods as methods
from rmconsole import testing
from rmconsole.cl import data, datasets, images, inference, loop, online, pipeline
from rmconsole.cl.methods.base import TASK_HOOKS, Method
from rmconsole.cl.methods.er import ER
from rmconsole.cl.methods.taskfree import TASK_FREE_HOOKS, TaskFree
from rmconsole.testing import _files, _registered_class, check_hooks


def hooks_of(monkeypatch: pytest.MonkeyPatch, cls: type, *protocols: str) -> list[str]:
    """check_hooks of `cls` declaring `protocols`: each violation as one line, its file:line left out."""
    monkeypatch.setattr(methods, "method_class", lambda name: cls)
    monkeypatch.setattr(methods, "method_spec", lambda name: SimpleNamespace(protocols=protocols))
    out = []
    for v in check_hooks("m"):
        assert v.rule == "known-hooks" and v.protocol is None
        where = re.search(r" \((\S+):(\d+)\)", v.seen)
        assert where is not None and where.group(1).endswith("test_conformance_kit_hooks.py"), v.seen
        out.append(f"{v.seen.replace(where.group(0), '')} | {v.advice}")
    return out


def _calls(bases: tuple[type, ...], hooks: tuple[str, ...]) -> str:
    """The hooks a message lists as called: the protocols' hooks that are functions of a base, or online_*."""
    return ", ".join(
        sorted(
            {h for h in hooks if h.startswith("online_") or any(inspect.isfunction(getattr(b, h, None)) for b in bases)}
        )
    )


class TaskHooks(Method):
    """One name of each kind, in an order where each kind is followed by a name that is flagged."""

    after_count = 0  # hook-like, but not a function: an attribute of its own

    def after_task(self, task: Any) -> None: ...  # called by its protocol

    def apply_helper(self) -> None: ...  # a helper that does not look like a hook

    def before_tsak(self, task: Any) -> None: ...  # a typo of before_task

    def images_of(self, idx: Any) -> Any: ...  # a building block of Method, overridden

    def images_off(self, idx: Any) -> Any: ...  # a typo of a building block (no hook prefix)

    def lern_tasks_now(self) -> None: ...  # near learn_task, but below the typo cutoff

    def online_observe(self, index: int, label: int) -> None: ...  # a hook of the protocol it does not declare

    def online_zzz(self) -> None: ...  # hook-like, like no hook


def test_check_hooks_flags_each_kind_of_name_and_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _calls((Method,), TASK_HOOKS)
    assert "after_task" in calls and "memory_batch_size" not in calls  # an attribute of Method, not a function
    assert hooks_of(monkeypatch, TaskHooks, "task") == [
        "TaskHooks.before_tsak looks like a hook, but no protocol calls it; did you mean 'before_task'? | "
        f"the task protocol calls: {calls}. Rename it to the hook you mean, or, if it is a helper your own code "
        "calls, name it _before_tsak.",
        "TaskHooks.images_off looks like a hook, but no protocol calls it; did you mean 'images_of'? | "
        f"the task protocol calls: {calls}. Rename it to the hook you mean, or, if it is a helper your own code "
        "calls, name it _images_off.",
        "TaskHooks.online_observe is a hook of the task-free protocol, but 'm' declares only the task protocol, "
        "which never calls it. | declare the task-free protocol for 'm' in its registry entry (its class lists "
        "TaskFree before Method), or remove the override.",
        "TaskHooks.online_zzz looks like a hook, but no protocol calls it. | "
        f"the task protocol calls: {calls}. Rename it to the hook you mean, or, if it is a helper your own code "
        "calls, name it _online_zzz.",
    ]


def test_check_method_runs_the_static_rule_when_it_is_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    hooks_of(monkeypatch, TaskHooks, "task")
    with pytest.raises(testing.ConformanceError) as err:
        testing.check_method("m", rules=["known-hooks"])  # nothing trained
    assert len(err.value.violations) == 4 and {v.rule for v in err.value.violations} == {"known-hooks"}


class FreeHooks(TaskFree, Method):
    def learn_task(self, task: Any) -> None: ...  # a task-protocol hook

    def memory_drawn(self, n: int) -> Any: ...  # a typo of TaskFree's building block memory_draw


def test_check_hooks_names_the_protocols_declared_and_the_ones_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert hooks_of(monkeypatch, FreeHooks, "task-free") == [
        "FreeHooks.learn_task is a hook of the task protocol, but 'm' declares only the task-free protocol, which "
        "never calls it. | declare the task protocol for 'm' in its registry entry, or remove the override.",
        "FreeHooks.memory_drawn looks like a hook, but no protocol calls it; did you mean 'memory_draw'? | the "
        f"task-free protocol calls: {_calls((TaskFree, Method), TASK_FREE_HOOKS)}. Rename it to the hook you mean, "
        "or, if it is a helper your own code calls, name it _memory_drawn.",
    ]
    both = _calls((TaskFree, Method), TASK_HOOKS + TASK_FREE_HOOKS)
    assert "after_task" in both and "online_observe" in both and "memory_draw" not in both
    assert hooks_of(monkeypatch, FreeHooks, "task", "task-free") == [
        "FreeHooks.memory_drawn looks like a hook, but no protocol calls it; did you mean 'memory_draw'? | the "
        f"task and task-free protocols call: {both}. Rename it to the hook you mean, or, if it is a helper your "
        "own code calls, name it _memory_drawn.",
    ]


class Registered(ER):
    name = "kit_registered_parent"

    def after_epoch(self) -> None: ...  # the registered method's own concern, under its own protocols


class Extension(Registered):
    name = "kit_extension"

    def before_tsak(self, task: Any) -> None: ...


def test_a_registered_method_it_extends_answers_for_its_own_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(cl_methods.REGISTRY, Registered.name, cl_methods.REGISTRY["er"])
    real = cl_methods.method_class
    monkeypatch.setattr(cl_methods, "method_class", lambda n: Registered if n == Registered.name else real(n))
    flagged = [line.split(" ")[0] for line in hooks_of(monkeypatch, Extension, "task", "task-free")]
    assert flagged == ["Extension.before_tsak"]
    monkeypatch.delitem(cl_methods.REGISTRY, Registered.name)  # not registered: its names are the method's own
    flagged = [line.split(" ")[0] for line in hooks_of(monkeypatch, Extension, "task", "task-free")]
    assert flagged == ["Registered.after_epoch", "Extension.before_tsak"]


def test_registered_class_is_a_registry_entry_that_loads_to_this_very_class(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _registered_class(ER) and not _registered_class(Registered) and not _registered_class(Method)
    assert not _registered_class(type("Nameless", (), {"name": None}))
    assert not _registered_class(type("ER", (ER,), {}))  # the name of a registered one, another class
    monkeypatch.setattr(cl_methods, "method_class", lambda n: Registered)  # loads anything to Registered
    assert not _registered_class(Registered)  # but its name is in no registry entry
    assert _registered_class(type("ER2", (), {"name": "er"})) is False

    def broken(name: str) -> type:
        raise ImportError(name)

    monkeypatch.setattr(cl_methods, "method_class", broken)
    assert not _registered_class(ER)  # an entry that does not load


# ------------------------------------------------------------------------------ the guards' file table


def _dir(path: str) -> str:
    return os.path.dirname(os.path.abspath(path)) + os.sep


@pytest.fixture
def fresh_files() -> Any:
    """_files recomputed (it is cached for the process), and recomputed again after the test."""
    _files.cache_clear()
    yield _files
    _files.cache_clear()


def test_the_file_table_names_the_drivers_plumbing_and_libraries(fresh_files: Any) -> None:
    sklearn, scipy = (importlib.util.find_spec(n).origin for n in ("sklearn", "scipy"))  # not imported: slow
    files = fresh_files()
    assert files == {
        "drivers": {os.path.abspath(loop.__file__), os.path.abspath(online.__file__)},
        "inference": os.path.abspath(inference.__file__),
        "plumbing": {os.path.abspath(m.__file__ or "") for m in (data, datasets, images, pipeline, inference, testing)},
        "library": (_dir(torch.__file__), _dir(numpy.__file__), _dir(sklearn or ""), _dir(scipy or "")),
        "stdlib": os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep,
    }
    assert fresh_files() is files  # cached


def test_a_library_that_is_not_installed_or_has_no_file_is_left_out(
    fresh_files: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        if name == "sklearn":
            return None  # not installed
        if name == "scipy":
            return SimpleNamespace(origin=None)  # a namespace package: no file to place it
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert fresh_files()["library"] == (_dir(torch.__file__), _dir(numpy.__file__))
    assert sys.modules["rmconsole.testing"] is testing
