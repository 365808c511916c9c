"""Commands that may take seconds (presets, config-keys, export, a sweep's validation) show a
spinner on stderr when it is a terminal (cli/common.working), never on stdout, never in a pipe."""

from __future__ import annotations

import json
import time

import pytest
from support.cli import in_process

from rmconsole.cli import common


def test_a_terminal_sees_the_spinner_on_stderr_and_json_stays_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    from rmconsole.cli import setup_commands

    monkeypatch.setattr(common.err_console, "_force_terminal", True)  # stderr a terminal, as Rich found it at import
    monkeypatch.setattr(common.err_console, "is_interactive", True)
    names = setup_commands.preset_names

    def slow() -> list[str]:  # (a spinner draws after its first tick: a fast command shows nothing)
        time.sleep(0.4)
        return names()

    monkeypatch.setattr(setup_commands, "preset_names", slow)
    listed = in_process("presets", "--json")
    assert listed.returncode == 0 and "reading the presets" in listed.stderr
    assert "digits-iblurry50-10" in [p["name"] for p in json.loads(listed.stdout)]  # stdout: JSON alone
    assert "reading" not in listed.stdout


def test_a_pipe_sees_nothing() -> None:
    assert not common.err_console.is_terminal  # (the test's stderr is captured)
    with common.working("busy") as status:
        assert status is None
    listed = in_process("presets", "--json")
    assert listed.returncode == 0 and listed.stderr == ""
