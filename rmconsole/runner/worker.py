"""`python -m rmconsole.runner.worker RUN_ID`: the process that trains one stored run.

It loads the run's config from the store, runs `cl.loop.run_protocol`, and turns the loop's
events into rows: the stream plan at start, progress and a heartbeat about once a second, a
memory histogram per update, and a task result plus a checkpoint as each task ends. SIGTERM
stops it cleanly (status `stopped`); a checkpoint lets `rmconsole resume` continue later.

Started by `rmconsole.runner.supervise` (its parent, which records the exit status if the worker dies
without a word) or directly. Every end of the run goes through `store.finish_run`, so the
first to decide wins; a heartbeat that finds the run no longer `running` (stopped from another
host, or declared dead) makes the worker exit without writing anything more.
"""

from __future__ import annotations

import os
import platform
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from .. import __version__
from .checkpoints import (  # noqa: F401  (checkpoint_path, load_checkpoint: re-exported)
    CheckpointError, check_checkpoint, checkpoint_path, load_checkpoint, remove_checkpoint, save_checkpoint,
)
from ..cl.data import DatasetMissing, load_dataset, load_run_dataset  # noqa: F401  (load_dataset: re-exported)
from ..cl.events import AnytimePoint, Reporter, TaskOutcome, TaskPlan
from ..cl.loop import CheckpointMismatch, run_protocol
from ..config import ConfigError, RunConfig, build_config  # noqa: F401  (RunConfig: re-exported)
from .processes import EXIT_SUPERSEDED, StopSignal, die_with_supervisor, entry_args, supervisor_pid
from .. import store

HEARTBEAT_S = 1.0


class StopRequested(Exception):
    """SIGTERM arrived: stop at once and record the run as stopped."""


class Superseded(Exception):
    """Someone else ended the run (a stop from another host, dead-run detection): exit quietly."""

    def __init__(self, status: str) -> None:
        super().__init__(status)
        self.status = status


_signal_state: dict[str, Any] = {"stopping": False, "superseded": None}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r}: no CUDA device is available here (use device=cpu or auto)")
    return torch.device(name)


def package_versions() -> dict[str, str]:
    from importlib.metadata import version  # (the store's library, read without importing it here)

    import numpy
    import torchvision

    versions = {
        "rmconsole": __version__, "python": platform.python_version(), "torch": torch.__version__,
        "torchvision": torchvision.__version__, "numpy": numpy.__version__, "sqlmodel": version("sqlmodel"),
        "platform": platform.platform(),
    }
    if torch.cuda.is_available():  # which GPU trained the run (a sweep slot's, by CUDA_VISIBLE_DEVICES)
        versions.update(cuda=str(torch.version.cuda), gpu=torch.cuda.get_device_name(),
                        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", "all"))
    return versions


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True,
                             text=True, timeout=5)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


class StoreReporter(Reporter):
    """Writes the loop's events to the store; progress is flushed by a heartbeat thread so
    that counting samples costs nothing on the training path."""

    def __init__(self, run_id: int, n_tasks: int, config: dict[str, Any] | None = None) -> None:
        self.run_id = run_id
        self.n_tasks = n_tasks
        self.config = config  # written into every checkpoint, checked on resume
        self.lock = threading.Lock()
        self.task: int | None = None
        self.phase_name: str | None = None
        self.done = 0
        self.total = 0
        self.phase_started = time.monotonic()
        self.task_started = time.monotonic()
        self.tasks_done = 0
        self.task_seconds: list[float] = []
        self.anytime: list[AnytimePoint] = []  # task-free runs: evaluations not yet written (the heartbeat writes them)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self.thread.start()

    # heartbeat ------------------------------------------------------------
    def _progress(self) -> dict[str, Any]:
        with self.lock:
            elapsed = max(time.monotonic() - self.phase_started, 1e-6)
            rate = self.done / elapsed if self.done else None
            phase_eta = (self.total - self.done) / rate if rate else None
            eta = phase_eta
            if self.task_seconds and self.task is not None:  # whole-run estimate once a task is done
                per_task = sum(self.task_seconds) / len(self.task_seconds)
                in_task = time.monotonic() - self.task_started
                eta = max(per_task - in_task, 0.0) + per_task * (self.n_tasks - self.task - 1)
            return {"heartbeat_at": store.utcnow(), "task": self.task, "phase": self.phase_name,
                    "phase_done": self.done, "phase_total": self.total,
                    "samples_per_s": round(rate, 1) if rate else None,
                    "eta_s": round(eta, 1) if eta is not None else None}

    def flush_anytime(self) -> None:
        """Write the anytime evaluations made since the last write, in one transaction."""
        with self.lock:
            points, self.anytime = self.anytime, []
        if points:
            try:
                store.record_anytime(self.run_id, points)
            except Exception:
                with self.lock:  # keep them for the next beat (or the task's end)
                    self.anytime = points + self.anytime
                raise

    def flush(self) -> None:
        """Write progress; if the run is no longer `running`, someone else ended it: stop."""
        self.flush_anytime()
        status = store.heartbeat(self.run_id, **self._progress())
        if status == "running" or _signal_state["superseded"]:
            return
        _signal_state["superseded"] = status
        print(f"run {self.run_id} is now {status} in the store (ended elsewhere): this worker exits", flush=True)
        if threading.current_thread() is threading.main_thread():
            raise Superseded(status)
        os.kill(os.getpid(), signal.SIGTERM)  # reaches the main thread as Superseded

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            try:
                self.flush()
            except Exception as err:  # noqa: BLE001 - a missed heartbeat must not kill training
                print(f"heartbeat failed: {' '.join(str(err).split())[:300]}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        try:  # what the last beat did not write (a stopped run keeps its evaluations)
            self.flush_anytime()
        except Exception as err:  # noqa: BLE001 - closing must not mask how the run ended
            print(f"could not write the last anytime evaluations: {' '.join(str(err).split())[:300]}",
                  file=sys.stderr, flush=True)

    # loop events ------------------------------------------------------------
    def run_started(self, plans: list[TaskPlan], class_order: list[int], class_names: list[str],
                    pipeline: list[str]) -> None:
        store.record_start(self.run_id, plans, class_order, class_names, pipeline)
        self.n_tasks = len(plans)
        print(f"stream: {len(plans)} tasks, sizes {[p.n_samples for p in plans]}; pipeline: {pipeline}", flush=True)

    def phase(self, task: int, name: str, total: int) -> None:
        with self.lock:
            if task != self.task:
                self.task_started = time.monotonic()
            self.task, self.phase_name, self.done, self.total = task, name, 0, total
            self.phase_started = time.monotonic()
        print(f"task {task + 1}/{self.n_tasks}: {name} ({total} samples)", flush=True)
        self.flush()

    def advance(self, n: int) -> None:
        with self.lock:
            self.done += n

    def memory_updated(self, task: int, histogram: list[int], slots_per_class: int, info: dict[str, Any]) -> None:
        store.record_memory(self.run_id, task, histogram, slots_per_class, info)
        print(f"task {task + 1}: memory {sum(histogram)} samples, {slots_per_class} slots/class, "
              f"histogram {histogram}", flush=True)

    def task_finished(self, outcome: TaskOutcome, checkpoint: dict[str, Any] | None) -> None:
        # the result first, then the checkpoint: a kill in between leaves a checkpoint one task
        # behind the results, and the resume recomputes (identically) that task; the reverse
        # order could leave a checkpoint past a result that was never stored
        self.flush_anytime()  # the task's anytime rows before its result (A_auc in the summary)
        summary = store.record_task(self.run_id, outcome)
        if checkpoint is not None:
            if self.config is None:
                self.config = store.get_run(self.run_id).config
            save_checkpoint(self.run_id, checkpoint, self.config)
        with self.lock:
            self.task_seconds.append(outcome.seconds)
        auc = f", A_auc so far {summary['A_auc']:.2f}" if summary.get("A_auc") is not None else ""
        print(f"task {outcome.task + 1}/{self.n_tasks}: accuracy {outcome.accuracy:.2f}% "
              f"({outcome.seconds:.1f} s); A_avg so far {summary['A_avg']:.2f}{auc}", flush=True)

    def anytime_evaluated(self, point: AnytimePoint) -> None:
        with self.lock:
            self.anytime.append(point)

    def log(self, message: str) -> None:
        print(message, flush=True)


def _on_sigterm() -> None:
    if _signal_state["stopping"]:  # a second signal (group kill + forward, a second Ctrl-C): one stop
        return
    _signal_state["stopping"] = True
    if _signal_state["superseded"]:
        raise Superseded(_signal_state["superseded"])
    raise StopRequested()


def _claim(run_id: int, fields: dict[str, Any]) -> str:
    """queued -> running with the worker's facts (store.claim_run); returns the status found.
    Only a queued run is started, so a stopped or already running run never gets a second worker."""
    claimed = store.claim_run(run_id, **fields)
    return "queued" if claimed else claimed.status


def train(run_id: int) -> str:
    """Run the stored run to its end; returns the final status."""
    run = store.get_run(run_id)
    cfg = build_config(run.config)
    if run.started_at is None:  # never started: a checkpoint here is a leftover of a deleted run with this id
        remove_checkpoint(run_id)
    resume = load_checkpoint(run_id)
    if resume is not None:
        check_checkpoint(resume, run_id, run.config)
    threads = cfg.threads or (resume or {}).get("threads")  # same thread count, same float sums
    if threads:
        torch.set_num_threads(int(threads))
    device = resolve_device(cfg.device)
    fields = dict(status="running", host=socket.gethostname(), device=str(device), versions=package_versions(),
                  git_commit=git_commit(), started_at=store.utcnow(), heartbeat_at=store.utcnow(), error=None,
                  finished_at=None)
    if supervisor_pid() is None:  # under a supervisor, the pid is the supervisor's group
        fields["pid"] = os.getpid()
    found = _claim(run_id, fields)
    if found != "queued":
        raise Superseded(found)
    start = int(resume["task"]) + 1 if resume is not None else 0
    store.delete_results_from(run_id, start)  # rows of an unfinished task from an earlier attempt
    if resume is not None:
        print(f"resuming after task {start} from {checkpoint_path(run_id)}", flush=True)
    reporter = StoreReporter(run_id, cfg.n_tasks, run.config)
    try:
        data = load_run_dataset(cfg)  # the input-pipeline keys too (streamed or in memory)
        run_protocol(cfg, data, device, reporter, resume=resume)
    finally:
        reporter.close()
    if not store.finish_run(run_id, "finished", only_from=("running",), phase="done", eta_s=0.0,
                            heartbeat_at=store.utcnow()):
        raise Superseded(store.get_run(run_id).status)
    return "finished"


def _one_line(message: str, limit: int = 500) -> str:
    return " ".join(message.split())[:limit]


def main(argv: list[str] | None = None) -> int:
    args = entry_args(argv, "python -m rmconsole.runner.worker RUN_ID")
    if args is None:
        return 2
    run_id = args.run_id
    if os.environ.get("LOCAL_RANK") is None:
        die_with_supervisor()  # (a torchrun rank dies with torchrun)
    StopSignal(then=_on_sigterm)
    try:
        status = train(run_id)
        print(f"run {run_id} {status}", flush=True)
        return 0
    except StopRequested:
        store.finish_run(run_id, "stopped", error="stopped by request (SIGTERM)")
        print(f"run {run_id} stopped", flush=True)
        return 143
    except Superseded as err:
        print(f"run {run_id} is {err.status} (not this worker's to run or end): nothing written", flush=True)
        return EXIT_SUPERSEDED
    except (DatasetMissing, ConfigError, CheckpointError, CheckpointMismatch) as err:
        message = _one_line(str(err))
    except store.UnknownRun as err:
        print(str(err), file=sys.stderr, flush=True)
        return 2
    except Exception as err:  # noqa: BLE001 - record any crash on the run, with its traceback in the log
        traceback.print_exc()
        message = _one_line(f"{type(err).__name__}: {err}") + " (traceback in the run's log)"
    print(f"run {run_id} failed: {message}", file=sys.stderr, flush=True)
    try:
        store.finish_run(run_id, "failed", error=message)
    except Exception as err:  # noqa: BLE001
        print(f"could not record the failure: {err}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
