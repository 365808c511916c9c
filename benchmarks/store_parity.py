"""The same digits sweep on three setups: SQLite + local queue, PostgreSQL + local queue,
PostgreSQL + Slurm (through submitit), with A_last per run side by side; on the Slurm leg one
job is cancelled with `scancel` and one job's worker is killed with SIGKILL mid-run, each
timed until the store says `stopped` / `failed`, and both are resumed (resubmitted).

    python benchmarks/store_parity.py --pg postgresql://USER:PASSWORD@/postgres?host=/sock&port=N \\
        --partition debug [--epochs 20]

`--pg` names a server and a database this user may create databases from (a fresh database is
made for each leg and dropped after); `.ci/services start DIR` starts a throwaway PostgreSQL and
Slurm and writes both to DIR/env. Prints a Markdown table and the interruption timings.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def cli(env: dict[str, str], *args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rmconsole", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def fresh_database(server: str, name: str) -> str:
    import sqlalchemy
    from sqlalchemy.engine import make_url

    from rmconsole.store.db import engine_url

    admin = sqlalchemy.create_engine(engine_url(server), isolation_level="AUTOCOMMIT", poolclass=sqlalchemy.NullPool)
    with admin.connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    return make_url(server).set(database=name).render_as_string(hide_password=False)


def runs_of(env: dict[str, str]) -> list[dict]:
    out = cli(env, "runs", "--json", "--limit", "0")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def wait(predicate, timeout: float, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError("timed out")


def worker_pid(run_id: int) -> int | None:
    from rmconsole.runner.processes import process_argv

    for entry in os.listdir("/proc"):
        if entry.isdigit():
            argv = process_argv(int(entry)) or []
            if argv[1:3] == ["-m", "rmconsole.runner.worker"] and argv[-1] == str(run_id):
                return int(entry)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg", required=True, help="PostgreSQL server URL (a maintenance database)")
    parser.add_argument("--partition", default=None, help="Slurm partition (omit to skip the Slurm leg)")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    grid = [
        "--set",
        "method=rm,finetune",
        "--seeds",
        "1,2",
        "--set",
        f"epochs={args.epochs}",
        "--set",
        "threads=1",
        "--set",
        "device=cpu",
    ]
    root = Path(tempfile.mkdtemp(prefix="rmconsole-parity-"))
    base = {k: v for k, v in os.environ.items() if k != "RMCONSOLE_DB"}
    base.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    legs = {
        "SQLite / local": dict(base, RMCONSOLE_HOME=str(root / "a")),
        "PostgreSQL / local": dict(
            base, RMCONSOLE_HOME=str(root / "b"), RMCONSOLE_DB=fresh_database(args.pg, "parity_local")
        ),
    }
    if args.partition:
        legs["PostgreSQL / Slurm"] = dict(
            base, RMCONSOLE_HOME=str(root / "c"), RMCONSOLE_DB=fresh_database(args.pg, "parity_slurm")
        )
    table: dict[str, dict[tuple[str, int], float]] = {}
    walls: dict[str, float] = {}
    notes: list[str] = []
    for leg, env in legs.items():
        started = time.monotonic()
        if leg.endswith("Slurm"):
            out = cli(
                env, "run", *grid, "--executor", "slurm", "--slurm", f"partition={args.partition},time=30", "--detach"
            )
            assert out.returncode == 0, out.stderr
            notes.append(out.stderr.strip())
            notes.extend(interrupt_and_resume(env))
        else:
            out = cli(env, "run", *grid, "--parallel", "2")
            assert out.returncode == 0, out.stdout + out.stderr
        walls[leg] = time.monotonic() - started
        table[leg] = {
            (r["method"], r["seed"]): r["metrics"]["A_last"] for r in runs_of(env) if r["status"] == "finished"
        }
    keys = sorted(next(iter(table.values())), key=lambda k: (k[0] != "rm", k))
    print("| run | " + " | ".join(table) + " | identical |")
    print("|---|" + "---|" * (len(table) + 1))
    for key in keys:
        values = [table[leg].get(key) for leg in table]
        same = all(v is not None and v == values[0] for v in values)
        print(
            f"| {key[0]}, seed {key[1]} | "
            + " | ".join("—" if v is None else f"{v:.4f}" for v in values)
            + f" | {'yes' if same else 'NO'} |"
        )
    print("| wall time (s) | " + " | ".join(f"{walls[leg]:.0f}" for leg in table) + " | |")
    for note in notes:
        print(f"\n{note}")


def interrupt_and_resume(env: dict[str, str]) -> list[str]:
    """On the Slurm leg: scancel one running job and SIGKILL another job's worker, each once its
    run has finished a task; time each until the store says so; resume both; wait for the end."""
    os.environ.update({k: env[k] for k in ("RMCONSOLE_HOME", "RMCONSOLE_DB")})
    from rmconsole import runner, store

    def active() -> list:
        runs = store.list_runs()
        runner.reap_dead([r for r in runs if r.status in store.ACTIVE])
        return store.list_runs()

    def running_after_a_task(exclude: set[int]) -> list:
        return [
            r
            for r in active()
            if r.status == "running" and r.id not in exclude and 1 <= int((r.metrics or {}).get("tasks_done", 0)) < 4
        ]

    notes = []
    cancelled = wait(lambda: running_after_a_task(set()), 900)[0]
    began = time.monotonic()
    subprocess.run(["scancel", cancelled.job_id], check=True)
    wait(
        lambda: (runner.reap_dead([store.get_run(cancelled.id)]), store.get_run(cancelled.id).status)[1] == "stopped",
        60,
        poll=0.05,
    )
    notes.append(
        f"scancel of slurm job {cancelled.job_id} (run {cancelled.id}, {cancelled.method} seed "
        f"{cancelled.seed}, after task {store.get_run(cancelled.id).metrics['tasks_done']}): `stopped` in the "
        f"store after {time.monotonic() - began:.1f} s ({store.get_run(cancelled.id).error})"
    )
    killed = wait(lambda: running_after_a_task({cancelled.id}), 900)[0]
    pid = wait(lambda: worker_pid(killed.id), 60)
    began = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    wait(
        lambda: (runner.reap_dead([store.get_run(killed.id)]), store.get_run(killed.id).status)[1] == "failed",
        60,
        poll=0.05,
    )
    notes.append(
        f"SIGKILL of run {killed.id}'s worker (slurm job {killed.job_id}, {killed.method} seed "
        f"{killed.seed}, after task {store.get_run(killed.id).metrics['tasks_done']}): `failed` in the store "
        f"after {time.monotonic() - began:.1f} s ({store.get_run(killed.id).error[:80]})"
    )
    wait(lambda: not any(r.status in store.ACTIVE for r in active()), 1800, poll=1.0)
    for run in (cancelled, killed):
        out = cli(env, "resume", str(run.id), "--detach")
        assert out.returncode == 0, out.stderr
        notes.append(f"resume {run.id}: {out.stderr.strip()}")
    wait(lambda: not any(r.status in store.ACTIVE for r in active()), 1800, poll=1.0)
    return notes


if __name__ == "__main__":
    main()
