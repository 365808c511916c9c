"""Warm starts, the launcher's side: a process with torch and the training code already imported
(`warm_server.py`) forks each run's supervisor and worker, so a run starts training about a
second after `rmconsole run`.

Importing torch, torchvision (and the torch._dynamo that any optimiser step pulls in) costs
3-4 s on a small machine, every run. `python -m rmconsole.runner.warm_server SOCKET` pays it once: it
imports the worker's modules, never touches a tensor, a device or the store, and waits on a
Unix socket. For each request (a run id, its store home, the worker's environment, its log and
cwd) it forks a child that becomes exactly what `launch.start_worker` starts cold:

    supervisor (new session, process group leader, argv shown as `... supervise RUN -- ... worker RUN`)
      └─ worker (forked again: argv `... worker RUN`, dies with the supervisor, runs `worker.main`)

so stopping, reaping and dead-run detection treat both the same (`processes.is_run_process`
reads the argv). The supervisor records the worker's end as `supervise.record_end` does, and
writes its exit status to HOME/warm/exit-PID for the launcher that polls it.

One server per user and installed version, whatever the number of store homes: the server
holds no store (each request carries its home and environment), so its socket lives in the
user's own folder (`servers_folder()`: RMCONSOLE_WARM_DIR, else $XDG_RUNTIME_DIR/rmconsole/warm,
else ~/.cache/rmconsole/warm; 0700), not in each home. One server per home once meant a ~700 MB
process per home for 15 idle minutes (5 homes: 5 servers, 3.5 GB; a test script's homes: 21).

Which server: the socket's name is a fingerprint of the interpreter, the rmconsole sources
(their paths, sizes and mtimes: an edited checkout gets a fresh server, never stale code), the
installed plug-ins (`plugins.sources_digest()`: their packages, versions, entry points and
files, so a plug-in installed, upgraded or edited in its editable checkout gets a fresh server
too; the server's cached list of plug-ins is never out of date either) and
the environment that import-time code reads (thread counts, PYTHONPATH, library paths); the
worker's own environment (RMCONSOLE_*, CUDA_VISIBLE_DEVICES) is sent with each request, and
CUDA is first initialised in the forked worker. Starting the server of a new fingerprint stops
the servers of the same installation and import environment whose code is older (their code
is gone: nobody asks them again). Each server describes itself in FINGERPRINT.json beside its
socket (pid, version, installation, runs and homes served, last request): `rmconsole server
list` reads it, `rmconsole server stop` stops them. A server exits after RMCONSOLE_WARM_IDLE_S
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
from dataclasses import dataclass
from pathlib import Path

from .. import plugins, private
from .processes import pid_alive, python_m

IMPORT_ENV = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "PYTHONPATH",
    "LD_LIBRARY_PATH",
    "LD_PRELOAD",
    "PYTHONHASHSEED",
    "TORCH_HOME",
    "CUBLAS_WORKSPACE_CONFIG",
)
IDLE_S = 900.0
CONNECT_TIMEOUT_S = 2.0


def enabled(env: dict[str, str] | None = None) -> bool:
    """Warm starts are on unless RMCONSOLE_WARM=0, on Linux with setproctitle (without it a forked
    process would not show its run's argv, and `rmconsole stop` would not recognise it)."""
    import importlib.util

    value = (os.environ if env is None else env).get("RMCONSOLE_WARM", "1").strip().lower()
    return (
        value not in ("0", "false", "no", "off")
        and sys.platform.startswith("linux")
        and importlib.util.find_spec("setproctitle") is not None
    )


def installation() -> str:
    """This installation: the interpreter and where the rmconsole package is (a checkout, a venv)."""
    return f"{sys.executable}|{Path(__file__).resolve().parents[1]}"


def import_environment() -> str:
    """The digest of the import-time environment (thread counts, paths): two of these never share
    a server, and a newer server of one never stops another's."""
    h = hashlib.sha1()
    for key in IMPORT_ENV:
        h.update(f"{key}={os.environ.get(key, '')};".encode())
    return h.hexdigest()[:16]


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


def servers_folder() -> Path:
    """Where this user's warm servers listen (one folder whatever the store home)."""
    explicit = os.environ.get("RMCONSOLE_WARM_DIR")
    if explicit:
        return Path(explicit).expanduser()
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = Path(runtime) if runtime and Path(runtime).is_dir() else Path.home() / ".cache"
    return base / "rmconsole" / "warm"


def folder(home: Path) -> Path:
    """A home's warm folder: the exit files of the runs forked for it."""
    return home / "warm"


def socket_path(key: str | None = None) -> Path:
    return servers_folder() / f"{key or fingerprint()}.sock"


def exit_file(home: Path, pid: int) -> Path:
    return folder(home) / f"exit-{pid}"


def _private_folder(path: Path) -> bool:
    """Create this user's servers folder 0700; False when it is not ours (no warm start then)."""
    private.mkdir(path)
    st = path.stat()
    return st.st_uid == os.getuid() and not path.is_symlink()


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


def namespaces() -> dict[str, str]:
    """This process's Linux namespaces that a forked run would inherit from its server: a caller
    in other ones (`unshare`, a container sharing the socket's folder) sees other mounts, pids or
    network, so its runs start cold (the server refuses them)."""
    found = {}
    for name in ("mnt", "pid", "net", "user"):
        try:
            found[name] = os.readlink(f"/proc/self/ns/{name}")
        except OSError:
            pass
    return found


def request(home: Path, run_id: int, env: dict[str, str], log: Path) -> WarmProcess | None:
    """Ask this user's warm server (of this installed version) to fork run `run_id`'s supervisor
    and worker for store `home`; None when there is no usable server (then a server is started
    for the runs after this one)."""
    path = socket_path()
    try:
        private.mkdir(folder(home))  # where the supervisor leaves its exit status
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT_S)
            conn.connect(str(path))
            conn.sendall(
                json.dumps(
                    {
                        "run_id": run_id,
                        "home": str(home),
                        "env": env,
                        "log": str(log),
                        "cwd": os.getcwd(),
                        "namespaces": namespaces(),
                    }
                ).encode()
                + b"\n"
            )
            reply = json.loads(_read_line(conn) or "{}")
    except (OSError, ValueError):
        start_server(env)
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


def start_server(env: dict[str, str]) -> None:
    """Start this installed version's warm server in its own session (it outlives the caller),
    unless one is starting already (its lock file is fresh); the servers it makes stale (this
    installation's older code under the same import environment) are stopped."""
    path = socket_path()
    lock = path.with_suffix(".starting")
    try:
        if not _private_folder(path.parent):
            return
        if lock.exists() and time.time() - lock.stat().st_mtime < 60:
            return
        lock.write_text(str(os.getpid()))
        stop_servers([s for s in servers() if s.stale])
        with private.open_append(path.with_suffix(".log")) as out:
            subprocess.Popen(
                python_m("warm_server", str(path)),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={
                    **env,
                    "RMCONSOLE_WARM_INSTALL": installation(),
                    "RMCONSOLE_WARM_IMPORT_ENV": import_environment(),
                },
                close_fds=True,
                umask=private.UMASK,
            )
    except OSError:
        pass  # no warm server: runs start cold, as they always could


# ---------------------------------------------------------------------------- listing, stopping


@dataclass(frozen=True)
class Server:
    """One warm server of this user, as its status file and /proc describe it."""

    fingerprint: str
    pid: int | None
    alive: bool
    version: str
    installation: str
    started: float | None
    last_request: float | None
    idle_exit_s: float
    runs: int
    homes: tuple[str, ...]
    rss_kb: int | None
    current: bool  # the one this installation would use now
    stale: bool  # this installation's older code under the same import environment

    @property
    def idle_s(self) -> float | None:
        since = self.last_request or self.started
        return None if since is None else max(0.0, time.time() - since)

    @property
    def exits_in_s(self) -> float | None:
        idle = self.idle_s
        return None if idle is None else max(0.0, self.idle_exit_s - idle)


def rss_kb(pid: int) -> int | None:
    """A process's resident memory in kB (/proc), None when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def servers() -> list[Server]:
    """This user's warm servers (every installed version), the one this installation uses
    marked `current`; a server whose process is gone is cleaned away, not listed."""
    root = servers_folder()
    current, install, env_digest = fingerprint(), installation(), import_environment()
    out = []
    for sock in sorted(root.glob("*.sock")) if root.is_dir() else []:  # (a starting server has none yet)
        key = sock.stem
        try:
            info = json.loads(sock.with_suffix(".json").read_text())
        except (OSError, ValueError):
            info = {}
        try:
            pid: int | None = int(sock.with_suffix(".pid").read_text().strip())
        except (OSError, ValueError):
            pid = info.get("pid") if isinstance(info.get("pid"), int) else None
        alive = pid is not None and pid_alive(pid)
        if not alive:
            for suffix in (".sock", ".pid", ".json"):
                sock.with_suffix(suffix).unlink(missing_ok=True)
            continue
        same_install = info.get("installation") == install and info.get("import_env") == env_digest
        out.append(
            Server(
                key,
                pid,
                alive,
                str(info.get("version", "?")),
                str(info.get("installation", "?")),
                info.get("started"),
                info.get("last_request"),
                float(info.get("idle_exit_s", IDLE_S)),
                int(info.get("runs", 0)),
                tuple(info.get("homes", ())),
                rss_kb(pid) if pid else None,
                key == current,
                same_install and key != current,
            )
        )
    return out


def stop_servers(which: list[Server] | None = None) -> list[Server]:
    """Stop warm servers (all of this user's by default): SIGTERM, and their sockets removed so
    that one that misses the signal exits at its next look. Runs they forked go on: a forked
    supervisor is its own session, not the server's child for signals."""
    stopped = []
    for server in servers() if which is None else which:
        if server.pid is not None:
            try:
                os.kill(server.pid, signal.SIGTERM)
            except OSError:
                pass
        socket_path(server.fingerprint).unlink(missing_ok=True)
        stopped.append(server)
    return stopped
