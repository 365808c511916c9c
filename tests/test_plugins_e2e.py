"""Plug-ins really installed (pip install -e into a throwaway venv, tests/plugin_venv.py): the warm
server's key follows an editable plug-in's edits, and a plug-in that fails to import is one line
naming it while every other command keeps working."""

from __future__ import annotations

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
