"""The executors: the spec's grammar, the scheduler's states turned into run statuses (with a
scripted scheduler), and the whole submitit path on this machine (submitit's LocalExecutor):
submitted, followed, stopped and resumed like a Slurm job, in seconds. The same path on a real
Slurm cluster is tests/runner/test_slurm.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import torch
from conftest import rmconsole, wait_for, worker_process
from support.cli import in_process

from rmconsole import runner, store
from rmconsole.cl.data import load_digits
from rmconsole.cl.loop import run_protocol
from rmconsole.config import ConfigError, load_config
from rmconsole.runner import executors as X
from rmconsole.runner.launch import STALE_AFTER_S

SETTINGS = {"epochs": 48, "threads": 1, "device": "cpu"}  # long enough to stop a run mid-way, even loaded
ARGS = [a for k, v in SETTINGS.items() for a in ("--set", f"{k}={v}")]
STOPPABLE = {**SETTINGS, "epochs": 96}  # the stop-and-resume test's run: 4 tasks left after the first take seconds


# ---------------------------------------------------------------------------- the spec


def test_a_spec_round_trips_through_the_run_row() -> None:
    spec = runner.parse_executor("slurm", ["partition=gpu,time=240", "gpus_per_run=1"], 4)
    assert spec.text() == "slurm:gpus_per_run=1,partition=gpu,time=240,runs_per_gpu=4"
    assert X.ExecutorSpec.from_text(spec.text()) == spec
    assert spec.get("time") == 240 and spec.get("gpus_per_run") == 1 and spec.get("cpus_per_run") == 1
    assert runner.parse_executor(None) is None and runner.parse_executor("local") is None


@pytest.mark.parametrize(
    "name, options, per_gpu, says",
    [
        ("ray", [], None, "--executor 'ray': allowed: local, slurm, submitit-local"),
        ("slurm", ["partition=gpu,tim=5"], None, "--slurm tim: unknown option; allowed: partition, time,"),
        ("slurm", ["time=0"], None, "--slurm time='0': expected minutes, at least 1"),
        ("slurm", ["time=ten"], None, "--slurm time='ten': expected minutes, at least 1"),
        ("slurm", ["partition"], None, "--slurm 'partition': expected KEY=VALUE pairs"),
        ("slurm", ["partition=a b"], None, "--slurm partition='a b': expected a partition name"),
        ("slurm", ["gpus_per_run=2"], 2, "--runs-per-gpu 2 packs runs on one GPU: gpus_per_run=2 must be 1"),
        (None, ["time=5"], None, "--slurm applies to --executor slurm"),
        ("slurm", [], 0, "--runs-per-gpu 0: allowed: 1 to 32"),
        ("slurm", [], 33, "--runs-per-gpu 33: allowed: 1 to 32"),
    ],
)
def test_bad_executor_options_are_one_line(name, options, per_gpu, says) -> None:
    with pytest.raises(ConfigError) as refused:
        runner.parse_executor(name, options, per_gpu)
    assert str(refused.value).startswith(says) and "\n" not in str(refused.value)


@pytest.mark.usefixtures("store_backend")
def test_slurm_without_a_cluster_is_refused_before_anything_is_stored(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no sbatch here
    out = in_process("run", "--executor", "slurm", "--slurm", "partition=gpu", env={"PATH": "/nonexistent"})
    assert out.returncode == 2 and out.stderr.startswith("error: --executor slurm: sbatch is not on PATH")
    assert "Traceback" not in out.stderr and store.count_runs() == 0


# ---------------------------------------------------------------------------- states -> statuses


class ScriptedScheduler(X.SubmititExecutor):
    """A scheduler whose answers the test writes (`STATES`), recording what it was asked to cancel."""

    name = "scripted"
    noun = "scripted job"
    STATES: dict[str, X.JobState] | None = {}
    CANCELLED: list[str] = []

    def states(self, job_ids):
        if self.STATES is None:
            return None
        return {j: self.STATES.get(j, X.JobState(j, "UNKNOWN")) for j in job_ids}

    def cancel(self, job_ids):
        self.CANCELLED.extend(job_ids)


@pytest.fixture
def scripted(monkeypatch):
    monkeypatch.setitem(X.EXECUTORS, "scripted", ScriptedScheduler)
    monkeypatch.setattr(X, "SCHEDULER_POLL_S", 0.0)  # every look asks (the scripted answers change)
    monkeypatch.setattr(ScriptedScheduler, "STATES", {})
    monkeypatch.setattr(ScriptedScheduler, "CANCELLED", [])
    return ScriptedScheduler


def _scheduled(job_id: str, status: str = "running", beat_age_s: float = 1.0, created_age_s: float = 300.0) -> int:
    _, cfg = load_config(None)
    run_id = store.create_run(cfg.to_dict(), "digits-blurry10-online")
    now = store.utcnow()
    store.update_run(
        run_id,
        status=status,
        executor="scripted:time=5",
        job_id=job_id,
        job_state="RUNNING",
        created_at=now - timedelta(seconds=created_age_s),
        task=1,
        phase="memory",
        heartbeat_at=now - timedelta(seconds=beat_age_s) if status == "running" else None,
    )
    return run_id


@pytest.mark.usefixtures("store_backend")
def test_the_schedulers_word_becomes_the_runs_status(scripted) -> None:
    pending = _scheduled("11", status="queued")
    live = _scheduled("12")
    cancelled = _scheduled("13")
    failed = _scheduled("14")
    timeout = _scheduled("15")
    completed = _scheduled("16")  # the job ended but the worker never recorded the run's end
    gone = _scheduled("17")  # the scheduler forgot the job, and the heartbeat is old
    gone_fresh = _scheduled("18")  # ... but this one still beats: a scheduler hiccup, not a death
    scripted.STATES = {
        "11": X.JobState("11", "PENDING", "Resources"),
        "12": X.JobState("12", "RUNNING", "None"),
        "13": X.JobState("13", "CANCELLED", "None"),
        "14": X.JobState("14", "FAILED", "NonZeroExitCode"),
        "15": X.JobState("15", "TIMEOUT", "TimeLimit"),
        "16": X.JobState("16", "COMPLETED", "None"),
    }
    store.update_run(gone, heartbeat_at=store.utcnow() - timedelta(seconds=STALE_AFTER_S + 5))
    settled = runner.reap_dead()
    assert sorted(settled) == [cancelled, failed, timeout, completed, gone]
    run = store.get_run
    assert run(pending).status == "queued" and run(pending).job_state == "PENDING (Resources)"
    assert run(live).status == "running"
    assert run(cancelled).status == "stopped" and "scripted job 13 CANCELLED" in run(cancelled).error
    assert run(failed).status == "failed" and run(failed).error.startswith(
        "scripted job 14 FAILED (NonZeroExitCode); last phase: memory of task 2"
    )
    assert run(timeout).error.startswith("scripted job 15 TIMEOUT (TimeLimit)")
    assert run(completed).error.startswith("scripted job 16 COMPLETED") and run(completed).status == "failed"
    assert run(gone).error.startswith("no heartbeat for") or "unknown to the scheduler" in run(gone).error
    assert run(gone_fresh).status == "running"
    assert scripted.CANCELLED == []  # nothing live was failed, so nothing needed cancelling


@pytest.mark.usefixtures("store_backend")
@pytest.mark.parametrize("ended", ["FAILED", "CANCELLED"])
def test_a_run_resumed_after_it_was_read_is_not_settled_by_its_old_jobs_end(scripted, ended) -> None:
    """The reaper read the run while its killed job was its job; before the verdict was recorded
    the run was resumed (a new job, a new token). The old job's end must not fail or stop the
    new attempt (seen once in the Slurm whole-job-kill test under load: `rmconsole stop` found
    the resumed run failed)."""
    run_id = _scheduled("51")
    read = [store.get_run(run_id)]  # what the reaper read: job 51
    store.mark_failed(run_id, "job 51 killed")
    store.requeue_run(run_id)  # the resume: a new token
    store.update_run(run_id, status="running", job_id="52", heartbeat_at=store.utcnow())
    scripted.STATES = {"51": X.JobState("51", ended, "None"), "52": X.JobState("52", "RUNNING")}
    assert runner.reap_dead(read) == []
    assert store.get_run(run_id).status == "running"


@pytest.mark.usefixtures("store_backend")
def test_a_reaper_between_a_resume_and_its_submission_leaves_the_run_queued(scripted, monkeypatch) -> None:
    """`rmconsole resume` of a run whose job died: between queueing the run again and the new
    job's id being stored (sbatch can take seconds), a reaper (the TUI, `rmconsole runs`) must not
    fail the new attempt by the old job's end."""
    run_id = _scheduled("61")
    scripted.STATES = {"61": X.JobState("61", "FAILED", "NonZeroExitCode")}
    assert runner.reap_dead() == [run_id]  # the old job's death, settled
    seen = []

    def submit(spec, run_ids):  # the reaper runs while sbatch is being asked
        seen.append((runner.reap_dead(), store.get_run(run_id).status))
        store.update_run(run_id, job_id="62", job_state="PENDING (submitted)")
        return ["62"]

    monkeypatch.setattr(X, "submit_runs", submit)
    monkeypatch.setattr(X, "check_scheduler", lambda spec: None)
    resumed = runner.resume_run(run_id)
    assert resumed.job_id == "62" and seen == [([], "queued")]
    assert store.get_run(run_id).status == "queued"


@pytest.mark.usefixtures("store_backend")
def test_a_stale_heartbeat_fails_a_live_job_and_cancels_it(scripted) -> None:
    hung = _scheduled("21", beat_age_s=STALE_AFTER_S + 10)
    scripted.STATES = {"21": X.JobState("21", "RUNNING")}
    assert runner.reap_dead() == [hung]
    assert store.get_run(hung).status == "failed" and "(scripted job 21 RUNNING)" in store.get_run(hung).error
    assert scripted.CANCELLED == ["21"]  # failed means not running: the job is cancelled


@pytest.mark.usefixtures("store_backend")
def test_an_unreachable_scheduler_settles_only_stale_heartbeats(scripted) -> None:
    alive = _scheduled("31")
    stale = _scheduled("32", beat_age_s=STALE_AFTER_S + 10)
    queued = _scheduled("33", status="queued")
    scripted.STATES = None  # squeue failed
    assert runner.reap_dead() == [stale]
    assert store.get_run(alive).status == "running" and store.get_run(queued).status == "queued"
    assert "state unknown" in store.get_run(stale).error


@pytest.mark.usefixtures("store_backend")
def test_a_just_submitted_job_the_scheduler_does_not_list_yet_is_not_dead(scripted) -> None:
    fresh = _scheduled("41", status="queued", created_age_s=1.0)
    store.update_run(fresh, job_state="PENDING (submitted)")
    old = _scheduled("42", status="queued", created_age_s=X.UNKNOWN_GRACE_S + 30)
    assert runner.reap_dead() == [old]
    assert store.get_run(fresh).status == "queued"
    assert store.get_run(old).error.startswith("scripted job 42 is unknown to the scheduler before its worker started")


@pytest.mark.usefixtures("store_backend")
def test_stopping_a_run_that_shares_its_job_stops_it_through_the_store(scripted) -> None:
    """--runs-per-gpu: runs 1 and 2 share job 51; stopping run 1 must not cancel run 2's job."""
    one, two = _scheduled("51"), _scheduled("51")
    scripted.STATES = {"51": X.JobState("51", "RUNNING")}
    assert runner.stop_run(one, grace_s=0.1) == "stopped"
    assert scripted.CANCELLED == [] and "exits at its next heartbeat" in store.get_run(one).error
    assert store.get_run(two).status == "running"
    assert runner.stop_run(two, grace_s=0.1) == "stopped"  # the last one: its job is cancelled
    assert scripted.CANCELLED == ["51"]


# ---------------------------------------------------------------------------- through submitit, on this machine
# (on the SQLite store: tests/runner/test_slurm.py takes the same path on a real cluster with PostgreSQL)


_REFERENCE: list[list[float]] = []


def uninterrupted_accuracies() -> list[float]:
    if not _REFERENCE:
        _, cfg = load_config(None, STOPPABLE)
        before = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _REFERENCE.append([o.accuracy for o in run_protocol(cfg, load_digits(), torch.device("cpu"))])
        finally:
            torch.set_num_threads(before)
    return _REFERENCE[0]


@pytest.mark.slow  # a real job cancelled and resumed: a developer need not run it at every change
@pytest.mark.full  # 85 s of a worker, not in CI: test_slurm.py's jobs go through submitit there
def test_a_submitit_job_runs_is_stopped_and_resumed_exactly(isolated_home) -> None:
    """The scheduler path end to end with submitit's LocalExecutor: the job id is recorded, the
    run is followed to its first task, `rmconsole stop` cancels the job (submitit's cancel), and
    `rmconsole resume` submits a new job that continues from the task checkpoint to exactly the
    uninterrupted run's accuracies."""
    stoppable = [a for k, v in STOPPABLE.items() for a in ("--set", f"{k}={v}")]
    # submitted as from a script's background job (`rmconsole run ... &`) or nohup: SIGINT ignored, and
    # inherited by the job's controller (no warm server: this process starts it); submitit's own cancel
    # (SIGINT) did nothing there and the run went on to `finished`
    out = subprocess.run(
        [sys.executable, "-m", "rmconsole", "run", *stoppable, "--executor", "submitit-local", "--slurm", "time=10"]
        + ["--detach"],
        capture_output=True,
        text=True,
        env={**os.environ, "RMCONSOLE_WARM": "0"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    run_id = int(out.stdout.strip())
    job = store.get_run(run_id).job_id
    assert job and f"run {run_id}: submitted as submitit-local job {job}" in out.stderr
    assert store.get_run(run_id).executor == "submitit-local:time=10"
    wait_for(lambda: (store.get_run(run_id).metrics or {}).get("tasks_done", 0) >= 1, 300, what="task 1")
    assert runner.stop_run(run_id) == "stopped"  # (in this process: a CLI would start too late on a loaded machine)
    run = store.get_run(run_id)
    assert run.status == "stopped" and 1 <= run.metrics["tasks_done"] < 5
    assert not X.pid_alive(int(job)) or wait_for(lambda: not X.pid_alive(int(job)), 30, what="the job's end")
    resumed = rmconsole("resume", str(run_id))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    run = store.get_run(run_id)
    assert run.status == "finished" and run.job_id != job  # a new job
    assert [r.accuracy for r in store.task_results(run_id)] == uninterrupted_accuracies()
    shown = json.loads(in_process("show", str(run_id), "--json").stdout)
    assert shown["executor"] == "submitit-local:time=10" and shown["job_id"] == run.job_id


def test_a_worker_killed_inside_a_job_is_failed_at_once(isolated_home) -> None:
    """SIGKILL to the worker inside the job: its supervisor (inside the job too) records `failed`
    with the signal; the job then ends, and a resume submits a new one."""
    out = rmconsole("run", *ARGS, "--executor", "submitit-local", "--detach")
    run_id = int(out.stdout.strip())
    wait_for(lambda: store.get_run(run_id).status == "running", 300, what="the worker's claim")
    worker = wait_for(lambda: worker_process(run_id), 60, what="the worker process")
    killed = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: store.get_run(run_id).status == "failed", 30, what="failed")
    assert time.monotonic() - killed < 30
    assert store.get_run(run_id).error.startswith("worker killed by signal SIGKILL")
