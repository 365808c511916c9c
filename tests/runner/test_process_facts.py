"""The runner's face and its process facts: the entry points' argv and stop signals, the one
rule for a process that exited without recording its run's end, and a face that costs the
small processes nothing to import."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from rmconsole import runner, store
from rmconsole.config import load_config
from rmconsole.runner.processes import EXIT_SUPERSEDED, StopSignal, entry_args, exit_reason, python_m


def _run(status: str = "running") -> int:
    _, cfg = load_config(None)
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    store.update_run(run_id, status=status, task=2, phase="memory")
    return run_id


# ---------------------------------------------------------------------------- the face


def test_every_face_name_resolves() -> None:
    for name in runner.__all__:
        assert getattr(runner, name) is not None, name
    with pytest.raises(AttributeError):
        runner.no_such_name  # noqa: B018


def test_the_supervisor_imports_neither_the_store_nor_torch() -> None:
    """It lives as long as its run: the lazy face keeps it small and quick to start."""
    probe = (
        "import sys, rmconsole.runner.supervise, rmconsole.runner.processes; "
        "print(sorted(m for m in ('sqlmodel', 'torch', 'rmconsole.store', 'rmconsole.config') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def test_entry_points_run_under_the_package() -> None:
    assert python_m("worker", "7") == [sys.executable, "-m", "rmconsole.runner.worker", "7"]
    assert runner.log_path(7).name == "run-7.log"


# ---------------------------------------------------------------------------- entry points


@pytest.mark.parametrize(
    "argv, command, expected",
    [
        (["7"], "none", (7, [])),
        (["7"], "optional", (7, [])),
        (["7", "--", "python", "-c", "pass"], "optional", (7, ["python", "-c", "pass"])),
        (["7", "--", "--standalone"], "required", (7, ["--standalone"])),
        (["7"], "required", None),
        (["7", "--", "x"], "none", None),
        (["7", "--"], "optional", None),
        (["7", "x"], "optional", None),
        (["seven"], "none", None),
        ([], "none", None),
    ],
)
def test_entry_args(argv, command, expected, capsys) -> None:
    parsed = entry_args(argv, "python -m rmconsole.runner.x RUN_ID", command)
    assert (None if parsed is None else (parsed.run_id, parsed.command)) == expected
    assert (capsys.readouterr().err == "usage: python -m rmconsole.runner.x RUN_ID\n") == (expected is None)


@pytest.mark.parametrize("usage_of", ["supervise", "worker", "multigpu", "dist_worker"])
def test_an_entry_point_refuses_a_bad_command_line_with_its_usage(usage_of) -> None:
    out = subprocess.run(python_m(usage_of, "not-a-run"), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.startswith("usage: ") and f"rmconsole.runner.{usage_of}" in out.stderr


@pytest.mark.parametrize("once, calls", [(False, 2), (True, 1)])
def test_stop_signal_turns_sigterm_and_sigint_into_one_request(once, calls) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    seen = []
    try:
        stop = StopSignal(then=lambda: seen.append(1), once=once)
        assert not stop.requested
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested and len(seen) == calls
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


# ---------------------------------------------------------------------------- a process's end


def test_exit_reasons() -> None:
    assert exit_reason(-signal.SIGKILL) == "worker killed by signal SIGKILL"
    assert exit_reason(1) == "worker exited with code 1"
    assert exit_reason(None) == "worker process is gone"


@pytest.mark.usefixtures("store_backend")  # on SQLite and on PostgreSQL
def test_record_exit_speaks_for_a_run_left_active_and_only_then() -> None:
    failed, stopped, finished = _run(), _run(), _run("finished")
    assert runner.record_exit(failed, -signal.SIGKILL)
    assert store.get_run(failed).status == "failed"
    assert store.get_run(failed).error.startswith("worker killed by signal SIGKILL; last phase: memory of task 3")
    assert runner.record_exit(stopped, -signal.SIGTERM, stop_requested=True)
    assert store.get_run(stopped).status == "stopped"
    assert store.get_run(stopped).error == "stopped by request (worker killed by signal SIGTERM)"
    assert not runner.record_exit(finished, 1) and store.get_run(finished).error is None  # it recorded its own end
    assert not runner.record_exit(failed, 0)  # the first end wins


@pytest.mark.usefixtures("store_backend")  # on SQLite and on PostgreSQL
def test_the_supervisor_leaves_a_superseded_workers_run_alone() -> None:
    """A worker that found its run someone else's exits EXIT_SUPERSEDED and wrote nothing; its
    supervisor must not write either (the run is another worker's)."""
    from rmconsole.runner.supervise import record_end

    other = _run()
    record_end(other, EXIT_SUPERSEDED, stop_requested=False)
    assert store.get_run(other).status == "running"
    record_end(other, 1, stop_requested=False)
    assert store.get_run(other).status == "failed"


def test_started_workers_hand_over_each_exit_once() -> None:
    started = runner.StartedWorkers()
    quick = subprocess.Popen([sys.executable, "-c", "raise SystemExit(4)"])
    slow = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started.add(1, quick)
        started.add(2, slow)
        quick.wait(timeout=30)
        assert len(started) == 2
        assert [e[:2] for e in started.exited()] == [(1, 4)]
        assert started.exited() == [] and len(started) == 1
    finally:
        slow.kill()
        slow.wait()
    assert [e[:2] for e in started.exited()] == [(2, -signal.SIGKILL)] and not started


@pytest.mark.usefixtures("store_backend")  # on SQLite and on PostgreSQL
def test_follow_run_records_the_end_of_a_process_that_died_silently() -> None:
    run_id = _run("queued")
    silent = subprocess.Popen([sys.executable, "-c", "raise SystemExit(5)"])
    seen = [run.status for run in runner.follow_run(run_id, silent, poll_s=0.05)]
    assert seen[0] == "queued" and seen[-1] == "failed" and set(seen[:-1]) == {"queued"}
    assert store.get_run(run_id).error.startswith("worker exited with code 5")


@pytest.mark.usefixtures("store_backend")  # on SQLite and on PostgreSQL
def test_stop_and_resume_refuse_a_run_in_the_wrong_state() -> None:
    finished = _run("finished")
    with pytest.raises(ValueError, match=f"run {finished} is finished: only queued or running runs can be stopped"):
        runner.stop_run(finished)
    with pytest.raises(ValueError, match=f"run {finished} is finished: only failed or stopped runs can be resumed"):
        runner.resume_run(finished)
    dead = _run()
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    store.update_run(dead, pid=gone.pid, host=socket.gethostname())
    with pytest.raises(ValueError, match=f"run {dead} is failed"):  # reaped first: dead is failed, not stoppable
        runner.stop_run(dead)


def test_following_a_run_wakes_when_its_process_ends() -> None:
    """`follow_run` sleeps between looks at the run, but a process that exits ends the sleep
    (a pidfd): `rmconsole run` prints the end at once, not up to a poll later."""
    import time

    from rmconsole.runner.launch import _ExitWatch

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    watch = _ExitWatch(proc)
    started = time.monotonic()
    watch.sleep(20)
    woke = time.monotonic() - started
    proc.wait()
    assert 0.2 < woke < 10, woke
    assert watch.fd is None  # fired: plain sleeps from here on (no busy loop on a ready fd)
    started = time.monotonic()
    watch.sleep(0.2)
    assert time.monotonic() - started >= 0.19
    watch.close()


def test_a_stop_that_lands_in_an_error_fallback_still_stops_the_run(tmp_path, monkeypatch) -> None:
    """SIGTERM raises StopRequested wherever the worker's main thread is. Landing inside an
    `except Exception` fallback (the dataset cache's "a damaged copy: decode again") it must not
    be taken for an error and swallowed: the worker ignores later SIGTERMs (one stop), so the run
    trained on to its end (seen as a `stop` answered "finished" under load in CI)."""
    from rmconsole.cl import data
    from rmconsole.runner import worker

    monkeypatch.setitem(worker._signal_state, "stopping", False)
    monkeypatch.setitem(worker._signal_state, "superseded", None)
    (tmp_path / "digits-key.pt").write_bytes(b"")
    monkeypatch.setattr(data, "cache_key", lambda name, root: "digits-key.pt")

    def read_while_stopped(path):  # the signal arrives during the cache read
        os.kill(os.getpid(), signal.SIGTERM)
        return sum(range(10_000))  # (the handler runs between bytecodes, here)

    monkeypatch.setattr(data, "_load_cached", read_while_stopped)
    previous = signal.getsignal(signal.SIGTERM)
    StopSignal(then=worker._on_sigterm, signals=(signal.SIGTERM,))
    try:
        with pytest.raises(worker.StopRequested):
            data.load_cached("digits", tmp_path, tmp_path, load=lambda: pytest.fail("the stop was swallowed"))
    finally:
        signal.signal(signal.SIGTERM, previous)
