"""Warm starts, the launcher's side: a process with torch and the training code already imported
(`warm_server.py`) forks each run's supervisor and worker, so a run starts training about a
second after `rmconsole run`.

Importing torch, torchvision (and the torch._dynamo that any optimiser step pulls in) costs
3-4 s on a small machine, every run. `python -m rmconsole.runner.warm_server SOCKET` pays it once: it
imports the worker's modules, never touches a tensor, a device or the store, and waits on a
Unix socket under RMCONSOLE_HOME/warm. For each request (a run id, the worker's environment,
its log and cwd) it forks a child that becomes exactly what `launch.start_worker` starts cold:

    supervisor (new session, process group leader, argv shown as `... supervise RUN -- ... worker RUN`)
      └─ worker (forked again: argv `... worker RUN`, dies with the supervisor, runs `worker.main`)

so stopping, reaping and dead-run detection treat both the same (`processes.is_run_process`
reads the argv). The supervisor records the worker's end as `supervise.record_end` does, and
writes its exit status to warm/exit-PID for the launcher that polls it.

Which server: the socket's name is a fingerprint of the interpreter, the rmconsole sources
(their paths, sizes and mtimes: an edited checkout gets a fresh server, never stale code), the
installed plug-ins (`plugins.sources_digest()`: their packages, versions, entry points and
files, so a plug-in installed, upgraded or edited in its editable checkout gets a fresh server
too; the server's cached list of plug-ins is never out of date either) and
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

from .. import plugins, private
from .processes import pid_alive, python_m

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
    """Interpreter, sources (rmconsole's and every installed plug-in's: an edited editable
    plug-in is new code) and import-time environment: a server is only used by clients that
    would have imported the very same code the same way."""
    package = Path(__file__).resolve().parents[1]
    h = hashlib.sha1(sys.executable.encode())
    for path in sorted(package.rglob("*.py")):
        st = path.stat()
        h.update(f"{path.relative_to(package)}:{st.st_size}:{st.st_mtime_ns};".encode())
    for key in IMPORT_ENV:
        h.update(f"{key}={os.environ.get(key, '')};".encode())
    h.update(f"plugins={plugins.sources_digest()};".encode())
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
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.05)
        return code

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
        private.mkdir(folder(home))
        if lock.exists() and time.time() - lock.stat().st_mtime < 60:
            return
        lock.write_text(str(os.getpid()))
        log = home / "logs" / "warm.log"
        private.mkdir(log.parent)
        with private.open_append(log) as out:
            subprocess.Popen(python_m("warm_server", str(path)), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True, env=env, close_fds=True, umask=private.UMASK)
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
