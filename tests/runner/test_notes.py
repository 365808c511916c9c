"""A run's note has a limit, as its name has (launch.MAX_NOTE beside launch.MAX_NAME): a 2 MB
note was stored whole, then shown by `show`, the TUI and reports and searched by every run filter."""

from __future__ import annotations

import pytest
from support.cli import in_process

from rmconsole import store
from rmconsole.config import ConfigError, load_config
from rmconsole.runner import launch


def test_a_note_is_one_printable_line_of_at_most_max_note_characters() -> None:
    assert launch.MAX_NOTE == 2000
    assert launch.check_note("  lr too high?  ") == "lr too high?"
    assert launch.check_note("") is None and launch.check_note("   ") is None  # clears it
    assert launch.check_note("x" * launch.MAX_NOTE) == "x" * launch.MAX_NOTE
    for bad in ("x" * (launch.MAX_NOTE + 1), "x" * 2_000_000, "two\nlines", "a\tb", "evil \x1b[2J"):
        with pytest.raises(ConfigError) as refused:
            launch.check_note(bad)
        message = str(refused.value)
        assert "\n" not in message and len(message) < 300, message
        assert message.endswith(f"give one line of printable text (at most {launch.MAX_NOTE} characters)")


@pytest.mark.usefixtures("store_backend")
def test_a_two_megabyte_note_is_refused_and_the_old_note_kept(isolated_home) -> None:
    _, cfg = load_config(None)
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    assert in_process("note", str(run_id), "first note").returncode == 0
    out = in_process("note", str(run_id), "x" * 2_000_000)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert "(2000000 characters)': give one line of printable text (at most 2000 characters)" in out.stderr
    assert store.run_record(run_id).note == "first note"
