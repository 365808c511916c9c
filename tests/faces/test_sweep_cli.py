"""Sweeps and reports through the real CLI: real worker subprocesses training on digits with a
tiny budget, the queue with two slots, a detached queue runner, and every report format
checked against `show --json`. The sweeps start as processes (`rmconsole run`, its queue
runner, its workers); what reads them back (runs, show, report, bad input) runs in-process."""

from __future__ import annotations

import csv
import io
import json
import statistics
import time

import pytest
from conftest import REPO, drop_postgres_database, fresh_postgres_database, rmconsole
from support.cli import in_process

from rmconsole import store
from rmconsole.runner import queue as Q

TINY = ["--set", "epochs=0", "--set", "n_tasks=2", "--set", "threads=1"]
METRICS = ("A_last", "A_avg", "F_last")


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def swept(request, tmp_path_factory) -> dict:
    """One sweep of two seeds run in two parallel slots, shared by the tests below; on a SQLite
    store and on a PostgreSQL one."""
    home = tmp_path_factory.mktemp("sweep") / "home"
    env = {"RMCONSOLE_HOME": str(home), "PYTHONPATH": str(REPO), "RMCONSOLE_DB": ""}
    if request.param == "postgresql":
        server = request.getfixturevalue("postgres_server")
        env["RMCONSOLE_DB"] = fresh_postgres_database(server)
        request.addfinalizer(lambda: drop_postgres_database(server, env["RMCONSOLE_DB"]))
    done = rmconsole("run", "--set", "method=finetune", "--seeds", "1,2", *TINY, "--parallel", "2", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(in_process("runs", "--json", env=env).stdout)
    details = {r["id"]: json.loads(in_process("show", str(r["id"]), "--json", env=env).stdout) for r in runs}
    return {"env": env, "out": done.stdout, "runs": runs, "details": details}


def test_sweep_runs_two_slots_side_by_side(swept) -> None:
    runs, out = swept["runs"], swept["out"]
    assert [(r["status"], r["method"], r["seed"]) for r in runs] == [
        ("finished", "finetune", 1),
        ("finished", "finetune", 2),
    ]
    sweep_id = runs[0]["sweep_id"]
    assert sweep_id and runs[1]["sweep_id"] == sweep_id
    assert f"sweep {sweep_id} (digits-blurry10-online): 2 runs (seed = 2), ids 1-2, 2 slot(s) on CPU" in out
    lines = out.splitlines()
    start1 = next(i for i, line in enumerate(lines) if line.startswith("run 1 started in slot 1/2"))
    start2 = next(i for i, line in enumerate(lines) if line.startswith("run 2 started in slot 2/2"))
    first_end = min(i for i, line in enumerate(lines) if line.startswith(("run 1 finished", "run 2 finished")))
    assert start1 < first_end and start2 < first_end  # both were running at once
    assert f"sweep {sweep_id}: 2 finished" in out and "mean ± std" in out


def test_runs_shows_the_queue_per_sweep(swept) -> None:
    out = in_process("runs", env=swept["env"]).stdout
    assert f"sweep {swept['runs'][0]['sweep_id']} (digits-blurry10-online): 2/2 done — 2 finished" in out


def test_csv_and_json_give_back_the_numbers_of_show(swept, tmp_path) -> None:
    env, details = swept["env"], swept["details"]
    per_run = {m: [details[i]["metrics"][m] for i in sorted(details)] for m in METRICS}
    assert all(v is not None for values in per_run.values() for v in values)

    out = in_process("report", "--sweep", "last", "--format", "csv", "--out", str(tmp_path / "t.csv"), env=env)
    assert out.returncode == 0, out.stderr
    (row,) = list(csv.DictReader(io.StringIO((tmp_path / "t.csv").read_text())))
    assert row["method"] == "finetune"
    for metric, values in per_run.items():
        assert float(row[f"{metric} mean"]) == pytest.approx(statistics.mean(values), rel=1e-12)
        assert float(row[f"{metric} std"]) == pytest.approx(statistics.stdev(values), rel=1e-9)
        assert row[f"{metric} n"] == "2" and row[f"{metric} complete"] == "true"

    data = json.loads(in_process("report", "--sweep", "last", "--format", "json", env=env).stdout)
    (cell,) = data["rows"][0]["cells"]
    assert cell["used_runs"] == sorted(details) and cell["complete"]
    for metric, values in per_run.items():
        assert [v["value"] for v in cell["metrics"][metric]["values"]] == values  # exactly show's numbers
        assert [v["run"] for v in cell["metrics"][metric]["values"]] == sorted(details)
        assert cell["metrics"][metric]["mean"] == pytest.approx(statistics.mean(values), rel=1e-12)


def test_every_format_renders(swept, tmp_path) -> None:
    env = swept["env"]
    a_last = statistics.mean(d["metrics"]["A_last"] for d in swept["details"].values())
    md = in_process("report", "--format", "md", "--metrics", "A_last,F_last,I_last", env=env).stdout.splitlines()
    assert md[0] == "| method | A_last ↑ | F_last ↓ | I_last ↓ |" and md[2].startswith(f"| finetune | {a_last:.2f} ± ")
    latex = in_process("report", "--format", "latex", "--out", str(tmp_path / "t.tex"), env=env)
    text = (tmp_path / "t.tex").read_text()
    assert latex.returncode == 0 and "\\toprule" in text and "\\bottomrule" in text and f"{a_last:.2f} $\\pm$" in text
    table = in_process("report", "--cols", "seed", env=env)
    assert table.returncode == 0 and "seed=1" in table.stdout and "seed=2" in table.stdout


def test_figures_are_written(swept, tmp_path) -> None:
    import matplotlib.image

    out = in_process("report", "--plot", str(tmp_path / "acc.png"), env=swept["env"])
    assert out.returncode == 0 and f"wrote {tmp_path / 'acc.png'}" in out.stderr
    mem = in_process("report", "--runs", "1", "--memory-plot", str(tmp_path / "mem.png"), env=swept["env"])
    assert mem.returncode == 0, mem.stderr
    for name in ("acc.png", "mem.png"):
        pixels = matplotlib.image.imread(tmp_path / name)
        assert pixels.ndim == 3 and pixels.std() > 0.05


@pytest.mark.usefixtures("store_backend")
@pytest.mark.parametrize(
    "args, fragment",
    [
        (["run", "--set", "method=rm,nope", "--seeds", "1,2"], "grid point 2/4 (method=nope, seed=1)"),
        (["run", "--seeds", "1,2", "--parallel", "0"], "--parallel 0"),
        (["run", "--set", "dataset=digits,mnist"], "dataset 'mnist' not found"),
        (["report"], "no runs match"),
        (["report", "--format", "xml"], "--format 'xml'"),
    ],
)
def test_bad_sweep_or_report_input_is_one_line_and_stores_nothing(isolated_home, args, fragment) -> None:
    out = in_process(*args, env={"RMCONSOLE_DATA": str(isolated_home / "empty")})
    assert out.returncode == 2 and fragment in out.stderr
    assert out.stderr.strip().count("\n") == 0 and "Traceback" not in out.stderr
    assert json.loads(in_process("runs", "--json").stdout) == []


@pytest.mark.usefixtures("store_backend")
def test_detached_queue_runner_outlives_the_cli(isolated_home) -> None:
    out = rmconsole("run", "--set", "method=finetune", "--seeds", "3,4", *TINY, "--detach")  # (one seed: one run)
    assert out.returncode == 0, out.stderr
    sweep_id = out.stdout.strip()
    assert "queue runner pid" in out.stderr
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        runs = store.list_runs(sweep_id=sweep_id)
        if runs and all(r.status not in store.ACTIVE for r in runs) and Q.driver_pid(sweep_id) is None:
            break
        time.sleep(0.5)
    assert [r.status for r in runs] == ["finished", "finished"]
    log = Q.log_path(sweep_id).read_text()
    assert "run 1 started in slot 1/1 on CPU" in log and f"sweep {sweep_id} done: 2 finished" in log


@pytest.mark.usefixtures("store_backend")
@pytest.mark.parametrize("driver", ["alive", "killed"])
def test_stop_sweep_ends_every_run_with_or_without_its_driver(isolated_home, driver) -> None:
    """`runner.stop_sweep` from another process: a live queue runner is asked to stop (it stops
    its workers and its unstarted runs); without one, the runs are stopped directly."""
    import os
    import signal

    from rmconsole import runner

    out = rmconsole(
        "run", "--set", "method=finetune", "--seeds", "1,2", "--set", "epochs=1000", "--set", "threads=1", "--detach"
    )
    assert out.returncode == 0, out.stderr
    sweep_id = out.stdout.strip()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and store.list_runs(sweep_id=sweep_id)[0].status != "running":
        time.sleep(0.2)
    pid = Q.driver_pid(sweep_id)
    assert pid and store.list_runs(sweep_id=sweep_id)[0].status == "running"
    if driver == "killed":
        os.kill(pid, signal.SIGKILL)  # the worker lives on in its own session
        while Q.driver_pid(sweep_id) is not None:
            time.sleep(0.05)
    assert runner.stop_sweep(sweep_id, grace_s=5) == {"stopped": 2}
    runs = store.list_runs(sweep_id=sweep_id)
    assert Q.driver_pid(sweep_id) is None and not runner.pid_alive(runs[0].pid)
    assert ("stopping the sweep" in Q.log_path(sweep_id).read_text()) == (driver == "alive")


@pytest.mark.slow
@pytest.mark.full  # nine runs, 32 s of a worker, not in CI: the module's two-slot sweep (swept) is
def test_three_methods_three_seeds_from_one_command(isolated_home, tmp_path) -> None:
    """The issue's acceptance sweep on digits: 3 methods × 3 seeds, then every format and both figures."""
    done = rmconsole(
        "run",
        "--set",
        "method=rm,finetune,er",
        "--seeds",
        "1,2,3",
        "--set",
        "epochs=1",  # the sweep, the store and the reports are tested here, not what more epochs learn
        "--set",
        "threads=1",
        timeout=3600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    runs = json.loads(in_process("runs", "--json", "--limit", "0").stdout)
    assert len(runs) == 9 and {r["status"] for r in runs} == {"finished"} and len({r["sweep_id"] for r in runs}) == 1
    data = json.loads(in_process("report", "--sweep", "last", "--format", "json").stdout)
    assert [row["row"]["method"] for row in data["rows"]] == ["rm", "finetune", "er"]
    for row in data["rows"]:
        (cell,) = row["cells"]
        assert cell["complete"] and cell["metrics"]["A_last"]["n"] == 3
        for value in cell["metrics"]["A_last"]["values"]:
            shown = json.loads(in_process("show", str(value["run"]), "--json").stdout)
            assert shown["metrics"]["A_last"] == value["value"] and shown["method"] == row["row"]["method"]
    for fmt in ("table", "md", "csv", "latex"):
        assert in_process("report", "--sweep", "last", "--format", fmt).returncode == 0
    assert in_process("report", "--sweep", "last", "--plot", str(tmp_path / "acc.png")).returncode == 0
    assert in_process("report", "--runs", "1", "--memory-plot", str(tmp_path / "mem.png")).returncode == 0
