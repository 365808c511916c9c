"""`python -m rmconsole.worker RUN_ID`: the process that trains one stored run.

It loads the run's config from the store, runs `cl.loop.run_protocol`, and turns the loop's
events into rows: the stream plan at start, progress and a heartbeat about once a second, a
memory histogram per update, and a task result plus a checkpoint as each task ends. SIGTERM
stops it cleanly (status `stopped`); a checkpoint lets `rmconsole resume` continue later.
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

from . import __version__
from .cl.data import DatasetMissing, load_dataset, load_run_dataset  # noqa: F401
from .cl.events import Reporter, TaskOutcome, TaskPlan
from .cl.loop import run_protocol
from .config import ConfigError, RunConfig
from . import store

HEARTBEAT_S = 1.0


class StopRequested(Exception):
    """SIGTERM arrived: stop at once and record the run as stopped."""


def checkpoint_path(run_id: int) -> Path:
    return store.home() / "checkpoints" / f"run-{run_id}.pt"


def load_checkpoint(run_id: int) -> dict[str, Any] | None:
    """The last task checkpoint of a run, or None; a corrupt file is a clear error."""
    path = checkpoint_path(run_id)
    if not path.exists():
        return None
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same to the user
        raise CheckpointError(f"checkpoint {path} cannot be loaded ({type(err).__name__}); "
                              f"delete it to restart run {run_id} from the beginning") from None


class CheckpointError(Exception):
    pass


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r}: no CUDA device is available here (use device=cpu or auto)")
    return torch.device(name)


def package_versions() -> dict[str, str]:
    import numpy
    import sqlmodel
    import torchvision

    return {
        "rmconsole": __version__, "python": platform.python_version(), "torch": torch.__version__,
        "torchvision": torchvision.__version__, "numpy": numpy.__version__, "sqlmodel": sqlmodel.__version__,
        "platform": platform.platform(),
    }


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

    def __init__(self, run_id: int, n_tasks: int) -> None:
        self.run_id = run_id
        self.n_tasks = n_tasks
        self.lock = threading.Lock()
        self.task: int | None = None
        self.phase_name: str | None = None
        self.done = 0
        self.total = 0
        self.phase_started = time.monotonic()
        self.task_started = time.monotonic()
        self.tasks_done = 0
        self.task_seconds: list[float] = []
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

    def flush(self) -> None:
        store.update_run(self.run_id, **self._progress())

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            try:
                self.flush()
            except Exception as err:  # noqa: BLE001 - a missed heartbeat must not kill training
                print(f"heartbeat failed: {err}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)

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
        if checkpoint is not None:
            path = checkpoint_path(self.run_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            torch.save(checkpoint, tmp)
            os.replace(tmp, path)
        summary = store.record_task(self.run_id, outcome)
        with self.lock:
            self.task_seconds.append(outcome.seconds)
        print(f"task {outcome.task + 1}/{self.n_tasks}: accuracy {outcome.accuracy:.2f}% "
              f"({outcome.seconds:.1f} s); A_avg so far {summary['A_avg']:.2f}", flush=True)

    def log(self, message: str) -> None:
        print(message, flush=True)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise StopRequested()


def train(run_id: int) -> str:
    """Run the stored run to its end; returns the final status."""
    run = store.get_run(run_id)
    cfg = RunConfig(**run.config)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    resume = load_checkpoint(run_id)
    if resume is not None:
        store.delete_results_from(run_id, int(resume["task"]) + 1)
        print(f"resuming after task {int(resume['task']) + 1} from {checkpoint_path(run_id)}", flush=True)
    # under torchrun (`rmconsole.multigpu`) the run's pid stays the launcher's: it leads the process group a stop signals
    pid = int(os.environ.get("RMCONSOLE_GROUP_PID") or os.getpid())
    store.update_run(run_id, status="running", pid=pid, host=socket.gethostname(), device=str(device),
                     versions=package_versions(), git_commit=git_commit(), started_at=store.utcnow(),
                     heartbeat_at=store.utcnow(), error=None, finished_at=None)
    reporter = StoreReporter(run_id, cfg.n_tasks)
    try:
        data = load_run_dataset(cfg)  # the input-pipeline keys too (streamed or in memory)
        run_protocol(cfg, data, device, reporter, resume=resume)
    finally:
        reporter.close()
    store.update_run(run_id, status="finished", finished_at=store.utcnow(), phase="done", eta_s=0.0,
                     heartbeat_at=store.utcnow())
    return "finished"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m rmconsole.worker RUN_ID", file=sys.stderr)
        return 2
    run_id = int(argv[0])
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        status = train(run_id)
        print(f"run {run_id} {status}", flush=True)
        return 0
    except StopRequested:
        store.update_run(run_id, status="stopped", finished_at=store.utcnow(), error="stopped by request (SIGTERM)")
        print(f"run {run_id} stopped", flush=True)
        return 143
    except (DatasetMissing, ConfigError, CheckpointError) as err:
        message = str(err)
    except store.UnknownRun as err:
        print(str(err), file=sys.stderr, flush=True)
        return 2
    except Exception as err:  # noqa: BLE001 - record any crash on the run, with its traceback in the log
        traceback.print_exc()
        message = f"{type(err).__name__}: {err}"
    print(f"run {run_id} failed: {message}", file=sys.stderr, flush=True)
    try:
        store.update_run(run_id, status="failed", finished_at=store.utcnow(), error=message)
    except Exception as err:  # noqa: BLE001
        print(f"could not record the failure: {err}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
