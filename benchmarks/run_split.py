"""A run end to end, in process: wall and CPU seconds of each phase, and the accuracies.

    python benchmarks/run_split.py                                   # the MNIST RM run, seed 1, 1 thread
    python benchmarks/run_split.py --preset digits-blurry10-online
    python benchmarks/run_split.py --set seed=2 --set epochs=5 --json out.json

It goes through `cl.loop.run_protocol` exactly as `rmconsole run` does (the same config, the
dataset from RMCONSOLE_DATA), without the store and the worker process: `startup` is what a
fresh process pays before training (importing torch and rmconsole, loading the dataset),
measured in a child interpreter. Phases: stream (the pass over each task's stream), memory
update (RM's uncertainty scoring), memory (the memory-only epochs), evaluation. CPU seconds
are this process's time on the CPU (one torch thread unless --set threads=N): on a shared
machine they, not the wall clock, say what the run costs; the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import TimingReporter, machine

from rmconsole.cl.data import load_run_dataset
from rmconsole.cl.loop import run_protocol
from rmconsole.config import ConfigError, load_config

STARTUP = (
    "import time; t = time.process_time(); w = time.perf_counter(); import torch; "
    "from rmconsole.config import load_config; from rmconsole.cl.loop import run_protocol; "
    "from rmconsole.cl.data import load_run_dataset; _, cfg = load_config({preset!r}, {overrides!r}); "
    "load_run_dataset(cfg); print(time.process_time() - t, time.perf_counter() - w)"
)


def startup_seconds(preset: str, overrides: list[str]) -> tuple[float, float]:
    """(CPU, wall) seconds a fresh interpreter takes to import and load the run's dataset."""
    code = STARTUP.format(preset=preset, overrides=overrides)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]),
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    cpu, wall = (float(v) for v in out.split()[-2:])
    return cpu, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="mnist-blurry10-online")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    overrides = ["seed=1", "threads=1"] + args.overrides
    try:
        _, cfg = load_config(args.preset, overrides)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    torch.set_num_threads(cfg.threads or 1)
    device = torch.device("cuda" if cfg.device == "cuda" else "cpu")
    print(machine())
    start_cpu, start_wall = startup_seconds(args.preset, overrides)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    data = load_run_dataset(cfg)
    reporter = TimingReporter(device)
    outcomes = run_protocol(cfg, data, device, reporter)
    reporter.finish()
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    split = {}
    for name in dict.fromkeys(p.name for p in reporter.phases):
        group = [p for p in reporter.phases if p.name == name]
        split[name] = {
            "samples": sum(p.samples for p in group),
            "seconds": sum(p.seconds for p in group),
            "cpu_seconds": sum(p.cpu_seconds for p in group),
        }
    load = os.getloadavg()
    print(
        f"{args.preset} {' '.join(overrides)}: A_last {outcomes[-1].accuracy:.2f}, "
        f"best-epoch {outcomes[-1].best_epoch_accuracy if outcomes[-1].best_epoch_accuracy is not None else '-'}"
    )
    print(f"{'phase':<15} {'samples':>10} {'CPU s':>8} {'wall s':>8}")
    print(f"{'startup':<15} {'':>10} {start_cpu:>8.1f} {start_wall:>8.1f}")
    for name, row in split.items():
        print(f"{name:<15} {row['samples']:>10,} {row['cpu_seconds']:>8.1f} {row['seconds']:>8.1f}")
    print(
        f"{'end to end':<15} {'':>10} {start_cpu + cpu:>8.1f} {start_wall + wall:>8.1f}   "
        f"(load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine(),
                    "preset": args.preset,
                    "overrides": overrides,
                    "a_last": outcomes[-1].accuracy,
                    "accuracies": [o.accuracy for o in outcomes],
                    "startup": {"cpu_seconds": start_cpu, "seconds": start_wall},
                    "phases": split,
                    "cpu_seconds": start_cpu + cpu,
                    "seconds": start_wall + wall,
                    "load": load,
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
