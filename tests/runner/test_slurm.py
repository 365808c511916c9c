"""Sweeps on a real single-node Slurm cluster (slurmctld + slurmd + munge on localhost, started by
.ci/services: ProctrackType=proctrack/linuxproc, no cgroups), through submitit, with the store on
PostgreSQL when a server is at hand (a cluster's shared store), else SQLite. Skipped, with the
reason, where no cluster can be started.

Every interruption the issue names: a job cancelled with `scancel` ends its run `stopped`, a
worker killed with SIGKILL inside its job ends `failed`, a whole job killed (supervisor too)
ends `failed` by the scheduler's word — each within 30 s — and `rmconsole resume` submits a new
job that finishes with exactly the per-task accuracies of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
import torch
from conftest import drop_postgres_database, fresh_postgres_database, rmconsole, wait_for, worker_process

from rmconsole import runner, store
from rmconsole.cl.data import load_digits
from rmconsole.cl.loop import run_protocol
from rmconsole.config import load_config
from rmconsole.runner.processes import process_argv

# Slow as well: two real-cluster sweeps (108 s of CI's default run on a quiet machine, one xdist
# worker held all along) that a developer need not run at every change: they need slurmctld,
# slurmd and munge (a fresh clone without them skips them anyway); CI's slow leg runs them on its
# cluster. The executors run in the default run (test_executors.py: the spec, a scripted scheduler
# whose states become run statuses, the whole submitit path on submitit-local).
pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# long enough to act on a run mid-way, even loaded (~2.6 s a task measured at load 23, 80 epochs ~4 s)
SETTINGS = {"epochs": 40, "threads": 1, "device": "cpu"}
ARGS = [a for k, v in SETTINGS.items() for a in ("--set", f"{k}={v}")]
DETECTED_WITHIN_S = 30.0


@pytest.fixture
def cluster_store(request, isolated_home, monkeypatch):
    """The store a cluster shares: PostgreSQL when a server is at hand, else the SQLite file. A
    test's jobs still queued or running at its end are cancelled."""
    try:
        server = request.getfixturevalue("postgres_server")
    except pytest.skip.Exception:
        server = None
    if server is not None:
        url = fresh_postgres_database(server)
        monkeypatch.setenv("RMCONSOLE_DB", url)
    try:
        yield "sqlite" if server is None else "postgresql"
    finally:
        jobs = {r.job_id for r in store.list_runs() if r.job_id}
        if jobs:
            subprocess.run(["scancel", *sorted(jobs)], capture_output=True, timeout=60)
        if server is not None:
            drop_postgres_database(server, url)


def status(run_id: int) -> str:
    runner.reap_dead([store.get_run(run_id)])  # what `rmconsole runs` does: asks the scheduler
    return store.get_run(run_id).status


def tasks_done(run_id: int) -> int:
    return int((store.get_run(run_id).metrics or {}).get("tasks_done", 0))


def scheduler_state(job_id: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-r", "-t", "all", "-o", "%T", "--jobs", job_id.split("_")[0]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return out.stdout.split()[0] if out.stdout.split() else "?"


def uninterrupted(overrides: dict) -> list[float]:
    """The per-task accuracies of the same config trained here, without interruption."""
    _, cfg = load_config(None, {**SETTINGS, **overrides})
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [o.accuracy for o in run_protocol(cfg, load_digits(), torch.device("cpu"))]
    finally:
        torch.set_num_threads(before)


def accuracies(run_id: int) -> list[float]:
    return [r.accuracy for r in store.task_results(run_id)]


def test_a_digits_sweep_on_slurm_survives_scancel_and_sigkill(slurm_cluster, cluster_store) -> None:
    out = rmconsole(
        "run",
        "--set",
        "method=rm,finetune",
        "--seeds",
        "1,2",
        *ARGS,
        "--executor",
        "slurm",
        "--slurm",
        f"partition={slurm_cluster},time=20",
        "--detach",
    )
    assert out.returncode == 0, out.stderr
    sweep_id = out.stdout.strip()
    runs = store.list_runs(sweep_id=sweep_id)
    assert len(runs) == 4 and all(r.executor == "slurm:partition=debug,time=20" for r in runs)
    jobs = [r.job_id for r in runs]
    assert len(set(jobs)) == 4 and len({j.split("_")[0] for j in jobs}) == 1  # one job array
    assert f"submitted as 4 slurm job(s) {', '.join(jobs)}" in out.stderr

    # the node has 2 CPUs and each run asks 1: two run, two wait, and say why
    first = wait_for(
        lambda: [r.id for r in store.list_runs(sweep_id=sweep_id) if tasks_done(r.id) >= 1],
        600,
        what="a run's first task",
    )
    listing = rmconsole("runs", "--sweep", sweep_id)
    assert listing.returncode == 0 and "held by the scheduler: slurm job" in listing.stdout
    running = wait_for(
        lambda: [
            r
            for r in store.list_runs(sweep_id=sweep_id)
            if r.status == "running" and tasks_done(r.id) >= 1 and tasks_done(r.id) < 4
        ],
        600,
        what="two running runs",
    )
    cancelled = running[0]
    assert first

    # scancel: SIGTERM to the job's processes, the worker records `stopped`
    began = time.monotonic()
    subprocess.run(["scancel", cancelled.job_id], check=True, timeout=30)
    wait_for(lambda: status(cancelled.id) == "stopped", DETECTED_WITHIN_S, what="scancel -> stopped")
    assert time.monotonic() - began < DETECTED_WITHIN_S
    wait_for(lambda: scheduler_state(cancelled.job_id) == "CANCELLED", 60, what="the job's CANCELLED")

    # SIGKILL to a worker inside its job: its supervisor records `failed` with the signal
    killed = wait_for(  # a run running now (one picked before the scancel may have finished since)
        lambda: next(
            (
                r
                for r in store.list_runs(sweep_id=sweep_id)
                if r.status == "running" and r.id != cancelled.id and 1 <= tasks_done(r.id) < 4
            ),
            None,
        ),
        600,
        what="another running run",
    )
    pid = wait_for(lambda: worker_process(killed.id), 60, what="the worker's pid")
    began = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: status(killed.id) == "failed", DETECTED_WITHIN_S, what="SIGKILL -> failed")
    assert time.monotonic() - began < DETECTED_WITHIN_S
    assert store.get_run(killed.id).error.startswith("worker killed by signal SIGKILL")

    # the other two run to their end; then both interrupted runs are resubmitted and finish
    wait_for(
        lambda: all(status(r.id) not in store.ACTIVE for r in store.list_runs(sweep_id=sweep_id)),
        900,
        poll=1.0,
        what="the sweep's end",
    )
    for run in (cancelled, killed):
        out = rmconsole("resume", str(run.id), "--detach")
        assert out.returncode == 0 and f"run {run.id}: resubmitted as job" in out.stderr, out.stderr
        assert store.get_run(run.id).job_id not in (run.job_id, None)
    wait_for(
        lambda: all(status(r.id) not in store.ACTIVE for r in (cancelled, killed)),
        900,
        poll=1.0,
        what="the resumed runs' end",
    )
    final = {r.id: r for r in store.list_runs(sweep_id=sweep_id)}
    assert {r.status for r in final.values()} == {"finished"}, {r.id: (r.status, r.error) for r in final.values()}
    for run in (cancelled, killed):
        assert accuracies(run.id) == uninterrupted({"method": run.method, "seed": run.seed})
    report = json.loads(rmconsole("report", "--sweep", sweep_id, "--format", "json").stdout)
    assert [row["row"]["method"] for row in report["rows"]] == ["rm", "finetune"]


def job_processes(job_id: str) -> list[int]:
    """The Python processes of a Slurm job (submitit's, the supervisor, the worker), by their
    environment's SLURM_JOB_ID."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        argv = process_argv(int(entry)) or []
        if f"SLURM_JOB_ID={job_id}".encode() in env and argv and "python" in os.path.basename(argv[0]):
            pids.append(int(entry))
    return pids


# `full` (before every stop, not CI: 70 s of a worker): CI's slow leg keeps the sweep above, whose
# scancel and SIGKILL reach the job's processes the same way; a whole job killed is judged by the
# scheduler's word only here
@pytest.mark.full
def test_a_job_killed_whole_is_failed_by_the_schedulers_word_and_stop_cancels(slurm_cluster, cluster_store) -> None:
    """SIGKILL to every process of the job (submitit's, the supervisor, the worker: nobody can
    record anything, as when a node dies): the scheduler's state says the job ended, and the next
    look at the run marks it failed. Resumed, then stopped with `rmconsole stop` (scancel through
    submitit), then resumed again: it finishes exactly as an uninterrupted run."""
    out = rmconsole("run", *ARGS, "--executor", "slurm", "--slurm", f"partition={slurm_cluster},time=20", "--detach")
    assert out.returncode == 0, out.stderr
    run_id = int(out.stdout.strip())
    job = store.get_run(run_id).job_id
    wait_for(lambda: tasks_done(run_id) >= 1, 600, what="task 1")
    victims = job_processes(job)
    assert len(victims) >= 3, victims  # submitit's process, the supervisor, the worker
    began = time.monotonic()
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: status(run_id) == "failed", DETECTED_WITHIN_S, what="a dead job -> failed")
    assert time.monotonic() - began < DETECTED_WITHIN_S
    error = store.get_run(run_id).error
    assert error.startswith(f"slurm job {job} FAILED") and "last phase:" in error, error

    resumed = runner.resume_run(run_id)
    assert resumed.job_id not in (None, job) and resumed.process is None
    wait_for(lambda: status(run_id) == "running" and tasks_done(run_id) >= 2, 600, what="the resumed run's task 2")
    stopped = rmconsole("stop", str(run_id))
    assert stopped.returncode == 0 and stopped.stdout.strip() == f"run {run_id} stopped", (
        stopped.stderr + f" (the run's error: {store.get_run(run_id).error})"
    )
    wait_for(lambda: scheduler_state(resumed.job_id) == "CANCELLED", 60, what="the job's CANCELLED")
    if tasks_done(run_id) < 5:
        out = rmconsole("resume", str(run_id))  # follows the job to the run's end
        assert out.returncode == 0, out.stdout + out.stderr
    assert store.get_run(run_id).status == "finished"
    assert accuracies(run_id) == uninterrupted({})
