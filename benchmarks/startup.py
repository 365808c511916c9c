"""Start-up: seconds from `rmconsole run` to the first training step, on digits and MNIST.

    python benchmarks/startup.py [--repeat 5] [--datasets digits,mnist] [--modes cold-nocache,cold,warm]
                                 [--repo PATH]   # another checkout's code (e.g. before a change)

The clock starts when `python -m rmconsole run --detach ...` is spawned (a fresh process, as a
user's shell would) and stops when the run's log shows its first training phase (`task 1/T:
stream`, printed by the worker right before the first batch of the stream pass is augmented
and trained). Each run is then stopped. Modes:

- cold-nocache: a fresh RMCONSOLE_HOME for every run, warm starts off: the worker imports torch
  and decodes the dataset (what every run paid before this benchmark existed);
- cold: warm starts off, the dataset's tensor copy already in RMCONSOLE_HOME/cache;
- warm: a warm-start server of its own is up (runner/warm.py; RMCONSOLE_WARM_DIR in the
  benchmark's temp folder) and the tensor copy is there.

Threads are pinned to one (OMP_NUM_THREADS=1) as in the test suite; the machine's load is
printed with the figures (on a shared machine the wall time moves with it). Beside the wall
time it prints the CPU seconds on the path: the CLI process's (its rusage) plus the worker's
own up to its first training phase (the worker logs `time.process_time()` there; a forked
worker's count starts at the fork): what the start-up costs on an idle core, whatever the load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("RMCONSOLE_DATA", REPO.parent / "shared" / "data"))
PRESETS = {"digits": "digits-blurry10-online", "mnist": "mnist-blurry10-online"}


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def servers_dir(home: Path) -> Path:
    """Where this benchmark's warm server listens: a folder of its own beside the home (warm
    servers are one per user, in ~/.cache/rmconsole/warm unless RMCONSOLE_WARM_DIR says; the
    user's own server, of another checkout or environment, is neither timed nor stopped)."""
    return home.parent / "warm-servers"


def env_for(home: Path, repo: Path, warm: bool) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RMCONSOLE_HOME=str(home),
        RMCONSOLE_DATA=str(DATA),
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(repo),
        RMCONSOLE_WARM="1" if warm else "0",
        RMCONSOLE_WARM_DIR=str(servers_dir(home)),
    )
    env.pop("RMCONSOLE_DB", None)
    return env


def one_start(home: Path, repo: Path, dataset: str, warm: bool, timeout: float = 300.0) -> tuple[float, float | None]:
    """(seconds from spawning `rmconsole run --detach` to the worker's first training phase, the
    CPU seconds on that path: the CLI process's plus the worker's own up to that phase, as the
    worker logs it; None for code that does not log it). On a loaded machine the wall time
    stretches with the load; the CPU seconds are what an idle core would take."""
    import resource

    env = env_for(home, repo, warm)
    cli_cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    logs = home / "logs"
    before = {p.name for p in logs.glob("run-*.log")} if logs.exists() else set()
    t0 = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "rmconsole",
            "run",
            "--detach",
            "--preset",
            PRESETS[dataset],
            "--set",
            "epochs=1",
            "--set",
            "threads=1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if out.returncode != 0:
        raise SystemExit(f"rmconsole run failed: {out.stderr.strip()}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cli_cpu_s = (after.ru_utime - cli_cpu.ru_utime) + (after.ru_stime - cli_cpu.ru_stime)
    run_id = out.stdout.strip().splitlines()[-1]
    log = logs / f"run-{run_id}.log"
    deadline = t0 + timeout
    while time.perf_counter() < deadline:
        try:
            if ": stream (" in log.read_text(errors="replace"):
                elapsed = time.perf_counter() - t0
                break
        except OSError:
            pass
        time.sleep(0.005)
    else:
        raise SystemExit(f"run {run_id} did not start training within {timeout:g} s (log {log})")
    assert log.name not in before
    subprocess.run(
        [sys.executable, "-m", "rmconsole", "stop", run_id, "--grace", "5"], env=env, capture_output=True, timeout=120
    )
    import re

    found = re.search(r"first training phase after ([0-9.]+) s of CPU", log.read_text(errors="replace"))
    return elapsed, (cli_cpu_s + float(found.group(1))) if found else None


def wait_for_server(home: Path, repo: Path, timeout: float = 300.0) -> None:
    sys.path.insert(0, str(repo))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(servers_dir(home).glob("*.sock")):
            return
        time.sleep(0.1)
    raise SystemExit("the warm-start server did not come up")


def stop_servers(home: Path) -> None:
    for pid_file in servers_dir(home).glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text()), 15)
        except (OSError, ValueError):
            pass


def measure(dataset: str, mode: str, repeat: int, repo: Path) -> tuple[list[float], list[float]]:
    samples, cpus = [], []
    root = Path(tempfile.mkdtemp(prefix=f"rmconsole-startup-{dataset}-{mode}-"))
    home = root / "home"
    try:
        if mode != "cold-nocache":  # prime: the dataset's tensor copy (and, for warm, the server)
            one_start(home, repo, dataset, warm=mode == "warm")
            if mode == "warm":
                wait_for_server(home, repo)
        for _ in range(repeat):
            if mode == "cold-nocache":
                shutil.rmtree(home, ignore_errors=True)
            wall, cpu = one_start(home, repo, dataset, warm=mode == "warm")
            samples.append(wall)
            if cpu is not None:
                cpus.append(cpu)
            time.sleep(0.5)
    finally:
        stop_servers(home)
        shutil.rmtree(root, ignore_errors=True)
    return samples, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--datasets", default="digits,mnist")
    parser.add_argument("--modes", default="cold-nocache,cold,warm")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout whose code runs (default: this one)")
    args = parser.parse_args()
    print(f"code: {args.repo}; load before: {load()}; {os.cpu_count()} CPUs; OMP_NUM_THREADS=1")
    targets = {"digits": 2.0, "mnist": 4.0}
    for dataset in args.datasets.split(","):
        for mode in args.modes.split(","):
            samples, cpus = measure(dataset, mode, args.repeat, args.repo)
            cpu = f"; CPU on the path median {statistics.median(cpus):5.2f} s" if cpus else ""
            print(
                f"{dataset:<7} {mode:<13} wall median {statistics.median(samples):5.2f} s  min {min(samples):5.2f} s  "
                f"max {max(samples):5.2f} s{cpu}  (n={len(samples)}, target {targets[dataset]:g} s; load {load()})",
                flush=True,
            )


if __name__ == "__main__":
    main()
