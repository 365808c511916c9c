"""The soak: many digits runs through the sweep queue while a random tenth of them are SIGKILLed
(their worker, their supervisor, or the queue's driver), then resumed through the queue.

    OMP_NUM_THREADS=1 PYTHONPATH=. nice python benchmarks/soak.py --runs 200 --parallel 2

What it does, with real processes on a real SQLite store in a fresh RMCONSOLE_HOME:
1. stores a sweep of RUNS runs (`rmconsole run --seeds 1..RUNS --parallel P --detach`: one run
   per seed, digits, RM, `--set epochs=E threads=1 device=cpu`) and lets its queue runner drive it;
2. picks KILL_FRACTION of the runs at random, each with a victim (worker, supervisor or the queue
   driver) and a task to strike in; when a victim's run reaches that task it gets SIGKILL;
3. whenever the driver is gone and runs are left (queued, or failed by a kill), starts it again
   with `--retry`, which queues the failed runs again: they resume from their last checkpoint;
4. at the end checks: every run finished with all its tasks (zero lost), nothing queued or
   running and no rmconsole process left (zero stuck), every run killed mid-task was resumed
   from a checkpoint, and the per-task accuracies of every killed run equal those of its
   uninterrupted twin (the same config trained in this process, one thread) bit for bit.

It prints the figures and exits 0 only if all of that holds. Killing the driver does not stop
the runs in flight (each run's supervisor has a session of its own): those are counted apart.

On PostgreSQL (issue 28's soak): `--postgres` starts a throwaway server of its own (.ci/services)
and stores the sweep there; `--restarts N` stops it N times during the soak (`pg_ctl stop -m
fast`), each time for `--outage` seconds (random up to that), and starts it again. The runs ride
out each outage within their grace period (RMCONSOLE_DB_GRACE_S); the figures add the restarts,
the outages each worker measured ("answers again after S s") and the runs that failed past the
grace period (0 expected):

    OMP_NUM_THREADS=1 PYTHONPATH=. nice python benchmarks/soak.py --postgres --runs 100 --parallel 8 \
        --restarts 5 --kill-fraction 0.1 --epochs 4
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Victim:
    run_id: int
    kind: str  # worker | supervisor | driver
    task: int  # strike when the run is in this task (0-based)
    done: bool = False
    at: str = ""


@dataclass
class Figures:
    kills: dict[str, int] = field(default_factory=lambda: {"worker": 0, "supervisor": 0, "driver": 0})
    driver_starts: int = 0
    max_running: int = 0


def rmconsole(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rmconsole", *args], capture_output=True, text=True, env=env, timeout=600
    )


def children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out]


def kill(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False


def ours_left(home: Path) -> list[str]:
    """rmconsole processes of this soak still alive (by their RMCONSOLE_HOME)."""
    left = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"RMCONSOLE_HOME={home}".encode() in environ and "rmconsole" in cmdline and int(proc.name) != os.getpid():
            left.append(f"{proc.name}: {cmdline[:100]}")
    return left


class OwnPostgres:
    """A throwaway PostgreSQL server (.ci/services) this soak stops and starts."""

    def __init__(self) -> None:
        import pwd

        repo = Path(__file__).resolve().parents[1]
        self.folder = Path(tempfile.mkdtemp(prefix="rmconsole-soak-pg-"))
        subprocess.run(
            [str(repo / ".ci" / "services"), "start", str(self.folder), "postgres"], capture_output=True, timeout=300
        )
        env = (self.folder / "env").read_text() if (self.folder / "env").exists() else ""
        urls = [
            line.split("=", 1)[1].strip("'")
            for line in env.splitlines()
            if line.startswith("export RMCONSOLE_TEST_PG=")
        ]
        if not urls:
            raise SystemExit(f"soak: no PostgreSQL server could be started: {env.strip()}")
        self.url = urls[0]
        self.data = self.folder / "pg" / "data"
        self.bin = (self.folder / "pg" / "bin").read_text().strip()
        self.owner = pwd.getpwuid(self.data.stat().st_uid).pw_name
        self.repo = repo

    def pg_ctl(self, *args: str) -> None:
        command = [
            f"{self.bin}/pg_ctl",
            "-D",
            str(self.data),
            "-l",
            str(self.folder / "pg" / "server.log"),
            "-w",
            "-t",
            "120",
            *args,
        ]
        if os.getuid() == 0 and self.owner != "root":
            command = ["runuser", "-u", self.owner, "--", *command]
        env = {k: v for k, v in os.environ.items() if not k.startswith("RMCONSOLE")}  # not one of the soak's processes
        subprocess.run(command, capture_output=True, timeout=300, check=True, env=env)

    def stop_for(self, seconds: float) -> None:
        self.pg_ctl("stop", "-m", "fast")
        time.sleep(seconds)
        self.pg_ctl("restart", "-m", "fast")  # (a stopped server is started with its last options)

    def close(self) -> None:
        subprocess.run(
            [str(self.repo / ".ci" / "services"), "stop", str(self.folder)], capture_output=True, timeout=120
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--kill-fraction", type=float, default=0.1)
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--seed", type=int, default=14, help="the soak's own randomness (victims, timing)")
    parser.add_argument("--home", type=Path, default=None, help="RMCONSOLE_HOME (default: a fresh temporary folder)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--postgres", action="store_true", help="the store on a PostgreSQL server of the soak's own")
    parser.add_argument("--restarts", type=int, default=0, help="with --postgres: stop and start the server N times")
    parser.add_argument("--outage", type=float, default=8.0, help="each stop lasts up to this many seconds")
    parser.add_argument("--restart-every", type=float, default=60.0, help="seconds between restarts")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    home = (args.home or Path(tempfile.mkdtemp(prefix="rmconsole-soak-"))).resolve()
    env = dict(os.environ, RMCONSOLE_HOME=str(home), OMP_NUM_THREADS="1")
    env.pop("RMCONSOLE_DB", None)
    os.environ.update(RMCONSOLE_HOME=str(home))
    os.environ.pop("RMCONSOLE_DB", None)
    server = OwnPostgres() if args.postgres else None
    if server is not None:
        env["RMCONSOLE_DB"] = os.environ["RMCONSOLE_DB"] = server.url
    from rmconsole import store
    from rmconsole.runner.queue import driver_pid
    from rmconsole.store.db import hold_through_outages

    hold_through_outages(600.0)  # the soak's own reads wait out the outages it makes
    outages: list[float] = []

    def restart_now() -> None:
        assert server is not None
        seconds = rng.uniform(args.outage / 2, args.outage)
        server.stop_for(seconds)
        outages.append(round(seconds, 1))
        print(f"  restarted PostgreSQL after {seconds:.1f} s down", flush=True)

    next_restart = time.monotonic() + args.restart_every / 2

    load_before = os.getloadavg()
    started = time.monotonic()
    settings = ["--set", f"epochs={args.epochs}", "--set", "threads=1", "--set", "device=cpu"]
    seeds = ",".join(str(s) for s in range(1, args.runs + 1))
    out = rmconsole("run", "--seeds", seeds, *settings, "--parallel", str(args.parallel), "--detach", env=env)
    if out.returncode != 0:
        print(out.stderr, file=sys.stderr)
        return 2
    sweep_id = out.stdout.strip()
    ids = [r.id for r in store.list_runs(sweep_id=sweep_id)]
    figures = Figures(driver_starts=1)
    victims = {
        run_id: Victim(run_id, rng.choice(["worker", "supervisor", "driver"]), rng.randrange(5))
        for run_id in rng.sample(ids, round(args.kill_fraction * len(ids)))
    }
    print(
        f"soak: sweep {sweep_id}, {len(ids)} runs, {args.parallel} slots, epochs={args.epochs}, home {home}; "
        f"{len(victims)} victims: " + ", ".join(f"{v.run_id}:{v.kind}@task{v.task + 1}" for v in victims.values()),
        flush=True,
    )
    last_report = 0.0
    while True:
        runs = store.list_runs(sweep_id=sweep_id)
        running = [r for r in runs if r.status == "running"]
        figures.max_running = max(figures.max_running, len(running))
        for run in running:
            victim = victims.get(run.id)
            if victim is None or victim.done or run.task is None or run.task < victim.task:
                continue
            time.sleep(rng.uniform(0, 0.3))  # somewhere in the task
            if victim.kind == "driver":
                hit = kill(driver_pid(sweep_id))
            elif victim.kind == "supervisor":
                hit = kill(run.pid)
            else:
                hit = any(kill(pid) for pid in children(run.pid or 0))
            if hit:
                victim.done = True
                victim.at = f"task {run.task + 1} {run.phase}"
                figures.kills[victim.kind] += 1
                print(f"  killed the {victim.kind} of run {run.id} in {victim.at}", flush=True)
        ended = all(r.status == "finished" for r in runs)
        if ended:
            break
        if driver_pid(sweep_id) is None:
            time.sleep(rng.uniform(0, 1.0))  # the driver is gone: start it again; it queues failed runs again
            if driver_pid(sweep_id) is None and not all(
                r.status == "finished" for r in store.list_runs(sweep_id=sweep_id)
            ):
                with open(home / "logs" / f"sweep-{sweep_id}.log", "ab") as log:
                    driver = subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "rmconsole.runner.queue",
                            sweep_id,
                            "--retry",
                            "--parallel",
                            str(args.parallel),
                        ],
                        env=env,
                        start_new_session=True,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                figures.driver_starts += 1
                deadline = time.monotonic() + 120  # until it holds the lock (or has ended)
                while driver.poll() is None and driver_pid(sweep_id) is None and time.monotonic() < deadline:
                    time.sleep(0.1)
        if server is not None and len(outages) < args.restarts and time.monotonic() >= next_restart:
            restart_now()
            next_restart = time.monotonic() + args.restart_every
        if time.monotonic() - last_report > 60:
            counts: dict[str, int] = {}
            for r in runs:
                counts[r.status] = counts.get(r.status, 0) + 1
            print(f"  {time.monotonic() - started:6.0f} s: {counts}, load {os.getloadavg()[0]:.1f}", flush=True)
            last_report = time.monotonic()
        time.sleep(0.1)
    wall = time.monotonic() - started
    deadline = time.monotonic() + 120  # the last workers, supervisors and the driver exit
    while (driver_pid(sweep_id) is not None or ours_left(home)) and time.monotonic() < deadline:
        time.sleep(0.5)

    # ---------------------------------------------------------------- the checks
    runs = store.list_runs(sweep_id=sweep_id)
    lost = [r.id for r in runs if r.status != "finished" or len(store.task_results(r.id)) != r.n_tasks]
    stuck = [r.id for r in store.list_runs(status=store.ACTIVE)]
    left = ours_left(home)
    logs = {run_id: (home / "logs" / f"run-{run_id}.log").read_text(errors="replace") for run_id in victims}
    interrupted = [v.run_id for v in victims.values() if v.kind in ("worker", "supervisor") and v.done]
    resumed = [run_id for run_id in interrupted if "resuming after task" in logs[run_id]]
    restarted = [run_id for run_id in interrupted if run_id not in resumed and logs[run_id].count("stream: ") > 1]
    print(
        f"soak: {len(runs)} runs in {wall:.0f} s ({3600 * len(runs) / wall:.0f} runs/hour); checking the "
        f"{len(victims)} killed runs against their uninterrupted twins…",
        flush=True,
    )

    import torch

    from rmconsole.cl.data import load_digits
    from rmconsole.cl.loop import run_protocol
    from rmconsole.config import build_config

    torch.set_num_threads(1)
    data = load_digits()
    identical, different = [], []
    for run_id in sorted(victims):
        run = store.get_run(run_id)
        twin = run_protocol(build_config(run.config), data, torch.device("cpu"))
        mine = [(r.task, r.accuracy, r.accuracy_row, r.class_accuracy) for r in store.task_results(run_id)]
        theirs = [(o.task, o.accuracy, o.accuracy_row, o.class_accuracy) for o in twin]
        (identical if mine == theirs else different).append(run_id)
    result = {
        "runs": len(runs),
        "parallel": args.parallel,
        "epochs": args.epochs,
        "wall_s": round(wall, 1),
        "runs_per_hour": round(3600 * len(runs) / wall, 1),
        "victims": len(victims),
        "kills": figures.kills,
        "kill_points": {v.run_id: f"{v.kind} in {v.at}" for v in victims.values()},
        "driver_starts": figures.driver_starts,
        "max_running": figures.max_running,
        "interrupted_runs": len(interrupted),
        "resumed_from_checkpoint": len(resumed),
        "started_over_no_checkpoint_yet": len(restarted),
        "lost": lost,
        "stuck": stuck,
        "processes_left": left,
        "twins_identical": len(identical),
        "twins_different": different,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "home": str(home),
    }
    if server is not None:
        import re

        held = [
            float(x)
            for run in runs
            for x in re.findall(
                r"answers again after ([0-9.]+) s", (home / "logs" / f"run-{run.id}.log").read_text(errors="replace")
            )
        ]
        past_grace = [
            run.id
            for run in runs
            if "longer than the grace period" in (home / "logs" / f"run-{run.id}.log").read_text(errors="replace")
        ]
        result.update(
            {
                "store": "postgresql",
                "restarts": len(outages),
                "outages_s": outages,
                "outages_held_by_workers": len(held),
                "longest_held_s": max(held, default=0.0),
                "failed_past_grace": past_grace,
            }
        )
        server.close()
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    ok = (
        not lost
        and not stuck
        and not left
        and not different
        and len(identical) == len(victims)
        and len(resumed) + len(restarted) == len(interrupted)
        and not result.get("failed_past_grace")
    )
    print(
        "soak: " + ("PASS" if ok else "FAIL") + f": {len(runs) - len(lost)}/{len(runs)} finished, {len(lost)} lost, "
        f"{len(stuck)} stuck, {len(left)} processes left, {len(identical)}/{len(victims)} killed runs identical "
        f"to their twins"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
