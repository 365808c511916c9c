"""Typed per-method parameters: a run's config holds the keys every run has plus its method's
own; a sweep applies a method's key to the runs that read it; a run stored by an earlier
version (every method's keys) still shows, reports, diffs and resumes; a plug-in's method spec,
found through an entry point, validates its own parameters and trains like a built-in."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
import torch
from conftest import rmconsole, train_in_process
from support.cli import in_process

from rmconsole import plugins, store
from rmconsole.cl.events import TaskOutcome
from rmconsole.cl.methods import REGISTRY
from rmconsole.config import COMMON_KEYS, ConfigError, build_config, config_defaults, load_config, overrides_of
from rmconsole.runner.sweep import plan_sweep

# ---------------------------------------------------------------------------- sweeps


def test_a_sweep_applies_a_method_key_to_the_runs_whose_method_reads_it() -> None:
    plan = plan_sweep(None, ["method=rm,bic", "bic_temperature=3"])
    configs = {c.method: c.to_dict() for c in plan.configs}
    assert configs["bic"]["bic_temperature"] == 3 and "bic_temperature" not in configs["rm"]
    assert set(configs["rm"]) == set(COMMON_KEYS) | {"rm_variant"}
    # RM under bic_temperature=2,3 is one run, not two identical ones (nor a "same run" refusal)
    plan = plan_sweep(None, ["method=rm,bic", "bic_temperature=2,3"])
    assert sorted((c.method, c.to_dict().get("bic_temperature")) for c in plan.configs) == [
        ("bic", 2.0),
        ("bic", 3.0),
        ("rm", None),
    ]


def test_a_sweep_key_that_no_run_of_the_sweep_reads_is_refused_naming_its_readers() -> None:
    with pytest.raises(ConfigError) as err:
        plan_sweep(None, ["method=rm,er", "bic_temperature=3"])
    assert (
        str(err.value)
        == "bic_temperature=3: read by bic, bic_star, not by method=rm, er (no run of this sweep reads it)"
    )
    with pytest.raises(ConfigError, match="unknown config key 'bic_temprature' \\(did you mean bic_temperature\\?\\)"):
        plan_sweep(None, ["method=rm,bic", "bic_temprature=3"])


def test_the_cli_refuses_another_method_s_key_in_one_line() -> None:
    out = in_process("run", "--set", "bic_temperature=3")
    assert (
        out.returncode == 2
        and out.stderr.strip() == "error: bic_temperature=3: read by bic, bic_star, not by method=rm"
    )
    sweep = in_process("run", "--set", "method=rm,er", "--set", "bic_temperature=3", "--detach")
    assert sweep.returncode == 2 and "no run of this sweep reads it" in sweep.stderr and sweep.stderr.count("\n") == 1


# ---------------------------------------------------------------------------- runs stored by earlier versions


def _old_style(config: dict) -> dict:
    """What an earlier version stored: the run's keys plus every other method's at their default."""
    return {**config_defaults(), **config}


def test_an_old_style_stored_config_rebuilds_shows_reports_and_diffs() -> None:
    from rmconsole import report

    _, cfg = load_config(None, {"epochs": 1})
    new = cfg.to_dict()
    old = _old_style(new)
    assert len(old) > len(new) + 15 and old["bic_temperature"] == 2.0
    assert build_config(old).to_dict() == new  # the rebuild (worker, resume) holds its method's keys only
    assert overrides_of("digits-blurry10-online", old) == {"epochs": 1}
    ids = []
    for config in (old, {**new, "epochs": 2}):
        run_id = store.create_run(config, "digits-blurry10-online")
        store.record_task(run_id, TaskOutcome(0, 80.0, [80.0], [80.0] * 10, list(range(10)), 1.0))
        store.update_run(run_id, status="finished")
        ids.append(run_id)
    diff = report.run_diff(*(store.run_detail(i) for i in ids))
    assert [row[0] for row in diff["config"]] == ["epochs"]  # no bic_* / ewc keys shown as differences
    assert report.key_value({"config": old}, "bic_temperature") is None  # rm never read it
    from rmconsole.store.records import config_value

    assert config_value(old, "bic_temperature") is None and config_value(old, "rm_variant") == "paper"
    assert config_value({"method": "bic"}, "bic_temperature") == 2.0  # stored before the key: its default
    shown = in_process("show", str(ids[0]))
    assert shown.returncode == 0 and "epochs=1" in shown.stdout, shown.stderr
    table = in_process("report", "--format", "csv")
    assert table.returncode == 0 and "epochs" in table.stdout and "bic_" not in table.stdout, table.stderr
    assert in_process("diff", str(ids[0]), str(ids[1])).returncode == 0


def test_an_old_style_stored_run_resumes(isolated_home) -> None:
    _, cfg = load_config(None, {"epochs": 1, "threads": 1, "device": "cpu"})
    run_id = store.create_run(_old_style(cfg.to_dict()), "digits-blurry10-online")
    train_in_process(run_id, fail_after_task=1)  # a crash once task 2 is recorded
    out = rmconsole("resume", str(run_id))
    assert out.returncode == 0 and "resuming at task 3/5" in out.stdout, out.stdout + out.stderr
    assert store.get_run(run_id).status == "finished" and len(store.task_results(run_id)) == 5


# ---------------------------------------------------------------------------- a plug-in method

PACKAGE = {
    "declare.py": """
        from rmconsole.cl.methods.spec import MethodSpec
        from .params import FakeParams

        METHOD = MethodSpec("fake", "fakemethod.method:Fake", FakeParams, ("task",), "a test plug-in")
        WRONG_NAME = MethodSpec("other", "fakemethod.method:Fake", FakeParams)
        NOT_A_SPEC = object()
        """,
    "params.py": """
        from dataclasses import dataclass
        from rmconsole.cl.settings import MethodParams, param

        @dataclass(frozen=True)
        class FakeParams(MethodParams):
            fake_batch_size: int = param(8, "Fake: its training batch size", ge=2)
        """,
    "method.py": """
        from rmconsole.cl.methods.base import Method
        from .params import FakeParams

        class Fake(Method[FakeParams]):
            name = "fake"

            @property
            def train_batch_size(self) -> int:
                return self.params.fake_batch_size
        """,
    "broken.py": "raise ImportError('a missing dependency')\n",
}


@pytest.fixture
def fake_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, plugins.Plugin]:
    """A plug-in package on sys.path, announced by fake entry points (`plugins.available`)."""
    folder = tmp_path / "fakemethod"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    for name, text in PACKAGE.items():
        (folder / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    installed = {
        name: plugins.Plugin("method", name, target, "fakemethod", "0.1")
        for name, target in [
            ("fake", "fakemethod.declare:METHOD"),
            ("misnamed", "fakemethod.declare:WRONG_NAME"),
            ("notspec", "fakemethod.declare:NOT_A_SPEC"),
            ("broken", "fakemethod.broken:METHOD"),
            ("rm", "fakemethod.declare:METHOD"),
        ]
    }
    monkeypatch.setattr(plugins, "available", lambda kind: dict(installed) if kind == "method" else {})
    plugins.forget()
    yield installed
    plugins.forget()
    for module in [m for m in sys.modules if m.startswith("fakemethod")]:
        del sys.modules[module]


def test_a_plugin_method_validates_its_own_params_in_one_line_and_trains_on_digits(fake_plugin) -> None:
    from rmconsole.cl.data import load_digits
    from rmconsole.cl.loop import run_protocol
    from rmconsole.config import key_table
    from rmconsole.methods import method_class, method_names

    assert "fake" in method_names() and method_names().count("rm") == 1  # a plug-in cannot take rm
    with pytest.raises(ConfigError) as err:
        load_config(None, {"method": "fake", "fake_batch_size": 1})
    assert str(err.value) == "fake_batch_size=1: Input should be greater than or equal to 2"
    with pytest.raises(ConfigError, match=r"^fake_batch_size=4: read by fake, not by method=rm$"):
        load_config(None, {"fake_batch_size": 4})
    rows = {row.key: row for row in key_table()}
    assert rows["fake_batch_size"].methods == "fake" and "fake" in rows["method"].allowed
    _, cfg = load_config(None, {"method": "fake", "fake_batch_size": 32, "epochs": 1, "augment": "none"})
    assert cfg.to_dict()["fake_batch_size"] == 32 and method_class("fake").__name__ == "Fake"
    with torch.random.fork_rng():
        outcomes = run_protocol(cfg, load_digits(), torch.device("cpu"))
    assert len(outcomes) == 5 and all(0 <= o.accuracy <= 100 for o in outcomes)
    # what the worker records with the run (versions["plugins"], tests/platform/test_plugins.py): the package
    recorded = plugins.used_by(cfg.to_dict())
    assert [(p["kind"], p["name"], p["package"], p["version"]) for p in recorded] == [
        ("method", "fake", "fakemethod", "0.1")
    ]
    assert plugins.used_by({**cfg.to_dict(), "method": "rm"}) == []


def test_the_warm_server_key_changes_with_the_plugins_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    """An edited editable plug-in is new code: a warm server started before it is not reused."""
    from rmconsole.runner import warm

    monkeypatch.setattr(plugins, "sources_digest", lambda: "before")
    before = warm.fingerprint()
    monkeypatch.setattr(plugins, "sources_digest", lambda: "after")
    assert warm.fingerprint() != before


def test_a_plugin_that_cannot_be_used_is_one_line_naming_it(fake_plugin) -> None:
    from rmconsole.methods import method_specs

    for name, fragment in [
        (
            "broken",
            "method plug-in 'broken' (package fakemethod 0.1) failed to load "
            "'fakemethod.broken:METHOD': ImportError: a missing dependency",
        ),
        ("misnamed", "its MethodSpec is named 'other'"),
        ("notspec", "is a object, not a MethodSpec"),
    ]:
        with pytest.raises(ConfigError) as err:
            load_config(None, {"method": name})
        assert fragment in str(err.value) and "\n" not in str(err.value), name
    _, cfg = load_config(None, {"method": "bic"})  # every other method still works
    specs, problems = method_specs()
    assert [s.name for s in specs][-1] == "fake" and len(problems) == 4
    assert any("has a built-in's name" in p for p in problems)
    listing = rmconsole("config-keys")  # (a real process: no plug-in installed there)
    assert listing.returncode == 0


def test_a_method_whose_class_does_not_read_its_declared_params_is_refused() -> None:
    from rmconsole.cl.methods import MethodSpec, method_class
    from rmconsole.cl.methods.bic_params import BiCParams

    wrong = MethodSpec("wrong", "rmconsole.cl.methods.finetune:Finetune", BiCParams)
    with pytest.raises(TypeError, match="reads MethodParams but its spec declares BiCParams"):
        method_class(wrong)
    assert method_class(REGISTRY["bic_star"]).params_type is BiCParams  # inherited from BiC's Method[BiCParams]


def test_a_method_spec_refuses_each_malformed_field_where_it_is_written() -> None:
    """A MethodSpec takes one protocol or several (any sequence, kept as a tuple) and refuses, in
    one ValueError naming it, a name that is no identifier, an implementation that is not
    'package.module:Class', params that are not a MethodParams dataclass, protocols empty or
    unknown, and a summary of more than one line."""
    from rmconsole.cl.methods import MethodSpec

    plain = MethodSpec("good", "pkg.mod:Cls")
    assert plain.protocols == ("task",) and plain.runs_under("task") and not plain.runs_under("task-free")
    assert MethodSpec("good", "pkg.mod:Cls", protocols="task-free").protocols == ("task-free",)
    both = MethodSpec("good", "pkg.mod:Cls", protocols=["task", "task-free"], summary="one line")
    assert type(both.protocols) is tuple and both.protocols == ("task", "task-free") and both.runs_under("task-free")

    bad = [
        ({"name": "two words"}, "must be an identifier"),
        ({"name": 3}, "must be an identifier"),
        ({"implementation": "pkg.mod"}, "must be 'package.module:Class'"),
        ({"implementation": " :Cls"}, "must be 'package.module:Class'"),
        ({"implementation": "pkg.mod: "}, "must be 'package.module:Class'"),
        ({"implementation": ".mod:Cls"}, "must be 'package.module:Class'"),
        ({"params": int}, "params must be a MethodParams dataclass"),
        ({"params": 3}, "params must be a MethodParams dataclass"),
        ({"protocols": ()}, "allowed: a tuple of"),
        ({"protocols": ("task", "tasks")}, "allowed: a tuple of"),
        ({"summary": "two\nlines"}, "the summary is one line"),
    ]
    for over, message in bad:
        fields = {"name": "good", "implementation": "pkg.mod:Cls", **over}
        with pytest.raises(ValueError, match=message):
            MethodSpec(**fields)


def test_a_spec_whose_implementation_is_no_method_class_is_refused() -> None:
    from rmconsole.cl.methods import MethodSpec, method_class

    for target in ("rmconsole.cl.settings:MethodParams", "rmconsole.cl.methods:method_class"):
        with pytest.raises(TypeError, match="is not a Method subclass"):
            method_class(MethodSpec("wrong", target))


def test_methods_maps_every_registered_name_to_its_class() -> None:
    from rmconsole.cl.methods import METHODS, method_class

    assert set(METHODS) == set(REGISTRY) and METHODS["ewc"] is method_class("ewc")
