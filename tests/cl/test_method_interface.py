"""The Method interface: the hooks its docstring table names are the ones that exist, and each
is a real override point (a method that overrides it changes what the engine does)."""

from __future__ import annotations

import re

import torch

from rmconsole.cl.methods import METHODS, Method, base, method_class


def _table_names(heading: str) -> list[str]:
    doc = base.__doc__ or ""
    section = doc.split(heading, 1)[1].split("\n\n", 2)[1]
    return [m.group(1) for m in re.finditer(r"^    (\w+)", section, re.M)]


def test_the_hooks_table_names_what_method_has() -> None:
    hooks = _table_names("Hooks a method may override")
    assert {"before_task", "learn_task", "step_loss", "after_step", "update_memory", "predict", "state_dict"} <= set(
        hooks
    )
    assert all(hasattr(Method, name) for name in hooks), [n for n in hooks if not hasattr(Method, n)]
    class_variables = _table_names("Class variables")
    assert class_variables == ["name", "params_type", "default_memory_policy", "single_task"]
    assert all(hasattr(cls, name) for cls in METHODS.values() for name in class_variables)


def test_each_method_reads_the_params_its_spec_declares_as_typed_fields() -> None:
    """`class X(Method[XParams])` is the one place a class names its parameters: params_type is
    what its spec declares (method_class checks it), inherited by a subclass that names none."""
    from rmconsole.cl.methods import REGISTRY
    from rmconsole.cl.settings import MethodParams

    for name, spec in REGISTRY.items():
        assert METHODS[name].params_type is spec.params, name
    assert METHODS["finetune"].params_type is MethodParams and METHODS["bic_star"].params_type.__name__ == "BiCParams"


def test_the_engine_calls_the_step_hooks_of_a_method(monkeypatch) -> None:
    """train.fit runs step_loss and after_step once per batch: a method's override is what trains."""
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.loop import build_protocol, make_augmenter
    from rmconsole.cl.methods import Setup, Task
    from rmconsole.config import load_config

    calls = {"loss": 0, "after": 0}

    class Counting(method_class("finetune")):  # type: ignore[misc, valid-type]
        def step_loss(self, x, y):
            calls["loss"] += 1
            return super().step_loss(x, y)

        def after_step(self):
            calls["after"] += 1

    _, cfg = load_config(None, {"method": "finetune", "epochs": 1, "augment": "none"})
    data, cpu = load_digits(), torch.device("cpu")
    proto = build_protocol(cfg, data)
    learner = Counting(
        Setup(cfg, data, proto.train_labels, proto.test_labels, proto.groups, cpu, make_augmenter(cfg, data, cpu))
    )
    task = Task(0, proto.tasks[0], 5)
    learner.before_task(task)
    batches = learner.shuffled_batches(task.stream, 16)
    learner.fit(2, lambda e: batches, "offline", task)
    assert calls == {"loss": 2 * len(batches), "after": 2 * len(batches)}
