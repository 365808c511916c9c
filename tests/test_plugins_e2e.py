"""Plug-ins really installed (pip install -e into a throwaway venv, tests/plugin_venv.py): the warm
server's key follows an editable plug-in's edits, and a plug-in that fails to import is one line
naming it while every other command keeps working."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from plugin_venv import Venv, write_package

FINGERPRINT = "from rmconsole.runner import warm; print(warm.fingerprint())"


def test_an_edited_editable_plugin_gets_a_new_warm_server(tmp_path: Path) -> None:
    venv = Venv(tmp_path / "venv")

    def fingerprint() -> str:
        done = venv.python_run(FINGERPRINT)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    bare = fingerprint()
    package = write_package(tmp_path / "plug", "warmplug", {
        "warmplug/__init__.py": "",
        "warmplug/declare.py": "METHOD = 'declared'\n",
        "warmplug/impl.py": "def hook():\n    return 1\n",
    }, {"rmconsole.methods": {"warmplug": "warmplug.declare:METHOD"}})
    venv.install_editable(package)
    installed = fingerprint()
    assert installed != bare  # installed after a server started: a new server
    assert fingerprint() == installed  # nothing changed: the same server is reused
    (package / "warmplug" / "impl.py").write_text("def hook():\n    return 2\n")  # edited in its checkout
    edited = fingerprint()
    assert edited != installed
    socket = venv.python_run("from pathlib import Path; from rmconsole.runner import warm; "
                             "print(warm.socket_path(Path('/h')))").stdout.strip()
    assert socket == f"/h/warm/{edited}.sock"  # the key names the server a launch asks for


def test_presets_shipped_by_a_plugin_package_are_listed_and_found(tmp_path: Path) -> None:
    from rmconsole.config import DEFAULT_PRESET, preset_dir

    venv = Venv(tmp_path / "venv")
    default = (preset_dir() / f"{DEFAULT_PRESET}.toml").read_text()
    assert "\nn_tasks = 5\n" in default and "\nmemory_size = 200\n" in default
    ours = default.replace("n_tasks = 5", "n_tasks = 2").replace("description =", "old_description =")
    ours = ours.replace("old_description =", "description = \"two tasks of digits, from a plug-in\"\n#", 1)
    package = write_package(tmp_path / "presetplug", "presetplug", {
        "presetplug/__init__.py": "raise ImportError('listing presets must not import the package')\n",
        "presetplug/presets/__init__.py": "",
        "presetplug/presets/two-tasks.toml": ours,
        "presetplug/presets/" + f"{DEFAULT_PRESET}.toml": default.replace("memory_size = 200", "memory_size = 7"),
    }, {"rmconsole.presets": {"presetplug": "presetplug.presets"}})
    venv.install_editable(package)
    listed = venv.rmconsole("presets", "--json")
    assert listed.returncode == 0, listed.stderr
    items = {item["name"]: item for item in json.loads(listed.stdout)}
    assert "two-tasks" in items, listed.stderr
    assert items["two-tasks"]["package"] == "presetplug" and items["two-tasks"]["config"]["n_tasks"] == 2
    assert "package" not in items[DEFAULT_PRESET]  # the built-in keeps its name
    assert listed.stderr.strip() == (f"preset {DEFAULT_PRESET!r} of package presetplug has a built-in preset's name: "
                                     f"not used; rename its file")
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
    unknown = venv.rmconsole("run", "--preset", "nope")
    assert unknown.returncode == 2 and "two-tasks" in unknown.stderr and len(unknown.stderr.strip().splitlines()) == 1
