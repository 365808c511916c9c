"""Warm starts (runner/warm.py): a run forked from a server that imported torch already trains
exactly as a cold run does, shows its run's argv, is stopped like any run, and an edited
checkout never runs stale code (a new fingerprint, a new server)."""

from __future__ import annotations

import time

import pytest

from conftest import rmconsole
from rmconsole import store
from rmconsole.runner import launch, warm
from rmconsole.runner.processes import is_run_process, process_argv


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@pytest.mark.timeout(600)
def test_a_warm_run_equals_a_cold_run_and_stops_like_one(isolated_home, monkeypatch) -> None:
    monkeypatch.setenv("RMCONSOLE_WARM", "1")
    if not warm.enabled():
        pytest.skip("warm starts need Linux and setproctitle")
    env = {"RMCONSOLE_WARM": "1"}
    args = ("run", "--set", "epochs=1", "--set", "n_tasks=2", "--set", "threads=1")
    try:
        cold = rmconsole(*args, env=env)  # no server yet: starts cold, and starts one for the next run
        assert cold.returncode == 0, cold.stderr
        sock = warm.socket_path(isolated_home.resolve())
        wait_for(sock.exists, 300, "the warm server's socket")
        hot = rmconsole(*args, env=env)
        assert hot.returncode == 0, hot.stderr
        log = (isolated_home / "logs" / "warm.log").read_text()
        assert "run 2: supervisor" in log and "run 1:" not in log  # run 2 was forked, run 1 was not
        first, second = store.run_detail(1), store.run_detail(2)
        assert [t["accuracy"] for t in first["tasks"]] == [t["accuracy"] for t in second["tasks"]]  # bit for bit
        assert first["metrics"]["A_last"] == second["metrics"]["A_last"]
        assert [e["loss"] for e in first["epochs"]] == [e["loss"] for e in second["epochs"]]

        # a warm run's processes carry its argv: stop finds, signals and records it as for a cold one
        launched = launch.launch_run(None, ["epochs=200", "threads=1"])
        assert isinstance(launched.process, warm.WarmProcess)
        wait_for(lambda: store.get_run(launched.run_id).status == "running", 60, "the warm run to start")
        argv = process_argv(launched.process.pid)
        assert argv is not None and is_run_process(argv, launched.run_id) and "rmconsole.runner.supervise" in argv
        assert launch.worker_state(store.get_run(launched.run_id)) == "ours"
        assert launch.stop_run(launched.run_id, grace_s=20) == "stopped"
        assert launched.process.wait(timeout=30) is not None
        assert "stopped by request" in (store.get_run(launched.run_id).error or "")
    finally:
        warm.stop_servers(isolated_home.resolve())


def test_the_fingerprint_follows_the_sources_and_import_environment(tmp_path, monkeypatch) -> None:
    before = warm.fingerprint()
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    assert warm.fingerprint() != before  # import-time environment
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("RMCONSOLE_DATA", str(tmp_path))  # per-request environment: the same server
    same = warm.fingerprint()
    monkeypatch.setenv("RMCONSOLE_DATA", "/elsewhere")
    assert warm.fingerprint() == same


def test_no_server_means_a_cold_start_and_off_means_off(isolated_home, monkeypatch) -> None:
    monkeypatch.setenv("RMCONSOLE_WARM", "0")
    assert not warm.enabled()
    monkeypatch.setenv("RMCONSOLE_WARM", "1")
    if not warm.enabled():
        pytest.skip("warm starts need Linux and setproctitle")
    monkeypatch.setattr(warm, "start_server", lambda home, env: None)  # (no server started by this test)
    assert warm.request(isolated_home, 1, {}, isolated_home / "x.log") is None
