"""Bad input, each case: one line on stderr (`error: ...`), exit code 2, the store unchanged.

The cases are the table in docs/troubleshooting.md ("Bad input"): the page is the one source,
read here row by row, so the page cannot drift from what the CLI prints. Each row runs the real
CLI entry point (`rmconsole.cli.main`) in this process, which is fast; a few rows run again as a
real subprocess to check what a user's terminal gets.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import sys
from pathlib import Path

import pytest

from conftest import REPO, rmconsole
from rmconsole import cli, store
from rmconsole.config import load_config

pytestmark = pytest.mark.usefixtures("store_backend")  # each test on SQLite and on PostgreSQL

PAGE = REPO / "docs" / "troubleshooting.md"
DEMO = "/tmp/demo"  # the folder the page's examples run in; here it is the test's tmp_path


def _code(cell: str) -> str:
    """The text of a Markdown code span (`x` or `` x `` when x holds a backtick)."""
    cell = cell.strip()
    return cell[3:-3] if cell.startswith("`` ") else cell.strip("`")


def page_cases(page: Path = PAGE) -> list[tuple[str, list[str], dict[str, str], str]]:
    """(case, argv, environment, the line it prints) for every row of the page's bad-input table.
    Paths under DEMO become "{tmp}"; in the printed line, "…" stands for any text."""
    section = page.read_text(encoding="utf-8").split("\n## Bad input\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ")][1:]  # after the head
    cases = []
    for line in rows:
        case, command, prints = line.strip().strip("|").split(" | ")
        words = shlex.split(_code(command).replace(DEMO, "{tmp}"))
        env = {}
        while words[0] != "rmconsole":
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        cases.append((case.strip(), words[1:], env, _code(prints).replace(DEMO, "{tmp}")))
    return cases


def says(err: str, expected: str) -> bool:
    """Whether stderr holds the expected line, each "…" matching any text."""
    return re.search(".*".join(re.escape(part.strip()) for part in expected.split("…")), err) is not None


CASES = page_cases()


def test_the_page_lists_every_refusal_once() -> None:
    names = [c[0] for c in CASES]
    assert len(names) == len(set(names)) >= 30
    assert all(c[3].startswith("error: ") for c in CASES)
    assert says("error: no run with id 42 (see x)", "error: no run … (see x)")
    assert not says("error: no run with id 42", "error: no run with id 43")


def _files(tmp: Path, home: Path) -> None:
    (tmp / "bad.toml").write_text('dataset = "digits"\nmodel = \n')
    (tmp / "extra.toml").write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = 100\ncolour = "blue"\n')
    (tmp / "typed.toml").write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = "big"\n')
    (tmp / "a-file").write_text("a file, not a folder")
    (tmp / "broken-home").mkdir()
    (tmp / "broken-home" / "rmconsole.db").write_bytes(b"this is not SQLite" * 100)
    raw = tmp / "bad-data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    header = bytes([0, 0, 8, 3]) + (60000).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    (raw / "train-images-idx3-ubyte").write_bytes(header + bytes(1000))  # truncated: a broken download
    (raw / "t10k-images-idx3-ubyte").write_bytes(header)


def _store(tmp: Path) -> None:
    """Run 1 finished; run 2 failed with a corrupt checkpoint; run 3 failed with another config's."""
    from rmconsole.runner.checkpoints import checkpoint_path, save_checkpoint

    _, cfg = load_config(None)
    config = cfg.to_dict()
    for _ in range(3):
        store.create_run(config, "digits-blurry10-online")
    store.update_run(1, status="finished")
    store.update_run(2, status="failed", error="worker killed by signal SIGKILL")
    store.update_run(3, status="failed", error="worker killed by signal SIGKILL")
    checkpoint_path(2).parent.mkdir(parents=True, exist_ok=True)
    checkpoint_path(2).write_bytes(b"\x80\x02 half a checkpoint")
    save_checkpoint(3, {"task": 1, "method": {}}, {**config, "memory_size": 300})


def _snapshot(home: Path) -> tuple:
    """Everything a command could change: every row of every table and every file in the home."""
    from sqlmodel import select

    with store.reading() as session:
        rows = [repr(sorted(row.model_dump().items()))
                for table in (store.Run, store.TaskResult, store.TaskStream, store.MemorySnapshot)
                for row in session.exec(select(table)).all()]
    files = sorted((str(p.relative_to(home)), hashlib.sha1(p.read_bytes()).hexdigest())
                   for p in home.rglob("*") if p.is_file() and not p.name.startswith("rmconsole.db"))
    return tuple(rows), tuple(files)


def _fill(text: str, tmp: Path, home: Path) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{home}", str(home))


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["rmconsole", *argv])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    out = capsys.readouterr()
    return int(exited.value.code or 0), out.out, out.err


@pytest.mark.parametrize("case, argv, env, expected", CASES, ids=[c[0] for c in CASES])
def test_bad_input(case, argv, env, expected, isolated_home, tmp_path, monkeypatch, capsys) -> None:
    _files(tmp_path, isolated_home)
    _store(tmp_path)
    monkeypatch.setenv("RMCONSOLE_DATA", str(tmp_path / "data"))
    before = _snapshot(isolated_home)
    store_url = store.database_url()
    if ("RMCONSOLE_HOME" in env or "RMCONSOLE_DB" in env) and "RMCONSOLE_DB" not in env:
        monkeypatch.delenv("RMCONSOLE_DB", raising=False)  # the row is about the SQLite file in that home
    for key, value in env.items():
        monkeypatch.setenv(key, _fill(value, tmp_path, isolated_home))
    code, out, err = _main([_fill(a, tmp_path, isolated_home) for a in argv], monkeypatch, capsys)
    assert code == 2, (out, err)
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert says(err, _fill(expected, tmp_path, isolated_home)), (err, expected)
    assert "Traceback" not in err + out
    for key in env:
        monkeypatch.delenv(key)
    monkeypatch.setenv("RMCONSOLE_HOME", str(isolated_home))
    if not store_url.startswith("sqlite"):
        monkeypatch.setenv("RMCONSOLE_DB", store_url)
    assert _snapshot(isolated_home) == before  # nothing stored, nothing changed
    assert not (tmp_path / "elsewhere.db").exists()


@pytest.mark.parametrize("argv, env, expected", [
    (["runs"], {"RMCONSOLE_DB": "postgresql://rm:secret@127.0.0.1:1/rm"}, "postgresql://rm:***@127.0.0.1:1/rm"),
    (["runs"], {"RMCONSOLE_DB": "mysql://rm:secret@127.0.0.1:1/rm"}, "mysql://rm:***@127.0.0.1:1/rm"),
    (["run", "--set", "memory_size=5"], {}, "memory_size=5: smaller than the 10 classes"),
    (["resume", "1"], {}, "run 1 is finished: only failed or stopped runs can be resumed"),
])
def test_bad_input_in_a_real_terminal_process(argv, env, expected, isolated_home, tmp_path) -> None:
    _store(tmp_path)
    before = _snapshot(isolated_home)
    done = rmconsole(*argv, env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1 and expected in done.stderr
    assert "secret" not in done.stderr
    assert _snapshot(isolated_home) == before
