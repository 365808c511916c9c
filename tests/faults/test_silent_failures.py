"""The 13 defect groups of issue 14, each reproduced as it was found (real processes, real
store, real file systems where a fault needs one), and the faults of the campaign that go
with them. Each test claims its row of the Faults table in docs/troubleshooting.md and checks
its exit code and message against the row.

A few faults need a file system of their own (read-only, full): those run their command in a
user and mount namespace (`unshare -rm`) over a small tmpfs or a read-only bind mount, and are
skipped where namespaces are not available.

Faults of arguments and messages call the CLI in this process (support.cli.in_process); those of
processes (a resume, a killed launcher, a lock held by another process, a pipe, /dev/stdout, the
namespaces) start them.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from conftest import rmconsole, train_in_process, wait_for
from support.campaign import claim, garble_run_table
from support.cli import in_process
from support.online_helpers import defaults_on_digits

from rmconsole import cli, store
from rmconsole.cl.data import load_digits
from rmconsole.cl.events import TaskOutcome
from rmconsole.cl.loop import run_protocol
from rmconsole.cl.methods import REGISTRY
from rmconsole.config import load_config
from rmconsole.runner import checkpoints, launch
from rmconsole.store import db

HERE = "test_silent_failures.py::"
SLOW_RUN = {"epochs": 20, "threads": 1, "device": "cpu"}
QUICK_RUN = {"epochs": 1, "threads": 1, "device": "cpu"}


def _claim(case: str, test: str):
    return claim(case, HERE + test)


def forget_engines() -> None:
    """Drop this process's pooled connections (as a fresh process would have none)."""
    for engine in db._ENGINES.values():
        engine.dispose()
    db._ENGINES.clear()


def new_run(settings: dict | None = None, sweep_id: str | None = None) -> int:
    _, cfg = load_config(None, {**QUICK_RUN, **(settings or {})})
    return store.create_run(cfg.to_dict(), "digits-blurry10-online", sweep_id)


def finished_run(accuracy: float = 80.0) -> int:
    """A finished run with one task result (enough for `report`)."""
    run_id = new_run()
    store.record_task(run_id, TaskOutcome(0, accuracy, [accuracy], [accuracy] * 10, list(range(10)), 1.0))
    store.update_run(run_id, status="finished")
    return run_id


def log_of(home: Path, run_id: int) -> str:
    return (home / "logs" / f"run-{run_id}.log").read_text(errors="replace")


def namespaces() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


needs_namespaces = pytest.mark.skipif(not namespaces(), reason="needs `unshare -rm` (user and mount namespaces)")


def in_namespace(script: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run a shell script as root of a new user and mount namespace (its mounts vanish with it)."""
    full = dict(os.environ, **(env or {}), PY=sys.executable)
    return subprocess.run(
        ["unshare", "-rm", "sh", "-ec", script], capture_output=True, text=True, env=full, timeout=timeout
    )


def flip_byte(path: Path, offset: int = 300) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


# =========================================================================== 1. store identity


def test_defect_01_a_recreated_store_is_never_written_by_an_old_worker(isolated_home) -> None:
    """The reproduction: a detached run in task 2, `rm rmconsole.db*` (the advice for a bad store
    was "move that file away"), a new run stored (id 1 again). The old worker must stop with one
    line, its supervisor must write nothing, and the new run 1 must stay untouched."""
    row = _claim("store deleted during a run", "test_defect_01_a_recreated_store_is_never_written_by_an_old_worker")
    run_id = new_run(SLOW_RUN)
    supervisor = launch.start_worker(run_id)
    wait_for(lambda: (r := store.get_run(run_id)).task == 1 and r.status == "running", 300, what="task 2")
    assert checkpoints.checkpoint_path(run_id).exists()
    forget_engines()
    # the worker (and its supervisor, one process group) paused while the store is swapped, so
    # what it finds is the replacement, never the moment in between (that is the next test's case)
    os.killpg(supervisor.pid, signal.SIGSTOP)
    try:
        for path in isolated_home.glob("rmconsole.db*"):
            path.unlink()
        _, cfg = load_config(None)
        assert store.create_run(cfg.to_dict(), "a new store") == run_id  # the new store's run 1
    finally:
        os.killpg(supervisor.pid, signal.SIGCONT)
    code = supervisor.wait(timeout=120)
    new = store.get_run(run_id)
    assert (new.status, new.error, new.started_at, new.preset) == ("queued", None, None, "a new store")
    assert store.task_results(run_id) == [] and store.memory_snapshots(run_id) == []
    lines = [line for line in log_of(isolated_home, run_id).splitlines() if "this worker stops" in line]
    assert len(lines) == 1 and "store" in lines[0], log_of(isolated_home, run_id)[-2000:]
    assert "supervisor:" not in log_of(isolated_home, run_id)  # the supervisor recorded nothing either
    assert checkpoints.checkpoint_path(run_id).exists()  # the old run's checkpoint is kept
    row.check(code, lines[0])


def test_defect_01_a_worker_whose_store_vanished_stops_and_creates_none(isolated_home) -> None:
    row = _claim(
        "store file removed, not replaced", "test_defect_01_a_worker_whose_store_vanished_stops_and_creates_none"
    )
    run_id = new_run(SLOW_RUN)
    supervisor = launch.start_worker(run_id)
    wait_for(lambda: store.get_run(run_id).task is not None, 300, what="training")
    forget_engines()
    for path in isolated_home.glob("rmconsole.db*"):
        path.unlink()
    code = supervisor.wait(timeout=120)
    assert not list(isolated_home.glob("rmconsole.db*"))  # nobody made an empty store
    log = log_of(isolated_home, run_id)
    lines = [line for line in log.splitlines() if "this worker stops" in line]
    assert len(lines) == 1, log[-2000:]
    row.check(code, lines[0])


def test_defect_01_an_older_attempt_never_ends_the_new_one(isolated_home) -> None:
    row = _claim("an older attempt's supervisor", "test_defect_01_an_older_attempt_never_ends_the_new_one")
    run_id = new_run()
    first = store.Lease(run_id, store.get_run(run_id).token, store.store_id())
    assert store.claim_run(run_id, lease=first)
    assert store.mark_failed(run_id, "no heartbeat for 31 s", lease=first)  # thought dead; in fact alive elsewhere
    assert store.requeue_run(run_id)
    second = store.Lease(run_id, store.get_run(run_id).token, store.store_id())
    assert second.token != first.token and store.claim_run(run_id, lease=second)
    assert not launch.record_exit(run_id, -signal.SIGKILL, lease=first)  # the first attempt's supervisor, late
    with pytest.raises(store.LeaseLost) as lost:
        store.heartbeat(run_id, lease=first, phase="stale")  # and its worker, if it still runs
    run = store.get_run(run_id)
    assert (run.status, run.error, run.phase) == ("running", None, None)
    row.check(None, str(lost.value))


def test_defect_01_a_deleted_stores_checkpoint_is_set_aside_not_used(isolated_home) -> None:
    row = _claim("a deleted store's checkpoint", "test_defect_01_a_deleted_stores_checkpoint_is_set_aside_not_used")
    run_id = new_run()
    _, cfg = load_config(None, {"memory_size": 300})
    left = checkpoints.save_checkpoint(run_id, {"task": 3, "method": {}}, cfg.to_dict())  # another store's run 1
    leftover = left.read_bytes()
    code = launch.start_worker(run_id).wait(timeout=300)
    assert code == 0 and store.get_run(run_id).status == "finished"
    aside = list((isolated_home / "checkpoints" / "orphaned").glob(f"run-{run_id}-*.pt"))
    assert len(aside) == 1 and aside[0].read_bytes() == leftover
    line = next(line for line in log_of(isolated_home, run_id).splitlines() if "never wrote" in line)
    row.check(None, line)


# =========================================================================== 2. checkpoints


def test_defect_02_a_changed_checkpoint_is_refused(isolated_home, monkeypatch) -> None:
    row = _claim("a flipped byte in a checkpoint", "test_defect_02_a_changed_checkpoint_is_refused")
    run_id = new_run()
    train_in_process(run_id, fail_after_task=1)
    path = checkpoints.checkpoint_path(run_id)
    recorded = [getattr(r, "checkpoint_sha256", None) for r in store.task_results(run_id)]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == recorded[-1] and len(recorded) == 2
    flip_byte(path)
    before = store.get_run(run_id)
    out = rmconsole("resume", str(run_id))
    after = store.get_run(run_id)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert (after.status, after.error, after.token) == (before.status, before.error, before.token)  # not requeued
    row.check(out.returncode, out.stderr)
    flip_byte(path)  # put it back: now it is the file that was written, and it resumes
    again = rmconsole("resume", str(run_id))
    assert again.returncode == 0 and "resuming at task 3/5" in again.stdout, again.stdout + again.stderr


def test_defect_02_a_checkpoint_one_task_behind_is_still_verified(isolated_home, monkeypatch) -> None:
    row = _claim(
        "a kill between the result and the rename", "test_defect_02_a_checkpoint_one_task_behind_is_still_verified"
    )
    run_id = new_run()
    train_in_process(run_id, lose_rename_of_task=3)
    assert [r.task for r in store.task_results(run_id)] == [0, 1, 2, 3]  # task 4's result committed...
    state = torch.load(checkpoints.checkpoint_path(run_id), weights_only=True)
    assert state["task"] == 2  # ...but its checkpoint never reached its place
    out = rmconsole("resume", str(run_id))
    assert out.returncode == 0, out.stdout + out.stderr
    assert store.get_run(run_id).status == "finished" and len(store.task_results(run_id)) == 5
    row.check(out.returncode, out.stdout)


# =========================================================================== 3. damaged pages


def test_defect_03_damaged_pages_are_one_line_naming_the_verdict(isolated_home) -> None:
    row = _claim("damaged store pages", "test_defect_03_damaged_pages_are_one_line_naming_the_verdict")
    for _ in range(5):  # more than one page of the run table (a run holds its method's keys only)
        finished_run()
    forget_engines()
    garble_run_table(isolated_home / "rmconsole.db")
    for command in (["runs"], ["show", "1"], ["report"], ["run", "--detach"], ["stop", "1"], ["resume", "1"]):
        out = in_process(*command)
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (command, out.stderr)
        row.check(out.returncode, out.stderr)


# =========================================================================== 4. integers


def test_defect_04_integers_are_checked_at_the_edge(isolated_home) -> None:
    row = _claim("a 20-digit integer", "test_defect_04_integers_are_checked_at_the_edge")
    big = "99999999999999999999"
    finished_run()
    for command in (
        ["run", "--seed", big],
        ["run", "--set", f"seed={big}"],
        ["show", big],
        ["stop", big],
        ["resume", big],
        ["run", "--set", f"memory_size={big}"],
        ["runs", "--limit", big + "0"],
    ):
        out = in_process(*command)
        if command[:2] == ["runs", "--limit"]:  # a huge limit is simply "all"
            assert out.returncode == 0, out.stderr
            continue
        assert out.returncode == 2 and out.stderr.count("\n") == 1, (command, out.stderr)
        row.check(out.returncode, out.stderr)
    assert [r.id for r in store.list_runs()] == [1]


# =========================================================================== 5. report outputs


def test_defect_05_a_symlink_is_written_through(isolated_home, tmp_path) -> None:
    row = _claim("--out a symlink", "test_defect_05_a_symlink_is_written_through")
    finished_run()
    target = tmp_path / "target.md"
    target.write_text("old")
    link = tmp_path / "link.md"
    link.symlink_to(target)
    out = in_process("report", "--format", "md", "--out", str(link))
    assert out.returncode == 0, out.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)  # still a link...
    assert "| method |" in target.read_text()  # ...to the new report
    assert not list(tmp_path.glob(".*.tmp"))
    row.check(out.returncode, out.stderr)


def test_defect_05_a_device_is_written_in_place(isolated_home) -> None:
    row = _claim("--out /dev/stdout", "test_defect_05_a_device_is_written_in_place")
    finished_run()
    out = rmconsole("report", "--format", "md", "--out", "/dev/stdout")
    assert out.returncode == 0, out.stderr
    assert Path("/dev/stdout").is_symlink() or Path("/dev/stdout").is_char_device()
    row.check(out.returncode, out.stdout)


@needs_namespaces
def test_defect_05_a_read_only_file_system_is_one_line(isolated_home, tmp_path) -> None:
    row = _claim("--out on a read-only file system", "test_defect_05_a_read_only_file_system_is_one_line")
    finished_run()
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "old.md").write_text("old")
    done = in_namespace(f"""
        mount --bind {ro} {ro} && mount -o remount,bind,ro {ro}
        for option in "--format md --out {ro}/old.md" "--format md --out {ro}/sub/new.md" "--plot {ro}/acc.png"; do
            "$PY" -m rmconsole report $option 2>&1 && echo "exit 0" || echo "exit $?"
        done""")
    lines = done.stdout.splitlines()
    assert lines.count("exit 2") == 3 and len(lines) == 6 and "Traceback" not in done.stdout, done.stdout + done.stderr
    for message in lines[0::2]:
        assert "read-only file system" in message, message
    row.check(2, lines[0])
    assert (ro / "old.md").read_text() == "old" and sorted(p.name for p in ro.iterdir()) == ["old.md"]


@needs_namespaces
def test_defect_05_a_full_disk_leaves_the_old_file_and_no_temporary_one(isolated_home, tmp_path) -> None:
    row = _claim("--out on a full disk", "test_defect_05_a_full_disk_leaves_the_old_file_and_no_temporary_one")
    for _ in range(30):
        finished_run()
    full = tmp_path / "full"
    full.mkdir()
    done = in_namespace(f"""
        mount -t tmpfs -o size=16k tmpfs {full}
        echo old > {full}/out.json
        head -c 100000 /dev/zero > {full}/fill 2>/dev/null || true
        "$PY" -m rmconsole report --format json --out {full}/out.json 2>&1 && echo "exit 0" || echo "exit $?"
        echo "content: $(cat {full}/out.json)"
        ls -a {full}""")
    lines = done.stdout.splitlines()
    assert lines[1] == "exit 2" and lines[2] == "content: old", done.stdout + done.stderr
    assert sorted(lines[3:]) == [".", "..", "fill", "out.json"]  # no temporary file left
    row.check(2, lines[0])


# =========================================================================== 6. locks


def _hold_write_lock(path: Path) -> subprocess.Popen:
    """Another process that holds the store's write lock (BEGIN IMMEDIATE) until killed."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import sqlite3, sys, time
        conn = sqlite3.connect({str(path)!r}, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE run SET phase = 'held' WHERE id = 1")
        print("locked", flush=True)
        time.sleep(600)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_defect_06_reads_never_wait_on_the_write_lock(isolated_home) -> None:
    row = _claim("reads while another process writes", "test_defect_06_reads_never_wait_on_the_write_lock")
    finished_run()
    baseline = time.monotonic()
    assert rmconsole("runs").returncode == 0
    unlocked = time.monotonic() - baseline
    holder = _hold_write_lock(isolated_home / "rmconsole.db")
    try:
        for command in (["runs"], ["show", "1"], ["report", "--format", "csv"], ["runs", "--json"]):
            started = time.monotonic()
            out = rmconsole(*command, timeout=60)
            seconds = time.monotonic() - started
            assert out.returncode == 0 and "waiting" not in out.stderr, (command, out.stderr)
            assert seconds < unlocked + 5, (command, seconds, unlocked)
        row.check(out.returncode, out.stderr)
    finally:
        holder.kill()
        holder.wait()


def test_defect_06_a_blocked_write_says_what_it_waits_on(isolated_home) -> None:
    import select

    row = _claim("a write that must wait", "test_defect_06_a_blocked_write_says_what_it_waits_on")
    finished_run()
    holder = _hold_write_lock(isolated_home / "rmconsole.db")
    command = subprocess.Popen(
        [sys.executable, "-m", "rmconsole", "run", "--detach", "--set", "epochs=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "RMCONSOLE_WAIT_NOTICE_S": "2"},
    )  # the suite raises it
    try:
        started = time.monotonic()
        ready, _, _ = select.select([command.stderr], [], [], 25)  # imports, then 2 s of waiting
        line = command.stderr.readline() if ready else ""
        said_after = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    out, err = command.communicate(timeout=400)
    assert line, "nothing said within 25 s while waiting on the lock"
    assert command.returncode == 0 and out.strip() == "2", (out, err)
    assert f"held by pid {holder.pid}" in line, line
    assert said_after < 25, said_after
    row.check(command.returncode, line)


@pytest.mark.asyncio
async def test_defect_06_the_tui_opens_while_another_process_writes(isolated_home) -> None:
    """A fresh TUI process (here: a fresh engine) opens and lists the runs while another
    process holds the write lock: opening the store reads its schema, no lock needed."""
    from support import tui_store
    from test_tui import SIZE, table_ids, until

    from rmconsole.tui import RMConsoleApp

    row = _claim("the TUI while another process writes", "test_defect_06_the_tui_opens_while_another_process_writes")
    ids = tui_store.build()
    forget_engines()
    holder = _hold_write_lock(isolated_home / "rmconsole.db")
    try:
        app = RMConsoleApp(refresh_s=0.2)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(table_ids(app)) == len(ids), timeout=10, what="the rows")
    finally:
        holder.kill()
        holder.wait()
    row.check(None, "")


# =========================================================================== 7. stuck in queued


def test_defect_07_a_run_whose_launcher_died_is_reaped_and_resumable(isolated_home) -> None:
    row = _claim(
        "`run` killed before it starts the worker", "test_defect_07_a_run_whose_launcher_died_is_reaped_and_resumable"
    )
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
        import os, signal
        from rmconsole.runner import launch
        launch.start_worker = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # dies right after the commit
        launch.launch_run(None, ["epochs=1", "threads=1"])
        """),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert killed.returncode == -signal.SIGKILL
    assert store.get_run(1).status == "queued"
    out = in_process("runs")
    assert out.returncode == 0 and store.get_run(1).status == "failed", out.stderr
    line = next(line for line in out.stderr.splitlines() if "marked failed" in line)
    row.check(out.returncode, line)
    resumed = rmconsole("resume", "1")
    assert resumed.returncode == 0 and store.get_run(1).status == "finished", resumed.stdout + resumed.stderr


def test_defect_07_a_worker_that_cannot_start_leaves_no_queued_run(isolated_home) -> None:
    row = _claim("a worker that cannot be started", "test_defect_07_a_worker_that_cannot_start_leaves_no_queued_run")
    (isolated_home / "logs" / "run-1.log").mkdir(parents=True)
    out = rmconsole("run", "--detach", "--set", "epochs=1")
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    run = store.get_run(1)
    assert run.status == "failed" and "could not start its worker" in run.error
    row.check(None, out.stderr)


def test_defect_07_a_queued_run_nobody_drives_is_resumable(isolated_home) -> None:
    row = _claim("a sweep's run with no queue runner", "test_defect_07_a_queued_run_nobody_drives_is_resumable")
    run_id = new_run(sweep_id="orphan")
    new_run(sweep_id="orphan")
    listed = in_process("runs")
    assert "no queue runner" in listed.stdout
    out = rmconsole("resume", str(run_id))
    assert out.returncode == 0 and store.get_run(run_id).status == "finished", out.stdout + out.stderr
    row.check(out.returncode, out.stdout)


# =========================================================================== 8. ranges


def run_bounded(args: list[str], max_rss_mb: float, timeout: float) -> tuple[int, float, float]:
    """Run the CLI, killing it if its memory passes `max_rss_mb` or it runs past `timeout`:
    (exit code, peak RSS in MB, seconds)."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rmconsole", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    peak = 0.0
    while proc.poll() is None:
        try:
            rss = (
                next(
                    int(line.split()[1])
                    for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines()
                    if line.startswith("VmRSS:")
                )
                / 1024
            )
        except (OSError, StopIteration):
            rss = 0.0
        peak = max(peak, rss)
        if rss > max_rss_mb or time.monotonic() - started > timeout:
            proc.kill()
        time.sleep(0.05)
    return proc.returncode, peak, time.monotonic() - started


def test_defect_08_ranges_stay_ranges(isolated_home) -> None:
    row = _claim("a range of 100 billion ids", "test_defect_08_ranges_stay_ranges")
    finished_run()
    code, peak_mb, seconds = run_bounded(["report", "--runs", "1-99999999999", "--format", "csv"], 1500, 120)
    assert code == 0 and peak_mb < 1500 and seconds < 120, (code, peak_mb, seconds)
    out = in_process("report", "--runs", "1-99999999999", "--format", "csv")
    assert out.stdout.count("\n") == 2, out.stdout
    row.check(code, out.stderr)


# =========================================================================== 9. bad values


@pytest.mark.parametrize(
    "method",
    # the default run: the task protocol's fit (rm, finetune), its after-task check (bic), the task-free driver's (er_ace)
    [
        m
        if m in ("rm", "finetune", "bic", "er_ace")
        else pytest.param(
            m,
            marks=pytest.mark.skip(reason="knn trains nothing (a frozen backbone's features): no loss to diverge")
            if m == "knn"
            else pytest.mark.slow,
        )
        for m in sorted(REGISTRY)
    ],
)
def test_defect_09_a_diverging_loss_stops_every_method(method) -> None:
    row = _claim("a loss that becomes infinite, every method", "test_defect_09_a_diverging_loss_stops_every_method")
    # under the method's own protocol: the task-free-only methods refuse the default preset's stream=online
    cfg = defaults_on_digits(method, lr=1e30, epochs=2, uncertainty_views=2, device="cpu")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with pytest.raises(FloatingPointError) as diverged:  # (train.Diverged)
            run_protocol(cfg, load_digits(), torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
    assert "\n" not in str(diverged.value)
    row.check(None, str(diverged.value))


def test_defect_09_a_diverging_run_fails_with_one_line(isolated_home) -> None:
    row = _claim("a diverging run's worker", "test_defect_09_a_diverging_run_fails_with_one_line")
    out = rmconsole("run", "--set", "lr=1e30", "--set", "epochs=1", "--set", "threads=1")
    run = store.get_run(1)
    assert out.returncode == 1 and run.status == "failed" and run.metrics is None, out.stdout + out.stderr
    assert "\n" not in run.error and "Traceback" not in log_of(isolated_home, 1)
    row.check(out.returncode, run.error)


def test_defect_09_a_refused_resume_keeps_the_original_error(isolated_home, tmp_path) -> None:
    row = _claim("resume keeps the original error", "test_defect_09_a_refused_resume_keeps_the_original_error")
    _, cfg = load_config("mnist-blurry10-online")
    run_id = store.create_run(cfg.to_dict(), "mnist-blurry10-online")
    store.mark_failed(run_id, "worker killed by signal SIGKILL; last phase: memory of task 3")
    before = store.get_run(run_id)
    out = in_process("resume", str(run_id), env={"RMCONSOLE_DATA": str(tmp_path / "gone")})
    after = store.get_run(run_id)
    assert out.returncode == 2 and (after.status, after.error, after.token) == (
        before.status,
        before.error,
        before.token,
    )
    row.check(out.returncode, out.stderr)


# =========================================================================== 10. disk full


@needs_namespaces
def test_defect_10_no_space_for_a_checkpoint_keeps_the_finished_tasks(isolated_home) -> None:
    row = _claim("no space for a checkpoint", "test_defect_10_no_space_for_a_checkpoint_keeps_the_finished_tasks")
    folder = isolated_home / "checkpoints"
    folder.mkdir(parents=True)
    done = in_namespace(f"""
        mount -t tmpfs -o size=16k tmpfs {folder}
        "$PY" -m rmconsole run --set epochs=1 --set threads=1 >/dev/null 2>&1 && echo "exit 0" || echo "exit $?"
        ls -a {folder}""")
    lines = done.stdout.splitlines()
    assert lines[0] == "exit 1" and sorted(lines[1:]) == [".", ".."], done.stdout + done.stderr
    run = store.get_run(1)
    assert run.status == "failed" and len(store.task_results(1)) == 1  # the finished task is kept
    row.check(1, run.error)
    out = rmconsole("resume", "1")  # with space again (outside the namespace), it completes
    assert out.returncode == 0 and len(store.task_results(1)) == 5, out.stdout + out.stderr
    assert "resuming at task 1/5" in out.stdout  # where the message said it would


@needs_namespaces
def test_defect_10_no_space_for_the_store_is_one_line(isolated_home) -> None:
    row = _claim("no space for the store", "test_defect_10_no_space_for_the_store_is_one_line")
    home = isolated_home
    home.mkdir(parents=True)
    done = in_namespace(f"""
        mount -t tmpfs -o size=1m tmpfs {home}
        "$PY" -m rmconsole runs >/dev/null
        mkdir -p {home}/logs {home}/checkpoints
        head -c 2000000 /dev/zero > {home}/fill 2>/dev/null || true
        "$PY" -m rmconsole run --detach 2>&1 && echo "exit 0" || echo "exit $?"
        "$PY" -m rmconsole runs --json 2>&1 | tr -d '\\n'; echo""")
    lines = done.stdout.splitlines()
    assert lines[1] == "exit 2" and lines[2] == "[]", done.stdout + done.stderr
    row.check(2, lines[0])


@needs_namespaces
def test_defect_10_a_full_log_disk_does_not_crash_the_worker(isolated_home) -> None:
    row = _claim("no space for the log", "test_defect_10_a_full_log_disk_does_not_crash_the_worker")
    logs = isolated_home / "logs"
    logs.mkdir(parents=True)
    done = in_namespace(f"""
        mount -t tmpfs -o size=8k tmpfs {logs}
        head -c 100000 /dev/zero > {logs}/fill 2>/dev/null || true
        "$PY" -m rmconsole run --set epochs=1 --set threads=1 >/dev/null 2>&1 && echo "exit 0" || echo "exit $?"
        """)
    assert done.stdout.strip() == "exit 0", done.stdout + done.stderr
    assert store.get_run(1).status == "finished" and len(store.task_results(1)) == 5
    row.check(0, "")


# =========================================================================== 11-13


def test_defect_11_the_url_is_built_not_pasted(tmp_path, monkeypatch) -> None:
    row = _claim("? and %41 in RMCONSOLE_HOME", "test_defect_11_the_url_is_built_not_pasted")
    home = tmp_path / "x?y%41"
    monkeypatch.setenv("RMCONSOLE_HOME", str(home))
    out = in_process("run", "--set", "epochs=1", "--set", "threads=1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert (home / "rmconsole.db").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "x?y%41"] or sorted(
        p.name for p in tmp_path.iterdir()
    ) == ["x?y%41"]  # nothing outside HOME
    assert store.get_run(1).status == "finished" and len(store.task_results(1)) == 5
    row.check(out.returncode, out.stderr)


def test_defect_12_a_name_too_long_is_one_line(isolated_home) -> None:
    row = _claim("a 5000-character preset name", "test_defect_12_a_name_too_long_is_one_line")
    out = in_process("run", "--preset", "x" * 5000)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and len(out.stderr) < 400, out.stderr
    row.check(out.returncode, out.stderr)


def test_defect_13_refresh_is_clamped(isolated_home, monkeypatch, capsys) -> None:
    row = _claim("--refresh 0.0001", "test_defect_13_refresh_is_clamped")
    import rmconsole.tui as tui

    started = {}

    class FakeApp:
        def __init__(self, refresh_s: float) -> None:
            started["refresh_s"] = refresh_s

        def run(self) -> None:
            pass

    monkeypatch.setattr(tui, "RMConsoleApp", FakeApp)
    monkeypatch.setattr(sys, "argv", ["rmconsole", "tui", "--refresh", "0.0001"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    assert exited.value.code == 0 and started["refresh_s"] == 0.1
    row.check(None, capsys.readouterr().err)


def test_defect_13_usage_errors_are_one_line(isolated_home) -> None:
    row = _claim("a usage error", "test_defect_13_usage_errors_are_one_line")
    for args in (["runs", "--limt", "3"], ["show"], ["launch"], ["stop", "1", "--grace", "soon"]):
        out = in_process(*args)
        assert out.returncode == 2 and out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
        assert "╭" not in out.stderr and "Usage:" not in out.stderr
    row.check(2, rmconsole("runs", "--limt", "3").stderr)  # the row: in a real terminal process


def test_broken_pipe_is_quiet(isolated_home) -> None:
    row = _claim("a broken pipe", "test_broken_pipe_is_quiet")
    _, cfg = load_config(None)
    store.create_runs([cfg.to_dict()] * 300, "digits-blurry10-online", "wide")
    done = subprocess.run(
        f"{sys.executable} -m rmconsole runs --json | head -c 10",
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert len(done.stdout) == 10 and done.stdout.startswith("[") and done.stderr == "", done.stderr
    row.check(None, done.stderr)


def test_a_bug_is_one_line_and_debug_shows_it(isolated_home, monkeypatch, capsys) -> None:
    row = _claim("a bug", "test_a_bug_is_one_line_and_debug_shows_it")

    def broken(*args, **kwargs):
        raise RuntimeError("an invariant that does not hold")

    monkeypatch.setattr(store, "find_runs", broken)
    monkeypatch.setattr(sys, "argv", ["rmconsole", "runs"])
    with pytest.raises(SystemExit) as exited:
        cli.main()
    err = capsys.readouterr().err
    assert exited.value.code == 1 and err.count("\n") == 1 and "Traceback" not in err
    row.check(exited.value.code, err)
    monkeypatch.setattr(sys, "argv", ["rmconsole", "--debug", "runs"])
    with pytest.raises(RuntimeError):
        cli.main()
    monkeypatch.setattr(cli.errors, "_debug", False)


def test_a_replaced_store_is_read_anew(isolated_home, tmp_path) -> None:
    row = _claim("store replaced under a reader", "test_a_replaced_store_is_read_anew")
    finished_run()
    first = store.store_id()
    assert store.count_runs() == 1
    for path in isolated_home.glob("rmconsole.db*"):
        path.rename(tmp_path / path.name)  # moved away (as the advice says) while this process holds it open
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "from rmconsole import store; from rmconsole.config import "
            "load_config; c = load_config(None)[1].to_dict(); [store.create_run(c, 'b') for _ in "
            "range(3)]",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    assert store.count_runs() == 3  # this process reads the new store, not the file it had open
    assert store.store_id() != first
    row.check(None, "")
