"""`python -m rmconsole.runner.supervise RUN_ID [-- COMMAND...]`: the parent of one worker, there to record how it ended.

A worker killed by SIGKILL (the OOM killer, `kill -9`) has no chance to write anything, and
once the console that launched it has exited nobody else can learn its exit status. So
`launch.start_worker` starts this small process (it never imports torch) as the leader of the
run's process group; it starts the worker as its child and waits. When the worker exits and
the run is still queued or running in the store, it records `failed` with the signal or exit
code, the phase the worker was in and the log's last line, at once, whether or not any CLI or
TUI is open. A stop (SIGTERM to the process group) reaches both: the supervisor then waits for
the worker, and records `stopped` if the worker could not. Meanwhile it samples the worker's
system load every few seconds (`sysmetrics`).

The worker dies with its supervisor (PR_SET_PDEATHSIG), so a live worker always has a parent
that will speak for it; if both die at once, `launch.reap_dead` finds the run on its next look.
The worker is `python -m rmconsole.runner.worker RUN_ID` unless a COMMAND follows `--` (a multi-process
run: the torchrun launcher of `rmconsole.runner.multigpu`, whose rank 0 is that worker).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from . import sysmetrics
from .processes import EXIT_SUPERSEDED, SUPERVISOR_PID_ENV, StopSignal, entry_args, exit_reason, python_m


def main(argv: list[str] | None = None) -> int:
    args = entry_args(argv, "python -m rmconsole.runner.supervise RUN_ID [-- COMMAND...]", command="optional")
    if args is None:
        return 2
    run_id = args.run_id
    command = args.command or python_m("worker", str(run_id))
    child: subprocess.Popen | None = None

    def forward() -> None:
        if child is not None and child.poll() is None:  # a signal sent to this pid alone reaches the worker too
            try:
                child.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass

    stop = StopSignal(then=forward)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    env = dict(os.environ, **{SUPERVISOR_PID_ENV: str(os.getpid())})
    child = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    recorder = sysmetrics.Recorder.start(run_id, child.pid)  # the run's system load, every few seconds
    returncode = child.wait()  # retried across signals (PEP 475)
    if recorder is not None:
        recorder.stop()
    record_end(run_id, returncode, stop.requested)
    if returncode < 0:  # end the way the worker ended, so our parent sees the same status
        try:
            signal.signal(-returncode, signal.SIG_DFL)
        except (OSError, ValueError):  # SIGKILL/SIGSTOP have no handler to reset
            pass
        os.kill(os.getpid(), -returncode)
        return 128 - returncode  # a signal whose default is to be ignored
    return returncode


RECORD_PATIENCE_S = 1800.0  # how long a supervisor waits for an unreachable database to record its worker's end


def record_end(run_id: int, returncode: int, stop_requested: bool) -> None:
    """If the worker left its run queued or running, say how it ended (`launch.record_exit`);
    while the database is unreachable (a worker that outlasted its grace period), wait for it
    (up to RECORD_PATIENCE_S), so the run is recorded with its true reason, not found dead later."""
    from .. import store
    from . import launch

    if returncode == EXIT_SUPERSEDED:
        return  # the worker found the run another worker's, or already ended: not ours to record
    from ..store.db import StoreUnreachable

    deadline = time.monotonic() + RECORD_PATIENCE_S
    while True:
        try:  # with the lease this supervisor was started with: never the end of another attempt or store
            if launch.record_exit(run_id, returncode, stop_requested, lease=store.Lease.from_env(run_id)):
                print(f"supervisor: run {run_id} {store.get_run(run_id).status}: {exit_reason(returncode)}", flush=True)
            return
        except StoreUnreachable as err:  # the database is away: wait for it, so the true reason is recorded
            if time.monotonic() > deadline:
                print(f"supervisor: could not record the end of run {run_id}: {err}", file=sys.stderr, flush=True)
                return
            time.sleep(2.0)
        except Exception as err:  # noqa: BLE001 - nothing more we can do; dead-run detection is the fallback
            print(f"supervisor: could not record the end of run {run_id}: {err}", file=sys.stderr, flush=True)
            return


if __name__ == "__main__":
    sys.exit(main())
