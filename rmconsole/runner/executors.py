"""Where a run's worker runs: the executors.

An executor starts stored, queued runs somewhere, tells what its scheduler knows of them, and
cancels them. `local` (the default, spec None) is a supervisor + worker process on this machine
(`launch.start_worker`), judged alive by its pid. The others hand runs to a scheduler through
submitit (the library FAIR's training code uses):

    slurm           one Slurm job per run, or per group of --runs-per-gpu runs sharing one GPU;
                    a sweep is one job array
    submitit-local  the very same job on this machine (submitit's LocalExecutor): for tests, and
                    to try the scheduler path without a cluster

A scheduled run carries on its row its executor's spec (`slurm:partition=gpu,time=240`), its
job id and the scheduler's last word on it (`PENDING (Priority)`). Whether it lives is judged by
its heartbeat and the scheduler's state (`scheduled_verdicts`), never by a pid; `stop` cancels its
job (scancel, through submitit); `resume` submits it again and the worker continues from the
last task checkpoint. Ray or Kubernetes would be one more `Executor` subclass in EXECUTORS,
with the same three methods (submit, states, cancel).

Inside a job, `RunJob` (the callable submitit pickles) starts one supervisor per run of its
group, all at once (each with 1/N of the GPU's memory, `GPU_SHARE_ENV`), and waits for them.
SIGTERM (scancel, preemption) reaches them: each worker records `stopped`. When Slurm requeues
the job (preemption, or submitit's requeue at the time limit, `RunJob.checkpoint`), its runs are
queued again and continue from their last task checkpoint.

RMCONSOLE_HOME must be on a file system every node sees (logs, checkpoints, submitit's job
folders); RMCONSOLE_DB reaches the job through Slurm's environment export (sbatch's default)
and is never written to a file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from .. import private, store
from ..config import ConfigError
from .processes import GPU_SHARE_ENV, MAX_RUNS_PER_GPU, pid_alive, process_argv, python_m

SCHEDULER_POLL_S = 2.0  # how often a follower asks the scheduler (squeue is a controller RPC)
UNKNOWN_GRACE_S = 60.0  # a job the scheduler does not list yet (just submitted) is not dead yet

# Slurm's job states (squeue %T / sacct State), by what they mean for the run
WAITING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "CONFIGURING"}
LIVE = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}
CANCELLED = {"CANCELLED"}


# ---------------------------------------------------------------------------- the spec


@dataclass(frozen=True)
class Option:
    kind: Callable[[str], Any]
    check: Callable[[Any], bool]
    allowed: str
    default: Any = None


def _positive(x: Any) -> bool:
    return x > 0


SLURM_OPTIONS: dict[str, Option] = {
    "partition": Option(str, bool, "a partition name"),
    "time": Option(int, _positive, "minutes, at least 1", 60),
    "gpus_per_run": Option(int, lambda x: x >= 0, "0 or more GPUs", 0),
    "cpus_per_run": Option(int, _positive, "1 or more CPUs", 1),
    "mem_gb": Option(float, _positive, "GB per run, above 0"),
    "account": Option(str, bool, "an account name"),
    "qos": Option(str, bool, "a QOS name"),
    "constraint": Option(str, bool, "a node feature expression"),
    "exclude": Option(str, bool, "node names"),
    "nodelist": Option(str, bool, "node names"),
}


@dataclass(frozen=True)
class ExecutorSpec:
    """Which executor, with its options (validated, as text) and how many runs share a GPU."""

    name: str
    options: tuple[tuple[str, str], ...] = ()
    runs_per_gpu: int = 1

    def get(self, key: str) -> Any:
        """An option's value (typed), or its default."""
        option = SLURM_OPTIONS[key]
        raw = dict(self.options).get(key)
        return option.default if raw is None else option.kind(raw)

    def text(self) -> str:
        """What the run row stores: `slurm:partition=gpu,time=240,runs_per_gpu=2`."""
        parts = [f"{k}={v}" for k, v in self.options]
        if self.runs_per_gpu != 1:
            parts.append(f"runs_per_gpu={self.runs_per_gpu}")
        return self.name + (":" + ",".join(parts) if parts else "")

    @classmethod
    def from_text(cls, text: str) -> ExecutorSpec:
        name, _, rest = text.partition(":")
        pairs = [p for p in rest.split(",") if p]
        runs_per_gpu = 1
        options = []
        for pair in pairs:
            key, _, value = pair.partition("=")
            if key == "runs_per_gpu":
                runs_per_gpu = int(value)
            else:
                options.append((key, value))
        return cls(name, tuple(options), runs_per_gpu)


def check_runs_per_gpu(runs_per_gpu: int | None) -> int:
    """`--runs-per-gpu N` as N (1 when not given): the one check of it, for the local queue and
    for Slurm alike; outside 1 to MAX_RUNS_PER_GPU it is one line (processes.py says why 32)."""
    if runs_per_gpu is None:
        return 1
    if not 1 <= runs_per_gpu <= MAX_RUNS_PER_GPU:
        from ..config import shorten

        raise ConfigError(
            f"--runs-per-gpu {shorten(runs_per_gpu)}: allowed: 1 to {MAX_RUNS_PER_GPU} "
            f"(runs sharing one GPU, each given 1/N of its memory)"
        )
    return runs_per_gpu


def parse_executor(
    name: str | None, options: Iterable[str] = (), runs_per_gpu: int | None = None
) -> ExecutorSpec | None:
    """`--executor NAME --slurm KEY=V,KEY=V --runs-per-gpu N` -> a spec (None: the local
    executor). Every bad value is one line naming it and what is allowed."""
    options = [o for o in options if o.strip()]
    per_gpu = check_runs_per_gpu(runs_per_gpu)
    if name in (None, "local"):
        if options:
            raise ConfigError("--slurm applies to --executor slurm (or submitit-local)")
        return None
    if name not in EXECUTORS:
        raise ConfigError(f"--executor {name!r}: allowed: local, {', '.join(EXECUTORS)}")
    parsed: dict[str, str] = {}
    for text in options:
        for pair in text.split(","):
            key, sep, value = pair.strip().partition("=")
            key = key.strip().replace("-", "_")
            if not sep or not key:
                raise ConfigError(f"--slurm {text!r}: expected KEY=VALUE pairs, e.g. partition=gpu,time=240")
            if key not in SLURM_OPTIONS:
                raise ConfigError(f"--slurm {key}: unknown option; allowed: {', '.join(SLURM_OPTIONS)}")
            option = SLURM_OPTIONS[key]
            try:
                typed = option.kind(value.strip())
            except ValueError:
                typed = None
            if typed is None or not option.check(typed) or any(c in value for c in " \n'\""):
                raise ConfigError(f"--slurm {key}={value!r}: expected {option.allowed}")
            parsed[key] = str(typed)
    spec = ExecutorSpec(name, tuple(sorted(parsed.items())), per_gpu)
    if spec.runs_per_gpu > 1 and spec.get("gpus_per_run") > 1:
        raise ConfigError(
            f"--runs-per-gpu {spec.runs_per_gpu} packs runs on one GPU: "
            f"gpus_per_run={spec.get('gpus_per_run')} must be 1 (or 0 on a CPU partition)"
        )
    return spec


def spec_of(run: store.Run) -> ExecutorSpec | None:
    return ExecutorSpec.from_text(run.executor) if run.executor else None


def is_scheduled(run: store.Run) -> bool:
    """Whether a scheduler (not a local pid) owns the run's processes."""
    return bool(run.executor) and bool(run.job_id)


# ---------------------------------------------------------------------------- job states


@dataclass(frozen=True)
class JobState:
    """The scheduler's word on one job: its state (Slurm's names) and reason."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETED, CANCELLED, FAILED, TIMEOUT, ..., or UNKNOWN
    reason: str | None = None

    @property
    def waiting(self) -> bool:
        return self.state in WAITING

    @property
    def live(self) -> bool:
        return self.state in LIVE

    @property
    def ended(self) -> bool:
        return not (self.waiting or self.live or self.state == "UNKNOWN")

    def label(self) -> str:
        shown = self.reason not in (None, "", "None")
        return self.state + (f" ({self.reason})" if shown else "")


# ---------------------------------------------------------------------------- executors


class Executor:
    """The interface: start queued runs, ask the scheduler about jobs, cancel jobs."""

    name: ClassVar[str] = ""
    noun: ClassVar[str] = "job"  # how messages name a job: "slurm job 12"

    def __init__(self, spec: ExecutorSpec) -> None:
        self.spec = spec

    def submit(self, run_ids: list[int]) -> list[str]:
        """Start the (queued) runs; record executor, job id and state on each; their job ids."""
        raise NotImplementedError

    def states(self, job_ids: list[str]) -> dict[str, JobState] | None:
        """The scheduler's state of each job (UNKNOWN when it does not know one); None when the
        scheduler could not be asked at all."""
        raise NotImplementedError

    def cancel(self, job_ids: list[str]) -> None:
        raise NotImplementedError

    def describe(self, job_id: str) -> str:
        return f"{self.noun} {job_id}"


def folder() -> Path:
    """submitit's job folders (pickles, the job's own output): under RMCONSOLE_HOME, which every
    node must see."""
    return store.home().resolve() / "jobs"


def job_env() -> dict[str, str]:
    """What the job must see, passed in its pickle: the store's home, the data and the code.
    RMCONSOLE_DB (it may hold a password) is not among them: Slurm exports the submitter's
    environment to the job (sbatch's default); `RunJob` checks the job sees the same store."""
    env = {"RMCONSOLE_HOME": str(store.home().resolve()), "PYTHONUNBUFFERED": "1"}
    from ..cl.datasets import data_root

    env["RMCONSOLE_DATA"] = str(data_root().resolve())
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


class SubmititExecutor(Executor):
    """What every submitit-backed executor shares: one job per group of runs (a job array for
    several groups), the RunJob callable, submitit's cancel."""

    def _executor(self, group_size: int) -> Any:
        raise NotImplementedError

    def groups(self, run_ids: list[int]) -> list[list[int]]:
        n = self.spec.runs_per_gpu
        return [run_ids[i : i + n] for i in range(0, len(run_ids), n)]

    def _submitting(self) -> Any:
        """A context around the submission (nothing; the local executor detaches its job)."""
        return contextlib.nullcontext()

    def submit(self, run_ids: list[int]) -> list[str]:
        groups = self.groups(run_ids)
        ex = self._executor(max(len(g) for g in groups))
        env = job_env()
        store_seen = store.shown_url(store.database_url())
        calls = [
            RunJob(group, env, store_seen, self.spec.runs_per_gpu, self.spec.get("cpus_per_run")) for group in groups
        ]
        try:
            with self._submitting():
                if len(calls) == 1:
                    jobs = [ex.submit(calls[0])]
                else:
                    with ex.batch():
                        jobs = [ex.submit(call) for call in calls]
        except Exception as err:  # noqa: BLE001 - sbatch's refusal (bad partition, time limit...) is one line
            text = " ".join(str(err).split())
            for run_id in run_ids:
                store.mark_failed(run_id, f"submission to {self.name} failed: {text[:400]}")
            raise ConfigError(f"{self.name} refused the job: {text[:400]}") from None
        ids = []
        for job, group in zip(jobs, groups):
            for run_id in group:
                store.update_run(
                    run_id,
                    executor=self.spec.text(),
                    job_id=str(job.job_id),
                    job_state="PENDING (submitted)",
                    log_path=str(log_path(run_id)),
                    pid=None,
                )
                ids.append(str(job.job_id))
        return ids


class SlurmExecutor(SubmititExecutor):
    """Slurm through submitit's SlurmExecutor; states from squeue (sacct for jobs squeue no
    longer lists, where accounting is on)."""

    name = "slurm"
    noun = "slurm job"

    def _executor(self, group_size: int) -> Any:
        import submitit

        spec = self.spec
        ex = submitit.SlurmExecutor(folder=folder() / "%j", python=sys.executable)
        minutes = spec.get("time")
        params: dict[str, Any] = dict(
            job_name="rmconsole",
            time=minutes,
            cpus_per_task=spec.get("cpus_per_run") * group_size,
            signal_delay_s=min(90, max(10, minutes * 60 // 6)),
            stderr_to_stdout=True,
        )
        gpus = spec.get("gpus_per_run")
        if gpus:
            params["gpus_per_node"] = gpus  # a group of runs shares its GPU (--runs-per-gpu)
        if spec.get("mem_gb"):
            params["mem"] = f"{int(spec.get('mem_gb') * 1024 * group_size)}MB"
        for key in ("partition", "account", "qos", "constraint", "exclude", "nodelist"):
            if spec.get(key):
                params[key] = spec.get(key)
        ex.update_parameters(**params)
        return ex

    def states(self, job_ids: list[str]) -> dict[str, JobState] | None:
        if not job_ids:
            return {}
        base = sorted({j.split("_")[0] for j in job_ids})
        try:
            out = subprocess.run(
                ["squeue", "-h", "-r", "-t", "all", "-o", "%i|%T|%r", "--jobs=" + ",".join(base)],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        found: dict[str, JobState] = {}
        if out.returncode == 0 or "Invalid job id" in out.stderr:
            for line in out.stdout.splitlines():
                parts = line.strip().split("|")
                if len(parts) == 3:
                    found[parts[0]] = JobState(parts[0], parts[1].split()[0], parts[2])
        elif out.returncode != 0:
            return None
        missing = [j for j in job_ids if j not in found]
        if missing:
            found.update(_sacct(missing))
        return {j: found.get(j, JobState(j, "UNKNOWN")) for j in job_ids}

    def cancel(self, job_ids: list[str]) -> None:
        import submitit

        for job_id in dict.fromkeys(job_ids):
            try:
                submitit.SlurmJob(folder=folder() / "%j", job_id=job_id).cancel(check=False)  # scancel JOB_ID
            except Exception as err:  # noqa: BLE001 - the state check that follows says what happened
                print(f"scancel {job_id} failed: {err}", file=sys.stderr)


def _sacct(job_ids: list[str]) -> dict[str, JobState]:
    """Ended jobs squeue has forgotten, where Slurm keeps accounting (empty where it does not)."""
    try:
        out = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-o", "JobID,State,Reason", "-j", ",".join(job_ids)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    found = {}
    for line in out.stdout.splitlines() if out.returncode == 0 else []:
        parts = line.strip().split("|")
        if len(parts) >= 2 and parts[0] in job_ids:
            found[parts[0]] = JobState(parts[0], parts[1].split()[0], parts[2] if len(parts) > 2 else None)
    return found


class SubmititLocalExecutor(SubmititExecutor):
    """submitit's LocalExecutor: the job is a controller process on this machine (job id = its
    pid), which outlives the command that submitted it. Its state: the process, then the
    result submitit pickles when the job's function returns."""

    name = "submitit-local"
    noun = "local job"

    def _executor(self, group_size: int) -> Any:
        import submitit

        ex = submitit.LocalExecutor(folder=folder() / "%j", python=sys.executable)
        minutes = self.spec.get("time")
        ex.update_parameters(
            timeout_min=minutes, signal_delay_s=min(90, max(10, minutes * 60 // 6)), stderr_to_stdout=True
        )
        return ex

    @contextlib.contextmanager
    def _submitting(self) -> Iterator[None]:
        """submitit starts the job's controller with this process's stdin/stdout/stderr: it would
        hold the terminal (or a caller's pipe) until the job ends. It gets /dev/null instead."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        saved = [os.dup(fd) for fd in (0, 1, 2)]
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            yield
        finally:
            for fd, copy in zip((0, 1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
            os.close(devnull)

    def states(self, job_ids: list[str]) -> dict[str, JobState] | None:
        from submitit.core.utils import JobPaths

        found = {}
        for job_id in job_ids:
            pid = int(job_id) if job_id.isdigit() else 0
            argv = process_argv(pid) if pid and pid_alive(pid) else None
            if argv is not None and "submitit.local._local" in argv:
                found[job_id] = JobState(job_id, "RUNNING")
                continue
            result = JobPaths(folder() / "%j", job_id).result_pickle
            if result.exists():
                import pickle

                try:
                    outcome = pickle.loads(result.read_bytes())[0]
                except Exception:  # noqa: BLE001
                    outcome = "error"
                found[job_id] = JobState(job_id, "COMPLETED" if outcome == "success" else "FAILED")
            else:
                found[job_id] = JobState(job_id, "FAILED", "the job's process is gone")
        return found

    def cancel(self, job_ids: list[str]) -> None:
        # SIGTERM to the controller, which forwards it to its tasks (submitit's own handler), as
        # scancel sends SIGTERM to a Slurm job; not submitit's LocalJob.cancel (SIGINT): a controller
        # started from a shell's background job or nohup inherits SIGINT ignored, and that cancel
        # did nothing (the run went on to `finished`)
        for job_id in dict.fromkeys(job_ids):
            pid = int(job_id) if job_id.isdigit() else 0
            argv = process_argv(pid) if pid and pid_alive(pid) else None
            if argv is not None and "submitit.local._local" in argv:
                os.kill(pid, signal.SIGTERM)


EXECUTORS: dict[str, type[SubmititExecutor]] = {"slurm": SlurmExecutor, "submitit-local": SubmititLocalExecutor}


def executor_for(spec: ExecutorSpec) -> Executor:
    return EXECUTORS[spec.name](spec)


def _job_of(run: store.Run) -> str:
    """How the scheduler holding `run` names its job (a scheduled run: executor and job id set)."""
    spec = spec_of(run)
    assert spec is not None and run.job_id is not None, f"run {run.id} is not held by a scheduler"
    return executor_for(spec).describe(run.job_id)


def log_path(run_id: int) -> Path:
    return store.home().resolve() / "logs" / f"run-{run_id}.log"


# ---------------------------------------------------------------------------- inside the job


class RunJob:
    """The job: start a supervisor per run of the group (all at once: --runs-per-gpu), wait for
    them; returns each run's status. Pickled by submitit (so: plain attributes only)."""

    def __init__(
        self, run_ids: list[int], env: dict[str, str], store_seen: str, runs_per_gpu: int = 1, cpus_per_run: int = 1
    ) -> None:
        self.run_ids = list(run_ids)
        self.env = dict(env)
        self.store_seen = store_seen
        self.runs_per_gpu = runs_per_gpu
        self.cpus_per_run = cpus_per_run
        self._procs: dict[int, subprocess.Popen] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_procs"] = {}
        return state

    def __call__(self) -> dict[int, str]:
        os.environ.update(self.env)
        here = store.shown_url(store.database_url())
        if here != self.store_seen:
            raise RuntimeError(
                f"this job sees the store {here}, but its runs were submitted to {self.store_seen}: "
                f"let the scheduler export RMCONSOLE_DB to the job (sbatch's default --export=ALL)"
            )
        job_id = (
            (
                os.environ.get("SLURM_ARRAY_JOB_ID")
                and (f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '0')}")
            )
            or os.environ.get("SLURM_JOB_ID")
            or os.environ.get("SUBMITIT_LOCAL_JOB_ID")
            or "?"
        )
        if int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0:
            self._continue_after_requeue(job_id)
        for signum in (signal.SIGTERM, signal.SIGINT):  # scancel, submitit's local cancel: pass it on
            signal.signal(signum, self._forward)
        share = 1.0 / self.runs_per_gpu
        for run_id in self.run_ids:
            path = log_path(run_id)
            private.mkdir(path.parent)
            extra = {GPU_SHARE_ENV: repr(share)} if self.runs_per_gpu > 1 else {}
            if "OMP_NUM_THREADS" not in os.environ:
                extra["OMP_NUM_THREADS"] = str(self.cpus_per_run)
            from .multigpu import worker_command

            lease = store.Lease(run_id, store.ensure_token(run_id), store.store_id())  # this attempt's
            extra.update(lease.env())
            store.update_run(run_id, job_state=f"RUNNING (on {socket.gethostname()})")
            with private.open_append(path) as log:
                log.write(f"{self.describe(job_id)} on {socket.gethostname()}: starting run {run_id}\n".encode())
                log.flush()
                self._procs[run_id] = subprocess.Popen(
                    python_m("supervise", str(run_id), "--", *worker_command(run_id)),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env={**os.environ, **extra},
                    umask=private.UMASK,
                )
        for proc in self._procs.values():
            proc.wait()
        return {run_id: store.get_run(run_id).status for run_id in self.run_ids}

    @staticmethod
    def describe(job_id: str) -> str:
        return f"{'slurm' if os.environ.get('SLURM_JOB_ID') else 'submitit'} job {job_id}"

    def _forward(self, signum: int, frame: Any) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                try:
                    proc.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def _continue_after_requeue(self, job_id: str) -> None:
        """Slurm started this job again (preemption, a requeue): the runs it stopped continue."""
        for run_id in self.run_ids:
            run = store.get_run(run_id)
            if run.job_id == job_id and run.status in ("stopped", "failed") and store.requeue_run(run_id):
                print(f"run {run_id}: its job was requeued; continuing from its last task checkpoint", flush=True)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's hook at the time limit (or a simulated preemption): stop the workers (each
        records `stopped` and keeps its last task checkpoint), queue the runs again, and let
        submitit requeue this job, which continues them."""
        import submitit

        self._forward(signal.SIGTERM, None)
        for proc in self._procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for run_id in self.run_ids:
            if store.get_run(run_id).status in ("stopped", "failed"):
                store.requeue_run(run_id)
        return submitit.helpers.DelayedSubmission(
            RunJob(self.run_ids, self.env, self.store_seen, self.runs_per_gpu, self.cpus_per_run)
        )


# ---------------------------------------------------------------------------- the runner's side


def check_scheduler(spec: ExecutorSpec) -> None:
    """Refuse, before anything is stored, an executor that cannot submit from here: submitit
    missing, no Slurm client, an unknown partition (one line each)."""
    import importlib.util
    import shutil

    if importlib.util.find_spec("submitit") is None:
        raise ConfigError(
            f"--executor {spec.name} needs submitit, which is not installed: pip install 'rmconsole[slurm]'"
        )
    if spec.name != "slurm":
        return
    if shutil.which("sbatch") is None:
        raise ConfigError(
            "--executor slurm: sbatch is not on PATH (submit from a Slurm login node, or install the Slurm client)"
        )
    partition = spec.get("partition")
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        raise ConfigError(f"--executor slurm: cannot reach the Slurm controller ({err})") from None
    if out.returncode != 0:
        raise ConfigError(f"--executor slurm: cannot reach the Slurm controller: {' '.join(out.stderr.split())[:300]}")
    known = [p.strip().rstrip("*") for p in out.stdout.split()]
    if partition and partition not in known:
        raise ConfigError(f"--slurm partition={partition!r}: no such partition; this cluster has: {', '.join(known)}")


def submit_runs(spec: ExecutorSpec, run_ids: list[int]) -> list[str]:
    """Hand queued runs to the spec's executor; their job ids (one per run)."""
    private.mkdir(folder())
    private.mkdir(log_path(run_ids[0]).parent)
    return executor_for(spec).submit(run_ids)


def _age(at: datetime | None, now: datetime) -> float | None:
    if at is None:
        return None
    at = at if at.tzinfo else at.replace(tzinfo=UTC)
    return (now - at).total_seconds()


@dataclass(frozen=True)
class Verdict:
    """What the scheduler's word means for one run: end it `status` for `reason`; `cancel`: the
    (executor spec, job id) to cancel once that is recorded."""

    run_id: int
    status: str  # "failed" or "stopped"
    reason: str
    cancel: tuple[str, str] | None = None
    token: str | None = None  # the attempt judged: a run resumed since (a new token) is not this verdict's


def scheduled_verdicts(runs: list[store.Run], stale_after_s: float) -> list[Verdict]:
    """How to settle queued/running scheduled runs by the scheduler's state and their heartbeat
    (the caller records each verdict: `launch.reap_dead`):

    - job waiting or live: the run stays; its job_state is refreshed (`PENDING (Priority)`); a
      running run whose heartbeat is older than `stale_after_s` is failed (its job cancelled when
      it holds no other live run), whatever the scheduler says;
    - job cancelled while the run was active: `stopped`;
    - job ended otherwise (FAILED, TIMEOUT, PREEMPTED, NODE_FAIL, OUT_OF_MEMORY, or COMPLETED with
      the run never recording its end): `failed`, with the scheduler's state and reason;
    - job unknown to the scheduler past UNKNOWN_GRACE_S after submission and with no fresh
      heartbeat: `failed`.
    A scheduler that cannot be asked settles nothing but stale heartbeats."""
    now = store.utcnow()
    verdicts: list[Verdict] = []
    by_spec: dict[str, list[store.Run]] = {}
    for run in runs:
        if run.status in store.ACTIVE and is_scheduled(run):
            by_spec.setdefault(run.executor or "", []).append(run)  # (is_scheduled: it names one)
    for text, group in by_spec.items():
        executor = executor_for(ExecutorSpec.from_text(text))
        states = _asked(text, executor, sorted({r.job_id or "" for r in group}))  # (each has one: is_scheduled)
        for run in group:
            assert run.id is not None and run.job_id is not None
            job = executor.describe(run.job_id)
            beat = _age(run.heartbeat_at, now) if run.status == "running" else None
            state = None if states is None else states.get(run.job_id)
            if state is None or state.waiting or state.live:
                label = state.label() if state is not None else None
                if beat is not None and beat > stale_after_s:
                    cancel = (text, run.job_id) if state is not None and not _others_live(run) else None
                    verdicts.append(
                        Verdict(
                            run.id,
                            "failed",
                            f"no heartbeat for {int(beat)} s ({job} {label or 'state unknown'})",
                            cancel,
                            run.token,
                        )
                    )
                elif label and label != run.job_state:
                    store.update_run(run.id, job_state=label)
                continue
            if state.state == "UNKNOWN":
                since = _age(run.created_at if run.started_at is None else run.started_at, now) or 0.0
                fresh = beat is not None and beat <= stale_after_s
                if fresh or (run.status == "queued" and since < UNKNOWN_GRACE_S) or _recently_submitted(run, now):
                    continue
                reason = f"{job} is unknown to the scheduler"
            else:
                reason = f"{job} {state.label()}"
            store.update_run(run.id, job_state=state.label())
            if state.state in CANCELLED:
                verdicts.append(Verdict(run.id, "stopped", f"stopped: {reason} (scancel)", token=run.token))
            else:
                verdicts.append(
                    Verdict(
                        run.id,
                        "failed",
                        reason if run.status == "running" else f"{reason} before its worker started",
                        token=run.token,
                    )
                )
    return verdicts


_ASKED: dict[tuple[str, tuple[str, ...]], tuple[float, dict[str, JobState] | None]] = {}


def _asked(text: str, executor: Executor, job_ids: list[str]) -> dict[str, JobState] | None:
    """The scheduler's states, asked at most every SCHEDULER_POLL_S for the same jobs: the TUI
    reaps every second, and squeue is an RPC to a controller the whole cluster shares."""
    key = (text, tuple(job_ids))
    at, states = _ASKED.get(key, (-1e9, None))
    if time.monotonic() - at >= SCHEDULER_POLL_S:
        states = executor.states(job_ids)
        _ASKED.clear()  # (only the latest question is worth keeping)
        _ASKED[key] = (time.monotonic(), states)
    return states


def cancel_jobs(spec_text: str, *job_ids: str) -> None:
    executor_for(ExecutorSpec.from_text(spec_text)).cancel(list(job_ids))


def _recently_submitted(run: store.Run, now: datetime) -> bool:
    return run.job_state == "PENDING (submitted)" and (_age(run.created_at, now) or 0.0) < UNKNOWN_GRACE_S


def _others_live(run: store.Run) -> bool:
    """Whether the run's job holds other queued or running runs (--runs-per-gpu)."""
    return any(r.id != run.id and r.job_id == run.job_id for r in store.list_runs(status=store.ACTIVE))


def stop_scheduled(runs: list[store.Run], grace_s: float = 10.0) -> None:
    """Stop scheduled runs: cancel each job that holds no other live run (scancel; SIGTERM reaches
    the workers, which record `stopped`), else stop the run through the store (its worker exits
    at its next heartbeat); then wait for them to leave queued/running, and record `stopped` for
    any that did not."""
    ids = {r.id for r in runs}
    cancel: dict[str, list[str]] = {}
    for run in runs:
        assert run.id is not None and run.job_id is not None and run.executor is not None
        sharing = [r for r in store.list_runs(status=store.ACTIVE) if r.job_id == run.job_id and r.id not in ids]
        if sharing:
            store.mark_stopped(
                run.id,
                f"stopped by request; its worker in {_job_of(run)} "
                f"(shared with runs {', '.join(str(r.id) for r in sharing)}) exits at its next heartbeat",
            )
        else:
            cancel.setdefault(run.executor, []).append(run.job_id)
    for text, job_ids in cancel.items():
        executor_for(ExecutorSpec.from_text(text)).cancel(job_ids)
    _ASKED.clear()
    for run in runs:  # a run whose worker has not claimed it yet ends here (a claim after this fails)
        if run.job_id in {j for ids in cancel.values() for j in ids}:
            job = _job_of(run)
            store.mark_stopped(run.id, f"stopped before it started ({job} cancelled)", only_from=("queued",))
    deadline = time.monotonic() + grace_s + 5  # the worker's SIGTERM handler, or Slurm's KillWait
    pending = [r for r in runs if r.id is not None]
    while pending and time.monotonic() < deadline:
        pending = [r for r in pending if store.get_run(r.id).status in store.ACTIVE]
        if pending:
            time.sleep(0.2)
    for run in pending:
        job = _job_of(run)
        was = store.get_run(run.id).status
        store.mark_stopped(
            run.id,
            f"stopped before it started ({job} cancelled)"
            if was == "queued"
            else f"stopped by request ({job} cancelled)",
        )
