"""A whole `rmconsole run`, end to end, as a user types it: wall seconds, and how much of them the tasks take.

    python benchmarks/run_e2e.py                                  # the default digits run, 5 warm runs
    python benchmarks/run_e2e.py --repeat 8 --repo /tmp/before --repo .   # two checkouts, interleaved
    python benchmarks/run_e2e.py --preset mnist-blurry10-online --set threads=1 --set epochs=8

The clock runs from spawning `python -m rmconsole run [--preset P] [--set ...]` (a fresh process,
as a shell starts it) to its exit, the run followed and its tables printed. `tasks` is the sum of
the run's per-task seconds (stream pass, memory update, memory epochs, evaluation, as the worker
times them); `rest` is everything else: the CLI's imports, storing the run, forking the worker,
the worker's set-up, following it and printing. Each checkout gets its own scratch home; its
first run (which starts the home's warm-start server and writes the dataset's tensor copy) is
not counted, so the figures are warm starts (docs/performance.md). Several --repo are measured
in turn, run by run, so that a drift of the machine's speed falls on all of them alike. The
load average is printed: on a shared machine only figures taken together compare.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from startup import DATA, REPO, load, stop_servers


def one_run(repo: Path, home: Path, args: list[str]) -> tuple[float, float, str]:
    """(wall seconds of `rmconsole run ARGS`, the run's summed task seconds, its A_last)."""
    env = dict(os.environ, RMCONSOLE_HOME=str(home), RMCONSOLE_DATA=str(DATA), PYTHONPATH=str(repo))
    env.pop("RMCONSOLE_DB", None)
    started = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "rmconsole", "run", *args], env=env, cwd=repo, capture_output=True, text=True
    )
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"rmconsole run failed ({repo}): {(out.stderr or out.stdout).strip()[-500:]}")
    shown = subprocess.run(
        [sys.executable, "-m", "rmconsole", "show", "last", "--json"],
        env=env,
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    )
    run = json.loads(shown.stdout)
    tasks = sum(float(t["seconds"]) for t in run["tasks"])
    a_last = (run.get("metrics") or {}).get("A_last")
    return wall, tasks, "—" if a_last is None else f"{a_last:.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", help="preset name or TOML file (default: the digits demo)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument(
        "--repo", type=Path, action="append", help="a checkout whose code runs (repeatable; default: this one)"
    )
    args = parser.parse_args()
    repos = [r.resolve() for r in (args.repo or [REPO])]
    run_args = (["--preset", args.preset] if args.preset else []) + [a for kv in args.overrides for a in ("--set", kv)]
    root = Path(tempfile.mkdtemp(prefix="rmconsole-e2e-"))
    homes = {repo: root / f"home-{i}" for i, repo in enumerate(repos)}
    figures: dict[Path, list[tuple[float, float]]] = {repo: [] for repo in repos}
    print(f"rmconsole run {' '.join(run_args) or '(default)'}; {os.cpu_count()} CPUs; load before {load()}")
    try:
        for repo in repos:  # the warm-up run of each home: not counted
            one_run(repo, homes[repo], run_args)
            time.sleep(1.0)  # the warm-start server comes up
        for i in range(args.repeat):
            for repo in repos:
                wall, tasks, a_last = one_run(repo, homes[repo], run_args)
                figures[repo].append((wall, tasks))
                print(
                    f"  {i + 1:>2} {repo!s:<30} wall {wall:6.2f} s  tasks {tasks:6.2f} s  rest {wall - tasks:5.2f} s"
                    f"  A_last {a_last}",
                    flush=True,
                )
    finally:
        for home in homes.values():
            stop_servers(home)
        shutil.rmtree(root, ignore_errors=True)
    for repo, rows in figures.items():
        walls, tasks = [w for w, _ in rows], [t for _, t in rows]
        rest = [w - t for w, t in rows]
        print(
            f"{repo!s:<30} wall median {statistics.median(walls):5.2f} s  min {min(walls):5.2f} s  "
            f"max {max(walls):5.2f} s; tasks median {statistics.median(tasks):5.2f} s; "
            f"rest median {statistics.median(rest):4.2f} s (n={len(rows)})"
        )
    print(f"load after {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
