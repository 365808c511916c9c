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

A run handed to a scheduler (`executors.py`: Slurm through submitit) has no local process:
launching submits it, stopping cancels its job, resuming submits it again, and `reap_dead`
asks the scheduler about it (`executors.reap_scheduled`) instead of looking for a pid.
"""

from __future__ import annotations

import errno
import functools
import os
import select
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

from .. import private, store
from ..cl.datasets import data_root
from ..store.db import password_by_file
from .multigpu import worker_command
from .processes import exit_reason, is_run_process, pid_alive, process_argv, python_m
from .request import LaunchRequest, check_name, check_tags

STALE_AFTER_S = 30.0


def log_path(run_id: int) -> Path:
    return store.home() / "logs" / f"run-{run_id}.log"


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment with absolute store/data locations (its cwd may differ). The
    SQLite file in RMCONSOLE_HOME is found from RMCONSOLE_HOME; a RMCONSOLE_DB is passed as the
    URL object renders it (a relative SQLite path made absolute)."""
    env = dict(os.environ)
    env["RMCONSOLE_HOME"] = str(store.home().resolve())
    if os.environ.get("RMCONSOLE_DB"):
        env["RMCONSOLE_DB"] = store.database_url()
        path = store.database_path()
        if path is not None:
            env["RMCONSOLE_DB"] = (
                store.database_url_object().set(database=str(path)).render_as_string(hide_password=False)
            )
        env.update(password_by_file(env["RMCONSOLE_DB"]))  # the password by path, not in the environment
    env["RMCONSOLE_DATA"] = str(data_root().resolve())
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def check_home() -> None:
    """Refuse, before anything is stored, a RMCONSOLE_HOME where logs and checkpoints cannot be written."""
    for folder in (store.home() / "logs", store.home() / "checkpoints"):
        try:
            private.mkdir(folder)  # 0700, the home too when it is new
        except OSError as err:
            raise store.StoreError(
                f"cannot create {folder}: {err.strerror} (set RMCONSOLE_HOME to a writable folder)"
            ) from None
        if not os.access(folder, os.W_OK):
            raise store.StoreError(f"{folder} is not writable (set RMCONSOLE_HOME to a writable folder)")


def set_aside_log(run_id: int) -> Path | None:
    """Move a log that cannot be this run's to logs/orphaned/: the run never started and the file
    was last written before the run was stored (a deleted store's run with the same id left it),
    so that the new run's log starts with the new run. Returns where it went."""
    path = log_path(run_id)
    try:
        run = store.get_run(run_id)
        if run.started_at is not None or not path.is_file():
            return None
        created = run.created_at if run.created_at.tzinfo else run.created_at.replace(tzinfo=UTC)
        if path.stat().st_mtime >= created.timestamp():
            return None
        aside = path.parent / "orphaned" / f"run-{run_id}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
        private.mkdir(aside.parent)
        os.replace(path, aside)  # an old worker still writing follows its file there
        return aside
    except (OSError, store.UnknownRun):
        return None


class StartFailed(Exception):
    """A run's worker could not be started (its log cannot be opened, no process could be
    made): the run was marked failed with the reason; the message is one line."""


class WorkerProcess(subprocess.Popen):
    """A run's supervisor process, with the lease of the attempt it runs: whoever records how
    it ended (record_exit) presents that lease, so an attempt never ends another one."""

    lease: store.Lease | None = None


def start_worker(run_id: int, extra_env: dict[str, str] | None = None, rendezvous: Any = None) -> Any:
    """Start the run's supervisor (which starts `worker_command`) in a new session, output to
    the run's log, with the run's lease in its environment; returns the supervisor's process (a
    Popen, or for a warm start a handle with the same poll/wait/returncode). A single-process
    worker is forked by this home's warm server when one is up (runner/warm.py: no torch import
    to wait for); else it starts cold. If it cannot be started the run is marked failed (never
    left queued) and StartFailed says why."""
    from . import warm

    lease = store.Lease(run_id, store.ensure_token(run_id), store.store_id())
    path = log_path(run_id)
    proc: Any = None
    try:
        command = worker_command(run_id, rendezvous)
        private.mkdir(path.parent)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        aside = set_aside_log(run_id)
        if aside is not None:
            with private.open_append(path) as log:
                log.write(
                    f"a log this run never wrote (a deleted store's run {run_id}?) was moved to {aside}\n".encode()
                )
        env = worker_env({**(extra_env or {}), **lease.env()})
        if warm.enabled() and command == python_m("worker", str(run_id)):
            proc = warm.request(store.home().resolve(), run_id, env, path)
        if proc is None:
            with private.open_append(path) as log:
                proc = WorkerProcess(
                    python_m("supervise", str(run_id), "--", *command),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    env=env,
                    umask=private.UMASK,
                )
    except OSError as err:
        reason = f"could not start its worker: {describe_os_error(err)}"
        try:
            store.mark_failed(run_id, reason, lease=lease)
        except (store.StoreError, store.LeaseLost):
            pass
        raise StartFailed(
            f"run {run_id} {reason}; it is marked failed (`rmconsole resume {run_id}` once that is fixed)"
        ) from None
    proc.lease = lease
    store.update_run(run_id, lease=lease, pid=proc.pid, host=socket.gethostname(), log_path=str(path))
    return proc


def describe_os_error(err: OSError) -> str:
    """An OS error as one line: what failed, on which path."""
    what = err.strerror or type(err).__name__
    where = err.filename if err.filename is not None else None
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"no space left on device ({where})" if where else "no space left on device"
    return f"{what}: {shorten(str(where))}" if where is not None else what


def shorten(text: str, limit: int = 120) -> str:
    """An echoed value kept to one short line: long ones keep their start and end."""
    text = " ".join(str(text).split())
    return text if len(text) <= limit else f"{text[: limit // 2 - 1]}…{text[-(limit // 2 - 1) :]}"


def worker_state(run: store.Run) -> str:
    """The run's recorded local process: "ours" (alive, and its argv names this run's
    supervisor or worker), "gone", or "other" (alive, but not recognisably ours: a pid reused by
    another program, or a worker started in-process by some other launcher). Only "ours" is
    ever signalled; "other" is judged by its heartbeat, like a run on another host."""
    if run.pid is None or not pid_alive(run.pid):
        return "gone"
    argv = process_argv(run.pid)
    if argv is not None and run.id is not None and is_run_process(argv, run.id):
        return "ours"
    return "other"


def last_log_line(run_id: int, limit: int = 200) -> str | None:
    """The last non-empty line of the run's log (not a store notice, `rmconsole: waiting for…`, nor
    its supervisor's): often the error that killed it."""
    try:
        with open(log_path(run_id), "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [
                ln.strip()
                for ln in f.read().decode(errors="replace").splitlines()
                if ln.strip() and not ln.startswith(("rmconsole: ", "supervisor: "))
            ]  # the store's notices, not the run's
    except OSError:
        return None
    return " ".join(lines[-1].split())[:limit] if lines else None


def mark_dead(run_id: int, reason: str, lease: store.Lease | None = None) -> bool:
    """Record a run whose worker died without saying so as failed (never stuck running), with
    the reason, the phase it was in and the log's last line; returns whether it was marked.
    `lease`: the attempt that died (default: the attempt read here), so a run resumed meanwhile
    is never failed for its predecessor's death."""
    run = store.get_run(run_id)
    if run.status not in store.ACTIVE:
        return False
    if run.status == "queued" and run.task is None and reason.startswith("worker process is gone"):
        reason = f"never started: the process that was to start it (pid {run.pid}) is gone"
    detail = f"{reason}; last phase: {run.phase or 'none'}" + (
        f" of task {run.task + 1}" if run.task is not None else ""
    )
    line = last_log_line(run_id, 400)
    if line:
        detail += f"; last log line: {line}"
    try:
        return bool(store.mark_failed(run_id, detail, lease=lease or store.Lease(run_id, run.token)))
    except store.LeaseLost:  # another attempt owns the run now: its death is not this one's
        return False


def record_exit(
    run_id: int,
    returncode: int | None,
    stop_requested: bool = False,
    wait_s: float = 0.0,
    lease: store.Lease | None = None,
) -> bool:
    """The rule for a run's process that has exited: if it left the run queued or running (a
    worker killed, or dead before it could write), whoever saw the exit records how it ended:
    `stopped` when a stop was asked for, else `failed` with the exit reason. Returns whether it
    recorded: an end already recorded (by the worker, its supervisor, a stop) is never replaced,
    and with `lease` (the attempt that exited) nothing is written for another attempt or store.
    `wait_s`: a pause first, for a worker that exited cleanly to finish its last write."""
    if wait_s:
        time.sleep(wait_s)
    try:
        if stop_requested:
            return bool(store.mark_stopped(run_id, f"stopped by request ({exit_reason(returncode)})", lease=lease))
        return mark_dead(run_id, exit_reason(returncode), lease)
    except store.LeaseLost:
        return False


class Exited(NamedTuple):
    """A worker process that `StartedWorkers.exited` found ended."""

    run_id: int
    returncode: int | None
    lease: store.Lease | None


class StartedWorkers:
    """The worker processes this console started (run id -> its supervisor's process), so that
    their ends are noticed at once. Their supervisors record how each worker ended; `exited`
    hands over the ones that have exited so `record_exit` can cover a supervisor that could not."""

    def __init__(self) -> None:
        self._processes: dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()

    def add(self, run_id: int, process: subprocess.Popen | None) -> None:
        """Follow `process`; None (a run a scheduler holds: no process here) is not followed."""
        if process is None:
            return
        with self._lock:
            self._processes[run_id] = process

    def __len__(self) -> int:
        return len(self._processes)

    def exited(self) -> list[Exited]:
        """(run id, exit code, lease) of each process that exited since the last call (then forgotten)."""
        with self._lock:
            ended = [
                Exited(run_id, proc.returncode, getattr(proc, "lease", None))
                for run_id, proc in self._processes.items()
                if proc.poll() is not None
            ]
            for gone in ended:
                del self._processes[gone.run_id]
        return ended


def follow_run(run_id: int, process: subprocess.Popen | None = None, poll_s: float = 0.25) -> Iterator[store.Run]:
    """The run's row every `poll_s` seconds until it ends: the last row yielded is its end. If
    `process` (the run's supervisor, started here) exits while the run is still active, its end
    is recorded from the exit status (`record_exit`); a run a scheduler holds is settled by the
    scheduler's state every few seconds (`reap_dead`)."""
    from .executors import SCHEDULER_POLL_S, is_scheduled

    asked = time.monotonic()
    exit_watch = _ExitWatch(process)
    try:
        while True:
            run = store.get_run(run_id)
            if (
                process is None
                and run.status in store.ACTIVE
                and is_scheduled(run)
                and time.monotonic() - asked >= SCHEDULER_POLL_S
            ):
                asked = time.monotonic()
                reap_dead([run])
                run = store.get_run(run_id)
            yield run
            if run.status not in store.ACTIVE:
                return
            if process is not None and process.poll() is not None:
                record_exit(run_id, process.returncode, wait_s=poll_s, lease=getattr(process, "lease", None))
                yield store.get_run(run_id)
                return
            exit_watch.sleep(poll_s)
    finally:
        exit_watch.close()


class _ExitWatch:
    """Sleeps that end early when a process exits (a pidfd, Linux): the run's end shows as soon
    as its supervisor is gone, not up to a poll later. Anywhere a pidfd cannot be had (another
    OS, the process already gone), and once it has fired, a plain sleep."""

    def __init__(self, process: subprocess.Popen | None) -> None:
        self.fd: int | None = None
        try:
            if process is not None and process.pid:
                self.fd = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            self.fd = None

    def sleep(self, seconds: float) -> None:
        if self.fd is None:
            time.sleep(seconds)
            return
        ready, _, _ = select.select([self.fd], [], [], seconds)
        if ready:  # exited: the next look at the run sees its end (sleep plainly from now on)
            self.close()

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _heartbeat_age(run: store.Run, now: datetime) -> float | None:
    if run.heartbeat_at is None:
        return None
    beat = run.heartbeat_at if run.heartbeat_at.tzinfo else run.heartbeat_at.replace(tzinfo=UTC)
    return (now - beat).total_seconds()


def _kill_group(run: store.Run) -> None:
    try:
        os.killpg(run.pid, signal.SIGKILL)  # type: ignore[arg-type]  # no pid: the TypeError below
    except (ProcessLookupError, PermissionError, TypeError):
        pass


def reap_dead(runs: list[store.Run] | None = None, busy_s: float | None = None) -> list[int]:
    """Mark failed every queued or running run whose worker is gone or whose heartbeat is
    stale (`reap_local`); runs a scheduler holds are settled by its state and their heartbeat
    (`executors.reap_scheduled`). `busy_s`: wait at most this long for the store's write lock
    (StoreLocked after that), for a command that only reads."""
    if busy_s is not None:
        with store.impatient(busy_s):
            return reap_dead(runs)
    from .executors import cancel_jobs, is_scheduled, scheduled_verdicts

    runs = runs if runs is not None else store.list_runs(status=store.ACTIVE)
    scheduled = [r for r in runs if is_scheduled(r)]
    dead = []
    for verdict in scheduled_verdicts(scheduled, STALE_AFTER_S) if scheduled else []:
        # the attempt the scheduler's word was about: a run resumed since it was read (a new job,
        # a new token) is never failed or stopped for its predecessor's job
        lease = store.Lease(verdict.run_id, verdict.token)
        if verdict.status == "stopped":
            try:
                recorded = bool(store.mark_stopped(verdict.run_id, verdict.reason, lease=lease))
            except store.LeaseLost:
                recorded = False
        else:
            recorded = mark_dead(verdict.run_id, verdict.reason, lease)
        if recorded:
            dead.append(verdict.run_id)
            if verdict.cancel is not None:  # failed means not running: its job goes too
                cancel_jobs(*verdict.cancel)
    return reap_local([r for r in runs if not is_scheduled(r)]) + dead


def reap_local(runs: list[store.Run]) -> list[int]:
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
    for run in runs:
        if run.status not in store.ACTIVE or run.id is None:
            continue
        state = worker_state(run) if run.host == host and run.pid is not None else "remote"
        # a queued run's heartbeat is its launcher's stamp: a launcher (not ours to judge by argv)
        # that has not started the worker within STALE_AFTER_S never will
        judged = run.status == "running" or (run.status == "queued" and state == "other")
        age = _heartbeat_age(run, now) if judged else None
        if state == "gone":
            reason = "worker process is gone (no exit status was recorded: its supervisor died too)"
        elif age is not None and age > STALE_AFTER_S:
            if run.status == "queued":
                reason = (
                    f"never started: the process that queued it (pid {run.pid}) did not start its worker "
                    f"within {int(STALE_AFTER_S)} s"
                )
            else:
                reason = f"no heartbeat for {int(age)} s"
                if state == "ours":
                    _kill_group(run)
                    reason += " (worker killed)"
        else:
            continue
        if mark_dead(run.id, reason, store.Lease(run.id, run.token)):
            dead.append(run.id)
    return dead


def stop_run(run_id: int, grace_s: float = 10.0) -> str:
    """SIGTERM the worker's process group, SIGKILL after the grace period; returns the status.

    A run whose worker already died is failed, not stoppable (ValueError, one line, as for any
    run that is not queued or running). Finished tasks stay stored (each was committed as it
    ended). A run on another host cannot be signalled from here: it is marked stopped and its
    worker exits at its next heartbeat.
    """
    from .executors import is_scheduled, stop_scheduled

    reap_dead([store.get_run(run_id)])
    run = store.get_run(run_id)
    if run.status not in store.ACTIVE:
        raise ValueError(f"run {run_id} is {run.status}: only queued or running runs can be stopped")
    lease = store.Lease(run_id, run.token)  # the attempt being stopped: never a later one

    def stopped(error: str) -> str:
        try:
            store.finish_run(run_id, "stopped", lease=lease, error=error)
        except store.LeaseLost:  # resumed by someone else meanwhile: that attempt is not ours to stop
            pass
        return store.get_run(run_id).status

    if is_scheduled(run):  # its job is cancelled (scancel through submitit)
        stop_scheduled([run], grace_s)
        return store.get_run(run_id).status
    state = worker_state(run) if run.host in (None, socket.gethostname()) else "remote"
    if state in ("remote", "other"):  # cannot (or must not) signal it: the worker obeys the store
        where = f"on {run.host}" if state == "remote" else f"(pid {run.pid}, not started by rmconsole)"
        return stopped(
            f"stopped by request from {socket.gethostname()}; the worker {where} exits at its next heartbeat"
        )
    if state == "gone":
        return stopped(
            "stopped before it started"
            if run.status == "queued"
            else "stopped by request (its worker was already gone)"
        )
    try:
        os.killpg(run.pid, signal.SIGTERM)  # type: ignore[arg-type]  # no pid: the TypeError below
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
    return stopped(f"stopped by request (no exit within {grace_s:g} s: SIGKILL)")


@dataclass
class Launched:
    """A run that `launch_run` stored and started (or submitted: `process` None, `job_id` set)."""

    run_id: int
    preset: str
    config: Any
    process: subprocess.Popen | None
    job_id: str | None = None


def check_weights_file(cfg: Any) -> None:
    """The run's model_weights: readable, and (when the dataset fixes the model's input shape)
    this model's keys and shapes, by building the model and loading the file as the worker will
    (cl.models.check_weights). A sweep's runs sharing model, file and shape are checked once."""
    from .. import datasets
    from ..cl.models import read_weights

    shape = datasets.input_shape(cfg.dataset, getattr(cfg, "image_size", None))
    if shape is None:  # only loading the data tells the model's input: the file itself is checked
        read_weights(cfg.model_weights)
        return
    stat = Path(cfg.model_weights).stat()
    _weights_fit(cfg.model, cfg.model_weights, (stat.st_mtime_ns, stat.st_size), shape, datasets.classes(cfg.dataset))


@functools.lru_cache(maxsize=8)
def _weights_fit(model: str, path: str, stamp: tuple[int, int], shape: tuple[int, int, int], n_classes: int) -> None:
    """check_weights, remembered for a file unchanged since (`stamp`); a refusal is not remembered."""
    from ..cl.models import check_weights

    check_weights(model, path, shape, n_classes)


def check_runnable(cfg: Any, scheduled: bool = False) -> None:
    """Refuse, before anything is stored, a config whose dataset files are missing or corrupt, whose
    CUDA device is absent, or whose RMCONSOLE_HOME is not writable (one-line errors). A run for a
    scheduler gets its device on a node, so only the dataset and the home are checked here."""
    from .. import datasets

    if not cfg.download:
        datasets.verify(cfg.dataset)  # present and not corrupt
    if cfg.model_weights:  # a damaged file or another model's: refused here, not after storing the run
        check_weights_file(cfg)
    check_home()
    if scheduled:
        return
    if cfg.device not in ("auto", "cpu"):  # only a CUDA device can be missing; skip importing torch otherwise
        from .worker import resolve_device

        resolve_device(cfg.device)
    if getattr(cfg, "gpus", 1) > 1:
        from .multigpu import check_gpus

        check_gpus(cfg.gpus, cfg.device)


MAX_NOTE = 2000  # characters of a run's note (`rmconsole note`): a few sentences, shown on one line


def check_note(text: str) -> str | None:
    """A note as typed, stripped (None: clear it): one line of printable text of at most MAX_NOTE
    characters. A note is shown whole by `show`, the TUI and every report row that carries it, and
    searched by every run filter, so a pasted file (megabytes) is refused, as a too-long name is."""
    from ..config import ConfigError, shorten

    if not text.isprintable() or len(text.strip()) > MAX_NOTE:
        raise ConfigError(f"note {shorten(text)!r}: give one line of printable text (at most {MAX_NOTE} characters)")
    return text.strip() or None


def check_identity(name: str | None, tags: list[str] | None) -> list[str]:
    """A run name and tags as typed: one line, printable; tags one word each (`+`/`-` are how
    `rmconsole tag` adds and removes them). Returns the tags, each once (request.py's checks)."""
    check_name(name)
    check_tags(tags)
    return list(dict.fromkeys(tags or []))


def launch_run(
    preset: str | None,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    seed: int | None = None,
    device: str | None = None,
    sweep_id: str | None = None,
    gpus: int | None = None,
    rendezvous: Any = None,
    executor: Any = None,
    name: str | None = None,
    tags: list[str] | None = None,
    request: LaunchRequest | None = None,
) -> Launched:
    """Preset + overrides → validated config → stored run → started worker (or, with an
    `executor` spec, a submitted job): the one path the CLI's `run` and the TUI's launch screen
    share (through `queue.launch_request`, which hands over the `request` too: what it declares
    `shared` is stored with the run). A bad config, a missing dataset or an unavailable device is
    refused (ConfigError / DatasetMissing) before anything is stored."""
    from ..config import ConfigError, load_config, overrides_of

    tags = check_identity(name, tags)
    preset_name, cfg = load_config(preset, overrides, seed=seed, device=device, gpus=gpus)
    config = cfg.to_dict()
    identity: dict[str, Any] = {
        **(request.shared() if request is not None else {}),
        "name": name,
        "tags": tags,
        "overrides": overrides_of(preset, config),
    }
    if executor is not None:
        from .executors import check_scheduler, submit_runs

        if rendezvous is not None and rendezvous.multi_node:
            raise ConfigError(
                "--nnodes: a multi-node run is started by hand on each node (see `rmconsole join`), "
                "not through --executor"
            )
        check_runnable(cfg, scheduled=True)
        check_scheduler(executor)
        run_id = store.create_run(config, preset_name, sweep_id, **identity)
        (job_id,) = submit_runs(executor, [run_id])
        return Launched(run_id, preset_name, cfg, None, job_id)
    check_runnable(cfg)
    run_id = store.create_run(
        config, preset_name, sweep_id, owner_pid=os.getpid(), **identity
    )  # dead with us until started
    return Launched(run_id, preset_name, cfg, start_worker(run_id, rendezvous=rendezvous))


def delete_run(run_id: int) -> list[str]:
    """Delete an ended run: its rows (a guarded store transition: a queued or running run is
    refused with one line), then its log and checkpoint. Returns the files removed."""
    from .checkpoints import checkpoint_path

    reap_dead([store.get_run(run_id)])
    done = store.delete_run(run_id)
    if not done:
        raise ValueError(
            f"run {run_id} is {done.status}: stop it first (only finished, failed or stopped runs can be deleted)"
        )
    removed = []
    checkpoint = checkpoint_path(run_id)
    for path in (log_path(run_id), checkpoint, *checkpoint.parent.glob(f"{checkpoint.name}.*")):
        try:
            path.unlink()
            removed.append(str(path))
        except FileNotFoundError:
            pass
        except OSError as err:
            raise store.StoreError(
                f"run {run_id} is deleted from the store, but {path} could not be removed: {err.strerror}"
            ) from None
    return removed


@dataclass
class Resumed:
    """A run that `resume_run` queued again and started."""

    run_id: int
    first_task: int  # the task it continues at (0-based)
    n_tasks: int | None
    from_checkpoint: bool  # False: no task had finished, it starts over
    process: subprocess.Popen | None  # None: submitted to a scheduler as `job_id`
    job_id: str | None = None


KEEP = "keep"  # resume_run's default executor: the one the run had


def resume_run(run_id: int, rendezvous: Any = None, executor: Any = KEEP) -> Resumed:
    """Continue a failed or stopped run from its last task checkpoint: the CLI's `resume` and
    the TUI's. A run that ran under a scheduler is submitted to it again (`executor`: another
    spec, or None for this machine). Whatever would refuse it (its state, a config this version
    rejects, a missing or corrupt dataset, an absent device, a corrupt, changed or foreign
    checkpoint, an unwritable RMCONSOLE_HOME) is one line before the run is touched, so its
    recorded error stays. A queued run that nobody will start (a sweep's, with no queue runner)
    is started here too."""
    from ..config import build_config
    from .checkpoints import adopt_checkpoint, check_checkpoint, load_checkpoint
    from .executors import check_scheduler, spec_of, submit_runs

    reap_dead([store.get_run(run_id)])
    run = store.get_run(run_id)
    orphan = run.status == "queued" and not pid_alive(run.pid) and _sweep_undriven(run)
    if run.status not in ("failed", "stopped") and not orphan:
        raise ValueError(f"run {run_id} is {run.status}: only failed or stopped runs can be resumed")
    cfg = build_config(run.config)  # a config this version refuses is one line here, not a failed worker
    check_runnable(cfg)  # the dataset, the device and RMCONSOLE_HOME, as for a new run
    adopt_checkpoint(run_id)  # trained in another home sharing this store: its checkpoint brought here
    checkpoint = load_checkpoint(run_id)  # verified against the checksum recorded in the store
    if checkpoint is not None:
        check_checkpoint(checkpoint, run_id, run.config)
    check_log(run_id)
    spec = spec_of(run) if executor == KEEP else executor
    if spec is not None:
        check_scheduler(spec)
    only_from = ("queued",) if orphan else ("failed", "stopped")
    if not store.requeue_run(
        run_id, only_from, owner_pid=os.getpid(), owner_host=socket.gethostname(), forget_job=True
    ):
        raise ValueError(f"run {run_id} is {store.get_run(run_id).status} now (changed meanwhile): not resumed")
    first = int(checkpoint["task"]) + 1 if checkpoint is not None else 0
    if spec is not None:
        (job_id,) = submit_runs(spec, [run_id])
        return Resumed(run_id, first, run.n_tasks, checkpoint is not None, None, job_id)
    store.update_run(run_id, executor=None, job_id=None, job_state=None)
    return Resumed(run_id, first, run.n_tasks, checkpoint is not None, start_worker(run_id, rendezvous=rendezvous))


def _sweep_undriven(run: store.Run) -> bool:
    """A sweep's queued run whose sweep has no live queue runner (nobody else will start it)."""
    if run.sweep_id is None:
        return False
    from .driver import driver_pid

    return driver_pid(run.sweep_id) is None


def check_log(run_id: int) -> None:
    """Refuse, before the run is touched, a log path its worker could not write (a folder there...)."""
    path = log_path(run_id)
    if path.is_dir() or (path.exists() and not os.access(path, os.W_OK)):
        what = "is a directory" if path.is_dir() else "is not writable"
        raise StartFailed(f"run {run_id}'s log {path} {what}: move it away, then resume again")
