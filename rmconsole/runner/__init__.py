"""The runner: every process rmconsole starts, behind one face the CLI and the TUI both call.

    from rmconsole import runner
    launched = runner.launch_run("digits-blurry10-online", ["epochs=3"])
    for run in runner.follow_run(launched.run_id, launched.process): ...
    runner.stop_run(run_id); runner.resume_run(run_id); runner.reap_dead()

The modules, each importing only those below it (processes imports none of them):

    launch       start, follow, stop, resume, reap and delete runs (the face's run half)
    queue        launch_request (what both faces call: a LaunchRequest started as one run or a
                 sweep); a sweep's queue: N worker slots, the driver lock, launch/stop a sweep;
                 `python -m rmconsole.runner.queue SWEEP_ID` drives one
    sweep        a grid of runs: expansion, validation, storing
    multigpu     torchrun command lines and rendezvous; `python -m ...multigpu`, its launcher
    supervise    `python -m ...supervise RUN_ID`: a worker's parent, records how it ended
    worker       `python -m ...worker RUN_ID`: trains one stored run
    dist_worker  `torchrun -m ...dist_worker RUN_ID`: one rank of a multi-GPU run
    executors    where workers run: local processes, or a scheduler's jobs (Slurm through
                 submitit); `RunJob` is what a job runs
    checkpoints  task checkpoints, written atomically, checksummed in the store, verified, loaded weights-only
    driver       who drives a sweep (its lock file), asked by launch and queue
    warm         warm starts, the launcher's side: ask this home's server to fork a run
    warm_server  `python -m ...warm_server SOCKET`: torch imported once, forks supervisor + worker
    request      LaunchRequest: every option of a launch, declared once with its flags, help,
                 form field and check (the CLI's options and the TUI's form are derived from it)
    processes    process facts (liveness, whose process, exit reasons, dying with the parent)
                 and what every entry point does first (argv, stop signals)

The face's names are imported on first use: the supervisor and the ranks import modules of
this package, and must not pay for the store, the config and torch they never touch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_FACE = {
    "launch": (
        "launch_run",
        "Launched",
        "resume_run",
        "Resumed",
        "stop_run",
        "reap_dead",
        "follow_run",
        "record_exit",
        "StartedWorkers",
        "log_path",
        "StartFailed",
        "describe_os_error",
        "shorten",
        "KEEP",
        "delete_run",
        "check_identity",
        "check_note",
    ),
    "queue": (
        "launch_request",
        "launch_sweep",
        "LaunchedSweep",
        "stop_sweep",
        "SweepQueue",
        "ScheduledSweep",
        "DriverLock",
        "driver_pid",
        "SweepDeclined",
    ),
    "sweep": ("is_sweep", "status_counts", "resolve_sweep_id", "split_values", "fold_seed", "expansion_notice"),
    "multigpu": ("Rendezvous", "join_run"),
    "processes": ("pid_alive",),
    "executors": ("parse_executor", "ExecutorSpec", "EXECUTORS"),
    "request": ("LaunchRequest", "MAX_SLOTS"),
}
_MODULE_OF = {name: module for module, names in _FACE.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # the same names, for readers and type checkers
    from .executors import EXECUTORS, ExecutorSpec, parse_executor
    from .launch import (
        KEEP,
        Launched,
        Resumed,
        StartedWorkers,
        StartFailed,
        check_identity,
        check_note,
        delete_run,
        describe_os_error,
        follow_run,
        launch_run,
        log_path,
        reap_dead,
        record_exit,
        resume_run,
        shorten,
        stop_run,
    )
    from .multigpu import Rendezvous, join_run
    from .processes import pid_alive
    from .queue import (
        DriverLock,
        LaunchedSweep,
        ScheduledSweep,
        SweepDeclined,
        SweepQueue,
        driver_pid,
        launch_request,
        launch_sweep,
        stop_sweep,
    )
    from .request import MAX_SLOTS, LaunchRequest
    from .sweep import expansion_notice, fold_seed, is_sweep, resolve_sweep_id, split_values, status_counts
