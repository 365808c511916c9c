"""The follow-up's table on this machine: methods x seeds of a task-free preset, stored as ordinary
runs (one sweep id) so `rmconsole report` makes the table and the anytime figure.

    RMCONSOLE_DATA=../shared/data PYTHONPATH=. python benchmarks/iblurry_table.py \\
        --preset benchmarks/presets/mnist-iblurry50-10-cpu.toml \\
        --methods er,ewcpp,mir,er_ace,scr,gdumb,bic,rm,clib --seeds 1,2,3 --jobs 2
    rmconsole report --sweep SWEEP --format md --plot anytime.png

Each job is one process that trains its share of the runs one after another through the
worker's own `train(run_id)` (the same store rows, checkpoints and status transitions as
`rmconsole run`), keeping the decoded dataset between runs: decoding the Tiny-ImageNet JPEGs
again for every run would cost more than some runs. `--set KEY=VALUE` overrides every run;
a `--methods` entry NAME:KEY=VALUE adds a row with an override (`rm:rm_variant=iblurry`).

A call that was killed (a time limit: the GPU suite's tiny part) leaves its sweep's finished runs
and each unfinished run's last task checkpoint; `--resume SWEEP` continues the unfinished ones,
bit for bit as if never stopped. `--sweep-file F` writes the sweep id to F as soon as it exists.
`--by-seed` trains every method's first seed before any second one (a sweep stopped for time then
has whole rows of its first seeds).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path
from typing import Any


def _train_share(run_ids: list[int], home: str | None) -> None:
    import torch

    torch.set_num_threads(1)
    if home:
        os.environ["RMCONSOLE_HOME"] = home
    from rmconsole import store
    from rmconsole.cl import data as cl_data
    from rmconsole.runner import worker

    cache: dict[tuple[Any, ...], Any] = {}
    original = cl_data.load_run_dataset

    def cached(cfg: Any, *args: Any, **kwargs: Any) -> Any:
        key = (cfg.dataset, cfg.image_size, cfg.data_pipeline)
        if key not in cache:
            cache[key] = original(cfg, *args, **kwargs)
        return cache[key]

    worker.load_run_dataset = cached  # (the worker's name for it)
    for run_id in run_ids:
        started = time.perf_counter()
        try:
            status = worker.train(run_id)
        except Exception as err:  # noqa: BLE001 - a failed run is recorded, the others go on
            message = " ".join(f"{type(err).__name__}: {err}".split())[:400]
            store.finish_run(run_id, "failed", error=message)
            status = f"failed ({message})"
        print(f"run {run_id}: {status} in {time.perf_counter() - started:.0f} s", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--preset", required=True)
    ap.add_argument("--methods", required=True, help="comma-separated; NAME:KEY=VALUE adds a row with an override")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="KEY=VALUE for every run")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--resume", metavar="SWEEP", help="continue this sweep's unfinished runs instead")
    ap.add_argument("--sweep-file", type=Path, help="write the sweep id here as soon as it exists")
    ap.add_argument(
        "--by-seed", action="store_true", help="train every method's first seed, then every second one, ..."
    )
    args = ap.parse_args()
    if args.resume:
        sweep_id, ids = args.resume, unfinished_runs(args.resume)
        print(f"sweep {sweep_id}: resuming runs {', '.join(map(str, ids)) or 'none (all finished)'}", flush=True)
    else:
        sweep_id, ids = create_sweep(args)
    if args.sweep_file is not None:
        args.sweep_file.write_text(sweep_id + "\n")
    if args.by_seed:  # (a sweep cut short then has whole rows of its first seeds)
        from rmconsole import store

        seeds = {i: store.get_run(i).seed for i in ids}
        ids = sorted(ids, key=lambda i: (seeds[i], i))
    # interleave the shares so each job gets a mix of slow and fast methods
    shares = [ids[j :: args.jobs] for j in range(args.jobs)]
    home = os.environ.get("RMCONSOLE_HOME")
    started = time.perf_counter()
    if args.jobs == 1:
        _train_share(shares[0], home)
    else:
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_train_share, args=(share, home)) for share in shares if share]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    print(f"sweep {sweep_id} done in {time.perf_counter() - started:.0f} s", flush=True)


def unfinished_runs(sweep_id: str) -> list[int]:
    """The sweep's runs that did not finish, queued again: a killed worker's run is failed by
    dead-run detection, then requeued; its worker resumes from the last task checkpoint."""
    from rmconsole import store
    from rmconsole.runner.launch import reap_dead

    runs = store.list_runs(sweep_id=sweep_id)
    if not runs:
        sys.exit(f"error: no runs in sweep {sweep_id!r}")
    reap_dead([r for r in runs if r.status in store.ACTIVE])
    ids = []
    for run in store.list_runs(sweep_id=sweep_id):
        assert run.id is not None
        if run.status in ("failed", "stopped"):
            store.requeue_run(run.id, ("failed", "stopped"))
        if store.get_run(run.id).status == "queued":
            ids.append(run.id)
    return ids


def create_sweep(args: argparse.Namespace) -> tuple[str, list[int]]:
    """A new sweep: one queued run per method row and seed."""
    from rmconsole import store
    from rmconsole.config import ConfigError, load_config, parse_overrides

    overrides = parse_overrides(args.overrides)
    configs, name = [], None
    for spec in args.methods.split(","):
        method, _, extra = spec.partition(":")
        more = parse_overrides([extra]) if extra else {}
        for seed in (int(s) for s in args.seeds.split(",")):
            try:
                name, cfg = load_config(args.preset, {**overrides, **more, "method": method, "seed": seed})
            except ConfigError as err:
                sys.exit(f"error: {err}")
            configs.append(cfg.to_dict())
    sweep_id = f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    ids = store.create_runs(configs, name, sweep_id)
    print(f"sweep {sweep_id}: runs {ids[0]}-{ids[-1]} ({len(ids)})", flush=True)
    return sweep_id, ids


if __name__ == "__main__":
    main()
