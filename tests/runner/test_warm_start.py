"""Warm starts (runner/warm.py): a run forked from a server that imported torch already trains
exactly as a cold run does, shows its run's argv, is stopped like any run, and an edited
checkout never runs stale code (a new fingerprint, a new server)."""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from conftest import rmconsole
from typer.testing import CliRunner

from rmconsole import cli, store
from rmconsole.runner import launch, warm
from rmconsole.runner.processes import is_run_process, process_argv


@pytest.fixture(autouse=True)
def own_servers(tmp_path, monkeypatch) -> None:
    """These tests start, list and stop servers: a folder of their own, not the session's."""
    monkeypatch.setenv("RMCONSOLE_WARM_DIR", str(tmp_path / "warm-servers"))


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow  # a warm and a cold run of the digits preset, about 40 s: CI's slow leg
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
        sock = warm.socket_path()
        wait_for(sock.exists, 300, "the warm server's socket")
        hot = rmconsole(*args, env=env)
        assert hot.returncode == 0, hot.stderr
        log = sock.with_suffix(".log").read_text()
        home = isolated_home.resolve()
        assert f"run 2 of {home}: supervisor" in log and "run 1 " not in log  # run 2 was forked, run 1 was not
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

        # another store home is served by the same server: one per user and installed version
        other = isolated_home.parent / "other-home"
        again = rmconsole(*args, env={**env, "RMCONSOLE_HOME": str(other)})
        assert again.returncode == 0, again.stderr
        assert f"run 1 of {other.resolve()}: supervisor" in sock.with_suffix(".log").read_text()
        (server,) = warm.servers()
        assert server.current and server.runs == 3 and set(server.homes) == {str(home), str(other.resolve())}
        assert server.rss_kb and server.rss_kb > 100_000 and server.exits_in_s is not None
        listed = CliRunner().invoke(cli.app, ["server", "list"], env={"COLUMNS": "80"})
        assert listed.exit_code == 0 and f"pid {server.pid}" in listed.output and "2 homes" in listed.output
        stopped = CliRunner().invoke(cli.app, ["server", "stop"])
        assert stopped.exit_code == 0 and f"stopped 1 warm server (pid {server.pid})" in stopped.output
        wait_for(lambda: not warm.servers(), 30, "the stopped server to go")
    finally:
        warm.stop_servers()


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
    monkeypatch.setattr(warm, "start_server", lambda env: None)  # (no server started by this test)
    assert warm.request(isolated_home, 1, {}, isolated_home / "x.log") is None


def _fake_server(folder, key: str, info: dict) -> subprocess.Popen[bytes]:
    """A process standing for a warm server: its socket, pid and status files in `folder`."""
    import json
    import subprocess

    proc = subprocess.Popen(["sleep", "60"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key}.sock").write_text("")
    (folder / f"{key}.pid").write_text(str(proc.pid))
    (folder / f"{key}.json").write_text(json.dumps({"pid": proc.pid, **info}))
    return proc


def test_server_list_and_stop_show_and_end_this_users_servers(isolated_home, monkeypatch) -> None:
    """`rmconsole server list` on one line per server at 80 columns (memory, idle time, when it
    exits, runs and homes served); `server stop` ends them; a dead one is cleaned away, not listed."""
    folder = warm.servers_folder()
    now = time.time()
    current = _fake_server(
        folder,
        warm.fingerprint(),
        {
            "version": "0.1.0",
            "started": now - 200,
            "last_request": now - 90,
            "idle_exit_s": 900,
            "runs": 7,
            "homes": ["/a", "/b", "/c"],
            "installation": warm.installation(),
            "import_env": warm.import_environment(),
        },
    )
    stale = _fake_server(
        folder,
        "0123456789abcdef",
        {
            "started": now - 50,
            "idle_exit_s": 900,
            "runs": 1,
            "homes": ["/a"],
            "installation": warm.installation(),
            "import_env": warm.import_environment(),
        },
    )
    (folder / "deadbeefdeadbeef.sock").write_text("")
    (folder / "deadbeefdeadbeef.pid").write_text("999999999")  # no such process
    try:
        found = {s.fingerprint: s for s in warm.servers()}
        assert set(found) == {warm.fingerprint(), "0123456789abcdef"}
        assert not (folder / "deadbeefdeadbeef.sock").exists()
        assert found[warm.fingerprint()].current and not found[warm.fingerprint()].stale
        assert found["0123456789abcdef"].stale  # this installation's older code: stopped when a new one starts
        assert 780 <= (found[warm.fingerprint()].exits_in_s or 0) <= 811
        listed = CliRunner().invoke(cli.app, ["server", "list"], env={"COLUMNS": "80"})
        assert listed.exit_code == 0, listed.output
        lines = listed.output.splitlines()
        assert "each exits after 15:00 idle" in lines[0]
        mine = next(line for line in lines if f"pid {current.pid}" in line)
        assert re.search(r"idle 1:[2-4]\d, exits in 13:[1-3]\d  7 runs, 3 homes  current$", mine), mine
        assert len(mine) <= 80
        assert any(f"pid {stale.pid}" in line and line.endswith("stale code") for line in lines)
        stopped = CliRunner().invoke(cli.app, ["server", "stop"])
        assert stopped.exit_code == 0 and "stopped 2 warm servers" in stopped.output
        assert current.wait(timeout=10) is not None and stale.wait(timeout=10) is not None
        assert not list(folder.glob("*.sock"))
        none = CliRunner().invoke(cli.app, ["server", "list"])
        assert none.exit_code == 0 and none.output.startswith("no warm server running")
    finally:
        for proc in (current, stale):
            proc.kill()
            proc.wait()
