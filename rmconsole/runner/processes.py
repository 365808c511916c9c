"""Facts about the runner's processes, and how each of its `python -m` entry points starts.

This module imports nothing of rmconsole, so every other part of the runner (and the small
supervisor, which must start fast and stay small for a whole run) can use it without cycles.

The runner's processes: `supervise` (leader of a run's process group, records how its child
ended), `worker` (trains one run), `multigpu` (runs torchrun, then settles the run),
`dist_worker` (one torchrun rank) and `queue` (drives a sweep). Each is started as
`python -m rmconsole.runner.NAME ...` (see `python_m`).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

PACKAGE = __name__.rpartition(".")[0]  # "rmconsole.runner"
EXIT_SUPERSEDED = 3  # a worker that found its run owned or ended by someone else: it wrote nothing
SUPERVISOR_PID_ENV = "RMCONSOLE_SUPERVISOR_PID"  # set by the supervisor for its child
GPU_SHARE_ENV = "RMCONSOLE_GPU_SHARE"  # the share of its device a worker may use (1/N: --runs-per-gpu N)
# The most runs that may share one GPU (`--runs-per-gpu N`, local queue and Slurm alike; checked by
# executors.check_runs_per_gpu). Each run's worker is told 1/N of its GPU, but every process also
# holds a CUDA context of its own outside that share (about 0.5 GiB with torch): at N = 32 a 16 GB
# card's share is no bigger than a context, and 32 contexts alone take 16 GiB of an 80 GB one, so
# beyond it the share no longer describes what a run may use. (Volta-and-later MPS also serves at
# most 48 clients per GPU.) A typing error such as `--runs-per-gpu 400` is refused, not started.
MAX_RUNS_PER_GPU = 32

# A run's own process (`run.pid`) is its supervisor, or a worker started without one. Runs
# started before the runner package existed carry the old flat module names in their argv
# and must still be recognised as ours (to be signalled on stop, killed when stale).
RUN_PROCESS_MODULES = (f"{PACKAGE}.supervise", f"{PACKAGE}.worker", "rmconsole.supervise", "rmconsole.worker")


def python_m(name: str, *args: str) -> list[str]:
    """The argv that starts the runner's entry point `name`: `python -m rmconsole.runner.NAME ARGS`."""
    return [sys.executable, "-m", f"{PACKAGE}.{name}", *args]


# ---------------------------------------------------------------------------- liveness


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


def process_argv(pid: int) -> list[str] | None:
    """A process's argv (Linux /proc), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None
    if len(argv) == 1 and " " in argv[0]:  # a title set by setproctitle (a warm-started run: runner/warm.py)
        argv = argv[0].split()
    return argv


def is_run_process(argv: list[str], run_id: int) -> bool:
    """Whether `argv` is run `run_id`'s supervisor or worker (under its new or its old module name)."""
    return any(a in RUN_PROCESS_MODULES for a in argv) and argv[-1] == str(run_id)


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


# ---------------------------------------------------------------------------- dying together


def die_with_parent(expected_parent: int | None = None) -> None:
    """Ask the kernel to kill this process when its parent dies, even by SIGKILL (Linux), so a
    live worker, launcher or rank always has a parent that will record how it ended. Exits at
    once if the parent (`expected_parent`, or any parent but init) is already gone."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    parent = os.getppid()
    if parent == 1 or (expected_parent is not None and parent != expected_parent):  # died before prctl took effect
        os._exit(1)


def supervisor_pid() -> int | None:
    """The pid of the supervisor that started this process, if one did."""
    value = os.environ.get(SUPERVISOR_PID_ENV)
    return int(value) if value else None


def die_with_supervisor() -> None:
    """Die with the supervisor that started this process (nothing when none did)."""
    pid = supervisor_pid()
    if pid is not None:
        die_with_parent(pid)


# ---------------------------------------------------------------------------- entry points


@dataclass(frozen=True)
class EntryArgs:
    """An entry point's command line: `RUN_ID`, and for some the command after `--`."""

    run_id: int
    command: list[str]


def entry_args(argv: list[str] | None, usage: str, command: str = "none") -> EntryArgs | None:
    """Read `RUN_ID [-- COMMAND...]` (`command`: "none", "optional" or "required"). On anything
    else print `usage: USAGE` to stderr and return None: the entry point exits with code 2."""
    argv = sys.argv[1:] if argv is None else argv
    has_command = len(argv) >= 3 and argv[1] == "--"
    ok = (
        bool(argv)
        and argv[0].isdigit()
        and ((len(argv) == 1 and command != "required") or (has_command and command != "none"))
    )
    if not ok:
        print(f"usage: {usage}", file=sys.stderr)
        return None
    return EntryArgs(int(argv[0]), argv[2:])


class StopSignal:
    """SIGTERM (how a stop reaches a run's process group or a sweep's driver) and SIGINT, turned
    into one stop request: `requested` is set and `then` is called (on every signal, or with
    `once` on the first only). `then` may raise to unwind the main thread."""

    def __init__(
        self,
        then: Callable[[], None] | None = None,
        once: bool = False,
        signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
    ) -> None:
        self.requested = False
        self.then = then
        self.once = once
        for signum in signals:
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        first = not self.requested
        self.requested = True
        if self.then is not None and (first or not self.once):
            self.then()
