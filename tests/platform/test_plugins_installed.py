"""Plug-ins really installed (pip install -e into a throwaway venv, tests/support/plugin_venv.py): the warm
server's key follows an editable plug-in's edits, and a plug-in that fails to import is one line
naming it while every other command keeps working."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from support.plugin_venv import Venv, write_package

# Using a broken method or dataset goes through rmconsole's registries of both (built-ins and plug-ins)
needs_registries = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("rmconsole.methods", "rmconsole.datasets")),
    reason="the method and dataset registries (rmconsole.methods, rmconsole.datasets) are not here",
)

FINGERPRINT = "from rmconsole.runner import warm; print(warm.fingerprint())"


def test_an_edited_editable_plugin_gets_a_new_warm_server(tmp_path: Path) -> None:
    venv = Venv(tmp_path / "venv")

    def fingerprint() -> str:
        done = venv.python_run(FINGERPRINT)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    bare = fingerprint()
    package = write_package(
        tmp_path / "plug",
        "warmplug",
        {
            "warmplug/__init__.py": "",
            "warmplug/declare.py": "METHOD = 'declared'\n",
            "warmplug/impl.py": "def hook():\n    return 1\n",
        },
        {"rmconsole.methods": {"warmplug": "warmplug.declare:METHOD"}},
    )
    venv.install_editable(package)
    installed = fingerprint()
    assert installed != bare  # installed after a server started: a new server
    assert fingerprint() == installed  # nothing changed: the same server is reused
    (package / "warmplug" / "impl.py").write_text("def hook():\n    return 2\n")  # edited in its checkout
    edited = fingerprint()
    assert edited != installed
    socket = venv.python_run(
        "import os; os.environ['RMCONSOLE_WARM_DIR'] = '/w'; from rmconsole.runner import warm; "
        "print(warm.socket_path())"
    ).stdout.strip()
    assert socket == f"/w/{edited}.sock"  # the key names the server a launch asks for


def test_presets_shipped_by_a_plugin_package_are_listed_and_found(tmp_path: Path) -> None:
    from rmconsole.config import DEFAULT_PRESET, preset_dir

    venv = Venv(tmp_path / "venv")
    default = (preset_dir() / f"{DEFAULT_PRESET}.toml").read_text()
    assert "\nn_tasks = 5\n" in default and "\nmemory_size = 200\n" in default
    ours = default.replace("n_tasks = 5", "n_tasks = 2").replace("description =", "old_description =")
    ours = ours.replace("old_description =", 'description = "two tasks of digits, from a plug-in"\n#', 1)
    package = write_package(
        tmp_path / "presetplug",
        "presetplug",
        {
            "presetplug/__init__.py": "raise ImportError('listing presets must not import the package')\n",
            "presetplug/presets/__init__.py": "",
            "presetplug/presets/two-tasks.toml": ours,
            "presetplug/presets/" + f"{DEFAULT_PRESET}.toml": default.replace("memory_size = 200", "memory_size = 7"),
        },
        {"rmconsole.presets": {"presetplug": "presetplug.presets"}},
    )
    venv.install_editable(package)
    listed = venv.rmconsole("presets", "--json")
    assert listed.returncode == 0, listed.stderr
    items = {item["name"]: item for item in json.loads(listed.stdout)}
    assert "two-tasks" in items, listed.stderr
    assert items["two-tasks"]["package"] == "presetplug" and items["two-tasks"]["config"]["n_tasks"] == 2
    assert "package" not in items[DEFAULT_PRESET]  # the built-in keeps its name
    assert listed.stderr.strip() == (
        f"preset {DEFAULT_PRESET!r} of package presetplug has a built-in preset's name: not used; rename its file"
    )
    shown = venv.rmconsole("presets", "--long")
    assert shown.returncode == 0 and "from package presetplug" in shown.stdout
    assert "two tasks of digits, from a plug-in" in " ".join(shown.stdout.split())
    found = venv.python_run(f"""
        from rmconsole.config import load_config
        name, cfg = load_config("two-tasks")
        print(name, cfg.n_tasks, load_config({DEFAULT_PRESET!r})[1].memory_size)
    """)
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == ["two-tasks", "2", "200"]  # the built-in's name means the built-in
    unknown = venv.rmconsole("run", "--preset", "two-task")  # a slip: the plug-in's preset is suggested
    assert (
        unknown.returncode == 2
        and "did you mean two-tasks?" in unknown.stderr
        and len(unknown.stderr.strip().splitlines()) == 1
    )


def _one_line_naming(text: str, *names: str) -> bool:
    lines = text.strip().splitlines()
    return len(lines) == 1 and "Traceback" not in text and all(n in lines[0] for n in names)


@needs_registries
@pytest.mark.slow  # every command run against a broken plug-in, about 20 s: CI's slow leg
def test_a_plugin_that_fails_to_import_is_one_line_and_every_other_command_works(tmp_path: Path) -> None:
    """A package whose every declaration fails to import (its module raises ImportError), under
    each group: listing, validating and running anything else never imports it; using it is one
    line naming the plug-in and its package, exit 2, nothing stored."""
    venv = Venv(tmp_path / "venv")
    package = write_package(
        tmp_path / "brokenplug",
        "brokenplug",
        {
            "brokenplug/__init__.py": "",
            "brokenplug/declare.py": "raise ImportError('brokenplug needs a library that is not installed')\n",
        },
        {
            "rmconsole.methods": {"broken": "brokenplug.declare:METHOD"},
            "rmconsole.datasets": {"brokends": "brokenplug.declare:DATASET"},
            "rmconsole.metrics": {"broken_metric": "brokenplug.declare:METRIC"},
            "rmconsole.presets": {"brokenplug": "brokenplug.nopresets"},
        },
    )
    venv.install_editable(package)

    for command in (["presets"], ["runs"], ["config-keys"]):
        done = venv.rmconsole(*command)
        assert done.returncode == 0, (command, done.stderr)
        assert "Traceback" not in done.stderr
        for line in done.stderr.strip().splitlines():  # a note about the broken package is welcome, each one line
            if line.startswith("no runs in the store yet"):  # `runs` on an empty store says so (issue 28)
                continue
            assert "brokenplug" in line or "broken" in line, (command, line)
    warned = venv.rmconsole("config-keys").stderr.strip().splitlines()  # one line per unusable method plug-in
    assert len(warned) == 1 and warned[0].startswith("warning: method plug-in 'broken' (package brokenplug"), warned
    assert "ImportError" in warned[0], warned

    ran = venv.rmconsole("run", "--set", "epochs=1", "--set", "n_tasks=2", timeout=600)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr
    assert "A_last" in ran.stdout

    refused = venv.rmconsole("run", "--set", "method=broken")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert _one_line_naming(refused.stderr, "'broken'", "brokenplug", "ImportError"), refused.stderr
    refused = venv.rmconsole("run", "--set", "dataset=brokends")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert _one_line_naming(refused.stderr, "'brokends'", "brokenplug", "ImportError"), refused.stderr
    stored = json.loads(venv.rmconsole("runs", "--json").stdout)
    assert len(stored) == 1 and stored[0]["method"] == "rm"  # the built-in run only: nothing stored for the others
