"""Issue 28: nothing written where it must not be, nothing shown that the user did not type, no
run lost to a database restart. One test (or a few) per numbered defect of the issue, each
claiming its rows of the Faults table in docs/troubleshooting.md.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
from datetime import UTC
from pathlib import Path

import pytest
from support.campaign import claim

from rmconsole import cli, store
from rmconsole.cl.events import TaskOutcome
from rmconsole.config import load_config

HERE = "test_secrets_and_outages.py::"


def _claim(case: str, test: str):
    return claim(case, HERE + test)


def finished_run(accuracy: float = 80.0) -> int:
    """A finished run with one task result (enough for `report`)."""
    _, cfg = load_config(None, {"epochs": 1, "threads": 1, "device": "cpu"})
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    store.record_task(run_id, TaskOutcome(0, accuracy, [accuracy], [accuracy] * 10, list(range(10)), 1.0))
    store.update_run(run_id, status="finished")
    return run_id


def main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    """The real CLI entry point in this process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["rmconsole", *argv])
    monkeypatch.setattr(cli.errors, "_debug", False)
    with pytest.raises(SystemExit) as exited:
        cli.main()
    out = capsys.readouterr()
    return int(exited.value.code or 0), out.out, out.err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def store_files(home: Path) -> dict[str, str]:
    """The store's file and its companions, by content (a checkpoint first so WAL holds pages)."""
    return {p.name: digest(p) for p in sorted(home.glob("rmconsole.db*"))}


# =========================================================================== 1-3, 9: outputs


def test_defect_01_report_out_never_overwrites_the_store(isolated_home, monkeypatch, capsys) -> None:
    row = _claim("--out onto the store", "test_defect_01_report_out_never_overwrites_the_store")
    wal_row = _claim("--out onto the store's WAL", "test_defect_01_report_out_never_overwrites_the_store")
    hard_row = _claim("--out a hard link to the store", "test_defect_01_report_out_never_overwrites_the_store")
    finished_run()
    home = isolated_home
    (home / "rmconsole.db-shm").exists() or (home / "rmconsole.db-shm").write_bytes(b"")
    before = store_files(home)
    code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(home / "rmconsole.db"))
    row.check(code, err)
    for companion in ("rmconsole.db-wal", "rmconsole.db-shm", "rmconsole.db-journal"):
        code, _, err = main(monkeypatch, capsys, "report", "--format", "csv", "--out", str(home / companion))
        wal_row.check(code, err)
    os.link(home / "rmconsole.db", home.parent / "innocent.md")
    code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(home.parent / "innocent.md"))
    hard_row.check(code, err)
    assert store_files(home) == before and not (home / "rmconsole.db-journal").exists()
    assert [r.id for r in store.list_runs()] == [1]  # the store still answers


def test_defect_02_a_plot_through_a_link_to_the_store_is_refused(isolated_home, tmp_path, monkeypatch, capsys) -> None:
    row = _claim("--plot a link to the store", "test_defect_02_a_plot_through_a_link_to_the_store_is_refused")
    finished_run()
    before = store_files(isolated_home)
    (tmp_path / "x.png").symlink_to(isolated_home / "rmconsole.db")
    (tmp_path / "folder-link").symlink_to(isolated_home)
    for option in ("--plot", "--plot-epochs", "--memory-plot"):
        code, _, err = main(monkeypatch, capsys, "report", option, str(tmp_path / "x.png"))
        row.check(code, err)
        assert option in err
    code, _, err = main(
        monkeypatch, capsys, "report", "--format", "json", "--out", str(tmp_path / "folder-link" / "rmconsole.db")
    )
    row.check(code, err)
    assert store_files(isolated_home) == before and (tmp_path / "x.png").is_symlink()


def test_defect_03_report_out_never_overwrites_a_checkpoint_or_log(
    isolated_home, tmp_path, monkeypatch, capsys
) -> None:
    row = _claim("--out onto a checkpoint", "test_defect_03_report_out_never_overwrites_a_checkpoint_or_log")
    log_row = _claim("--out onto a run's log", "test_defect_03_report_out_never_overwrites_a_checkpoint_or_log")
    export_row = _claim(
        "export into the checkpoints folder", "test_defect_03_report_out_never_overwrites_a_checkpoint_or_log"
    )
    finished_run()
    checkpoint = isolated_home / "checkpoints" / "run-1.pt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"weights")
    log = isolated_home / "logs" / "run-1.log"
    log.parent.mkdir()
    log.write_text("task 1/5\n")
    (tmp_path / "ckpt-link").symlink_to(isolated_home / "checkpoints")
    for path in (checkpoint, tmp_path / "ckpt-link" / "run-1.pt", isolated_home / "checkpoints" / "new.md"):
        code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(path))
        row.check(code, err)
    code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(log))
    log_row.check(code, err)
    code, _, err = main(monkeypatch, capsys, "export", "1", "--to", "tensorboard", str(isolated_home / "checkpoints"))
    export_row.check(code, err)
    assert checkpoint.read_bytes() == b"weights" and log.read_text() == "task 1/5\n"
    assert sorted(p.name for p in checkpoint.parent.iterdir()) == ["run-1.pt"]


def test_defect_09_out_through_links_and_special_files(isolated_home, tmp_path, monkeypatch, capsys) -> None:
    missing_row = _claim(
        "--out through a link to a missing folder", "test_defect_09_out_through_links_and_special_files"
    )
    loop_row = _claim("--out a link loop", "test_defect_09_out_through_links_and_special_files")
    socket_row = _claim("--out a socket", "test_defect_09_out_through_links_and_special_files")
    finished_run()
    (tmp_path / "gone").symlink_to(tmp_path / "no" / "such" / "folder")
    code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(tmp_path / "gone" / "t.md"))
    missing_row.check(code, err)
    assert not (tmp_path / "no").exists()  # the folder was not created
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(tmp_path / "loop"))
    loop_row.check(code, err)
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    code, _, err = main(monkeypatch, capsys, "report", "--plot", str(tmp_path / "a" / "x.png"))
    loop_row.check(code, err)
    assert (tmp_path / "loop").is_symlink() and (tmp_path / "a").is_symlink()  # not replaced by a file
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(tmp_path / "s.md"))
        code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(tmp_path / "s.md"))
    socket_row.check(code, err)
    # still written: a link to a file in an existing folder, a missing ordinary folder, /dev/null
    (tmp_path / "dangling.md").symlink_to(tmp_path / "target.md")
    for path in (tmp_path / "dangling.md", tmp_path / "new" / "t.md", Path("/dev/null")):
        code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(path))
        assert code == 0, err
    assert "| method |" in (tmp_path / "target.md").read_text() and (tmp_path / "new" / "t.md").exists()


def test_defect_09_export_to_a_file_says_so(isolated_home, tmp_path, monkeypatch, capsys) -> None:
    row = _claim("export to a file", "test_defect_09_export_to_a_file_says_so")
    finished_run()
    (tmp_path / "a-file").write_text("mine")
    for target in ("mlflow", "tensorboard"):
        code, _, err = main(monkeypatch, capsys, "export", "1", "--to", target, str(tmp_path / "a-file"))
        row.check(code, err)
    assert (tmp_path / "a-file").read_text() == "mine"


# =========================================================================== 4: the served TUI


def _serve(port: int):
    import subprocess

    return subprocess.Popen(
        [sys.executable, "-m", "rmconsole", "tui", "--serve", "--port", str(port), "--refresh", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
        start_new_session=True,
    )


def _tree(pid: int) -> list[int]:
    """pid and every descendant (by /proc's parent links)."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(child for child, parent in parents.items() if parent == current)
    return found


@pytest.mark.timeout(180)
def test_defect_04_the_served_tui_needs_its_token_and_its_own_origin(isolated_home) -> None:
    pytest.importorskip("textual_serve", reason="textual-serve is not installed (pip install 'rmconsole[serve]')")
    import asyncio
    import signal
    import time

    import aiohttp
    from conftest import wait_for

    token_row = _claim(
        "the served TUI without its token", "test_defect_04_the_served_tui_needs_its_token_and_its_own_origin"
    )
    origin_row = _claim(
        "the served TUI from another site's page", "test_defect_04_the_served_tui_needs_its_token_and_its_own_origin"
    )
    finished_run()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = _serve(port)
    try:
        first = server.stdout.readline()
        assert f"serving the rmconsole TUI at http://127.0.0.1:{port}/?token=" in first, first
        url = first.split(" at ", 1)[1].split(" ", 1)[0]
        token = url.split("token=", 1)[1]
        assert len(token) >= 32
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, 30, 0.2, "the port")

        async def probe() -> dict[str, object]:
            seen: dict[str, object] = {}
            async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as session:  # an IP host
                async with session.get(base + "/") as r:
                    seen["no token"] = (r.status, await r.text())
                async with session.get(base + "/?token=wrong") as r:
                    seen["wrong token"] = r.status
                try:
                    async with session.ws_connect(base + "/ws"):
                        seen["ws without token"] = 101
                except aiohttp.WSServerHandshakeError as err:
                    seen["ws without token"] = err.status
                try:
                    async with session.ws_connect(
                        f"{base}/ws?token={token}", headers={"Origin": f"http://evil.example:{port}"}
                    ):
                        seen["ws from another site"] = 101
                except aiohttp.WSServerHandshakeError as err:
                    seen["ws from another site"] = err.status
                async with session.get(base + "/static/js/textual.js") as r:
                    seen["static"] = r.status
                async with session.get(url, allow_redirects=False) as r:
                    seen["with token"] = (r.status, r.headers.get("Location"))
                async with session.get(url) as r:  # the cookie it set opens the page
                    page = await r.text()
                    seen["page"] = (r.status, f"ws://127.0.0.1:{port}/ws" in page)
                async with session.ws_connect(base + "/ws?width=80&height=24", headers={"Origin": base}) as ws:
                    seen["ws with cookie"] = 101
                    await ws.send_json(["ping", "x"])
                    for _ in range(50):
                        message = await ws.receive(timeout=30)
                        if message.type == aiohttp.WSMsgType.TEXT and "pong" in message.data:
                            break
                    seen["processes"] = _tree(server.pid)
            return seen

        seen = asyncio.run(probe())
        status, text = seen["no token"]
        assert status == 403 and "token" in text and token not in text
        token_row.check(None, text)
        assert seen["wrong token"] == 403 and seen["ws without token"] == 403
        assert seen["ws from another site"] == 403
        origin_row.check(None, "refused a request from another site's page")
        assert seen["static"] == 200
        assert seen["with token"] == (302, "/")  # the token leaves the address bar
        assert seen["page"] == (200, True) and seen["ws with cookie"] == 101
        processes = seen["processes"]
        assert len(processes) >= 2  # the server and the app it started for the websocket
        for pid in processes:  # the token is in no argv and no environment
            for part in ("cmdline", "environ"):
                try:
                    assert token.encode() not in Path(f"/proc/{pid}/{part}").read_bytes(), (pid, part)
                except (FileNotFoundError, ProcessLookupError):
                    pass
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except Exception:  # noqa: BLE001
            os.killpg(server.pid, signal.SIGKILL)
        time.sleep(0)


# =========================================================================== 6, 7: secrets and modes


def test_defect_06_an_unparsable_url_never_shows_its_password(isolated_home) -> None:
    from support.cli import in_process as rmconsole  # a message: the CLI in this process

    row = _claim(
        "an unparsable RMCONSOLE_DB with a password", "test_defect_06_an_unparsable_url_never_shows_its_password"
    )
    for url in (
        "postgresql://rm:S3cretPW!x@db:54x2/rm",
        "postgresql://rm:S3cretPW!x@db/rm?port=abc",
        "postgresql://rm:S3cretPW!x@b@db:99999999/rm",
    ):
        done = rmconsole("runs", env={"RMCONSOLE_DB": url})
        assert done.returncode == 2 and "S3cretPW" not in done.stderr + done.stdout, done.stderr
        assert done.stderr.count("\n") == 1 and "rm:***@" in done.stderr
        if url.endswith("54x2/rm"):
            row.check(done.returncode, done.stderr)


def _mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.mark.slow  # runs in a fresh home, about 30 s: CI's slow leg
@pytest.mark.timeout(300)
def test_defect_07_a_new_home_is_the_users_alone(isolated_home, tmp_path) -> None:
    from conftest import rmconsole

    row = _claim("a new home under umask 022", "test_defect_07_a_new_home_is_the_users_alone")
    old = os.umask(0o022)
    try:
        done = rmconsole("run", "--set", "epochs=1", "--set", "n_tasks=2", "--set", "threads=1")
    finally:
        os.umask(old)
    assert done.returncode == 0, done.stderr
    home = isolated_home
    folders = {p: _mode(p) for p in (home, home / "logs", home / "checkpoints")}
    files = {
        p: _mode(p)
        for p in [*home.glob("rmconsole.db*"), *home.glob("logs/*"), *home.glob("checkpoints/*")]
        if p.is_file()
    }
    assert home / "rmconsole.db" in files and home / "logs" / "run-1.log" in files
    assert home / "checkpoints" / "run-1.pt" in files
    assert set(folders.values()) == {0o700}, {str(k): oct(v) for k, v in folders.items()}
    assert set(files.values()) == {0o600}, {str(k): oct(v) for k, v in files.items()}
    row.check(None, f"{oct(_mode(home))} {sorted(set(map(oct, files.values())))}")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("store_backend", ["postgresql"], indirect=True)
def test_defect_07_the_password_is_in_no_workers_environment(isolated_home, store_backend, monkeypatch) -> None:
    from conftest import rmconsole, wait_for
    from sqlalchemy.engine import make_url

    # the test harness's own URL of the server (CI's .ci/services exports it, password included) is
    # not rmconsole's to hide: the processes of this run must not inherit it from pytest
    monkeypatch.delenv("RMCONSOLE_TEST_PG", raising=False)

    row = _claim(
        "the database password and a run's processes", "test_defect_07_the_password_is_in_no_workers_environment"
    )
    password = make_url(os.environ["RMCONSOLE_DB"]).password
    assert password
    # cold: /proc/PID/environ is what a process was started with, and a warm-forked run's is its
    # server's (the server is started with a worker's environment, built by the same worker_env)
    done = rmconsole("run", "--detach", "--set", "epochs=3", "--set", "threads=1", env={"RMCONSOLE_WARM": "0"})
    assert done.returncode == 0, done.stderr
    run_id = int(done.stdout.strip())
    seen = {}

    def ours(pid: int) -> bool:  # another test's run 1 may be training too
        try:
            return f"RMCONSOLE_HOME={isolated_home.resolve()}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return False

    def alive_processes() -> bool:
        from rmconsole.runner.processes import process_argv

        pids = [int(e) for e in os.listdir("/proc") if e.isdigit()]
        pid = next(
            (
                p
                for p in pids
                if (process_argv(p) or [])[1:3] == ["-m", "rmconsole.runner.worker"]
                and (process_argv(p) or [])[-1] == str(run_id)
                and ours(p)
            ),
            None,
        )
        if pid is None:
            return False
        supervisor = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        for name, p in (("worker", pid), ("supervisor", supervisor)):
            seen[name] = (Path(f"/proc/{p}/environ").read_bytes(), Path(f"/proc/{p}/cmdline").read_bytes())
        return True

    wait_for(alive_processes, 120, 0.01, "the run's worker")
    for name, (environ, cmdline) in seen.items():
        assert password.encode() not in environ and password.encode() not in cmdline, name
        variables = dict(v.split(b"=", 1) for v in environ.split(b"\0") if b"=" in v)
        passfile = Path(variables[b"RMCONSOLE_DB_PASSWORD_FILE"].decode())
        assert passfile.read_text() == password and _mode(passfile) == 0o600 and _mode(passfile.parent) == 0o700
    wait_for(lambda: store.get_run(run_id).status not in store.ACTIVE, 240, 0.2, "the run's end")
    assert store.get_run(run_id).status == "finished", store.get_run(run_id).error
    row.check(None, "finished")


# =========================================================================== 9: bad input


def test_defect_09_a_subnormal_float_is_refused(isolated_home, monkeypatch, capsys) -> None:
    row = _claim("a subnormal learning rate", "test_defect_09_a_subnormal_float_is_refused")
    for value in ("1e-320", "5e-324", "2e-308"):
        code, out, err = main(monkeypatch, capsys, "run", "--set", f"lr={value}")
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
        if value == "1e-320":
            row.check(code, err)
    code, _, err = main(monkeypatch, capsys, "run", "--set", "weight_decay=1e-310")
    assert code == 2 and "weight_decay=1e-310: a subnormal number" in err
    assert store.count_runs() == 0
    from rmconsole.config import load_config as load

    assert load(None, {"lr": 2.3e-308, "weight_decay": 0.0})[1].lr == 2.3e-308  # the smallest normal ones pass


def test_defect_09_runs_that_match_nothing_say_so(isolated_home, monkeypatch, capsys) -> None:
    row = _claim("runs matching nothing", "test_defect_09_runs_that_match_nothing_say_so")
    finished_run()
    code, out, err = main(monkeypatch, capsys, "runs", "id:1-3")
    row.check(code, err)
    assert out == ""  # no header over nothing
    code, out, err = main(monkeypatch, capsys, "runs", "method:ewc")
    assert code == 1 and out == "" and "no runs match method:ewc" in err
    code, out, _ = main(monkeypatch, capsys, "runs", "id>=1", "id<=3")
    assert code == 0 and "digits-blurry10-online" in out
    code, out, _ = main(monkeypatch, capsys, "runs", "--json", "method:ewc")
    assert code == 0 and out.strip() == "[]"


# =========================================================================== 11: what the messages promise


def test_defect_11_no_space_at_a_checkpoint_says_where_resume_continues(isolated_home) -> None:
    import errno

    from rmconsole.runner import checkpoints, worker

    row = _claim(
        "no space at the second task's checkpoint",
        "test_defect_11_no_space_at_a_checkpoint_says_where_resume_continues",
    )
    _, cfg = load_config(None, {"epochs": 1, "threads": 1, "device": "cpu"})
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    outcome = lambda task: TaskOutcome(task, 80.0, [80.0] * (task + 1), [80.0] * 10, list(range(10)), 1.0)  # noqa: E731
    written = checkpoints.save_checkpoint(run_id, {"task": 0, "method": {}}, cfg.to_dict())
    store.record_task(run_id, outcome(0), checkpoint_sha256=checkpoints.sha256_of(written.read_bytes()))
    store.record_task(run_id, outcome(1))  # task 2's result kept, its checkpoint not written (a full disk)
    full = OSError(errno.ENOSPC, "No space left on device", str(written) + ".123.tmp")
    message = worker.no_space_message(run_id, full)
    row.check(None, message)
    resumes_at = checkpoints.load_checkpoint(run_id)["task"] + 1  # what `resume` computes (0-based)
    assert f"continues at task {resumes_at + 1}/5" in message
    written.unlink()  # no checkpoint at all: from the first task
    assert "starts again at task 1/5" in worker.no_space_message(run_id, full)


def test_defect_11_a_refused_checkpoint_is_said_in_whole_sentences(isolated_home, monkeypatch, capsys) -> None:
    import io

    import torch

    from rmconsole.runner import checkpoints

    row = _claim("a checkpoint that would run code", "test_defect_11_a_refused_checkpoint_is_said_in_whole_sentences")

    class Evil:
        def __reduce__(self):  # what a tampered checkpoint would run when unpickled
            return (os.system, ("true",))

    _, cfg = load_config(None, {"epochs": 1, "threads": 1, "device": "cpu"})
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")  # no checksums: as an older rmconsole's
    store.update_run(run_id, status="failed", error="worker killed by signal SIGKILL")
    path = checkpoints.checkpoint_path(run_id)
    path.parent.mkdir(parents=True)
    buffer = io.BytesIO()
    torch.save({"task": 0, "method": {}, "x": Evil()}, buffer)
    path.write_bytes(buffer.getvalue())
    code, _, err = main(monkeypatch, capsys, "resume", str(run_id))
    row.check(code, err)
    assert "Re-running" not in err and "weights_only` set to `False" not in err and "\x1b" not in err
    assert err.rstrip().endswith("from its first task")
    for text in ("x" * 400, "One. Two sentences here that run long " * 10):  # never cut mid-word
        clipped = checkpoints._clip(text)
        assert len(clipped) <= 162 and (clipped.endswith((".", "…")))


# =========================================================================== 12: a deleted store's log


@pytest.mark.timeout(300)
def test_defect_12_a_deleted_stores_log_is_set_aside_not_continued(isolated_home) -> None:
    import time

    from conftest import wait_for

    from rmconsole.runner import launch

    row = _claim("a deleted store's log", "test_defect_12_a_deleted_stores_log_is_set_aside_not_continued")
    log = isolated_home / "logs" / "run-1.log"
    log.parent.mkdir(parents=True)
    log.write_text("task 2/5: the deleted store's run 1 was here\n")  # the old run 1's lines
    an_hour_ago = time.time() - 3600
    os.utime(log, (an_hour_ago, an_hour_ago))
    _, cfg = load_config(None, {"epochs": 1, "n_tasks": 2, "threads": 1, "device": "cpu"})
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")  # the new store's run 1
    assert run_id == 1
    launch.start_worker(run_id).wait(timeout=240)
    assert store.get_run(run_id).status == "finished", log.read_text()[-2000:]
    text = log.read_text()
    assert "the deleted store's run 1 was here" not in text
    first = text.splitlines()[0]
    row.check(None, first)
    (aside,) = (isolated_home / "logs" / "orphaned").iterdir()
    assert aside.read_text() == "task 2/5: the deleted store's run 1 was here\n"  # kept, not lost
    # a resumed run's log goes on where it was: the same run wrote it
    store.update_run(run_id, status="failed", error="simulated")
    before = log.read_text()
    launch.resume_run(run_id).process.wait(timeout=240)
    assert log.read_text().startswith(before)
    wait_for(lambda: store.get_run(run_id).status == "finished", 30, 0.1, "the resumed run's end")


# =========================================================================== 10: a database outage


@pytest.fixture(scope="module")
def own_postgres():
    """A PostgreSQL cluster of this module's own (.ci/services), which the tests stop and start:
    (its URL, a function that runs pg_ctl on it). Skipped where no server can start."""
    import pwd
    import shutil
    import subprocess
    import tempfile

    from conftest import SERVICES, _read_env

    folder = tempfile.mkdtemp(prefix="rmconsole-test-outage-")
    subprocess.run([str(SERVICES), "start", folder, "postgres"], capture_output=True, text=True, timeout=300)
    env = _read_env(Path(folder) / "env") if (Path(folder) / "env").exists() else {}
    if not env.get("RMCONSOLE_TEST_PG"):
        shutil.rmtree(folder, ignore_errors=True)
        pytest.skip(f"PostgreSQL: {env.get('RMCONSOLE_TEST_PG_SKIP', 'no server could be started')}")
    data = Path(folder) / "pg" / "data"
    owner = pwd.getpwuid(data.stat().st_uid).pw_name
    bin_dir = (Path(folder) / "pg" / "bin").read_text().strip()

    def pg_ctl(*args: str) -> None:
        command = [
            f"{bin_dir}/pg_ctl",
            "-D",
            str(data),
            "-l",
            str(Path(folder) / "pg" / "server.log"),
            "-w",
            "-t",
            "60",
            *args,
        ]
        if os.getuid() == 0 and owner != "root":
            command = ["runuser", "-u", owner, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr

    try:
        yield env["RMCONSOLE_TEST_PG"], pg_ctl
    finally:
        subprocess.run([str(SERVICES), "stop", folder], capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


def _outage_run(own_postgres, monkeypatch, env: dict[str, str]) -> tuple[int, object]:
    """A detached 5-task run on the module's own server, once it trains task 2."""
    from conftest import rmconsole, wait_for

    from rmconsole.store import db

    url, pg_ctl = own_postgres
    pg_ctl("restart", "-m", "fast")  # a clean server (and database) for each test
    import sqlalchemy

    admin = sqlalchemy.create_engine(db.engine_url(url), isolation_level="AUTOCOMMIT", poolclass=sqlalchemy.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql("DROP DATABASE IF EXISTS outage WITH (FORCE)")
        conn.exec_driver_sql("CREATE DATABASE outage")
    from sqlalchemy.engine import make_url

    store_url = make_url(url).set(database="outage").render_as_string(hide_password=False)
    monkeypatch.setenv("RMCONSOLE_DB", store_url)
    db.dispose_engines()
    done = rmconsole("run", "--detach", "--set", "epochs=6", "--set", "threads=1", env=env)
    assert done.returncode == 0, done.stderr
    run_id = int(done.stdout.strip())
    wait_for(lambda: (r := store.get_run(run_id)).task is not None and r.task >= 1, 300, 0.2, "task 2")
    return run_id, pg_ctl


@pytest.mark.timeout(600)
def test_defect_10_a_database_restart_mid_run_loses_nothing(isolated_home, own_postgres, monkeypatch) -> None:
    import time

    from conftest import wait_for

    from rmconsole.store import db

    row = _claim("PostgreSQL restarted mid-run", "test_defect_10_a_database_restart_mid_run_loses_nothing")
    run_id, pg_ctl = _outage_run(own_postgres, monkeypatch, {})
    before = len(store.task_results(run_id))
    stopped = time.monotonic()
    pg_ctl("stop", "-m", "fast")
    time.sleep(8)  # a restart, a failover: seconds
    pg_ctl("restart", "-m", "fast")
    outage = time.monotonic() - stopped
    db.dispose_engines()
    wait_for(lambda: store.get_run(run_id).status not in store.ACTIVE, 400, 0.5, "the run's end")
    run = store.get_run(run_id)
    log = (isolated_home / "logs" / f"run-{run_id}.log").read_text()
    assert run.status == "finished", (run.error, log[-3000:])
    results = store.task_results(run_id)
    assert [r.task for r in results] == [0, 1, 2, 3, 4] and before >= 1  # nothing finished was lost
    assert "holding this process's results" in log and "the database answers again after" in log, log[-3000:]
    print(f"\noutage of {outage:.1f} s held through: {[line for line in log.splitlines() if 'answers again' in line]}")
    row.check(None, log)


@pytest.mark.timeout(600)
def test_defect_10_an_outage_past_the_grace_period_fails_with_the_true_reason(
    isolated_home, own_postgres, monkeypatch
) -> None:
    import time

    from conftest import wait_for

    from rmconsole.store import db

    row = _claim(
        "PostgreSQL away past the grace period",
        "test_defect_10_an_outage_past_the_grace_period_fails_with_the_true_reason",
    )
    run_id, pg_ctl = _outage_run(own_postgres, monkeypatch, {"RMCONSOLE_DB_GRACE_S": "5"})
    before = len(store.task_results(run_id))
    log_path = isolated_home / "logs" / f"run-{run_id}.log"
    stopped = time.monotonic()
    pg_ctl("stop", "-m", "fast")
    wait_for(lambda: "longer than the grace period" in log_path.read_text(), 120, 0.1, "the worker to give up")
    gave_up = time.monotonic() - stopped
    time.sleep(3)
    pg_ctl("restart", "-m", "fast")
    db.dispose_engines()
    wait_for(lambda: store.get_run(run_id).status not in store.ACTIVE, 120, 0.5, "the recorded end")
    run = store.get_run(run_id)
    assert run.status == "failed" and "supervisor died" not in (run.error or "")
    assert "longer than the grace period (5 s" in run.error, run.error
    assert len(store.task_results(run_id)) >= before  # what had finished is kept
    assert 4.5 <= gave_up <= 60, gave_up
    print(f"\ngrace period 5 s: the worker gave up {gave_up:.1f} s after the server stopped; recorded: {run.error}")
    row.check(None, run.error)


# =========================================================================== 5: control characters


HOSTILE = "evil\x1b[2J\x1b]0;T\x07\x1b]52;c;aGVsbG8=\x07\x9b31m\u202e"


def _raw_controls(text: str) -> list[str]:
    return sorted({c for c in text if (ord(c) < 0x20 and c not in "\n") or 0x7F <= ord(c) < 0xA0 or c == "\u202e"})


def test_defect_05_the_cli_shows_control_characters_never_obeys_them(
    isolated_home, tmp_path, monkeypatch, capsys
) -> None:
    row = _claim(
        "control characters in stored names", "test_defect_05_the_cli_shows_control_characters_never_obeys_them"
    )
    file_row = _claim(
        "a preset file named with escape sequences", "test_defect_05_the_cli_shows_control_characters_never_obeys_them"
    )
    run_id = finished_run()
    finished_run()
    # written by another writer of a shared store: nothing refused them on the way in
    store.set_name([run_id], HOSTILE)
    store.set_note([run_id], HOSTILE)
    store.update_run(run_id, preset=HOSTILE, error=HOSTILE)
    store.tag_runs([run_id], [HOSTILE], [])
    seen = []
    for argv in (
        ["runs"],
        ["runs", "--all", HOSTILE[:4]],
        ["show", "1"],
        ["report"],
        ["report", "--format", "md"],
        ["report", "--format", "csv", "--rows", "preset"],
        ["report", "--format", "latex"],
        ["diff", "1", "2"],
        ["tag", "1", "+ok"],
    ):
        code, out, err = main(monkeypatch, capsys, *argv)
        assert code == 0, (argv, err)
        assert _raw_controls(out + err) == [], (argv, out + err)
        seen.append(out + err)
    assert "evil␛[2J␛]0;T" in seen[2]  # shown, visibly
    row.check(None, seen[2])
    preset = tmp_path / f"{HOSTILE}.toml"
    preset.write_text('dataset = "digits"\nmodel = "mlp400"\nmemory_size = 100\nepochs = 1\nn_tasks = 2\nthreads = 1\n')
    code, out, err = main(monkeypatch, capsys, "run", "--preset", str(preset))  # trains: a real run of that preset
    assert code == 0 and _raw_controls(out + err) == [], out + err
    file_row.check(code, out)
    code, out, err = main(monkeypatch, capsys, "runs")
    assert "evil␛[2J" in out and _raw_controls(out + err) == []
    out_row = _claim(
        "--out named with escape sequences", "test_defect_05_the_cli_shows_control_characters_never_obeys_them"
    )
    code, out, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(tmp_path / f"{HOSTILE}.md"))
    assert code == 0 and _raw_controls(out + err) == [] and (tmp_path / f"{HOSTILE}.md").exists(), err
    out_row.check(code, err)
    error_row = _claim(
        "an error naming a file with escape sequences",
        "test_defect_05_the_cli_shows_control_characters_never_obeys_them",
    )
    (tmp_path / "plain-file").write_text("a file")
    code, out, err = main(
        monkeypatch, capsys, "report", "--format", "md", "--out", str(tmp_path / "plain-file" / f"{HOSTILE}.md")
    )
    assert code == 2 and _raw_controls(out + err) == [], err
    error_row.check(code, err)


def test_the_sanitiser_shows_every_control_character_in_one_cell() -> None:
    from rmconsole.sanitize import clean, clean_block

    for code in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x202E, 0x2066]:
        shown = clean(f"a{chr(code)}b")
        assert len(shown) == 3 and shown[1] != chr(code), hex(code)
    assert clean("a\nb") == "a␊b" and clean_block("a\nb\tc") == "a\nb\tc"
    assert clean("ünïcode, 中文, émoji 🙂") == "ünïcode, 中文, émoji 🙂"  # printable text is left alone


@pytest.mark.asyncio
async def test_defect_05_the_tui_shows_control_characters_never_obeys_them(isolated_home) -> None:
    from support import tui_store

    from rmconsole.tui import RMConsoleApp
    from rmconsole.tui.widgets.status_line import StatusLine

    row = _claim("control characters in the TUI", "test_defect_05_the_tui_shows_control_characters_never_obeys_them")
    ids = tui_store.build()
    for field in (store.set_name, store.set_note):
        field([ids["finished"]], HOSTILE)
    store.update_run(ids["failed"], error=HOSTILE)
    app = RMConsoleApp(refresh_s=0.1, reap_every_s=None)
    screens = []
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause(1.0)
        screens.append(app.export_screenshot())  # what the terminal is sent, as an SVG of it
        app.screen.query_text = "evil\x1b[2J\x9b31m"  # a filter pasted with escapes: the status line repeats it
        await pilot.pause(0.5)
        screens.append(app.export_screenshot())
        status = str(app.screen.query_one(StatusLine).text)  # clean at its source, not only on the way out
        assert "evil␛[2J" in status and _raw_controls(status) == [], status
        app.screen.query_text = ""
        await pilot.pause(0.3)
        for run_id in (ids["finished"], ids["failed"]):
            app.open_run(run_id)
            await pilot.pause(1.5)
            screens.append(app.export_screenshot())
            await pilot.press("escape")
    for svg in screens:
        assert _raw_controls(svg) == [], _raw_controls(svg)
    assert "evil␛[2J" in screens[1] and "␛]52;c;aGVsbG8=" in screens[2]  # shown, visibly
    row.check(None, screens[2])


def test_defect_01_every_way_to_the_stores_files_is_refused(isolated_home, tmp_path, monkeypatch, capsys) -> None:
    dots = _claim("--out onto the store through ..", "test_defect_01_every_way_to_the_stores_files_is_refused")
    elsewhere = _claim(
        "--out onto RMCONSOLE_DB's SQLite file", "test_defect_01_every_way_to_the_stores_files_is_refused"
    )
    hard = _claim("--out a hard link to a checkpoint", "test_defect_01_every_way_to_the_stores_files_is_refused")
    memory = _claim(
        "--memory-plot into the checkpoints folder", "test_defect_01_every_way_to_the_stores_files_is_refused"
    )
    logs = _claim("export into the logs folder", "test_defect_01_every_way_to_the_stores_files_is_refused")
    loop = _claim("export through a link loop", "test_defect_01_every_way_to_the_stores_files_is_refused")
    warm = _claim("--out onto the warm server's socket", "test_defect_01_every_way_to_the_stores_files_is_refused")
    finished_run()
    (isolated_home / "logs").mkdir()
    (isolated_home / "checkpoints").mkdir()
    code, _, err = main(
        monkeypatch, capsys, "report", "--format", "md", "--out", str(isolated_home / "logs" / ".." / "rmconsole.db")
    )
    dots.check(code, err)
    checkpoint = isolated_home / "checkpoints" / "run-1.pt"
    checkpoint.write_bytes(b"weights")
    os.link(checkpoint, tmp_path / "copy.md")
    code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(tmp_path / "copy.md"))
    hard.check(code, err)
    code, _, err = main(
        monkeypatch, capsys, "report", "--runs", "1", "--memory-plot", str(isolated_home / "checkpoints" / "mem.png")
    )
    memory.check(code, err)
    code, _, err = main(monkeypatch, capsys, "export", "1", "--to", "mlflow", str(isolated_home / "logs"))
    logs.check(code, err)
    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    code, _, err = main(monkeypatch, capsys, "export", "1", "--to", "tensorboard", str(tmp_path / "l1" / "tb"))
    loop.check(code, err)
    (isolated_home / "warm").mkdir()
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(isolated_home / "warm" / "abc.sock"))
        code, _, err = main(
            monkeypatch, capsys, "report", "--format", "md", "--out", str(isolated_home / "warm" / "abc.sock")
        )
    warm.check(code, err)
    assert checkpoint.read_bytes() == b"weights" and sorted(p.name for p in checkpoint.parent.iterdir()) == ["run-1.pt"]
    assert list((isolated_home / "logs").iterdir()) == []
    other = tmp_path / "other.db"  # a SQLite store named by RMCONSOLE_DB, away from the home
    monkeypatch.setenv("RMCONSOLE_DB", f"sqlite:///{other}")
    finished_run()
    before = digest(other)
    code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(other))
    elsewhere.check(code, err)
    assert digest(other) == before


def test_no_output_is_written_into_rmconsole_home(isolated_home, tmp_path, monkeypatch, capsys) -> None:
    """Only checkpoints/, logs/ and warm/ were refused: a report or an export could be written into
    the home itself or its other folders (secrets/, sweeps/, cache/...), and a hard link outside
    the home to one of their files was written through. The whole home is rmconsole's now."""
    finished_run()
    (isolated_home / "sweeps").mkdir()
    lock = isolated_home / "sweeps" / "s1.lock"
    lock.write_text("4242\n")
    os.link(lock, tmp_path / "innocent.md")
    before = sorted(str(p.relative_to(isolated_home)) for p in isolated_home.rglob("*") if "rmconsole.db" not in p.name)
    attempts = [
        ("report", "--format", "md", "--out", str(isolated_home / "table.md")),
        ("report", "--format", "csv", "--out", str(isolated_home / "sweeps" / "s1.lock")),
        ("report", "--format", "md", "--out", str(tmp_path / "innocent.md")),
        ("report", "--plot", str(isolated_home / "cache" / "acc.png")),
        ("report", "--plot-epochs", str(isolated_home / "loss.png")),
        ("report", "--runs", "1", "--memory-plot", str(isolated_home / "secrets" / "mem.png")),
        ("export", "1", "--to", "tensorboard", str(isolated_home)),
        ("export", "1", "--to", "mlflow", str(isolated_home / "mlruns")),
        ("new", "method", "mymethod", "--dir", str(isolated_home)),
    ]
    (tmp_path / "home-link").symlink_to(isolated_home)  # and through a link to the home
    attempts.append(("report", "--format", "md", "--out", str(tmp_path / "home-link" / "table.md")))
    for argv in attempts:
        code, out, err = main(monkeypatch, capsys, *argv)
        assert code == 2 and err.count("\n") == 1, (argv, err)
        assert "rmconsole's home folder (RMCONSOLE_HOME=" in err and "give a path elsewhere" in err, (argv, err)
    assert lock.read_text() == "4242\n"
    after = sorted(str(p.relative_to(isolated_home)) for p in isolated_home.rglob("*") if "rmconsole.db" not in p.name)
    assert after == before
    code, _, err = main(monkeypatch, capsys, "report", "--format", "md", "--out", str(tmp_path / "table.md"))
    assert code == 0 and (tmp_path / "table.md").is_file(), err  # beside the home: written


# =========================================================================== 8: bounded preset reading


def _bounded_cli(*argv: str) -> tuple[int, str]:
    """The CLI in a subprocess that cannot hurt the machine: 60 s, 2 GB of address space."""
    import resource
    import subprocess

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    try:
        done = subprocess.run(
            [sys.executable, "-m", "rmconsole", *argv],
            capture_output=True,
            text=True,
            timeout=60,
            preexec_fn=limit,
            env=dict(os.environ, COLUMNS="200"),
        )
    except subprocess.TimeoutExpired:
        return -1, "timed out after 60 s"
    return done.returncode, done.stderr


def test_defect_08_a_preset_is_read_bounded(isolated_home, tmp_path) -> None:
    device = _claim("--preset /dev/zero", "test_defect_08_a_preset_is_read_bounded")
    fifo_row = _claim("--preset a FIFO", "test_defect_08_a_preset_is_read_bounded")
    large = _claim("--preset larger than a preset can be", "test_defect_08_a_preset_is_read_bounded")
    code, err = _bounded_cli("run", "--preset", "/dev/zero")
    device.check(code, err)
    os.mkfifo(tmp_path / "fifo.toml")
    code, err = _bounded_cli("run", "--preset", str(tmp_path / "fifo.toml"))
    fifo_row.check(code, err)
    (tmp_path / "big.toml").write_text("# padding\n" * 200_000)
    code, err = _bounded_cli("run", "--preset", str(tmp_path / "big.toml"))
    large.check(code, err)
    assert store.count_runs() == 0


def test_defect_08_a_deeply_nested_preset_is_one_line(isolated_home, tmp_path) -> None:
    row = _claim("a preset nested 100,000 levels deep", "test_defect_08_a_deeply_nested_preset_is_one_line")
    set_row = _claim("--set a value nested 100,000 levels deep", "test_defect_08_a_deeply_nested_preset_is_one_line")
    (tmp_path / "deep.toml").write_text("lr = " + "[" * 100_000 + "]" * 100_000 + "\n")
    code, err = _bounded_cli("run", "--preset", str(tmp_path / "deep.toml"))
    row.check(code, err)
    code, err = _bounded_cli("run", "--set", "lr=" + "[" * 50_000 + "]" * 50_000)
    set_row.check(code, err)
    (tmp_path / "fine.toml").write_text(
        'dataset = "digits"\nmodel = "mlp400"\nmemory_size = 200\n'
        'augment = ["cutmix"] # [[[ in a comment ]\nname_ish = "[[[["\n'
    )
    from rmconsole.tomlfile import nesting_depth

    assert nesting_depth((tmp_path / "fine.toml").read_text()) == 1


def test_defect_08_a_preset_with_a_bom_is_read(isolated_home, tmp_path) -> None:
    row = _claim("a preset saved with a UTF-8 BOM", "test_defect_08_a_preset_with_a_bom_is_read")
    (tmp_path / "bom.toml").write_bytes(b"\xef\xbb\xbf" + b'dataset = "digits"\nmodel = "mlp400"\nmemory_size = 150\n')
    name, cfg = load_config(str(tmp_path / "bom.toml"))
    assert cfg.memory_size == 150 and name == "bom"
    (tmp_path / "bom-bad.toml").write_bytes(b"\xef\xbb\xbf" + b'dataset = "digits"\ncolour = 1\n')
    code, err = _bounded_cli("run", "--preset", str(tmp_path / "bom-bad.toml"))
    row.check(code, err)  # read (the BOM dropped): what is refused is the key, not line 1, column 1


# =========================================================================== clock jumps


@pytest.mark.asyncio
async def test_a_heartbeat_from_the_future_is_said_so_not_negative(isolated_home) -> None:
    from datetime import datetime, timedelta

    from support import tui_store

    from rmconsole.tui import RMConsoleApp
    from rmconsole.tui.screens.run import RunScreen
    from rmconsole.tui.widgets.run_header import RunHeader

    row = _claim("a heartbeat from the future in the TUI", "test_a_heartbeat_from_the_future_is_said_so_not_negative")
    ids = tui_store.build()
    behind = lambda: datetime.now(UTC) - timedelta(hours=1)  # noqa: E731 - this clock jumped back an hour
    app = RMConsoleApp(refresh_s=0.1, clock=behind, reap_every_s=None)
    async with app.run_test(size=(140, 40)) as pilot:
        app.open_run(ids["running"])
        for _ in range(60):
            await pilot.pause(0.1)
            if isinstance(app.screen, RunScreen) and app.screen.view is not None:
                break
        header = app.screen.query_one(RunHeader).render().plain
    assert "ahead of this clock" in header and "heartbeat -" not in header, header
    row.check(None, header)


def test_heartbeats_from_the_future_and_the_reaper(isolated_home) -> None:
    import signal as signals
    import subprocess
    from datetime import timedelta

    from rmconsole.runner import launch

    alive_row = _claim(
        "a live worker whose heartbeat is in the future", "test_heartbeats_from_the_future_and_the_reaper"
    )
    dead_row = _claim(
        "a dead worker whose heartbeat is in the future", "test_heartbeats_from_the_future_and_the_reaper"
    )
    _, cfg = load_config(None)
    placeholder = store.create_run(cfg.to_dict(), "x")
    fake = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "rmconsole.runner.worker", str(placeholder + 1)],
        start_new_session=True,
    )
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        ids = []
        for pid in (fake.pid, gone.pid):
            run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
            store.update_run(
                run_id,
                status="running",
                pid=pid,
                host=socket.gethostname(),
                task=1,
                phase="train",
                heartbeat_at=store.utcnow() + timedelta(hours=1),
            )  # the clock jumped back an hour
            ids.append(run_id)
        assert launch.reap_dead() == [ids[1]]
        assert store.get_run(ids[0]).status == "running" and fake.poll() is None  # alive: left alone
        alive_row.check(None, store.get_run(ids[0]).status)
        dead = store.get_run(ids[1])
        assert dead.status == "failed"
        dead_row.check(None, dead.error)
    finally:
        fake.send_signal(signals.SIGKILL)
        fake.wait()
