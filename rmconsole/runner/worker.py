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

import errno
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

from .. import __version__, metric_registry, plugins, store
from ..cl.data import DatasetMissing, load_dataset, load_run_dataset  # noqa: F401  (load_dataset: re-exported)
from ..cl.events import AnytimePoint, EpochStats, Reporter, TaskOutcome, TaskPlan
from ..cl.loop import CheckpointMismatch, run_protocol
from ..cl.train import Diverged
from ..config import ConfigError, RunConfig, build_config  # noqa: F401  (RunConfig: re-exported)
from .checkpoints import (  # noqa: F401  (checkpoint_path, load_checkpoint, save_checkpoint: re-exported)
    CheckpointError,
    check_checkpoint,
    checkpoint_path,
    load_checkpoint,
    save_checkpoint,
    set_aside,
    write_checkpoint,
)
from .processes import (
    EXIT_SUPERSEDED,
    GPU_SHARE_ENV,
    MAX_RUNS_PER_GPU,
    StopSignal,
    die_with_supervisor,
    entry_args,
    supervisor_pid,
)

HEARTBEAT_S = 1.0


class StopRequested(BaseException):
    """SIGTERM arrived: stop at once and record the run as stopped. A BaseException, as
    KeyboardInterrupt is: raised by the signal handler wherever the main thread is, it must not
    be taken for an error by an `except Exception` fallback there (the dataset cache's "damaged
    copy" read swallowed one, and the run trained on to the end; later SIGTERMs are one stop)."""


class Superseded(BaseException):
    """Someone else ended the run (a stop from another host, dead-run detection), another attempt
    owns it, or its store was replaced: exit quietly, writing nothing more. A BaseException for
    the same reason as StopRequested (the signal handler raises it too)."""

    def __init__(self, status: str, reason: str | None = None) -> None:
        super().__init__(status)
        self.status = status
        self.reason = reason


def lease_lost(run_id: int, err: Exception) -> Superseded:
    """The line a worker leaves in its log when its store or its run is not its own any more."""
    kept = checkpoint_path(run_id)
    where = f"its checkpoint stays at {kept}" if kept.exists() else "it had written no checkpoint"
    return Superseded("not this worker's", f"{err}: this worker stops and writes nothing more; {where}")


_signal_state: dict[str, Any] = {"stopping": False, "superseded": None}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name!r}: no CUDA device is available here (use device=cpu or auto)")
    return torch.device(name)


def package_versions() -> dict[str, str]:
    """What ran: the libraries, the platform, the GPU. (The plug-in packages a run uses join these
    when its start is recorded: StoreReporter.run_started, plugins.used_by.)"""
    from importlib.metadata import version  # (the store's library, read without importing it here)

    import numpy
    import torchvision

    versions = {
        "rmconsole": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "numpy": numpy.__version__,
        "sqlmodel": version("sqlmodel"),
        "platform": platform.platform(),
    }
    if torch.cuda.is_available():  # which GPU trained the run (a sweep slot's, by CUDA_VISIBLE_DEVICES)
        versions.update(
            cuda=str(torch.version.cuda),
            gpu=torch.cuda.get_device_name(),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES", "all"),
        )
    return versions


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


class StoreReporter(Reporter):
    """Writes the loop's events to the store; progress is flushed by a heartbeat thread so
    that counting samples costs nothing on the training path."""

    def __init__(
        self, run_id: int, n_tasks: int, config: dict[str, Any] | None = None, lease: store.Lease | None = None
    ) -> None:
        self.run_id = run_id
        self.lease = lease  # checked in every write: the store's identity and this attempt's token
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
        self.epochs: list[dict[str, Any]] = []  # epoch rows not yet written (flushed with the heartbeat)
        self.first_phase_seen = False
        self.anytime: list[AnytimePoint] = []  # task-free runs: evaluations not yet written (the heartbeat writes them)
        self.said: set[str] = set()  # the metric plug-ins' problem lines already in the log
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self.thread.start()

    def say_metric_problems(self) -> None:
        """One line in the run's log for each metric plug-in whose value was refused at the border
        (inf, NaN, a string, 10**400: stored as missing) or whose computation failed, once each."""
        for line in metric_registry.problems():
            if line not in self.said:
                self.said.add(line)
                print(f"warning: {line}", flush=True)

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
            return {
                "heartbeat_at": store.utcnow(),
                "task": self.task,
                "phase": self.phase_name,
                "phase_done": self.done,
                "phase_total": self.total,
                "samples_per_s": round(rate, 1) if rate else None,
                "eta_s": round(eta, 1) if eta is not None else None,
            }

    def flush_epochs(self) -> None:
        """Write the epoch rows gathered since the last flush, in one transaction."""
        with self.lock:
            rows, self.epochs = self.epochs, []
        if rows:
            try:
                store.record_epochs(self.run_id, rows, lease=self.lease)
            except Exception:
                with self.lock:  # held for the next beat (a database outage): never dropped
                    self.epochs = rows + self.epochs
                raise

    def flush_anytime(self) -> None:
        """Write the anytime evaluations made since the last write, in one transaction."""
        with self.lock:
            points, self.anytime = self.anytime, []
        if points:
            try:
                store.record_anytime(self.run_id, points, lease=self.lease)
            except Exception:
                with self.lock:  # keep them for the next beat (or the task's end)
                    self.anytime = points + self.anytime
                raise

    def flush(self) -> None:
        """Write progress; if the run is no longer `running`, someone else ended it, and if the
        store or the run's token is not ours any more, another store or attempt owns it: stop."""
        if _signal_state["superseded"]:  # found out already (a signal can be swallowed by library code)
            if threading.current_thread() is threading.main_thread():
                raise _signal_state["superseded"]
            return
        try:
            self.flush_epochs()
            self.flush_anytime()
            status = store.heartbeat(self.run_id, lease=self.lease, **self._progress())
        except (store.LeaseLost, store.StoreGone) as err:
            superseded = lease_lost(self.run_id, err)
        else:
            if status == "running":
                return
            superseded = Superseded(
                status, f"run {self.run_id} is now {status} in the store (ended elsewhere): this worker exits"
            )
        _signal_state["superseded"] = superseded
        print(superseded.reason, flush=True)
        if threading.current_thread() is threading.main_thread():
            raise superseded
        os.kill(os.getpid(), signal.SIGTERM)  # reaches the main thread as Superseded

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            try:
                self.flush()
            except Superseded:
                return
            except Exception as err:  # noqa: BLE001 - a missed heartbeat must not kill training
                print(f"heartbeat failed: {' '.join(str(err).split())[:300]}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        try:
            self.flush_epochs()
        except Exception as err:  # noqa: BLE001 - losing curve points must not change how the run ends
            print(f"epoch rows not written: {' '.join(str(err).split())[:300]}", file=sys.stderr, flush=True)
        try:  # what the last beat did not write (a stopped run keeps its evaluations)
            self.flush_anytime()
        except Exception as err:  # noqa: BLE001 - closing must not mask how the run ended
            print(
                f"could not write the last anytime evaluations: {' '.join(str(err).split())[:300]}",
                file=sys.stderr,
                flush=True,
            )

    # loop events ------------------------------------------------------------
    def run_started(
        self, plans: list[TaskPlan], class_order: list[int], class_names: list[str], pipeline: list[str]
    ) -> None:
        # which plug-in packages produced the run (package, version, checkout and commit), read
        # now: its method, data and model are built, so each plug-in it uses has been loaded here
        # (under a warm server too: the server is keyed on the plug-ins' sources)
        store.record_start(
            self.run_id,
            plans,
            class_order,
            class_names,
            pipeline,
            lease=self.lease,
            plugins=plugins.used_by(self.config or {}),
        )
        self.n_tasks = len(plans)
        print(f"stream: {len(plans)} tasks, sizes {[p.n_samples for p in plans]}; pipeline: {pipeline}", flush=True)

    def phase(self, task: int, name: str, total: int) -> None:
        with self.lock:
            if task != self.task:
                self.task_started = time.monotonic()
            self.task, self.phase_name, self.done, self.total = task, name, 0, total
            self.phase_started = time.monotonic()
        if not self.first_phase_seen:  # what start-up cost this process (benchmarks/startup.py reads it)
            self.first_phase_seen = True
            how = "warm (forked)" if os.environ.get("RMCONSOLE_WARM_FORKED") else "cold"
            print(
                f"start-up: first training phase after {time.process_time():.2f} s of CPU in this worker ({how} start)",
                flush=True,
            )
        print(f"task {task + 1}/{self.n_tasks}: {name} ({total} samples)", flush=True)
        self.flush()

    def advance(self, n: int) -> None:
        with self.lock:
            self.done += n

    def epoch_finished(self, stats: EpochStats) -> None:
        rate = stats.samples_per_s
        with self.lock:
            self.epochs.append(
                {
                    "task": stats.task,
                    "phase": stats.phase,
                    "epoch": stats.epoch,
                    "epochs": stats.epochs,
                    "loss": stats.loss,
                    "lr": stats.lr,
                    "samples": stats.samples,
                    "seconds": round(stats.seconds, 4),
                    "samples_per_s": round(rate, 1) if rate else None,
                    "test_accuracy": stats.test_accuracy,
                }
            )

    def memory_updated(self, task: int, histogram: list[int], slots_per_class: int, info: dict[str, Any]) -> None:
        store.record_memory(self.run_id, task, histogram, slots_per_class, info, lease=self.lease)
        print(
            f"task {task + 1}: memory {sum(histogram)} samples, {slots_per_class} slots/class, histogram {histogram}",
            flush=True,
        )

    def task_finished(self, outcome: TaskOutcome, checkpoint: dict[str, Any] | None) -> None:
        # the checkpoint's bytes first (a temporary file), then the result with their checksum,
        # then the rename: a kill in between leaves the previous checkpoint, one task behind the
        # results, whose checksum is in the store too, and the resume recomputes (identically)
        # that task; a checkpoint is never in place without its checksum in the store
        pending = None
        self.flush_epochs()  # the task's epochs are stored with its result
        self.flush_anytime()  # the task's anytime rows before its result (A_auc in the summary)
        if checkpoint is not None:
            if self.config is None:
                self.config = store.get_run(self.run_id).config
            try:
                pending = write_checkpoint(self.run_id, checkpoint, self.config)
            except OSError:  # (a full disk): the task's result is kept all the same, then the run fails
                store.record_task(self.run_id, outcome, lease=self.lease)
                raise
        try:
            summary = store.record_task(
                self.run_id, outcome, lease=self.lease, checkpoint_sha256=pending.sha256 if pending else None
            )
        except BaseException:
            if pending is not None:
                pending.discard()
            raise
        if pending is not None:
            pending.commit()
        self.say_metric_problems()
        with self.lock:
            self.task_seconds.append(outcome.seconds)
        auc = f", A_auc so far {summary['A_auc']:.2f}" if summary.get("A_auc") is not None else ""
        val = f", validation {outcome.val_accuracy:.2f}%" if outcome.val_accuracy is not None else ""
        if outcome.accuracy is None:  # evaluate_test=false: validation only
            print(
                f"task {outcome.task + 1}/{self.n_tasks}: no test evaluation (evaluate_test=false){val} "
                f"({outcome.seconds:.1f} s)",
                flush=True,
            )
            return
        print(
            f"task {outcome.task + 1}/{self.n_tasks}: accuracy {outcome.accuracy:.2f}%{val} "
            f"({outcome.seconds:.1f} s); A_avg so far {summary['A_avg']:.2f}{auc}",
            flush=True,
        )

    def anytime_evaluated(self, point: AnytimePoint) -> None:
        with self.lock:
            self.anytime.append(point)

    def validation_held_out(self, info: dict[str, Any]) -> None:
        store.update_run(self.run_id, lease=self.lease, validation=info)
        print(
            f"validation: {info['samples']} train samples held out ({info['fraction']:g} of each class), "
            f"hash {info['hash']}",
            flush=True,
        )

    def log(self, message: str) -> None:
        print(message, flush=True)


def _on_sigterm() -> None:
    if _signal_state["stopping"]:  # a second signal (group kill + forward, a second Ctrl-C): one stop
        return
    _signal_state["stopping"] = True
    if _signal_state["superseded"]:
        raise _signal_state["superseded"]
    raise StopRequested()


def _claim(run_id: int, fields: dict[str, Any], lease: store.Lease) -> str:
    """queued -> running with the worker's facts (store.claim_run); returns the status found.
    Only a queued run is started, so a stopped or already running run never gets a second worker."""
    claimed = store.claim_run(run_id, lease=lease, **fields)
    return "queued" if claimed else claimed.status


def run_lease(run_id: int) -> store.Lease:
    """The lease this worker was started with (its launcher's environment), or, started by hand,
    the run's current one."""
    lease = store.Lease.from_env(run_id)
    if lease is not None and lease.store_id is not None:
        return lease
    return store.Lease(run_id, store.ensure_token(run_id), store.store_id())


def train(run_id: int) -> str:
    """Run the stored run to its end; returns the final status."""
    lease = run_lease(run_id)
    _current["lease"] = lease
    run = store.get_run(run_id)
    cfg = build_config(run.config)
    device = resolve_device(cfg.device)
    share = memory_share_from_env()
    if share < 1:  # --runs-per-gpu N: this worker's share of its device
        from ..cl.accel import inference_batch, set_memory_share

        set_memory_share(share, device)
        print(
            f"memory share {share:.3g} of {device}"
            + (" (CUDA allocator capped)" if device.type == "cuda" else "")
            + f": inference forward passes of up to {inference_batch((3, 32, 32), device)} CIFAR-sized images",
            flush=True,
        )
    # the plug-ins that trained its earlier tasks (a resumed run), kept beside this attempt's
    earlier = (run.versions or {}).get("plugins")
    fields: dict[str, Any] = dict(
        status="running",
        host=socket.gethostname(),
        device=str(device),
        versions={**package_versions(), **({"plugins": earlier} if earlier else {})},
        git_commit=git_commit(),
        started_at=store.utcnow(),
        heartbeat_at=store.utcnow(),
        error=None,
        finished_at=None,
    )
    if supervisor_pid() is None:  # under a supervisor, the pid is the supervisor's group
        fields["pid"] = os.getpid()
    found = _claim(run_id, fields, lease)
    if found != "queued":
        raise Superseded(found)
    if run.started_at is None:  # never started: a checkpoint here is a leftover of a deleted store's run
        aside = set_aside(run_id)
        if aside is not None:
            print(
                f"a checkpoint this run never wrote (a deleted store's run {run_id}?) was moved to {aside}", flush=True
            )
    resume = load_checkpoint(run_id)  # verified against the checksums recorded in the store
    if resume is not None:
        check_checkpoint(resume, run_id, run.config)
    threads = cfg.threads or (resume or {}).get("threads")  # same thread count, same float sums
    if threads:
        torch.set_num_threads(int(threads))
    start = int(resume["task"]) + 1 if resume is not None else 0
    store.delete_results_from(run_id, start, lease=lease)  # rows of an unfinished task from an earlier attempt
    if resume is not None:
        print(f"resuming after task {start} from {checkpoint_path(run_id)}", flush=True)
    reporter = StoreReporter(run_id, cfg.n_tasks, run.config, lease)
    try:
        data = load_run_dataset(cfg, store.home() / "cache" / "datasets")  # (a tensor copy: no decode, no sklearn)
        run_protocol(cfg, data, device, reporter, resume=resume)
    finally:
        reporter.close()
    if not store.finish_run(
        run_id, "finished", only_from=("running",), lease=lease, phase="done", eta_s=0.0, heartbeat_at=store.utcnow()
    ):
        raise Superseded(store.get_run(run_id).status)
    return "finished"


def memory_share_from_env() -> float:
    """RMCONSOLE_GPU_SHARE (set by a queue slot or a job packing N runs per GPU), else 1."""
    raw = os.environ.get(GPU_SHARE_ENV, "").strip()
    if not raw:
        return 1.0
    allowed = f"expected a fraction from 1/{MAX_RUNS_PER_GPU} to 1 (1/N: --runs-per-gpu N)"
    try:
        share = float(raw)
    except ValueError:
        raise ConfigError(f"{GPU_SHARE_ENV}={raw!r}: {allowed}") from None
    if not 1 / MAX_RUNS_PER_GPU <= share <= 1:
        raise ConfigError(f"{GPU_SHARE_ENV}={raw!r}: {allowed}")
    return share


def _one_line(message: str, limit: int = 500) -> str:
    return " ".join(message.split())[:limit]


_current: dict[str, Any] = {"lease": None}


def no_space_message(run_id: int, err: BaseException) -> str:
    """ENOSPC anywhere (a checkpoint, the log, the store) as the run's one-line error, saying
    what `resume` will do: it continues after the last checkpoint in place, which may be older
    than the last stored result (a full disk at a task's checkpoint keeps that task's result)."""
    where = getattr(err, "filename", None) or (store.database_path() or store.home())
    try:
        done = len(store.task_results(run_id))
        n_tasks = store.get_run(run_id).n_tasks or "?"
        checkpointed = checkpoint_path(run_id).exists() and store.checkpoint_checksums(run_id)
        after = max(checkpointed.values()) + 1 if checkpointed else 0  # the tasks the checkpoint holds
    except Exception:  # noqa: BLE001 - the store may be on the full disk too
        return (
            f"no space left on device ({where}): finished tasks are kept; free some space, then "
            f"`rmconsole resume {run_id}` continues after the last task checkpoint"
        )
    if after >= done:
        then = f"continues at task {done + 1}/{n_tasks} from the last one"
    elif after == 0:
        then = f"starts again at task 1/{n_tasks} (no task checkpoint was written)"
    else:
        then = (
            f"continues at task {after + 1}/{n_tasks}, after the checkpoint of task {after} "
            f"(task{'s' if done - after > 1 else ''} {after + 1}{f'-{done}' if done - after > 1 else ''} "
            f"trained again, identically)"
        )
    return (
        f"no space left on device ({where}): the {done} finished task(s) are stored; free some space, then "
        f"`rmconsole resume {run_id}` {then}"
    )


class _Tolerant:
    """A stream that drops what it cannot write (a full disk under the log) instead of raising
    in the middle of training or of recording how the run ended."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    args = entry_args(argv, "python -m rmconsole.runner.worker RUN_ID")
    if args is None:
        return 2
    run_id = args.run_id
    sys.stdout, sys.stderr = _Tolerant(sys.stdout), _Tolerant(sys.stderr)
    if os.environ.get("LOCAL_RANK") is None:
        die_with_supervisor()  # (a torchrun rank dies with torchrun)
    StopSignal(then=_on_sigterm)
    try:
        status = train(run_id)
        print(f"run {run_id} {status}", flush=True)
        return 0
    except StopRequested:
        try:
            store.finish_run(run_id, "stopped", lease=_current["lease"], error="stopped by request (SIGTERM)")
        except (store.LeaseLost, store.StoreError) as err:
            print(f"run {run_id}: the stop was not recorded: {err}", flush=True)
        print(f"run {run_id} stopped", flush=True)
        return 143
    except Superseded as err:
        if _signal_state["superseded"] is not err:  # (a heartbeat that found it out has said so already)
            print(
                err.reason or f"run {run_id} is {err.status} (not this worker's to run or end): nothing written",
                flush=True,
            )
        return EXIT_SUPERSEDED
    except (store.LeaseLost, store.StoreGone) as err:
        if not _signal_state["superseded"]:  # (a heartbeat that found it out has said so already)
            print(lease_lost(run_id, err).reason, flush=True)
        return EXIT_SUPERSEDED
    except store.StoreFull:
        message = no_space_message(run_id, OSError(errno.ENOSPC, "No space left on device", str(store.database_path())))
    except (DatasetMissing, ConfigError, CheckpointError, CheckpointMismatch, Diverged, store.StoreError) as err:
        message = _one_line(str(err))
    except store.UnknownRun as err:
        print(str(err), file=sys.stderr, flush=True)
        return 2
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            message = no_space_message(run_id, err)
        else:
            traceback.print_exc()
            message = _one_line(f"{type(err).__name__}: {err}") + " (traceback in the run's log)"
    except Exception as err:  # noqa: BLE001 - record any crash on the run, with its traceback in the log
        traceback.print_exc()
        message = _one_line(f"{type(err).__name__}: {err}") + " (traceback in the run's log)"
    print(f"run {run_id} failed: {message}", file=sys.stderr, flush=True)
    try:
        store.finish_run(run_id, "failed", lease=_current["lease"], error=message)
    except store.LeaseLost as err:
        print(lease_lost(run_id, err).reason, flush=True)
        return EXIT_SUPERSEDED
    except Exception as err:  # noqa: BLE001
        print(f"could not record the failure: {err}", file=sys.stderr, flush=True)
        # the last line, which the supervisor (or whoever finds this run dead) records as its reason
        print(f"run {run_id} failed: {message}", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
