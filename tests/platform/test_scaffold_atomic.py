"""`rmconsole new` writes atomically (issue 38): on a full disk it left `X/README.md` and the retry
was refused ("exists"). Now the package is written into a hidden folder and renamed into place."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from support.campaign import claim

from rmconsole import scaffold
from rmconsole.config import ConfigError


@pytest.mark.parametrize("kind", ["method", "metric"])
def test_new_on_a_full_disk_leaves_nothing_and_the_retry_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    real = Path.write_text
    written: list[Path] = []

    def full_disk(self: Path, *args: object, **kwargs: object) -> int:
        if written:  # the second file: the disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        written.append(self)
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    where = tmp_path / "src"
    where.mkdir()
    with monkeypatch.context() as patched:
        patched.setattr(Path, "write_text", full_disk)
        with pytest.raises(ConfigError) as err:
            scaffold.new_package(kind, "mything", where)
    text = str(err.value)
    claim(
        "new on a full disk", "test_scaffold_atomic.py::test_new_on_a_full_disk_leaves_nothing_and_the_retry_works"
    ).check(None, text)
    assert "No space left on device" in text and "nothing was written" in text and "\n" not in text
    assert written and list(where.iterdir()) == []  # no package folder, no staging folder
    folder = scaffold.new_package(kind, "mything", where)  # the retry
    assert folder == where / "mything" and (folder / "README.md").is_file()
    assert [p.name for p in where.iterdir()] == ["mything"]
    with pytest.raises(ConfigError, match="exists; nothing was written"):
        scaffold.new_package(kind, "mything", where)
