"""Bad input, each case: one line on stderr (`error: ...`), exit code 2, the store unchanged.

The table below is the one in the README ("When things go wrong"). Each row runs the real CLI
entry point (`rmconsole.cli.main`) in this process, which is fast; a few rows run again as a
real subprocess to check what a user's terminal gets.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from conftest import rmconsole
from rmconsole import cli, store
from rmconsole.config import load_config

# (case, argv, environment tweaks, what stderr must contain)
# env values: "{tmp}" is the test's tmp_path; None removes the variable.
CASES = [
    ("malformed TOML", ["run", "--preset", "{tmp}/bad.toml"], {}, "is not valid TOML"),
    ("unknown key in a preset", ["run", "--preset", "{tmp}/extra.toml"], {}, "unknown config key 'colour'; known keys:"),
    ("unknown key in --set", ["run", "--set", "colour=blue"], {}, "unknown config key 'colour'; known keys:"),
    ("wrong type", ["run", "--set", "epochs=many"], {}, "epochs='many': Input should be a valid integer"),
    ("wrong type (boolean)", ["run", "--set", "lr=true"], {}, "lr=true: expected a number, not a boolean"),
    ("wrong type in a preset", ["run", "--preset", "{tmp}/typed.toml"], {}, "memory_size='big': Input should be a valid integer"),
    ("zero memory", ["run", "--set", "memory_size=0"], {}, "memory_size=0: Input should be greater than 0"),
    ("negative memory", ["run", "--set", "memory_size=-5"], {}, "memory_size=-5: Input should be greater than 0"),
    ("K smaller than the classes", ["run", "--set", "memory_size=5"], {},
     "memory_size=5: smaller than the 10 classes of digits, so some class would get no slot"),
    ("unknown method", ["run", "--set", "method=magic"], {}, "method='magic': unknown method; allowed:"),
    ("unknown dataset", ["run", "--set", "dataset=svhn"], {}, "dataset='svhn': allowed: 'digits', 'mnist'"),
    ("unknown model", ["run", "--set", "model=vit"], {}, "model='vit': allowed: 'mlp400'"),
    ("unknown augmentation", ["run", "--set", "augment=cutmix+mixup"], {}, "unknown augmentation 'mixup'; allowed:"),
    ("unknown preset", ["run", "--preset", "nope"], {}, "unknown preset 'nope'; available:"),
    ("missing dataset files", ["run", "--preset", "mnist-blurry10-online"], {"RMCONSOLE_DATA": "{tmp}/no-data"},
     "dataset 'mnist' not found: {tmp}/no-data/MNIST/raw/train-images-idx3-ubyte does not exist"),
    ("corrupt dataset files", ["run", "--preset", "mnist-blurry10-online"], {"RMCONSOLE_DATA": "{tmp}/bad-data"},
     "dataset 'mnist' is corrupt: {tmp}/bad-data/MNIST/raw/train-images-idx3-ubyte holds 1016 bytes, its header says 47040016"),
    ("unwritable RMCONSOLE_HOME", ["runs"], {"RMCONSOLE_HOME": "{tmp}/a-file/home"},
     "cannot create the store folder {tmp}/a-file/home: Not a directory (set RMCONSOLE_HOME to a writable folder)"),
    ("unwritable RMCONSOLE_HOME, database elsewhere", ["run"],
     {"RMCONSOLE_HOME": "{tmp}/a-file/home", "RMCONSOLE_DB": "sqlite:///{tmp}/elsewhere.db"},
     "cannot create {tmp}/a-file/home/logs: Not a directory (set RMCONSOLE_HOME to a writable folder)"),
    ("unreachable RMCONSOLE_DB (no driver)", ["runs"], {"RMCONSOLE_DB": "postgresql://rm:secret@127.0.0.1:1/rm"},
     "cannot use the database 'postgresql://rm:***@127.0.0.1:1/rm': No module named"),
    ("unreachable RMCONSOLE_DB (cannot open)", ["runs"], {"RMCONSOLE_DB": "sqlite:///{tmp}"},
     "cannot open the store at sqlite:///{tmp}: unable to open database file (check RMCONSOLE_DB"),
    ("malformed RMCONSOLE_DB", ["runs"], {"RMCONSOLE_DB": "not a url"},
     "cannot use the database 'not a url': Could not parse SQLAlchemy URL"),
    ("corrupt store file", ["runs"], {"RMCONSOLE_HOME": "{tmp}/broken-home"},
     "cannot open the store at sqlite:///{tmp}/broken-home/rmconsole.db: file is not a database (move that file away"),
    ("unknown run id (show)", ["show", "42"], {}, "no run with id 42 (see `rmconsole runs`)"),
    ("unknown run id (stop)", ["stop", "42"], {}, "no run with id 42"),
    ("unknown run id (resume)", ["resume", "42"], {}, "no run with id 42"),
    ("resuming a finished run", ["resume", "1"], {}, "run 1 is finished: only failed or stopped runs can be resumed"),
    ("stopping a finished run", ["stop", "1"], {}, "run 1 is finished: only queued or running runs can be stopped"),
    ("resuming from a corrupt checkpoint", ["resume", "2"], {},
     "checkpoint {home}/checkpoints/run-2.pt cannot be loaded: corrupt, or not a weights-only file "
     "(Unsupported operand 32); delete it to restart run 2 from its first task"),
    ("resuming from another run's checkpoint", ["resume", "3"], {},
     "checkpoint {home}/checkpoints/run-3.pt was written for another config (memory_size=300, run 3 has memory_size=200)"),
    ("unknown --status", ["runs", "--status", "done"], {}, "--status 'done': allowed: queued, running"),
]


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
    for key, value in env.items():
        monkeypatch.setenv(key, _fill(value, tmp_path, isolated_home))
    code, out, err = _main([_fill(a, tmp_path, isolated_home) for a in argv], monkeypatch, capsys)
    assert code == 2, (out, err)
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert _fill(expected, tmp_path, isolated_home) in err, err
    assert "Traceback" not in err + out
    for key in env:
        monkeypatch.delenv(key)
    monkeypatch.setenv("RMCONSOLE_HOME", str(isolated_home))
    assert _snapshot(isolated_home) == before  # nothing stored, nothing changed
    assert not (tmp_path / "elsewhere.db").exists()


@pytest.mark.parametrize("argv, env, expected", [
    (["runs"], {"RMCONSOLE_DB": "postgresql://rm:secret@127.0.0.1:1/rm"}, "postgresql://rm:***@127.0.0.1:1/rm"),
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
