"""TUI start-up time and the time of one refresh on a big store.

    python benchmarks/tui_refresh.py [--runs 1000] [--tasks 50] [--epochs 0] [--repeat 20]
    python benchmarks/tui_refresh.py --runs 200 --tasks 5 --epochs 256   # issue 18's 200-run store

Builds a throwaway store (RMCONSOLE_HOME in a temp folder) with RUNS runs of TASKS tasks each,
every task with a TaskResult and a MemorySnapshot row (1,000 × 50 × 2 = 100,000 metric rows
by default; CIFAR-100-sized: 100-class histograms, 50-task accuracy rows), a tenth of the runs
"running" (their last task); every run has overrides, every third a name, most tags, a few
are archived; with --epochs E each task also has 1 + E epoch rows (the stream pass and E memory
epochs: RM's 256 by default in the presets). Then it measures, and prints:

- start-up: a fresh `python` process importing the TUI and starting the app headless: the
  time until the first screenful of runs is drawn (target: import + that under 1 s) and
  until all runs are in the table (rows beyond the first screen are added in batches);
- one runs-page refresh: the store read (the worker thread's incremental RunsFeed.read) +
  applying it to the table and drawing the next frame (UI thread), while the running runs (a
  tenth) progress between refreshes; the read's delta (the rows that changed) goes with it, as
  the screen's own reads carry it (issue 27's target at 10,000 runs: at most 50 ms of CPU, and
  every row in the table within 2 s);
- one run-page refresh for a 50-task run: the store read + repainting its four panels.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

STARTUP_CHILD = r"""
import time, sys, json, asyncio
t0 = time.perf_counter()
c0 = time.process_time()
from rmconsole import long_lived_imports  # how the `rmconsole` command imports (gc off, then frozen)
if sys.argv[2] == "cli":  # the `rmconsole tui` path: the CLI module (Typer, the store, report) first
    with long_lived_imports():
        import rmconsole.cli
    rmconsole.store.get_engine()  # what the `tui` command does before its app starts
with long_lived_imports():
    from rmconsole.tui import RMConsoleApp
    from rmconsole.tui.widgets.runs_table import RunsTable
t_import = time.perf_counter() - t0
c_import = time.process_time() - c0
N = int(sys.argv[1])
marks = {}
render_line = RunsTable.render_line

SCREENFUL = min(36, N)  # the rows a 120x40 terminal shows; fewer runs than that: all of them

def timed_render_line(self, y):  # the first frame that draws a screenful of runs
    if self.row_count >= SCREENFUL and "first" not in marks:
        marks["first"] = time.perf_counter() - t1
        marks["first_cpu"] = time.process_time() - c1
    return render_line(self, y)

RunsTable.render_line = timed_render_line

async def main():
    global t1
    app = RMConsoleApp(reap_every_s=None)
    global c1
    t1 = time.perf_counter()
    c1 = time.process_time()
    async with app.run_test(size=(120, 40)) as pilot:
        while app.screen.query(RunsTable).first().row_count < N:
            await pilot.pause(0.01)
        await pilot.pause()
        marks["all"] = time.perf_counter() - t1
        marks["all_cpu"] = time.process_time() - c1

asyncio.run(main())
print(json.dumps({"import_s": t_import, "first_s": marks["first"], "all_s": marks["all"], "import_cpu": c_import,
                  "first_cpu": marks["first_cpu"], "all_cpu": marks["all_cpu"]}))
"""


def build_store(n_runs: int, n_tasks: int, n_epochs: int = 0) -> dict[str, int]:
    from sqlalchemy import insert

    from rmconsole import store
    from rmconsole.config import load_config
    from rmconsole.store.tables import EpochMetric, MemorySnapshot, Run, TaskResult, TaskStream

    _, cfg = load_config("cifar100-blurry10-online", {"n_tasks": n_tasks, "memory_size": 500})
    config = cfg.to_dict()
    now = datetime.now(UTC)
    n_classes = 100
    engine = store.get_engine()
    runs, streams, results, snapshots, epochs = [], [], [], [], []
    for i in range(1, n_runs + 1):
        running = i % 10 == 0  # a tenth are training their last task
        done = n_tasks
        runs.append(
            dict(
                id=i,
                status="running" if running else "finished",
                preset="cifar100-blurry10-online",
                method="rm",
                dataset="cifar100",
                seed=i % 5 + 1,
                config={**config, "seed": i % 5 + 1},
                created_at=now,
                n_tasks=n_tasks,
                task=n_tasks - 1,
                phase="memory" if running else "done",
                phase_done=100,
                phase_total=1000,
                samples_per_s=1500.0 if running else None,
                heartbeat_at=now,
                host="bench",
                metrics={"A_last": 40.0 + i % 30, "A_avg": 50.0, "F_last": 10.0, "tasks_done": done},
                name=f"ablation {i}" if i % 3 == 0 else None,
                tags=["sweep", f"k{500 + i % 3}"],
                overrides={"epochs": 2 ** (i % 9), "memory_size": 500},
                archived_at=now if i % 50 == 7 else None,
            )
        )
        for t in range(n_tasks):
            composition = [5] * n_classes
            composition[2 * t % n_classes] = 450
            streams.append(
                dict(
                    run_id=i,
                    task=t,
                    n_samples=sum(composition),
                    major_classes=[2 * t, 2 * t + 1],
                    composition=composition,
                    stream_hash=f"{i}-{t}",
                )
            )
            if t < done:
                row = [60.0 - j * 0.1 for j in range(t + 1)] + [0.0] * (n_tasks - t - 1)
                results.append(
                    dict(
                        run_id=i,
                        task=t,
                        accuracy=50.0,
                        accuracy_row=row,
                        class_accuracy=[50.0] * n_classes,
                        eval_classes=list(range(2 * (t + 1))),
                        seconds=10.0,
                        finished_at=now,
                    )
                )
                for e in range(n_epochs + 1 if n_epochs else 0):
                    epochs.append(
                        dict(
                            run_id=i,
                            task=t,
                            phase="stream" if e == 0 else "memory",
                            epoch=max(e - 1, 0),
                            epochs=1 if e == 0 else n_epochs,
                            loss=2.0 / (e + 1),
                            lr=0.05,
                            samples=500,
                            seconds=0.1,
                            samples_per_s=5000.0,
                        )
                    )
                snapshots.append(
                    dict(
                        run_id=i,
                        task=t,
                        histogram=[5] * n_classes,
                        slots_per_class=5,
                        info={
                            "policy": "uncertainty",
                            "views": 12,
                            "candidates_uncertainty": [30] * 13,
                            "chosen_uncertainty": [10] * 13,
                        },
                        created_at=now,
                    )
                )
    with engine.begin() as conn:
        conn.execute(insert(Run), runs)
        conn.execute(insert(TaskStream), streams)
        conn.execute(insert(TaskResult), results)
        conn.execute(insert(MemorySnapshot), snapshots)
        if epochs:
            conn.execute(insert(EpochMetric), epochs)
    return {
        "runs": len(runs),
        "task_results": len(results),
        "memory_snapshots": len(snapshots),
        "task_streams": len(streams),
        "epochs": len(epochs),
    }


MIN_RUNS = 10  # build_store makes every tenth run a running one; a refresh is measured on those


def visible(n_runs: int) -> int:
    """The runs the table shows: the archived ones (every 50th, from the 7th) are hidden."""
    return n_runs - sum(1 for i in range(1, n_runs + 1) if i % 50 == 7)


def median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:7.1f} ms (min {min(samples) * 1000:.1f}, max {max(samples) * 1000:.1f})"


async def measure_refresh(n_runs: int, repeat: int) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    from rmconsole import store
    from rmconsole.tui import RMConsoleApp, data
    from rmconsole.tui.messages import RunLoaded, RunsLoaded
    from rmconsole.tui.screens.run import RunScreen
    from rmconsole.tui.screens.runs import RunsScreen
    from rmconsole.tui.widgets.runs_table import RunsTable

    timings: dict[str, list[float]] = {
        "runs read": [],
        "runs apply": [],
        "runs apply+frame": [],
        "run read": [],
        "run apply+frame": [],
    }
    cpu: dict[str, list[float]] = {k: [] for k in timings}  # the same sections in this process's CPU time
    app = RMConsoleApp(refresh_s=3600, reap_every_s=None)  # refreshes driven by hand below
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        while screen.query_one(RunsTable).row_count < visible(n_runs):
            await pilot.pause(0.01)
        running = [r.id for r in data.load_run_rows() if r.status == "running"]
        feed = data.RunsFeed()
        feed.read()  # the screen's reader is warm after its first tick
        for k in range(repeat):
            store.write(lambda s, k=k: [s.get(store.Run, i).__setattr__("phase_done", 100 + k + 1) for i in running])
            t, c = time.perf_counter(), time.process_time()
            rows, changed = feed.read()  # what the worker thread does each tick
            timings["runs read"].append(time.perf_counter() - t)
            cpu["runs read"].append(time.process_time() - c)
            assert changed
            t, c = time.perf_counter(), time.process_time()
            screen.on_runs_loaded(RunsLoaded(rows, changed, feed.delta))  # what the UI thread does with it
            timings["runs apply"].append(time.perf_counter() - t)
            cpu["runs apply"].append(time.process_time() - c)
            await pilot.pause()
            timings["runs apply+frame"].append(time.perf_counter() - t)
            cpu["runs apply+frame"].append(time.process_time() - c)
        run_id = running[0]
        app.open_run(run_id)
        while not (isinstance(app.screen, RunScreen) and app.screen.view is not None):
            await pilot.pause(0.01)
        run_screen = app.screen
        for k in range(repeat):
            store.update_run(run_id, phase_done=200 + k)
            store.record_epochs(
                run_id,
                [
                    dict(
                        task=0,
                        phase="memory",
                        epoch=k,
                        epochs=256,
                        loss=0.5,
                        lr=0.05,
                        samples=500,
                        seconds=0.1,
                        samples_per_s=5000.0,
                    )
                ],
            )  # a live epoch
            t, c = time.perf_counter(), time.process_time()
            view = run_screen.feed.read()  # what the run page's worker thread does each tick
            timings["run read"].append(time.perf_counter() - t)
            cpu["run read"].append(time.process_time() - c)
            t, c = time.perf_counter(), time.process_time()
            run_screen.on_run_loaded(RunLoaded(view, []))
            await pilot.pause()
            timings["run apply+frame"].append(time.perf_counter() - t)
            cpu["run apply+frame"].append(time.process_time() - c)
    return timings, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=0, help="memory epochs per task with an epoch row each")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument(
        "--starts", type=int, default=7, help="fresh processes timed for the start-up (best and median)"
    )
    args = parser.parse_args()
    if args.runs < MIN_RUNS or args.tasks < 1:  # (run 10 is the first running run a refresh measures)
        raise SystemExit(
            f"tui_refresh.py: --runs {args.runs} --tasks {args.tasks}: give at least {MIN_RUNS} runs (every "
            "tenth is a running run, whose refresh is measured) and 1 task"
        )
    with tempfile.TemporaryDirectory(prefix="rmconsole-bench-") as home:
        os.environ["RMCONSOLE_HOME"] = home
        os.environ.pop("RMCONSOLE_DB", None)
        t = time.perf_counter()
        counts = build_store(args.runs, args.tasks, args.epochs)
        print(
            f"store: {counts['runs']:,} runs, {counts['task_results'] + counts['memory_snapshots']:,} metric rows "
            f"({counts['task_results']:,} task results + {counts['memory_snapshots']:,} memory snapshots; "
            f"{counts['task_streams']:,} stream rows; {counts['epochs']:,} epoch rows), "
            f"built in {time.perf_counter() - t:.1f} s, load {Path('/proc/loadavg').read_text().split()[0]}, "
            f"{(Path(home) / 'rmconsole.db').stat().st_size / 1e6:.0f} MB"
        )

        # as an installed package runs: with its bytecode cached (a sandbox's PYTHONDONTWRITEBYTECODE
        # would recompile rmconsole's modules on every start, ~0.1 s); the first start writes the cache
        child_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for path in ("tui", "cli"):
            starts = []
            for _ in range(args.starts):
                t = time.perf_counter()
                out = subprocess.run(
                    [sys.executable, "-c", STARTUP_CHILD, str(visible(args.runs)), path],
                    capture_output=True,
                    text=True,
                    env={**child_env, "PYTHONPATH": str(REPO)},
                    check=True,
                )
                wall = time.perf_counter() - t
                starts.append({**json.loads(out.stdout.strip().splitlines()[-1]), "wall_s": wall})
            best = min(starts, key=lambda s: s["import_s"] + s["first_s"])
            median = statistics.median(s["import_s"] + s["first_s"] for s in starts)
            what = "rmconsole.tui" if path == "tui" else "rmconsole.cli + rmconsole.tui (the `rmconsole tui` path)"
            print(
                f"start-up via {what} (best of {args.starts}; median import + first screen {median:.2f} s): "
                f"import {best['import_s']:.2f} s; first screenful of runs {best['first_s']:.2f} s after the app starts (import + first screen "
                f"{best['import_s'] + best['first_s']:.2f} s, target < 1 s); all {args.runs:,} rows in the table "
                f"{best['all_s']:.2f} s (CPU {best['all_cpu']:.2f} s); process wall incl. interpreter start and exit {best['wall_s']:.2f} s; "
                f"CPU: import {best['import_cpu']:.2f} s + first screen {best['first_cpu']:.2f} s = "
                f"{best['import_cpu'] + best['first_cpu']:.2f} s (what an idle core takes, whatever the load)"
            )

        timings, cpu = asyncio.run(measure_refresh(args.runs, args.repeat))
        for name, samples in timings.items():
            print(f"{name:<18} wall {median_ms(samples)}   CPU {median_ms(cpu[name])}")
        total = statistics.median(timings["runs read"]) + statistics.median(timings["runs apply+frame"])
        run_total = statistics.median(timings["run read"]) + statistics.median(timings["run apply+frame"])
        cpu_total = statistics.median(cpu["runs read"]) + statistics.median(cpu["runs apply+frame"])
        print(
            f"one runs-page refresh (read + apply + frame): wall {total * 1000:.1f} ms, CPU {cpu_total * 1000:.1f} ms"
            f"   target <= 50 ms CPU (load {Path('/proc/loadavg').read_text().split()[0]})"
        )
        print(f"one run-page refresh ({args.tasks} tasks; read + apply + frame): {run_total * 1000:.1f} ms")


if __name__ == "__main__":
    main()
