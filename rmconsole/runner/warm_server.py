"""`python -m rmconsole.runner.warm_server SOCKET`: the warm-start server (see warm.py).

It imports the worker's modules once, then for each request forks a child that becomes the
run's supervisor (new session, the supervisor's argv as its title) and forks the worker from it.
Single-threaded and never touching a tensor, a device or the store itself, so forking is safe.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any

from .processes import SUPERVISOR_PID_ENV, python_m
from .warm import IDLE_S, _read_line, exit_file, namespaces


def _become_run(run_id: int, request_: dict[str, Any], listener: socket.socket) -> None:
    """In the forked child: become run `run_id`'s supervisor, fork its worker, wait, record."""
    listener.close()
    os.setsid()
    for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    log_fd = os.open(request_["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
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
    from . import supervise, sysmetrics
    from .processes import StopSignal

    worker_argv = python_m("worker", str(run_id))
    _set_title(python_m("supervise", str(run_id), "--", *worker_argv))
    os.environ[SUPERVISOR_PID_ENV] = str(os.getpid())
    os.environ["RMCONSOLE_WARM_FORKED"] = "1"
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
    recorder = sysmetrics.Recorder.start(run_id, child)
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
    if recorder is not None:
        recorder.stop()
    supervise.record_end(run_id, returncode, stop.requested)
    home = Path(request_.get("home") or request_["env"].get("RMCONSOLE_HOME", "."))
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


def _write_status(path: Path, status: dict[str, Any]) -> None:
    """FINGERPRINT.json beside the socket: what `rmconsole server list` shows (written whole,
    then renamed, so a reader never sees half of it)."""
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(status))
        os.replace(tmp, path.with_suffix(".json"))
    except OSError:
        pass


def serve(path: Path, idle_s: float = IDLE_S) -> int:
    """Import the worker's modules, then fork a supervisor + worker for each request."""
    import setproctitle

    setproctitle.setproctitle(setproctitle.getproctitle())  # take over the argv area now, while the
    # environment is the one it started with (a forked run replaces the environment, then its title)
    import torch
    import torch._dynamo  # noqa: F401  (the optimiser's first step would import it)
    import torchvision  # noqa: F401

    from ..cl import loop  # noqa: F401
    from . import supervise, worker  # noqa: F401

    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    listener.settimeout(5.0)
    path.with_suffix(".pid").write_text(str(os.getpid()))
    path.with_suffix(".starting").unlink(missing_ok=True)
    from .. import __version__

    homes: list[str] = []
    status: dict[str, Any] = {
        "pid": os.getpid(),
        "version": __version__,
        "started": time.time(),
        "last_request": None,
        "idle_exit_s": idle_s,
        "runs": 0,
        "homes": homes,
        "installation": os.environ.get("RMCONSOLE_WARM_INSTALL", ""),
        "import_env": os.environ.get("RMCONSOLE_WARM_IMPORT_ENV", ""),
    }
    _write_status(path, status)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # our children (supervisors) are reaped by the kernel
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"warm server {os.getpid()} on {path}: ready", flush=True)
    own_namespaces = namespaces()
    last = time.monotonic()
    try:
        while time.monotonic() - last < idle_s and path.exists():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5.0)
                try:
                    request_ = json.loads(_read_line(conn))
                    run_id = int(request_["run_id"])
                except (OSError, ValueError, KeyError, TypeError):
                    continue
                if request_.get("namespaces") != own_namespaces:  # its runs would see our mounts and pids
                    try:
                        conn.sendall(b'{"refused": "another namespace"}\n')
                    except OSError:
                        pass
                    print(f"run {run_id}: refused (the caller is in other namespaces: it starts cold)", flush=True)
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
                home = str(request_.get("home") or "")
                print(f"run {run_id} of {home or 'a home'}: supervisor {pid}", flush=True)
            last = time.monotonic()
            if home and home not in homes:
                homes.append(home)
                del homes[:-20]  # the latest homes served, bounded
            status.update(last_request=time.time(), runs=status["runs"] + 1)
            _write_status(path, status)
    finally:
        listener.close()
        if (
            path.exists()
            and path.with_suffix(".pid").exists()
            and path.with_suffix(".pid").read_text().strip() == str(os.getpid())
        ):
            path.unlink(missing_ok=True)
            path.with_suffix(".pid").unlink(missing_ok=True)
            path.with_suffix(".json").unlink(missing_ok=True)
    print(f"warm server {os.getpid()}: idle for {idle_s:g} s or socket gone, exiting", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m rmconsole.runner.warm_server SOCKET", file=sys.stderr)
        return 2
    return serve(Path(argv[0]), float(os.environ.get("RMCONSOLE_WARM_IDLE_S", IDLE_S)))


if __name__ == "__main__":
    sys.exit(main())
