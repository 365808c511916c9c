"""Driving a sweep from the command line: its queue here with progress bars, or a detached
queue runner, or a scheduler's jobs (the queue itself is runner.queue)."""

from __future__ import annotations

from typing import Any

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

from .. import report as reports
from .. import runner, store
from ..store.db import holding_as_a_run
from ..store.filters import where
from .common import console, err_console


def follow_launched_sweep(launched: Any, detach: bool) -> None:
    """A sweep `runner.launch_request` stored: with --detach say where it runs and return; else
    drive its queue here (showing progress), or follow its scheduler's jobs with an executor."""
    spec = launched.executor
    sweep_id, ids, plan, slots, gpus = (
        launched.sweep_id,
        launched.run_ids,
        launched.plan,
        launched.parallel,
        launched.gpus,
    )
    if launched.executor is not None:
        jobs = list(dict.fromkeys(launched.job_ids or []))
        line = (
            f"sweep {sweep_id} ({plan.preset}): {len(ids)} runs ({plan.shape()}), ids {ids[0]}-{ids[-1]}, "
            f"submitted as {len(jobs)} {spec.name} job(s) {', '.join(jobs)}"
            + (f", {spec.runs_per_gpu} runs per job" if spec.runs_per_gpu > 1 else "")
        )
        if detach:
            err_console.print(line, highlight=False, soft_wrap=True)
            console.print(sweep_id, highlight=False)
            return
        console.print(line, highlight=False)
        with holding_as_a_run():  # a database outage is waited out as the workers wait it out
            counts = follow_sweep(sweep_id, runner.ScheduledSweep(sweep_id), plan)
    else:
        line = (
            f"sweep {sweep_id} ({plan.preset}): {len(ids)} runs ({plan.shape()}), ids {ids[0]}-{ids[-1]}, "
            f"{slots} slot(s) on {'GPUs ' + ','.join(gpus) if gpus else 'CPU'}"
            + (f", {launched.runs_per_gpu} per GPU" if launched.runs_per_gpu > 1 else "")
        )
        if launched.queue_runner is not None:
            err_console.print(
                f"{line}; queue runner pid {launched.queue_runner.pid}, log {launched.log_path}",
                highlight=False,
                soft_wrap=True,
            )
            console.print(sweep_id, highlight=False)
            return
        console.print(line, highlight=False)
        with runner.DriverLock(sweep_id), holding_as_a_run():  # an outage waited out as its workers do
            counts = follow_sweep(
                sweep_id, runner.SweepQueue(sweep_id, slots, gpus=gpus, runs_per_gpu=launched.runs_per_gpu), plan
            )
    summaries = [r.to_json() for r in store.find_runs(where("sweep", [sweep_id]), archived=True)]
    console.print(reports.rich_table(reports.build_report(summaries), width=console.width))
    console.print(
        f"sweep {sweep_id}: "
        + ", ".join(f"{v} {k}" for k, v in counts.items())
        + f"; tables: rmconsole report --sweep {sweep_id} --format md|csv|latex|json",
        highlight=False,
    )
    raise typer.Exit(0 if set(counts) == {"finished"} else 1)


def follow_sweep(sweep_id: str, queue: Any, plan: Any = None, poll_s: float = 0.5) -> dict[str, int]:
    """Drive a sweep's queue in this process with one bar for the sweep and one per running run;
    Ctrl-C stops the sweep. Returns the runs per status."""
    varying = [k for k, v in (plan.axes if plan else {}).items() if len(v) > 1 and k != "seed"]
    columns = (TextColumn("{task.description}"), BarColumn(), TaskProgressColumn(), TextColumn("{task.fields[info]}"))
    bars: dict[int, Any] = {}
    try:
        with Progress(*columns, console=console, transient=True) as progress:
            overall = progress.add_task(f"sweep {sweep_id}", total=len(queue.runs()), info="")

            def tick(q: Any) -> None:
                runs = q.runs()
                counts = runner.status_counts(runs)
                progress.update(
                    overall,
                    completed=sum(r.status not in store.ACTIVE for r in runs),
                    info=", ".join(f"{v} {k}" for k, v in counts.items()),
                )
                for r in runs:
                    if r.status == "running":
                        if r.id not in bars:
                            what = " ".join(f"{k}={reports.format_value(r.config.get(k))}" for k in varying)
                            bars[r.id] = progress.add_task(
                                f"  run {r.id} {what} seed {r.seed}".replace("  ", " ", 1), total=None, info=""
                            )
                        if r.task is not None:
                            progress.update(
                                bars[r.id],
                                total=max(r.phase_total, 1),
                                completed=r.phase_done,
                                info=f"task {r.task + 1}/{r.n_tasks} {r.phase or ''}",
                            )
                    elif r.id in bars:
                        progress.remove_task(bars.pop(r.id))

            queue.log = lambda message: progress.console.print(message, highlight=False)
            queue.run(poll_s, on_tick=tick)
    except KeyboardInterrupt:
        err_console.print(f"stopping sweep {sweep_id}…")
        queue.stop()
    return runner.status_counts(store.list_runs(sweep_id=sweep_id))
