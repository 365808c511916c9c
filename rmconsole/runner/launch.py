"""Starting, following, stopping and resuming worker processes; detecting dead runs.

What the CLI and the TUI call (through the `rmconsole.runner` face) to launch, resume, stop
and reap runs, so neither face holds logic the other lacks.

A worker runs in its own process session (so a terminal's Ctrl-C or a closed TUI does not
kill it, and a stop reaches its whole process group), with its output in a log file
under RMCONSOLE_HOME/logs. The group's leader is `rmconsole.runner.supervise`, the worker's
parent, which records how the worker ended; `run.pid` is the supervisor's pid (= the group id).

Dead runs are found two ways: the supervisor records a worker's death at once (signal or
exit code), and `reap_dead`, called by every command that lists or shows runs, catches what
no supervisor could report: a process group killed whole, a machine that rebooted, a worker
on another host whose heartbeat went stale.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from .. import store
from ..cl.catalog import data_root
from .processes import exit_reason, is_run_process, pid_alive, process_argv, python_m

STALE_AFTER_S = 30.0


def log_path(run_id: int) -> Path:
    return store.home() / "logs" / f"run-{run_id}.log"


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment with absolute store/data locations (its cwd may differ)."""
    env = dict(os.environ)
    env["RMCONSOLE_HOME"] = str(store.home().resolve())
    env["RMCONSOLE_DB"] = store.database_url()
    env["RMCONSOLE_DATA"] = str(data_root().resolve())
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def check_home() -> None:
    """Refuse, before anything is stored, a RMCONSOLE_HOME where logs and checkpoints cannot be written."""
    for folder in (store.home() / "logs", store.home() / "checkpoints"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise store.StoreError(f"cannot create {folder}: {err.strerror} "
                                   f"(set RMCONSOLE_HOME to a writable folder)") from None
        if not os.access(folder, os.W_OK):
            raise store.StoreError(f"{folder} is not writable (set RMCONSOLE_HOME to a writable folder)")


def worker_command(run_id: int, rendezvous: Any = None) -> list[str]:
    """`python -m rmconsole.runner.worker RUN_ID`, or for a run with gpus > 1 (or several nodes)
    the torchrun launcher of `rmconsole.runner.multigpu`."""
    gpus = int((store.get_run(run_id).config or {}).get("gpus", 1))
    if gpus > 1 or (rendezvous is not None and rendezvous.multi_node):
        from .multigpu import launcher_argv

        return launcher_argv(run_id, gpus, rendezvous)
    return python_m("worker", str(run_id))


def start_worker(run_id: int, extra_env: dict[str, str] | None = None, rendezvous: Any = None) -> Any:
    """Start the run's supervisor (which starts `worker_command`) in a new session, output to
    the run's log; returns the supervisor's process (a Popen, or for a warm start a handle
    with the same poll/wait/returncode). A single-process worker is forked by this home's warm
    server when one is up (runner/warm.py: no torch import to wait for); else it starts cold."""
    from . import warm

    path = log_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    env = worker_env(extra_env)
    command = worker_command(run_id, rendezvous)
    proc: Any = None
    if warm.enabled() and command == python_m("worker", str(run_id)):
        proc = warm.request(store.home().resolve(), run_id, env, path)
    if proc is None:
        with open(path, "ab") as log:
            proc = subprocess.Popen(python_m("supervise", str(run_id), "--", *command), stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, env=env)
    store.update_run(run_id, pid=proc.pid, host=socket.gethostname(), log_path=str(path))
    return proc


def worker_state(run: store.Run) -> str:
    """The run's recorded local process: "ours" (alive, and its argv names this run's
    supervisor or worker), "gone", or "other" (alive, but not recognisably ours: a pid reused by
    another program, or a worker started in-process by some other launcher). Only "ours" is
    ever signalled; "other" is judged by its heartbeat, like a run on another host."""
    if not pid_alive(run.pid):
        return "gone"
    argv = process_argv(run.pid)  # type: ignore[arg-type]
    if argv is not None and run.id is not None and is_run_process(argv, run.id):
        return "ours"
    return "other"


def last_log_line(run_id: int, limit: int = 200) -> str | None:
    """The last non-empty line of the run's log: often the error that killed it."""
    try:
        with open(log_path(run_id), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return None
    return " ".join(lines[-1].split())[:limit] if lines else None


def mark_dead(run_id: int, reason: str) -> bool:
    """Record a run whose worker died without saying so as failed (never stuck running), with
    the reason, the phase it was in and the log's last line; returns whether it was marked."""
    run = store.get_run(run_id)
    if run.status not in store.ACTIVE:
        return False
    detail = f"{reason}; last phase: {run.phase or 'none'}" + (f" of task {run.task + 1}" if run.task is not None else "")
    line = last_log_line(run_id)
    if line:
        detail += f"; last log line: {line}"
    return bool(store.mark_failed(run_id, detail))


def record_exit(run_id: int, returncode: int | None, stop_requested: bool = False, wait_s: float = 0.0) -> bool:
    """The rule for a run's process that has exited: if it left the run queued or running (a
    worker killed, or dead before it could write), whoever saw the exit records how it ended:
    `stopped` when a stop was asked for, else `failed` with the exit reason. Returns whether it
    recorded: an end already recorded (by the worker, its supervisor, a stop) is never replaced.
    `wait_s`: a pause first, for a worker that exited cleanly to finish its last write."""
    if wait_s:
        time.sleep(wait_s)
    if stop_requested:
        return bool(store.mark_stopped(run_id, f"stopped by request ({exit_reason(returncode)})"))
    return mark_dead(run_id, exit_reason(returncode))


class StartedWorkers:
    """The worker processes this console started (run id -> its supervisor's process), so that
    their ends are noticed at once. Their supervisors record how each worker ended; `exited`
    hands over the ones that have exited so `record_exit` can cover a supervisor that could not."""

    def __init__(self) -> None:
        self._processes: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()

    def add(self, run_id: int, process: subprocess.Popen) -> None:
        with self._lock:
            self._processes[run_id] = process

    def __len__(self) -> int:
        return len(self._processes)

    def exited(self) -> list[tuple[int, int]]:
        """(run id, exit code) of each process that exited since the last call (then forgotten)."""
        with self._lock:
            ended = [(run_id, proc.returncode) for run_id, proc in self._processes.items() if proc.poll() is not None]
            for run_id, _ in ended:
                del self._processes[run_id]
        return ended


def follow_run(run_id: int, process: subprocess.Popen | None = None, poll_s: float = 0.25) -> Iterator[store.Run]:
    """The run's row every `poll_s` seconds until it ends: the last row yielded is its end. If
    `process` (the run's supervisor, started here) exits while the run is still active, its end
    is recorded from the exit status (`record_exit`)."""
    while True:
        run = store.get_run(run_id)
        yield run
        if run.status not in store.ACTIVE:
            return
        if process is not None and process.poll() is not None:
            record_exit(run_id, process.returncode, wait_s=poll_s)
            yield store.get_run(run_id)
            return
        time.sleep(poll_s)


def _heartbeat_age(run: store.Run, now: datetime) -> float | None:
    if run.heartbeat_at is None:
        return None
    beat = run.heartbeat_at if run.heartbeat_at.tzinfo else run.heartbeat_at.replace(tzinfo=timezone.utc)
    return (now - beat).total_seconds()


def _kill_group(run: store.Run) -> None:
    try:
        os.killpg(run.pid, signal.SIGKILL)  # type: ignore[arg-type]
    except (ProcessLookupError, PermissionError, TypeError):
        pass


def reap_dead(runs: list[store.Run] | None = None) -> list[int]:
    """Mark failed every queued or running run whose worker is gone or whose heartbeat is stale.

    On this host a recorded pid that is gone is dead at once; a run with a stale heartbeat
    (> STALE_AFTER_S) is dead wherever it runs (this also catches a pid reused by another
    program). A stale worker of ours still alive here is killed first, so `failed` always means
    not running and a resume never races a second worker; a worker elsewhere (or one we do not
    recognise, which we never signal) sees the new status at its next heartbeat and exits.
    """
    host = socket.gethostname()
    now = store.utcnow()
    dead = []
    for run in runs if runs is not None else store.list_runs(status=store.ACTIVE):
        if run.status not in store.ACTIVE or run.id is None:
            continue
        state = worker_state(run) if run.host == host and run.pid is not None else "remote"
        age = _heartbeat_age(run, now) if run.status == "running" else None
        if state == "gone":
            reason = "worker process is gone (no exit status was recorded: its supervisor died too)"
        elif age is not None and age > STALE_AFTER_S:
            reason = f"no heartbeat for {int(age)} s"
            if state == "ours":
                _kill_group(run)
                reason += " (worker killed)"
        else:
            continue
        if mark_dead(run.id, reason):
            dead.append(run.id)
    return dead


def stop_run(run_id: int, grace_s: float = 10.0) -> str:
    """SIGTERM the worker's process group, SIGKILL after the grace period; returns the status.

    A run whose worker already died is failed, not stoppable (ValueError, one line, as for any
    run that is not queued or running). Finished tasks stay stored (each was committed as it
    ended). A run on another host cannot be signalled from here: it is marked stopped and its
    worker exits at its next heartbeat.
    """
    reap_dead([store.get_run(run_id)])
    run = store.get_run(run_id)
    if run.status not in store.ACTIVE:
        raise ValueError(f"run {run_id} is {run.status}: only queued or running runs can be stopped")
    state = worker_state(run) if run.host in (None, socket.gethostname()) else "remote"
    if state in ("remote", "other"):  # cannot (or must not) signal it: the worker obeys the store
        where = f"on {run.host}" if state == "remote" else f"(pid {run.pid}, not started by rmconsole)"
        store.finish_run(run_id, "stopped", error=f"stopped by request from {socket.gethostname()}; "
                                                  f"the worker {where} exits at its next heartbeat")
        return store.get_run(run_id).status
    if state == "gone":
        store.finish_run(run_id, "stopped", error="stopped before it started" if run.status == "queued"
                         else "stopped by request (its worker was already gone)")
        return store.get_run(run_id).status
    try:
        os.killpg(run.pid, signal.SIGTERM)  # type: ignore[arg-type]
    except (ProcessLookupError, PermissionError, TypeError):
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and pid_alive(run.pid):
        time.sleep(0.1)
    if pid_alive(run.pid):
        _kill_group(run)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and pid_alive(run.pid):
            time.sleep(0.05)
    store.finish_run(run_id, "stopped", error=f"stopped by request (no exit within {grace_s:g} s: SIGKILL)")
    return store.get_run(run_id).status


@dataclass
class Launched:
    """A run that `launch_run` stored and started."""

    run_id: int
    preset: str
    config: Any
    process: subprocess.Popen


def check_runnable(cfg: Any) -> None:
    """Refuse, before anything is stored, a config whose dataset files are missing or corrupt, whose
    CUDA device is absent, or whose RMCONSOLE_HOME is not writable (one-line errors)."""
    from ..cl.catalog import verify_dataset

    if not cfg.download:
        verify_dataset(cfg.dataset)  # present and not corrupt
    check_home()
    if cfg.device not in ("auto", "cpu"):  # only a CUDA device can be missing; skip importing torch otherwise
        from .worker import resolve_device

        resolve_device(cfg.device)
    if getattr(cfg, "gpus", 1) > 1:
        from .multigpu import check_gpus

        check_gpus(cfg.gpus, cfg.device)


def check_identity(name: str | None, tags: list[str] | None) -> list[str]:
    """A run name and tags as typed: one line, printable; tags one word each (`+`/`-` are how
    `rmconsole tag` adds and removes them). Returns the tags, each once."""
    from ..config import ConfigError

    if name is not None and (not name.strip() or not name.isprintable() or len(name) > 200):
        raise ConfigError(f"--name {name!r}: give one line of printable text (at most 200 characters)")
    out = []
    for tag in tags or []:
        if not tag or not tag.isprintable() or any(c.isspace() for c in tag) or tag[0] in "+-" or "," in tag \
                or len(tag) > 64:
            raise ConfigError(f"--tag {tag!r}: a tag is one word of printable characters without commas, "
                              f"not starting with + or - (at most 64)")
        out.append(tag)
    return list(dict.fromkeys(out))


def launch_run(preset: str | None, overrides: list[str] | dict[str, Any] | None = None, *, seed: int | None = None,
               device: str | None = None, sweep_id: str | None = None, gpus: int | None = None,
               rendezvous: Any = None, name: str | None = None, tags: list[str] | None = None) -> Launched:
    """Preset + overrides → validated config → stored run → started worker: the one path the
    CLI's `run` and the TUI's launch screen share. A bad config, a missing dataset or an
    unavailable device is refused (ConfigError / DatasetMissing) before anything is stored."""
    from ..config import load_config, overrides_of

    tags = check_identity(name, tags)
    preset_name, cfg = load_config(preset, overrides, seed=seed, device=device, gpus=gpus)
    check_runnable(cfg)
    config = cfg.to_dict()
    run_id = store.create_run(config, preset_name, sweep_id, name=name, tags=tags,
                              overrides=overrides_of(preset, config))
    return Launched(run_id, preset_name, cfg, start_worker(run_id, rendezvous=rendezvous))


def delete_run(run_id: int) -> list[str]:
    """Delete an ended run: its rows (a guarded store transition: a queued or running run is
    refused with one line), then its log and checkpoint. Returns the files removed."""
    from .checkpoints import checkpoint_path

    reap_dead([store.get_run(run_id)])
    done = store.delete_run(run_id)
    if not done:
        raise ValueError(f"run {run_id} is {done.status}: stop it first (only finished, failed or stopped runs "
                         f"can be deleted)")
    removed = []
    checkpoint = checkpoint_path(run_id)
    for path in (log_path(run_id), checkpoint, *checkpoint.parent.glob(f"{checkpoint.name}.*")):
        try:
            path.unlink()
            removed.append(str(path))
        except FileNotFoundError:
            pass
        except OSError as err:
            raise store.StoreError(f"run {run_id} is deleted from the store, but {path} could not be removed: "
                                   f"{err.strerror}") from None
    return removed


@dataclass
class Resumed:
    """A run that `resume_run` queued again and started."""

    run_id: int
    first_task: int  # the task it continues at (0-based)
    n_tasks: int | None
    from_checkpoint: bool  # False: no task had finished, it starts over
    process: subprocess.Popen


def resume_run(run_id: int, rendezvous: Any = None) -> Resumed:
    """Continue a failed or stopped run from its last task checkpoint: the CLI's `resume` and
    the TUI's. Whatever would refuse it (its state, a config this version rejects, a corrupt or
    foreign checkpoint, an unwritable RMCONSOLE_HOME) is one line before the run is touched."""
    from ..config import build_config
    from .checkpoints import check_checkpoint, load_checkpoint

    reap_dead([store.get_run(run_id)])
    run = store.get_run(run_id)
    if run.status not in ("failed", "stopped"):
        raise ValueError(f"run {run_id} is {run.status}: only failed or stopped runs can be resumed")
    build_config(run.config)  # a config this version refuses is one line here, not a failed worker
    checkpoint = load_checkpoint(run_id)
    if checkpoint is not None:
        check_checkpoint(checkpoint, run_id, run.config)
    check_home()
    if not store.requeue_run(run_id):
        raise ValueError(f"run {run_id} is {store.get_run(run_id).status} now (changed meanwhile): not resumed")
    first = int(checkpoint["task"]) + 1 if checkpoint is not None else 0
    return Resumed(run_id, first, run.n_tasks, checkpoint is not None, start_worker(run_id, rendezvous=rendezvous))
