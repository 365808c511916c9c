"""Warm starts: a process with torch and the training code already imported forks each run's
supervisor and worker, so a run starts training about a second after `rmconsole run`.

Importing torch, torchvision (and the torch._dynamo that any optimiser step pulls in) costs
3-4 s on a small machine, every run. `python -m rmconsole.runner.warm SOCKET` pays it once: it
imports the worker's modules, never touches a tensor, a device or the store, and waits on a
Unix socket under RMCONSOLE_HOME/warm. For each request (a run id, the worker's environment,
its log and cwd) it forks a child that becomes exactly what `launch.start_worker` starts cold:

    supervisor (new session, process group leader, argv shown as `... supervise RUN -- ... worker RUN`)
      └─ worker (forked again: argv `... worker RUN`, dies with the supervisor, runs `worker.main`)

so stopping, reaping and dead-run detection treat both the same (`processes.is_run_process`
reads the argv). The supervisor records the worker's end as `supervise.record_end` does, and
writes its exit status to warm/exit-PID for the launcher that polls it.

Which server: the socket's name is a fingerprint of the interpreter, the rmconsole sources
(their paths, sizes and mtimes: an edited checkout gets a fresh server, never stale code) and
the environment that import-time code reads (thread counts, PYTHONPATH, library paths); the
worker's own environment (RMCONSOLE_*, CUDA_VISIBLE_DEVICES) is sent with each request, and
CUDA is first initialised in the forked worker. A server exits after RMCONSOLE_WARM_IDLE_S
(default 900) seconds without a request, or when its socket is gone. RMCONSOLE_WARM=0 turns
warm starts off: every run then starts cold, as before. The first run that finds no server
starts one (for the runs after it) and starts cold itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .processes import SUPERVISOR_PID_ENV, pid_alive, python_m

IMPORT_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONPATH", "LD_LIBRARY_PATH", "LD_PRELOAD",
              "PYTHONHASHSEED", "TORCH_HOME", "CUBLAS_WORKSPACE_CONFIG")
IDLE_S = 900.0
CONNECT_TIMEOUT_S = 2.0


def enabled(env: dict[str, str] | None = None) -> bool:
    """Warm starts are on unless RMCONSOLE_WARM=0, on Linux with setproctitle (without it a forked
    process would not show its run's argv, and `rmconsole stop` would not recognise it)."""
    import importlib.util

    value = (os.environ if env is None else env).get("RMCONSOLE_WARM", "1").strip().lower()
    return value not in ("0", "false", "no", "off") and sys.platform.startswith("linux") \
        and importlib.util.find_spec("setproctitle") is not None


def fingerprint() -> str:
    """Interpreter, sources and import-time environment: a server is only used by clients that
    would have imported the very same code the same way."""
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha1(sys.executable.encode())
    for path in sorted(package.rglob("*.py")):
        st = path.stat()
        h.update(f"{path.relative_to(package)}:{st.st_size}:{st.st_mtime_ns};".encode())
    for key in IMPORT_ENV:
        h.update(f"{key}={os.environ.get(key, '')};".encode())
    return h.hexdigest()[:16]


def folder(home: Path) -> Path:
    return home / "warm"


def socket_path(home: Path, key: str | None = None) -> Path:
    return folder(home) / f"{key or fingerprint()}.sock"


def exit_file(home: Path, pid: int) -> Path:
    return folder(home) / f"exit-{pid}"


# ---------------------------------------------------------------------------- the launcher's side


class WarmProcess:
    """The Popen-like handle of a supervisor forked by a warm server (not our child: its exit
    status comes from the file the supervisor writes; a supervisor killed before writing it
    reads as exit code 137, killed)."""

    def __init__(self, pid: int, home: Path) -> None:
        self.pid = pid
        self.home = home
        self.returncode: int | None = None
        self.args = ["warm", str(pid)]

    def poll(self) -> int | None:
        if self.returncode is None and not pid_alive(self.pid):
            path = exit_file(self.home, self.pid)
            try:
                self.returncode = int(path.read_text().strip())
                path.unlink(missing_ok=True)
            except (OSError, ValueError):
                self.returncode = 137
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.05)
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, signum: int) -> None:
        try:
            os.kill(self.pid, signum)
        except ProcessLookupError:
            pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def request(home: Path, run_id: int, env: dict[str, str], log: Path) -> WarmProcess | None:
    """Ask this home's warm server to fork run `run_id`'s supervisor and worker; None when there
    is no usable server (then a server is started for the runs after this one)."""
    path = socket_path(home)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT_S)
            conn.connect(str(path))
            conn.sendall(json.dumps({"run_id": run_id, "env": env, "log": str(log), "cwd": os.getcwd()}).encode()
                         + b"\n")
            reply = json.loads(_read_line(conn) or "{}")
    except (OSError, ValueError):
        start_server(home, env)
        return None
    pid = reply.get("pid")
    return WarmProcess(int(pid), home) if isinstance(pid, int) else None


def _read_line(conn: socket.socket) -> str:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.decode()


def start_server(home: Path, env: dict[str, str]) -> None:
    """Start this home's warm server in its own session (it outlives the caller), unless one is
    starting already (its lock file is fresh)."""
    path = socket_path(home)
    lock = path.with_suffix(".starting")
    try:
        folder(home).mkdir(parents=True, exist_ok=True)
        if lock.exists() and time.time() - lock.stat().st_mtime < 60:
            return
        lock.write_text(str(os.getpid()))
        log = home / "logs" / "warm.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            subprocess.Popen(python_m("warm", str(path)), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=env, close_fds=True)
    except OSError:
        pass  # no warm server: runs start cold, as they always could


def stop_servers(home: Path) -> int:
    """Stop every warm server of this home (their sockets removed: each exits at its next look)."""
    n = 0
    for sock in folder(home).glob("*.sock"):
        try:
            pid = int(sock.with_suffix(".pid").read_text())
            os.kill(pid, signal.SIGTERM)
            n += 1
        except (OSError, ValueError):
            pass
        sock.unlink(missing_ok=True)
    return n


# ---------------------------------------------------------------------------- the server


def _become_run(run_id: int, request_: dict[str, Any], listener: socket.socket) -> None:
    """In the forked child: become run `run_id`'s supervisor, fork its worker, wait, record."""
    listener.close()
    os.setsid()
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    log_fd = os.open(request_["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_fd, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.close(null_fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(request_["env"])
    try:
        os.chdir(request_["cwd"])
    except OSError:
        pass
    from . import supervise
    from .processes import StopSignal

    worker_argv = python_m("worker", str(run_id))
    _set_title(python_m("supervise", str(run_id), "--", *worker_argv))
    os.environ[SUPERVISOR_PID_ENV] = str(os.getpid())
    child = os.fork()
    if child == 0:
        _set_title(worker_argv)
        code = 1
        try:
            from . import worker

            _threads_from_env()
            sys.argv = worker_argv[2:]
            code = worker.main([str(run_id)])
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)

    def forward() -> None:
        try:
            os.kill(child, signal.SIGTERM)
        except ProcessLookupError:
            pass

    stop = StopSignal(then=forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            status = 0
            break
        except InterruptedError:
            continue
    returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    supervise.record_end(run_id, returncode, stop.requested)
    home = Path(request_["env"].get("RMCONSOLE_HOME", "."))
    code = 128 - returncode if returncode < 0 else returncode
    try:
        exit_file(home, os.getpid()).write_text(str(returncode))  # (negative: the signal, as Popen says)
    except OSError:
        pass
    sys.stdout.flush()
    os._exit(code)


def _set_title(argv: list[str]) -> None:
    """Show `argv` as this process's command line (/proc/PID/cmdline), as a cold start would."""
    try:
        import setproctitle

        setproctitle.setproctitle(" ".join(argv))
    except ImportError:
        pass


def _threads_from_env() -> None:
    """The request's thread count (OpenMP read the server's environment when torch was imported)."""
    import torch

    value = os.environ.get("OMP_NUM_THREADS")
    if value and value.isdigit() and int(value) > 0:
        torch.set_num_threads(int(value))


def serve(path: Path, idle_s: float = IDLE_S) -> int:
    """Import the worker's modules, then fork a supervisor + worker for each request."""
    import setproctitle

    setproctitle.setproctitle(setproctitle.getproctitle())  # take over the argv area now, while the
    # environment is the one it started with (a forked run replaces the environment, then its title)
    import torch  # noqa: F401  (what the server is for: imported once)
    import torchvision  # noqa: F401

    from . import supervise, worker  # noqa: F401
    from ..cl import loop  # noqa: F401
    import torch._dynamo  # noqa: F401  (the optimiser's first step would import it)

    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    listener.settimeout(5.0)
    path.with_suffix(".pid").write_text(str(os.getpid()))
    path.with_suffix(".starting").unlink(missing_ok=True)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # our children (supervisors) are reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"warm server {os.getpid()} on {path}: ready", flush=True)
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s and path.exists():
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(5.0)
                try:
                    request_ = json.loads(_read_line(conn))
                    run_id = int(request_["run_id"])
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                pid = os.fork()
                if pid == 0:
                    try:
                        _become_run(run_id, request_, listener)
                    finally:
                        os._exit(1)
                try:
                    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
                except OSError:
                    pass
                print(f"run {run_id}: supervisor {pid}", flush=True)
            last = time.monotonic()
    finally:
        listener.close()
        if path.exists() and path.with_suffix(".pid").exists() and \
                path.with_suffix(".pid").read_text().strip() == str(os.getpid()):
            path.unlink(missing_ok=True)
            path.with_suffix(".pid").unlink(missing_ok=True)
    print(f"warm server {os.getpid()}: idle for {idle_s:g} s or socket gone, exiting", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m rmconsole.runner.warm SOCKET", file=sys.stderr)
        return 2
    return serve(Path(argv[0]), float(os.environ.get("RMCONSOLE_WARM_IDLE_S", IDLE_S)))


if __name__ == "__main__":
    sys.exit(main())
