"""Starting, following and stopping worker processes; detecting dead runs.

A worker runs in its own process session (so a terminal's Ctrl-C or a closed TUI does not
kill it, and a stop reaches its whole process group), with its output in a log file
under RMCONSOLE_HOME/logs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from . import store
from .cl.catalog import data_root

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


def worker_command(run_id: int, rendezvous: Any = None) -> list[str]:
    """`python -m rmconsole.worker RUN_ID`, or for a run with gpus > 1 (or several nodes) the
    torchrun launcher of `rmconsole.multigpu`."""
    gpus = int((store.get_run(run_id).config or {}).get("gpus", 1))
    if gpus > 1 or (rendezvous is not None and rendezvous.multi_node):
        from .multigpu import launcher_argv

        return launcher_argv(run_id, gpus, rendezvous)
    return [sys.executable, "-m", "rmconsole.worker", str(run_id)]


def start_worker(run_id: int, extra_env: dict[str, str] | None = None, rendezvous: Any = None) -> subprocess.Popen:
    """Start the run's worker (`worker_command`) in a new session, output to the run's log."""
    path = log_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "ab") as log:
        proc = subprocess.Popen(worker_command(run_id, rendezvous), stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                env=worker_env(extra_env))
    store.update_run(run_id, pid=proc.pid, host=socket.gethostname(), log_path=str(path))
    return proc


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not alive
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def exit_reason(returncode: int | None) -> str:
    if returncode is None:
        return "worker process is gone"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"worker killed by signal {name}"
    return f"worker exited with code {returncode}"


def mark_dead(run_id: int, reason: str) -> None:
    """Record a run whose worker died without saying so as failed (never stuck running)."""
    run = store.get_run(run_id)
    if run.status in store.ACTIVE:
        detail = f"{reason}; last phase: {run.phase or 'none'}" + (f" of task {run.task + 1}" if run.task is not None else "")
        store.update_run(run_id, status="failed", finished_at=store.utcnow(), error=detail)


def reap_dead(runs: list[store.Run] | None = None) -> list[int]:
    """Mark running runs on this host whose process is gone, or whose heartbeat is stale, failed."""
    host = socket.gethostname()
    now = store.utcnow()
    dead = []
    for run in runs if runs is not None else store.list_runs(status="running"):
        if run.status != "running":
            continue
        if run.host == host and not pid_alive(run.pid):
            mark_dead(run.id, "worker process is gone")
            dead.append(run.id)
        elif run.heartbeat_at and now - run.heartbeat_at > timedelta(seconds=STALE_AFTER_S):
            mark_dead(run.id, f"no heartbeat for {int((now - run.heartbeat_at).total_seconds())} s")
            dead.append(run.id)
    return dead


def stop_run(run_id: int, grace_s: float = 10.0) -> str:
    """SIGTERM the worker's process group, SIGKILL after the grace period; returns the status."""
    run = store.get_run(run_id)
    if run.status not in store.ACTIVE:
        raise ValueError(f"run {run_id} is {run.status}, not running: nothing to stop")
    if run.status == "queued" and not pid_alive(run.pid):
        store.update_run(run_id, status="stopped", finished_at=store.utcnow(), error="stopped before it started")
        return "stopped"
    try:
        os.killpg(run.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError, TypeError):
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and pid_alive(run.pid):
        time.sleep(0.1)
    if pid_alive(run.pid):
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    run = store.get_run(run_id)
    if run.status in store.ACTIVE:
        store.update_run(run_id, status="stopped", finished_at=store.utcnow(), error="stopped by request")
    return "stopped"


@dataclass
class Launched:
    """A run that `launch_run` stored and started."""

    run_id: int
    preset: str
    config: Any
    process: subprocess.Popen


def check_runnable(cfg: Any) -> None:
    """Refuse a config whose dataset files or CUDA device are missing here (DatasetMissing /
    ConfigError), before anything is stored."""
    from .cl.catalog import check_available

    if not cfg.download:
        check_available(cfg.dataset)
    if cfg.device not in ("auto", "cpu"):  # only a CUDA device can be missing; skip importing torch otherwise
        from .worker import resolve_device

        resolve_device(cfg.device)
    if getattr(cfg, "gpus", 1) > 1:
        from .multigpu import check_gpus

        check_gpus(cfg.gpus, cfg.device)


def launch_run(preset: str | None, overrides: list[str] | dict[str, Any] | None = None, *, seed: int | None = None,
               device: str | None = None, sweep_id: str | None = None, gpus: int | None = None,
               rendezvous: Any = None) -> Launched:
    """Preset + overrides → validated config → stored run → started worker: the one path the
    CLI's `run` and the TUI's launch screen share. A bad config, a missing dataset or an
    unavailable device is refused (ConfigError / DatasetMissing) before anything is stored."""
    from .config import load_config

    name, cfg = load_config(preset, overrides, seed=seed, device=device, gpus=gpus)
    check_runnable(cfg)
    run_id = store.create_run(cfg.to_dict(), name, sweep_id)
    return Launched(run_id, name, cfg, start_worker(run_id, rendezvous=rendezvous))
