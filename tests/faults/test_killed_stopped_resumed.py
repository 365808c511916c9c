"""Runs survive faults: real workers killed, stopped and resumed through the real CLI.

The worker's supervisor records a death at once; `reap_dead` (run by `runs`, `show`, `stop`,
`resume`) catches what no supervisor could report. A run killed with SIGKILL in the middle of
task 3 and resumed ends with exactly the per-task results of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import torch
from conftest import rmconsole, wait_for
from support.campaign import claim
from support.cli import in_process

from rmconsole import store
from rmconsole.cl.data import load_digits
from rmconsole.cl.loop import run_protocol
from rmconsole.config import load_config
from rmconsole.runner import launch

pytestmark = pytest.mark.usefixtures("store_backend")  # each test on SQLite and on PostgreSQL

SETTINGS = {"epochs": 20, "threads": 1, "device": "cpu"}
ARGS = [a for k, v in SETTINGS.items() for a in ("--set", f"{k}={v}")]


def worker_pid(supervisor: int) -> int:
    children = wait_for(
        lambda: subprocess.run(["pgrep", "-P", str(supervisor)], capture_output=True, text=True).stdout.split(),
        30,
        what="the worker process",
    )
    return int(children[0])


def start_detached(*extra: str) -> int:
    out = rmconsole("run", *ARGS, *extra, "--detach")
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def listed(run_id: int) -> dict:
    out = in_process("runs", "--json")
    assert out.returncode == 0, out.stderr
    return next(r for r in json.loads(out.stdout) if r["id"] == run_id)


def results(run_id: int) -> list[tuple]:
    return [(r.task, r.accuracy, r.accuracy_row, r.class_accuracy) for r in store.task_results(run_id)]


_UNINTERRUPTED: list[list[tuple]] = []


def uninterrupted_results() -> list[tuple]:
    """The same config trained in this process without interruption (computed once)."""
    if _UNINTERRUPTED:
        return _UNINTERRUPTED[0]
    _, cfg = load_config(None, SETTINGS)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        outcomes = run_protocol(cfg, load_digits(), torch.device("cpu"))
    finally:
        torch.set_num_threads(before)
    _UNINTERRUPTED.append([(o.task, o.accuracy, o.accuracy_row, o.class_accuracy) for o in outcomes])
    return _UNINTERRUPTED[0]


@pytest.mark.slow  # an uninterrupted run, a killed one and its resume, about 35 s: CI's slow leg
def test_sigkill_mid_task_is_failed_at_once_and_resume_equals_uninterrupted(isolated_home) -> None:
    test = "test_killed_stopped_resumed.py::test_sigkill_mid_task_is_failed_at_once_and_resume_equals_uninterrupted"
    killed_row, resumed_row = claim("worker SIGKILLed mid-task", test), claim("resume after a SIGKILL", test)
    run_id = start_detached()
    run = wait_for(
        lambda: (r := store.get_run(run_id)).task == 2 and r.phase == "memory" and r, 300, what="task 3's memory epochs"
    )
    worker = worker_pid(run.pid)
    os.kill(worker, signal.SIGKILL)  # like the OOM killer: no chance to write anything
    killed = time.monotonic()
    shown = wait_for(
        lambda: (r := listed(run_id))["status"] != "running" and r,
        30,
        poll=0.2,
        what="`rmconsole runs` to show the run as failed",
    )
    seconds = time.monotonic() - killed
    assert shown["status"] == "failed" and seconds < 30
    assert "killed by signal SIGKILL" in shown["error"] and "of task 3" in shown["error"], shown["error"]
    assert len(store.task_results(run_id)) == 2  # killed in the middle of task 3; tasks 1-2 kept
    print(f"\nSIGKILL -> `runs` shows failed after {seconds:.2f} s: {shown['error']}")
    killed_row.check(None, shown["error"])

    out = rmconsole("resume", str(run_id))
    assert out.returncode == 0, out.stdout + out.stderr
    resumed_row.check(out.returncode, out.stdout)
    assert "resuming at task 3/5" in out.stdout
    assert store.get_run(run_id).status == "finished"
    assert "resuming after task 2" in (isolated_home / "logs" / f"run-{run_id}.log").read_text()
    assert results(run_id) == uninterrupted_results()  # bit for bit
    histograms = [m.histogram for m in store.memory_snapshots(run_id)]
    assert len(histograms) == 5 and all(sum(h) == 200 for h in histograms)


def test_supervisor_killed_takes_the_worker_and_the_next_look_finds_it(isolated_home) -> None:
    """The supervisor dies by SIGKILL (as in a kill -9 of the group, or a reboot): the worker
    dies with it (PR_SET_PDEATHSIG), nobody could write, and the next `runs` finds the pid
    gone and marks the run failed."""
    row = claim(
        "supervisor SIGKILLed",
        "test_killed_stopped_resumed.py::test_supervisor_killed_takes_the_worker_and_the_next_look_finds_it",
    )
    run_id = start_detached()
    run = wait_for(
        lambda: (r := store.get_run(run_id)).status == "running" and r.task is not None and r,
        120,
        what="the run to train",
    )
    worker = worker_pid(run.pid)
    os.kill(run.pid, signal.SIGKILL)
    wait_for(
        lambda: not launch.pid_alive(run.pid) and not launch.pid_alive(worker), 10, what="supervisor and worker to die"
    )
    assert store.get_run(run_id).status == "running"  # nobody has looked yet
    shown = listed(run_id)
    assert shown["status"] == "failed" and "worker process is gone" in shown["error"], shown
    row.check(None, shown["error"])


def _stop_in_process(run_id: int) -> subprocess.CompletedProcess:
    """`rmconsole stop RUN` through the Typer app in this process: on a loaded machine a fresh
    interpreter's start-up could outlast the run's remaining tasks."""
    from typer.testing import CliRunner

    from rmconsole.cli import app

    result = CliRunner().invoke(app, ["stop", str(run_id)])
    return subprocess.CompletedProcess(
        ["rmconsole", "stop", str(run_id)], result.exit_code, result.stdout, result.stderr
    )


def _stop_mid_run() -> tuple[int, subprocess.CompletedProcess]:
    run_id = start_detached()
    wait_for(
        lambda: len(store.task_results(run_id)) >= 1 and store.get_run(run_id).phase == "memory",
        300,
        what="a finished task",
    )
    out = _stop_in_process(run_id)  # no interpreter start-up between "a task is done" and the stop
    assert out.returncode == 0 and f"run {run_id} stopped" in out.stdout, out.stdout + out.stderr
    run = store.get_run(run_id)
    kept = len(store.task_results(run_id))
    assert run.status == "stopped" and "SIGTERM" in run.error and 1 <= kept < 5
    assert not launch.pid_alive(run.pid)

    return run_id, out


def test_stop_keeps_finished_tasks(isolated_home) -> None:
    test = "test_killed_stopped_resumed.py::test_stop_keeps_finished_tasks"
    run_id, out = _stop_mid_run()
    claim("stop keeps finished tasks", test).check(out.returncode, out.stdout)
    again = rmconsole("stop", str(run_id))
    assert again.returncode == 2
    assert again.stderr.strip() == f"error: run {run_id} is stopped: only queued or running runs can be stopped"
    claim("stopping twice", test).check(again.returncode, again.stderr)


@pytest.mark.slow
def test_stopped_run_resumes_to_the_uninterrupted_results(isolated_home) -> None:
    run_id, _ = _stop_mid_run()
    out = rmconsole("resume", str(run_id))
    assert out.returncode == 0, out.stdout + out.stderr
    assert store.get_run(run_id).status == "finished" and len(store.task_results(run_id)) == 5
    assert results(run_id) == uninterrupted_results()


def test_heartbeat_of_an_ended_run_stops_its_worker_without_writing(isolated_home) -> None:
    """The fence, in-process: once the store says the run is no longer running, the worker's
    next heartbeat writes nothing and raises Superseded (the real process: the slow test below)."""
    from rmconsole.runner import worker

    run_id = _running_run(None, beat_age_s=0)
    reporter = worker.StoreReporter(run_id, 5)
    reporter.close()  # no heartbeat thread here: its way out is a SIGTERM to this very process
    try:
        reporter.phase(1, "memory", 100)  # phases flush a heartbeat from the main thread
        store.finish_run(run_id, "stopped", error="stopped by request from elsewhere")
        with pytest.raises(worker.Superseded) as err:
            reporter.phase(2, "memory", 100)
        assert err.value.status == "stopped"
    finally:
        worker._signal_state.update(stopping=False, superseded=None)
    run = store.get_run(run_id)
    assert run.status == "stopped" and run.task == 1 and run.error == "stopped by request from elsewhere"
    claim(
        "ended elsewhere: the worker writes nothing",
        "test_killed_stopped_resumed.py::test_heartbeat_of_an_ended_run_stops_its_worker_without_writing",
    ).check(None, run.error)


@pytest.mark.slow
def test_stop_from_another_host_is_obeyed_at_the_next_heartbeat(isolated_home) -> None:
    """A worker whose run was ended in the store by someone else exits without writing."""
    run_id = start_detached()
    run = wait_for(
        lambda: (r := store.get_run(run_id)).status == "running" and r.task is not None and r,
        120,
        what="the run to train",
    )
    store.update_run(run_id, host="another-host")  # as if the worker ran elsewhere
    assert launch.stop_run(run_id) == "stopped"
    error = store.get_run(run_id).error
    assert "exits at its next heartbeat" in error
    wait_for(lambda: not launch.pid_alive(run.pid), 30, what="the fenced worker to exit")
    after = store.get_run(run_id)
    assert after.status == "stopped" and after.error == error  # nothing overwritten
    assert "ended elsewhere" in (isolated_home / "logs" / f"run-{run_id}.log").read_text()


def test_a_crash_records_its_own_error_in_one_line(isolated_home, tmp_path, monkeypatch) -> None:
    """An exception in the worker is written by the worker itself (here: corrupt MNIST files
    that only the worker reads, because the run was stored without the CLI's checks)."""
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for name in (
        "train-images-idx3-ubyte",
        "t10k-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-labels-idx1-ubyte",
    ):
        (raw / name).write_bytes(b"\x00\x00\x08\x03garbage")
    _, cfg = load_config("mnist-blurry10-online", {"epochs": 1})
    run_id = store.create_run(cfg.to_dict(), "mnist-blurry10-online")
    monkeypatch.setenv("RMCONSOLE_DATA", str(tmp_path / "data"))
    proc = launch.start_worker(run_id)
    code = proc.wait(timeout=120)
    assert code == 1
    run = store.get_run(run_id)
    assert run.status == "failed" and "dataset 'mnist'" in run.error and "\n" not in run.error, run.error
    claim(
        "a crash records its own error",
        "test_killed_stopped_resumed.py::test_a_crash_records_its_own_error_in_one_line",
    ).check(code, run.error)


# --------------------------------------------------------------------------- detection without training


def _fake_worker(run_id: int, module: str = "rmconsole.runner.worker") -> subprocess.Popen:
    """A process that looks like run `run_id`'s worker (same argv tail) and does nothing."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", module, str(run_id)], start_new_session=True
    )


def _running_run(pid: int | None, host: str | None = None, beat_age_s: float = 0.0) -> int:
    _, cfg = load_config(None)
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    store.update_run(
        run_id,
        status="running",
        pid=pid,
        host=host or socket.gethostname(),
        task=1,
        phase="memory",
        heartbeat_at=store.utcnow() - timedelta(seconds=beat_age_s),
    )
    return run_id


@pytest.mark.parametrize("module", ["rmconsole.runner.worker", "rmconsole.worker"])
def test_stale_heartbeat_of_a_live_local_worker_kills_it(isolated_home, module) -> None:
    _, cfg = load_config(None)
    placeholder = store.create_run(cfg.to_dict(), "x")
    fake = _fake_worker(placeholder + 1, module)
    try:
        run_id = _running_run(fake.pid, beat_age_s=45)
        assert run_id == placeholder + 1
        assert launch.worker_state(store.get_run(run_id)) == "ours"
        assert launch.reap_dead() == [run_id]
        assert fake.wait(timeout=10) == -signal.SIGKILL  # failed means not running: no second writer on resume
        run = store.get_run(run_id)
        assert run.status == "failed" and run.error.startswith("no heartbeat for 4") and "worker killed" in run.error
        claim(
            "stale heartbeat of a live worker",
            "test_killed_stopped_resumed.py::test_stale_heartbeat_of_a_live_local_worker_kills_it",
        ).check(None, run.error)
    finally:
        fake.kill()
        fake.wait()


def test_fresh_live_worker_is_left_alone_and_other_hosts_go_by_heartbeat(isolated_home) -> None:
    _, cfg = load_config(None)
    placeholder = store.create_run(cfg.to_dict(), "x")
    fake = _fake_worker(placeholder + 1)
    try:
        alive = _running_run(fake.pid, beat_age_s=2)
        remote_fresh = _running_run(999_999, host="node-7", beat_age_s=5)
        remote_stale = _running_run(999_999, host="node-7", beat_age_s=31)
        assert launch.reap_dead() == [remote_stale]
        assert store.get_run(alive).status == "running" and store.get_run(remote_fresh).status == "running"
        assert "no heartbeat for 31 s" in store.get_run(remote_stale).error
        assert fake.poll() is None
    finally:
        fake.kill()
        fake.wait()


# a run started before the runner package carries the old flat module names in its processes' argv
@pytest.mark.parametrize(
    "module, ours",
    [
        ("rmconsole.runner.supervise", True),
        ("rmconsole.runner.worker", True),
        ("rmconsole.supervise", True),
        ("rmconsole.worker", True),  # the old names: still ours to stop
        ("rmconsole.multigpu", False),
        ("rmconsole.dist_worker", False),
        ("rmconsole.queue", False),
        ("rmconsole.runner.dist_worker", False),  # a rank that recorded its own pid: judged by its heartbeat
    ],
)
def test_run_processes_are_known_by_their_new_and_old_module_names(isolated_home, module, ours) -> None:
    _, cfg = load_config(None)
    placeholder = store.create_run(cfg.to_dict(), "x")
    fake = _fake_worker(placeholder + 1, module)
    try:
        run_id = _running_run(fake.pid, beat_age_s=1)
        assert launch.worker_state(store.get_run(run_id)) == ("ours" if ours else "other")
        assert launch.reap_dead() == [] and fake.poll() is None  # alive and beating: left alone
    finally:
        fake.kill()
        fake.wait()
    assert launch.worker_state(store.get_run(run_id)) == "gone"
    assert launch.reap_dead() == [run_id] and "worker process is gone" in store.get_run(run_id).error


def test_stopping_an_old_named_supervisor_signals_its_group(isolated_home) -> None:
    _, cfg = load_config(None)
    placeholder = store.create_run(cfg.to_dict(), "x")
    fake = _fake_worker(placeholder + 1, "rmconsole.supervise")
    try:
        run_id = _running_run(fake.pid, beat_age_s=1)
        assert launch.stop_run(run_id, grace_s=5) == "stopped"
        assert fake.wait(timeout=10) == -signal.SIGTERM  # signalled, not merely marked
    finally:
        fake.kill()
        fake.wait()


def test_pid_reused_by_another_program_is_never_signalled(isolated_home) -> None:
    """A recorded pid now held by another program (here: pytest itself) is not ours: it is
    judged by the heartbeat alone and never killed."""
    fresh = _running_run(os.getpid(), beat_age_s=1)
    stale = _running_run(os.getpid(), beat_age_s=40)
    assert launch.worker_state(store.get_run(stale)) == "other"
    assert launch.reap_dead() == [stale]  # and we are still here
    assert "no heartbeat for 40 s" in store.get_run(stale).error and "killed" not in store.get_run(stale).error
    claim(
        "pid reused by another program",
        "test_killed_stopped_resumed.py::test_pid_reused_by_another_program_is_never_signalled",
    ).check(None, store.get_run(stale).error)
    assert store.get_run(fresh).status == "running"
    assert launch.stop_run(fresh) == "stopped"  # marked, not signalled: the worker obeys the store
    assert "not started by rmconsole" in store.get_run(fresh).error


def test_queued_run_whose_processes_died_before_starting_is_failed(isolated_home) -> None:
    _, cfg = load_config(None)
    run_id = store.create_run(cfg.to_dict(), "x")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    store.update_run(run_id, pid=gone.pid, host=socket.gethostname())
    waiting = store.create_run(cfg.to_dict(), "x")  # queued with no process yet (a sweep queue): untouched
    assert launch.reap_dead() == [run_id]
    assert store.get_run(run_id).status == "failed" and store.get_run(waiting).status == "queued"
    claim(
        "queued run whose processes died",
        "test_killed_stopped_resumed.py::test_queued_run_whose_processes_died_before_starting_is_failed",
    ).check(None, store.get_run(run_id).error)


def test_first_end_wins() -> None:
    """A late writer cannot turn a recorded end into another one."""
    _, cfg = load_config(None)
    run_id = store.create_run(cfg.to_dict(), "x")
    assert store.finish_run(run_id, "failed", error="worker killed by signal SIGKILL")
    assert not store.finish_run(run_id, "stopped", error="late")
    assert not store.finish_run(run_id, "finished", only_from=("running",))
    assert store.get_run(run_id).error == "worker killed by signal SIGKILL"
    claim("a late writer", "test_killed_stopped_resumed.py::test_first_end_wins").check(
        None, store.get_run(run_id).error
    )
    assert store.requeue_run(run_id) and not store.requeue_run(run_id)  # two resumes: one wins
    assert store.heartbeat(run_id, phase="x") == "queued" and store.get_run(run_id).phase is None
