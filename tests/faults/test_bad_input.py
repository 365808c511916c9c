"""Bad input, each case: one line on stderr (`error: ...`), the exit code the page says, the store unchanged.

The cases are the table in docs/troubleshooting.md ("Bad input"): the page is the one source,
read here row by row, so the page cannot drift from what the CLI prints. Each row runs the real
CLI entry point (`rmconsole.cli.main`) in this process, which is fast, in a copy of one demo
folder built once; a few rows run again as a real subprocess to check what a user's terminal gets.
A row's verdict is "clean" when all of that holds (or "explained: ..." when a row documents a
deliberate exception); the test recomputes it.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import rmconsole
from support.campaign import code, garble_run_table, says, table, verdict_ok

from rmconsole import cli, store
from rmconsole.config import load_config

pytestmark = pytest.mark.usefixtures("store_backend")  # each test on SQLite and on PostgreSQL

DEMO = "/tmp/demo"  # the folder the page's examples run in; here it is the test's tmp_path


def _expand(text: str) -> str:
    """`{x*N}` in a command stands for N letters x (a hostile, very long value)."""
    while "{x*" in text:
        start = text.index("{x*")
        end = text.index("}", start)
        text = text[:start] + "x" * int(text[start + 3 : end]) + text[end + 1 :]
    return text


def page_cases() -> list[tuple[str, list[str], dict[str, str], int, str, str]]:
    """(case, argv, environment, exit code, the line it prints, verdict) for every row of the page's
    bad-input table. Paths under DEMO become "{tmp}"; in the printed line, "…" stands for any text."""
    cases = []
    for row in table("Bad input"):
        words = shlex.split(_expand(code(row["command"]).replace(DEMO, "{tmp}")))
        env = {}
        while words[0] != "rmconsole":
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        cases.append(
            (row["case"], words[1:], env, int(row["exit"]), code(row["prints"]).replace(DEMO, "{tmp}"), row["verdict"])
        )
    return cases


CASES = page_cases()


def test_the_page_lists_every_refusal_once() -> None:
    names = [c[0] for c in CASES]
    assert len(names) == len(set(names)) >= 100
    assert all(c[4].startswith("error: ") for c in CASES)
    assert all(verdict_ok(c[5]) for c in CASES)
    assert says("error: no run with id 42 (see x)", "error: no run … (see x)")
    assert not says("error: no run with id 42", "error: no run with id 43")


# ---------------------------------------------------------------------- the demo folder, built once


def _mnist_files(raw: Path, n: int, label: int | None = None, truncate: bool = False) -> None:
    """Tiny MNIST idx files (n images each) with consistent headers; `label`: the first label."""
    raw.mkdir(parents=True)
    for split in ("train", "t10k"):
        images = bytes([0, 0, 8, 3]) + n.to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
        if truncate:
            images = bytes([0, 0, 8, 3]) + (60000).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2 + bytes(1000)
        else:
            images += bytes(28 * 28 * n)
        (raw / f"{split}-images-idx3-ubyte").write_bytes(images)
        labels = [label if label is not None and i == 0 else i % 10 for i in range(n)]
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(bytes([0, 0, 8, 1]) + n.to_bytes(4, "big") + bytes(labels))


def _damaged_store(home: Path) -> None:
    """A real store with five runs (more than one page of the run table, so the garbage page is not its
    only one) whose run table's page is garbage (its header and schema are fine)."""
    from rmconsole.store import db

    path = home / "rmconsole.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RMCONSOLE_HOME", str(home))
        _, cfg = load_config(None)
        for _ in range(5):
            store.create_run(cfg.to_dict(), "digits-blurry10-online")
        store.get_engine().dispose()
        db._ENGINES.pop(db.database_url())
    garble_run_table(path)


def _files(tmp: Path) -> None:
    (tmp / "bad.toml").write_text('dataset = "digits"\nmodel = \n')
    (tmp / "extra.toml").write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = 100\ncolour = "blue"\n')
    (tmp / "typed.toml").write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = "big"\n')
    (tmp / "quoted.toml").write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = "200"\n')
    (tmp / "binary.toml").write_bytes(b'dataset = "\xff\xfe"\n')
    (tmp / "folder.toml").mkdir()
    (tmp / "plots.png").mkdir()
    (tmp / "a-file").write_text("a file, not a folder")
    (tmp / "broken-home").mkdir()
    (tmp / "broken-home" / "rmconsole.db").write_bytes(b"this is not SQLite" * 100)
    (tmp / "dir-home" / "rmconsole.db").mkdir(parents=True)
    (tmp / "byte-home").mkdir()
    (tmp / "byte-home" / "rmconsole.db").write_bytes(b"x")  # SQLite would take it for an empty database
    (tmp / "one-byte.db").write_bytes(b"\n")
    other = sqlite3.connect(tmp / "other-app.db")  # another program's database
    other.execute("CREATE TABLE contacts (id INTEGER PRIMARY KEY, name TEXT)")
    other.commit()
    other.close()
    (tmp / "other-home").mkdir()
    shutil.copy(tmp / "other-app.db", tmp / "other-home" / "rmconsole.db")
    _damaged_store(tmp / "damaged-home")
    _mnist_files(tmp / "bad-data" / "MNIST" / "raw", 10, truncate=True)  # a broken download
    _mnist_files(tmp / "label-data" / "MNIST" / "raw", 10, label=12)  # sizes fine, a label 12


def _store(tmp: Path) -> None:
    """Run 1 finished; run 2 failed with a corrupt checkpoint; run 3 failed with another config's;
    run 4 failed, an MNIST run (whose data is not there); run 5 failed with a checkpoint changed
    after it was written; run 6 failed with its log path a folder; run 7 failed with its
    checkpoint path a folder; run 8 running (its worker is this test process, so alive)."""
    from rmconsole.cl.events import TaskOutcome
    from rmconsole.runner.checkpoints import checkpoint_path, save_checkpoint

    _, cfg = load_config(None)
    config = cfg.to_dict()
    _, mnist = load_config("mnist-blurry10-online")
    for i in range(7):
        store.create_run(
            mnist.to_dict() if i == 3 else config, "mnist-blurry10-online" if i == 3 else "digits-blurry10-online"
        )
    store.update_run(1, status="finished")
    for run_id in range(2, 8):
        store.update_run(run_id, status="failed", error="worker killed by signal SIGKILL")
    checkpoint_path(2).parent.mkdir(parents=True, exist_ok=True)
    checkpoint_path(2).write_bytes(b"\x80\x02 half a checkpoint")
    save_checkpoint(3, {"task": 1, "method": {}}, {**config, "memory_size": 300})
    written = save_checkpoint(5, {"task": 0, "method": {}}, config)
    sha = hashlib.sha256(written.read_bytes()).hexdigest()
    store.record_task(5, TaskOutcome(0, 50.0, [50.0], [50.0] * 10, list(range(10)), 1.0), checkpoint_sha256=sha)
    with open(written, "r+b") as f:  # one flipped byte, after the checksum was recorded
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 0x01]))
    (store.home() / "logs" / "run-6.log").mkdir(parents=True)
    checkpoint_path(7).mkdir()


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("demo")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RMCONSOLE_HOME", str(folder / "home"))
        mp.delenv("RMCONSOLE_DB", raising=False)
        _files(folder)
        _store(folder)
        from rmconsole.store import db

        for engine in db._ENGINES.values():
            engine.dispose()
        db._ENGINES.clear()
    return folder


@pytest.fixture(scope="session")
def pg_demo(postgres_server: str, postgres_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    """The demo's runs on PostgreSQL and their files, made once per test process (the demo made anew
    for each case cost 0.3 s a case): each case's database is a copy of it (`database_template`)."""
    from conftest import drop_postgres_database, fresh_postgres_database
    from sqlalchemy.engine import make_url

    from rmconsole.store import db

    folder = tmp_path_factory.mktemp("pg-demo")
    url = fresh_postgres_database(postgres_server, template=postgres_template)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RMCONSOLE_HOME", str(folder / "home"))
        mp.setenv("RMCONSOLE_DB", url)
        _store(folder)
        db.dispose_engines()
    yield folder / "home", make_url(url).database
    drop_postgres_database(postgres_server, url)


@pytest.fixture(scope="session")
def pg_demo_database(pg_demo: tuple) -> str:
    return pg_demo[1]


def _snapshot(home: Path) -> tuple:
    """Everything a command could change: every row of every table and every file in the home."""
    from sqlmodel import select

    with store.reading() as session:
        rows = [
            repr(sorted(row.model_dump().items()))
            for table_ in (store.Run, store.TaskResult, store.TaskStream, store.MemorySnapshot)
            for row in session.exec(select(table_)).all()
        ]
    files = sorted(
        (str(p.relative_to(home)), hashlib.sha1(p.read_bytes()).hexdigest() if p.is_file() else "dir")
        for p in home.rglob("*")
        if not p.name.startswith("rmconsole.db")
    )
    return tuple(rows), tuple(files)


def _fill(text: str, tmp: Path, home: Path) -> str:
    return text.replace("{tmp}", str(tmp)).replace("{home}", str(home))


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    monkeypatch.setattr(sys, "argv", ["rmconsole", *argv])
    monkeypatch.setattr(cli.errors, "_debug", False)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    out = capsys.readouterr()
    return int(exited.value.code or 0), out.out, out.err


@pytest.mark.database_template("pg_demo_database")
@pytest.mark.parametrize("case, argv, env, exit_code, expected, verdict", CASES, ids=[c[0] for c in CASES])
def test_bad_input(
    case,
    argv,
    env,
    exit_code,
    expected,
    verdict,
    demo,
    isolated_home,
    tmp_path,
    monkeypatch,
    capsys,
    request,
    store_backend,
) -> None:
    shutil.copytree(demo, tmp_path, dirs_exist_ok=True, symlinks=True)
    if store_backend != "sqlite":  # the demo's runs in this backend's store (a copy of pg_demo's), with their files
        for folder in ("checkpoints", "logs"):
            shutil.rmtree(isolated_home / folder, ignore_errors=True)
        shutil.copytree(request.getfixturevalue("pg_demo")[0], isolated_home, dirs_exist_ok=True, symlinks=True)
    monkeypatch.setenv("RMCONSOLE_DATA", str(tmp_path / "data"))
    before = _snapshot(isolated_home)
    store_url = store.database_url()
    if ("RMCONSOLE_HOME" in env or "RMCONSOLE_DB" in env) and "RMCONSOLE_DB" not in env:
        monkeypatch.delenv("RMCONSOLE_DB", raising=False)  # the row is about the SQLite file in that home
    for key, value in env.items():
        monkeypatch.setenv(key, _fill(value, tmp_path, isolated_home))
    code_, out, err = _main([_fill(a, tmp_path, isolated_home) for a in argv], monkeypatch, capsys)
    assert code_ == exit_code, (out, err)
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert len(err) < 2500, len(err)  # an echoed value never makes a huge line
    assert says(err, _fill(expected, tmp_path, isolated_home)), (err, expected)
    assert "Traceback" not in err + out
    for key in env:
        monkeypatch.delenv(key)
    monkeypatch.setenv("RMCONSOLE_HOME", str(isolated_home))
    if not store_url.startswith("sqlite"):
        monkeypatch.setenv("RMCONSOLE_DB", store_url)
    assert _snapshot(isolated_home) == before  # nothing stored, nothing changed
    assert not (tmp_path / "elsewhere.db").exists()
    assert not list(tmp_path.rglob("*.tmp"))  # no temporary file left behind
    assert verdict == "clean"


@pytest.mark.parametrize(
    "argv, env, expected",
    [
        (["runs"], {"RMCONSOLE_DB": "postgresql://rm:secret@127.0.0.1:1/rm"}, "postgresql://rm:***@127.0.0.1:1/rm"),
        (["runs"], {"RMCONSOLE_DB": "mysql://rm:secret@127.0.0.1:1/rm"}, "mysql://rm:***@127.0.0.1:1/rm"),
        (["run", "--set", "memory_size=5"], {}, "memory_size=5: smaller than the 10 classes"),
        (["resume", "1"], {}, "run 1 is finished: only failed or stopped runs can be resumed"),
        (["show", "-1"], {}, "run id -1: run ids are whole numbers"),
        (["runs", "--limt", "3"], {}, "No such option: --limt"),
    ],
)
def test_bad_input_in_a_real_terminal_process(argv, env, expected, isolated_home, tmp_path) -> None:
    _store(tmp_path)
    before = _snapshot(isolated_home)
    done = rmconsole(*argv, env=env)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1 and expected in done.stderr
    assert "secret" not in done.stderr
    assert _snapshot(isolated_home) == before
