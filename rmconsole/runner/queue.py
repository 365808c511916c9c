"""The sweep queue: a sweep's queued runs, N worker processes at a time.

Who drives it. `rmconsole run` without --detach drives the queue in its own process and
shows the sweep's progress (Ctrl-C stops the sweep). With --detach it starts
`python -m rmconsole.runner.queue SWEEP_ID --parallel N` in its own session (output in
RMCONSOLE_HOME/logs/sweep-ID.log) and returns; that queue runner carries on after the
terminal closes and exits when the sweep is done. The same command continues a sweep whose
driver died (add --retry to queue its failed and stopped runs again; they resume from their
last task checkpoint). SIGTERM to the queue runner stops the sweep: running workers get
`stop_run`, runs not yet started are marked stopped.

One driver per sweep: it holds an exclusive lock on RMCONSOLE_HOME/sweeps/ID.lock (with its
pid inside), released by the kernel however the driver ends. Workers are the same
`python -m rmconsole.runner.worker RUN_ID` processes a single run uses (launch.start_worker); slot i
gets GPU i (of the visible ones, through CUDA_VISIBLE_DEVICES) unless the run pins `cuda:N`
or uses the CPU. With --runs-per-gpu N there are N slots per GPU (slot i gets GPU i mod G, so
runs spread over the GPUs before they pack), and each worker gets 1/N of its GPU's memory
(RMCONSOLE_GPU_SHARE: the CUDA allocator is capped, inference forward passes shrink).

A sweep submitted to a scheduler (`--executor slurm`) has no queue here: the scheduler is the
queue (`executors.ScheduledSweep` follows it), and a queue runner leaves its runs alone.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import private, store
from ..config import ConfigError
from . import launch
from .driver import driver_pid, lock_path
from .executors import SCHEDULER_POLL_S, check_runs_per_gpu
from .processes import GPU_SHARE_ENV, StopSignal, pid_alive, python_m
from .request import LaunchRequest
from .sweep import SweepPlan, check_sweep_name, fold_seed, is_sweep, plan_sweep, run_names, status_counts, store_sweep

Starter = Callable[[int, dict | None], Any]


class QueueBusy(Exception):
    """Another process already drives this sweep."""


class SweepStopped(Exception):
    """SIGTERM reached the queue runner."""


def visible_gpus(env: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may hand out: CUDA_VISIBLE_DEVICES's entries when it is set (up to
    the first invalid one, as CUDA reads it), else 0..device_count-1."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        gpus = []
        for entry in env["CUDA_VISIBLE_DEVICES"].split(","):
            entry = entry.strip()
            if not entry or entry.startswith("-"):
                break
            gpus.append(entry)
        return gpus
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - no usable CUDA means no GPUs to hand out
        return []


def default_parallel(gpus: list[str], runs_per_gpu: int = 1) -> int:
    """`runs_per_gpu` slots per visible GPU; `runs_per_gpu` on a CPU-only machine."""
    return max(1, len(gpus)) * runs_per_gpu


def slot_env(slot: int, gpus: list[str], device: str, runs_per_gpu: int = 1) -> dict[str, str]:
    """The environment that gives slot `slot` its GPU (nothing for CPU or pinned runs): GPU
    `slot mod G`, so with N slots per GPU (`runs_per_gpu`) each GPU holds at most N runs, each
    told to use 1/N of its memory (also on the CPU path, whose batches scale the same way)."""
    env = {GPU_SHARE_ENV: repr(1.0 / runs_per_gpu)} if runs_per_gpu > 1 else {}
    if not gpus or device == "cpu" or device.startswith("cuda:"):
        return env
    return {"CUDA_VISIBLE_DEVICES": gpus[slot % len(gpus)], **env}


# ---------------------------------------------------------------------- the driver lock


class DriverLock:
    """The exclusive right to start this sweep's runs."""

    def __init__(self, sweep_id: str) -> None:
        self.sweep_id = sweep_id
        self.handle: Any = None

    def acquire(self) -> None:
        path = lock_path(self.sweep_id)
        private.mkdir(path.parent)
        handle = open(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, private.FILE_MODE), "a+")  # noqa: SIM115 - held: the lock lives as long as it is open
        for _ in range(20):  # a reader probing with a shared lock holds it for microseconds
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                time.sleep(0.05)
        else:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            handle.close()
            raise QueueBusy(f"sweep {self.sweep_id} is already driven by process {holder}")
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self.handle = handle

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None

    def __enter__(self) -> DriverLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


# ---------------------------------------------------------------------- the queue


class SweepQueue:
    """Starts a sweep's queued runs into `parallel` slots and notices when they end.

    `step()` is one scheduling pass (the CLI calls it between progress refreshes); `start`
    is how a worker is started (launch.start_worker; tests may pass their own)."""

    def __init__(
        self,
        sweep_id: str,
        parallel: int | None = None,
        gpus: list[str] | None = None,
        start: Starter | None = None,
        log: Callable[[str], None] | None = None,
        runs_per_gpu: int = 1,
    ) -> None:
        self.sweep_id = sweep_id
        self.gpus = visible_gpus() if gpus is None else list(gpus)
        self.runs_per_gpu = check_runs_per_gpu(runs_per_gpu)
        self.parallel = parallel or default_parallel(self.gpus, self.runs_per_gpu)
        if self.parallel < 1:
            raise ValueError(f"--parallel {self.parallel}: must be at least 1")
        self.start = start or launch.start_worker
        self.log = log or (lambda message: None)
        self.busy: dict[int, tuple[int, Any]] = {}  # slot -> (run id, process)
        self.launched: set[int] = set()

    def runs(self) -> list[store.Run]:
        """The sweep's runs this queue may start or wait for (not those a scheduler holds)."""
        from .executors import is_scheduled

        return [r for r in store.list_runs(sweep_id=self.sweep_id) if not is_scheduled(r)]

    def _ours(self) -> set[int]:
        return {run_id for run_id, _ in self.busy.values()}

    def _reap(self) -> None:
        for slot, (run_id, proc) in list(self.busy.items()):
            if proc.poll() is None:
                continue
            del self.busy[slot]
            launch.record_exit(run_id, proc.returncode, lease=getattr(proc, "lease", None))  # died without a word
            run = store.get_run(run_id)
            metrics = run.metrics or {}
            shown = f": A_last {metrics['A_last']:.2f}" if metrics.get("A_last") is not None else ""
            self.log(f"run {run_id} {run.status}{shown}" + (f" ({run.error})" if run.error else ""))

    def step(self) -> bool:
        """Reap ended workers and fill free slots; False once nothing is left to run or wait for."""
        self._reap()
        runs = self.runs()
        ours = self._ours()
        launch.reap_dead([r for r in runs if r.status == "running" and r.id not in ours])
        runs = self.runs()
        # runs someone else started (a resume, an earlier driver's workers) take slots too
        foreign = [
            r
            for r in runs
            if r.id not in ours and (r.status == "running" or (r.status == "queued" and pid_alive(r.pid)))
        ]
        pending = [r for r in runs if r.status == "queued" and r.id not in self.launched and not pid_alive(r.pid)]
        free = [s for s in range(self.parallel) if s not in self.busy]
        free = free[: max(0, self.parallel - len(self.busy) - len(foreign))]
        for slot, run in zip(free, list(pending)):
            if store.get_run(run.id).status != "queued":  # stopped meanwhile
                pending.remove(run)
                continue
            device = str(run.config.get("device", "auto"))
            env = slot_env(slot, self.gpus, device, self.runs_per_gpu)
            proc = self.start(run.id, env or None)
            self.busy[slot] = (run.id, proc)
            self.launched.add(run.id)
            pending.remove(run)
            where = (
                f"GPU {env['CUDA_VISIBLE_DEVICES']}"
                if "CUDA_VISIBLE_DEVICES" in env
                else "CPU"
                if device == "cpu" or not self.gpus
                else device
            )
            if GPU_SHARE_ENV in env:
                where += f" (1/{self.runs_per_gpu} of its memory)"
            self.log(
                f"run {run.id} started in slot {slot + 1}/{self.parallel} on {where} "
                f"({run.method}, seed {run.seed}); log {launch.log_path(run.id)}"
            )
        return bool(self.busy or pending or foreign)

    def run(self, poll_s: float = 0.5, on_tick: Callable[[SweepQueue], None] | None = None) -> dict[str, int]:
        """Drive the queue to its end; returns the runs per status."""
        while True:
            more = self.step()
            if on_tick is not None:
                on_tick(self)
            if not more:
                break
            time.sleep(poll_s)
        return status_counts(self.runs())

    def stop(self, grace_s: float = 10.0) -> None:
        """Stop the sweep: SIGTERM the running workers (SIGKILL after the grace period) and mark
        the runs that never started stopped. Finished tasks stay stored."""
        for _, proc in self.busy.values():  # all at once, then wait for each
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass
        for slot, (run_id, proc) in list(self.busy.items()):
            try:
                launch.stop_run(run_id, grace_s)
            except ValueError:  # it ended by itself meanwhile
                pass
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            del self.busy[slot]
        for run in self.runs():
            if run.status == "queued" and not pid_alive(run.pid):
                store.mark_stopped(run.id, "sweep stopped before this run started", only_from=("queued",))


@dataclass
class ScheduledSweep:
    """A sweep whose runs a scheduler holds, followed like a `SweepQueue` (the CLI's progress
    bars): each step asks the scheduler and settles what ended; `stop` cancels the jobs."""

    sweep_id: str
    log: Callable[[str], None] = field(default=lambda message: None)
    seen: dict[int, str] = field(default_factory=dict)
    busy: dict[int, Any] = field(default_factory=dict)  # (SweepQueue's shape; the scheduler holds the slots)

    def runs(self) -> list[store.Run]:
        return store.list_runs(sweep_id=self.sweep_id)

    def step(self) -> bool:
        runs = self.runs()
        launch.reap_dead([r for r in runs if r.status in store.ACTIVE])
        runs = self.runs()
        for run in runs:
            said = f"{run.status} {run.job_state or ''}"
            if run.id is not None and self.seen.get(run.id) != said:
                self.seen[run.id] = said
                metrics = run.metrics or {}
                shown = f": A_last {metrics['A_last']:.2f}" if metrics.get("A_last") is not None else ""
                where = (
                    f" ({(run.executor or '').split(':')[0]} job {run.job_id}: {run.job_state})" if run.job_id else ""
                )
                self.log(f"run {run.id} {run.status}{shown}{where}" + (f" — {run.error}" if run.error else ""))
        return any(r.status in store.ACTIVE for r in runs)

    def run(
        self, poll_s: float = SCHEDULER_POLL_S, on_tick: Callable[[ScheduledSweep], None] | None = None
    ) -> dict[str, int]:
        while True:
            more = self.step()
            if on_tick is not None:
                on_tick(self)
            if not more:
                break
            time.sleep(max(poll_s, SCHEDULER_POLL_S))
        return status_counts(self.runs())

    def stop(self, grace_s: float = 10.0) -> None:
        from .executors import is_scheduled, stop_scheduled

        stop_scheduled([r for r in self.runs() if r.status in store.ACTIVE and is_scheduled(r)], grace_s)


def requeue(sweep_id: str) -> list[int]:
    """Queue a sweep's failed and stopped runs again (workers resume from their checkpoints)."""
    return [
        run.id for run in store.list_runs(sweep_id=sweep_id, status=("failed", "stopped")) if store.requeue_run(run.id)
    ]


def log_path(sweep_id: str) -> Path:
    return store.home() / "logs" / f"sweep-{sweep_id}.log"


def start_queue_runner(
    sweep_id: str, parallel: int, gpus: list[str] | None = None, runs_per_gpu: int = 1
) -> subprocess.Popen:
    """`python -m rmconsole.runner.queue SWEEP_ID` in its own session: it outlives the CLI.
    Passing the GPUs the CLI already found spares the runner importing torch."""
    path = log_path(sweep_id)
    private.mkdir(path.parent)
    args = python_m("queue", sweep_id, "--parallel", str(parallel), "--runs-per-gpu", str(runs_per_gpu))
    if gpus is not None:
        args.append(f"--gpus={','.join(gpus)}")
    with private.open_append(path) as log:
        return subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=launch.worker_env(),
            umask=private.UMASK,
        )


class SweepDeclined(ConfigError):
    """The user answered no to the expansion question: nothing was stored."""


@dataclass
class LaunchedSweep:
    """A sweep that `launch_sweep` validated and stored."""

    sweep_id: str
    run_ids: list[int]
    plan: SweepPlan
    parallel: int  # slots
    gpus: list[str]  # the GPUs the slots hand out
    queue_runner: subprocess.Popen | None  # the detached driver, when one was started
    runs_per_gpu: int = 1
    executor: Any = None  # the scheduler's spec when the runs were submitted to one (no local queue)
    job_ids: list[str] | None = None

    @property
    def log_path(self) -> Path:
        """The queue runner's log."""
        return log_path(self.sweep_id)


def launch_sweep(
    preset: str | None,
    pairs: list[str],
    *,
    seeds: str | None = None,
    seed: int | None = None,
    device: str | None = None,
    parallel: int | None = None,
    detach: bool = False,
    runs_per_gpu: int | None = None,
    executor: Any = None,
    name: str | None = None,
    tags: list[str] | None = None,
    sweep_name: str | None = None,
    name_template: str | None = None,
    confirm: Callable[[SweepPlan], bool] | None = None,
    request: LaunchRequest | None = None,
) -> LaunchedSweep:
    """Validate every grid point and refuse what cannot run here (a missing dataset or GPU,
    gpus > 1) before anything is stored; store the grid as queued runs; with `detach` start a
    queue runner that outlives this process (else the caller drives a `SweepQueue`). With an
    `executor` spec the runs are submitted to its scheduler instead (one job array; the caller
    follows an `executors.ScheduledSweep`, or nobody with `detach`). `sweep_name` is the sweep's
    id (checked: `check_sweep_name`); each run is named by `name_template` (`run_names`).
    `confirm(plan)`, asked once the grid is valid and before anything is stored, may refuse the
    sweep (SweepDeclined). What the `request` declares `shared` is stored with every run."""
    shared = request.shared() if request is not None else {}
    if parallel is not None and parallel < 1:
        raise ConfigError(f"--parallel {parallel}: must be at least 1")
    per_gpu = check_runs_per_gpu(runs_per_gpu)
    tags = launch.check_identity(name, tags)
    if sweep_name is not None:
        check_sweep_name(sweep_name)
    plan = plan_sweep(preset, pairs, seeds, seed=seed, device=device)
    run_names(plan, name, name_template, sweep_name or "", sweep_name is not None)  # a bad template: refused now
    if any(getattr(cfg, "gpus", 1) > 1 for cfg in plan.configs):
        raise ConfigError("gpus: a sweep runs one GPU per run (--parallel slots); start multi-GPU runs one at a time")
    for cfg in plan.configs:  # a missing dataset or GPU refuses the sweep before anything is stored
        launch.check_runnable(cfg, scheduled=executor is not None)
    if confirm is not None and not confirm(plan):
        raise SweepDeclined(f"nothing started: the {len(plan.configs)} runs were not confirmed")
    if executor is not None:
        from .executors import check_scheduler, submit_runs

        if parallel is not None:
            raise ConfigError(
                f"--parallel applies to the local queue: with --executor {executor.name} "
                f"the scheduler runs the jobs (pack runs with --runs-per-gpu)"
            )
        check_scheduler(executor)
        sweep_id, ids = store_sweep(
            plan, sweep_name, name=name, name_template=name_template, **{**shared, "tags": tags}
        )
        job_ids = submit_runs(executor, ids)
        return LaunchedSweep(sweep_id, ids, plan, len(set(job_ids)), [], None, executor.runs_per_gpu, executor, job_ids)
    gpus = visible_gpus()
    slots = parallel or default_parallel(gpus, per_gpu)
    sweep_id, ids = store_sweep(plan, sweep_name, name=name, name_template=name_template, **{**shared, "tags": tags})
    runner = start_queue_runner(sweep_id, slots, gpus, per_gpu) if detach else None
    return LaunchedSweep(sweep_id, ids, plan, slots, gpus, runner, per_gpu)


def launch_request(
    request: LaunchRequest, confirm: Callable[[SweepPlan], bool] | None = None
) -> launch.Launched | LaunchedSweep:
    """Launch what a request asks (the one call of `rmconsole run` and the TUI's launch form): its
    options checked, then one run (`launch.launch_run`) or, when --set values or --seeds make a
    grid, a sweep (`launch_sweep`; `confirm` as there). Nothing is stored when it is refused."""
    request.check()
    rendezvous = request.rendezvous()
    executor = request.executor_spec()
    pairs, seeds = fold_seed(list(request.overrides), request.seeds)  # `--seeds 3`: one run, not a sweep
    if is_sweep(pairs, seeds):
        if (request.gpus or 1) > 1 or rendezvous.multi_node:
            raise ConfigError(
                "--gpus/--nnodes apply to a single run: a sweep runs one GPU per run "
                "(--parallel slots); start multi-GPU runs one at a time"
            )
        return launch_sweep(
            request.preset,
            pairs,
            seeds=seeds,
            seed=request.seed,
            device=request.device,
            parallel=request.parallel,
            detach=request.detach,
            runs_per_gpu=request.runs_per_gpu,
            executor=executor,
            name=request.name,
            tags=list(request.tags),
            sweep_name=request.sweep_name,
            name_template=request.name_template,
            confirm=confirm,
            request=request,
        )
    request.check_one_run()
    return launch.launch_run(
        request.preset,
        pairs,
        seed=request.seed,
        device=request.device,
        gpus=request.gpus,
        rendezvous=rendezvous,
        executor=executor,
        name=request.name,
        tags=list(request.tags),
        request=request,
    )


def stop_sweep(sweep_id: str, grace_s: float = 10.0) -> dict[str, int]:
    """Stop a whole sweep from any process. Its driver (a queue runner, or a `rmconsole run`
    driving it) gets SIGTERM and stops its own workers; whatever is still active afterwards (no
    driver, or one that died) is stopped here, queued runs included. Finished tasks stay
    stored. Returns the runs per status."""
    from .executors import is_scheduled, stop_scheduled

    scheduled = [r for r in store.list_runs(sweep_id=sweep_id, status=store.ACTIVE) if is_scheduled(r)]
    if scheduled:  # their jobs, all cancelled at once (scancel)
        stop_scheduled(scheduled, grace_s)
    pid = driver_pid(sweep_id)
    if pid is not None and pid > 0 and pid != os.getpid():
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + grace_s + 10  # its workers get grace_s, then SIGKILL
        while time.monotonic() < deadline and driver_pid(sweep_id) is not None:
            time.sleep(0.1)
    for run in store.list_runs(sweep_id=sweep_id, status=store.ACTIVE):
        try:
            launch.stop_run(run.id, grace_s)
        except ValueError:  # it ended meanwhile
            pass
    return status_counts(store.list_runs(sweep_id=sweep_id))


def _sweep_stopped() -> None:
    raise SweepStopped()


QUEUE_OUTAGE_S = 1800.0  # how long a queue runner waits through a database outage before it gives up


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m rmconsole.runner.queue", description="Run a stored sweep's queued runs, N at a time."
    )
    parser.add_argument("sweep_id")
    parser.add_argument("--parallel", type=int, default=None, help="slots (default: one per visible GPU, 1 on CPU)")
    parser.add_argument("--retry", action="store_true", help="queue failed and stopped runs again first")
    parser.add_argument(
        "--runs-per-gpu", type=int, default=1, help="slots sharing each GPU, each with 1/N of its memory"
    )
    parser.add_argument(
        "--gpus", default=None, help="GPU ids to hand out, comma-separated ('' for none; default: the visible ones)"
    )
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}", flush=True)

    if args.parallel is not None and args.parallel < 1:
        print(f"--parallel {args.parallel}: must be at least 1", file=sys.stderr)
        return 2
    if not store.list_runs(sweep_id=args.sweep_id):
        print(f"no runs in sweep {args.sweep_id!r}", file=sys.stderr)
        return 2
    StopSignal(then=_sweep_stopped, once=True)  # a second signal must not interrupt the stop
    from ..store.db import hold_through_outages

    hold_through_outages(QUEUE_OUTAGE_S)  # a database restart must not orphan the sweep's queued runs
    try:
        with DriverLock(args.sweep_id):
            if args.retry:
                log(f"queued again: {requeue(args.sweep_id) or 'nothing'}")
            gpus = None if args.gpus is None else [g.strip() for g in args.gpus.split(",") if g.strip()]
            queue = SweepQueue(args.sweep_id, args.parallel, gpus=gpus, log=log, runs_per_gpu=args.runs_per_gpu)
            log(
                f"sweep {args.sweep_id}: driving with {queue.parallel} slot(s), pid {os.getpid()}, "
                f"GPUs {','.join(queue.gpus) or 'none'}"
                + (f", {queue.runs_per_gpu} runs per GPU" if queue.runs_per_gpu > 1 else "")
            )
            try:
                queue.run()
            except SweepStopped:
                log("stopping the sweep")
                queue.stop()
            counts = status_counts(queue.runs())
            log(f"sweep {args.sweep_id} done: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
            return 0 if set(counts) == {"finished"} else 1
    except QueueBusy as err:
        print(str(err), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
