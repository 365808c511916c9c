"""The real CLI in subprocesses: a run end to end, and bad input refused with one line."""

import json

import pytest
from conftest import SHARED_DATA, needs_mnist, rmconsole
from support.cli import in_process


@pytest.mark.usefixtures("store_backend")  # on SQLite and on PostgreSQL
def test_default_run_end_to_end(isolated_home) -> None:
    done = rmconsole("run", "--set", "epochs=4")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "A_last" in done.stdout
    listed = json.loads(in_process("runs", "--json").stdout)
    assert len(listed) == 1 and listed[0]["status"] == "finished"
    assert {"id", "status", "preset", "config", "metrics"} <= set(listed[0])
    detail = json.loads(in_process("show", str(listed[0]["id"]), "--json").stdout)
    assert detail["status"] == "finished"
    assert len(detail["tasks"]) == 5 and all(t["accuracy_row"] for t in detail["tasks"])
    assert len(detail["memory"]) == 5 and all(m["size"] == 200 for m in detail["memory"])
    assert detail["metrics"]["A_last"] > 30 and detail["metrics"]["F_last"] is not None
    assert (isolated_home / "logs" / "run-1.log").read_text().count("accuracy") >= 5


@pytest.mark.usefixtures("store_backend")  # on SQLite and on PostgreSQL
def test_detach_prints_the_id(isolated_home) -> None:
    out = rmconsole("run", "--set", "epochs=1", "--detach")
    assert out.returncode == 0 and out.stdout.strip() == "1"


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run", "--preset", "nope"], "unknown preset 'nope'"),
        (["run", "--set", "colour=blue"], "unknown config key 'colour'"),
        (["run", "--set", "memory_size=-1"], "memory_size=-1"),
        (["run", "--set", "augment=cutmix autoaug"], "unknown augmentation"),
        (["run", "--device", "cuda:7"], "device"),
        (["show", "42"], "no run with id 42"),
    ],
)
def test_bad_input_one_line_no_traceback_nothing_written(isolated_home, args, fragment) -> None:
    out = in_process(*args, env={"RMCONSOLE_DATA": str(isolated_home / "empty")})
    assert out.returncode == 2
    assert fragment in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert json.loads(in_process("runs", "--json").stdout) == []


@pytest.mark.usefixtures("store_backend")  # on SQLite and on PostgreSQL
def test_missing_dataset_is_refused_before_storing(isolated_home, tmp_path) -> None:
    out = in_process("run", "--preset", "mnist-blurry10-online", env={"RMCONSOLE_DATA": str(tmp_path / "nothing")})
    assert out.returncode == 2 and "dataset 'mnist' not found" in out.stderr and "Traceback" not in out.stderr
    assert json.loads(in_process("runs", "--json").stdout) == []


def test_presets_listing() -> None:
    out = in_process("presets", "--json")
    names = [p["name"] for p in json.loads(out.stdout)]
    assert "imagenet-blurry10" in names and "digits-blurry10-online" in names


@pytest.mark.slow
@pytest.mark.full  # real MNIST, 55 s: not in CI's 20 minutes (pyproject's markers)
@needs_mnist
def test_mnist_preset_short_budget() -> None:
    out = rmconsole(
        "run",
        "--preset",
        "mnist-blurry10-online",
        "--set",
        "epochs=2",
        env={"RMCONSOLE_DATA": str(SHARED_DATA)},
        timeout=1200,
    )
    assert out.returncode == 0, out.stderr
    detail = json.loads(rmconsole("show", "1", "--json").stdout)
    assert detail["status"] == "finished" and len(detail["tasks"]) == 5
    # The bar is the measured run's, not the paper's: 2 memory epochs (the preset trains 256) end
    # at A_last 64.33 (seed 1, measured 2026-11-25 here, as CI's run found it). The "> 80" this
    # test had since the spine commit (ddefa1e, same preset, same epochs=2) shows no sign of ever
    # holding: the spine's own code, run again, was at 46.26 after task 3 of 5. 55 leaves room
    # for float noise across CPUs and is 5.5x chance; the budget stays short (the run is here for
    # the real files, the preset and the CLI end to end; the full budget's accuracy is the docs').
    assert detail["metrics"]["A_last"] > 55
