"""The `rmconsole` command line: a thin Typer face over config, store and runner."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table
from rich.text import Text

from . import long_lived_imports, metric_registry, report as reports, report_anytime as anytime_report, runner, store
from .cl.datasets import DatasetMissing
from .cl.metric_catalog import mark_carrier
from .cl.protocols import is_task_free
from .store.filters import where, within
from .config import MAX_INT, ConfigError, plugin_presets, preset_description, preset_names, read_preset, shorten
from . import plugins
from .sanitize import SafeConsole, clean_block

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="A terminal experiment console for continual learning around Rainbow Memory.")
console = SafeConsole()  # whatever a run's name, tag, note or preset holds, no control character reaches the terminal
err_console = SafeConsole(stderr=True)
USER_ERRORS = (ConfigError, store.StoreError, store.UnknownRun, DatasetMissing, ValueError, runner.StartFailed,
               store.LeaseLost)
MAX_SLOTS = 1024  # --parallel, --gpus and --nnodes beyond this are typing errors, not machines
RUN_ID = {"ignore_unknown_options": True}  # `show -1` is a run id to refuse, not an unknown option
_debug = False


def check_run_id(run_id: int) -> int:
    """A run id within the store's range (a negative or 20-digit id is one line, not an OverflowError)."""
    if not 1 <= run_id <= MAX_INT:
        raise ConfigError(f"run id {shorten(run_id)}: run ids are whole numbers from 1 to {MAX_INT} "
                          f"(see `rmconsole runs`)")
    return run_id


def check_count(option: str, value: Optional[int], low: int, high: int = MAX_INT) -> None:
    if value is not None and not low <= value <= high:
        raise ConfigError(f"{option} {shorten(value)}: allowed: {low} to {high}")


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")) -> None:
    global _debug
    _debug = debug


def _fmt(value: Optional[float], digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _dim(text: str, style: str) -> str:
    return f"[{style}]{text}[/]" if style else text


def _duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return "—"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# --------------------------------------------------------------------------- run


@app.command()
def run(
    preset: Optional[str] = typer.Option(None, "--preset", "-p", help="Preset name or TOML file (default: the digits demo)."),
    set_: list[str] = typer.Option([], "--set", "-s", help="Override a config key: KEY=VALUE (repeatable)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (class order, stream, init)."),
    device: Optional[str] = typer.Option(None, "--device", help="auto | cpu | cuda | cuda:N"),
    detach: bool = typer.Option(False, "--detach", "-d", help="Start the run and return at once."),
    seeds: Optional[str] = typer.Option(None, "--seeds", help="A sweep over seeds: 1,2,3."),
    parallel: Optional[int] = typer.Option(None, "--parallel", "-j",
                                           help="Sweep slots (default: one per visible GPU, 1 on CPU)."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Train on N GPUs of this node under torchrun (data parallel); "
                                       "with --set device=cpu, N CPU processes on gloo."),
    nnodes: int = typer.Option(1, "--nnodes", help="Nodes in a multi-node run (torchrun; see `rmconsole join`)."),
    node_rank: Optional[int] = typer.Option(None, "--node-rank", help="This node's rank (0 for `run`)."),
    master_addr: Optional[str] = typer.Option(None, "--master-addr", help="Node 0's address (static rendezvous)."),
    master_port: Optional[int] = typer.Option(None, "--master-port", help="Node 0's port (torchrun's default 29500)."),
    rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of a c10d rendezvous."),
    rdzv_id: Optional[str] = typer.Option(None, "--rdzv-id", help="Job id shared by the nodes of a c10d rendezvous."),
    executor: Optional[str] = typer.Option(None, "--executor", help="Where the runs' workers run: local (this "
                                           "machine, the default), slurm (a job per run, through submitit), "
                                           "submitit-local (the same job on this machine)."),
    slurm: list[str] = typer.Option([], "--slurm", help="Job options for --executor slurm: partition=P,time=MINUTES,"
                                    "gpus_per_run=N,cpus_per_run=N,mem_gb=G,account=A,qos=Q,constraint=C."),
    runs_per_gpu: Optional[int] = typer.Option(None, "--runs-per-gpu", help="Runs sharing each GPU, each capped at "
                                               "1/N of its memory (local queue: N slots per GPU; slurm: N runs per job)."),
    name: Optional[str] = typer.Option(None, "--name", "-n", help="What to call the run (a sweep: each of its runs)."),
    tags: list[str] = typer.Option([], "--tag", "-t", help="A tag for the run (repeatable): filter with tag:T."),
) -> None:
    """Train one run, or a sweep: comma-separated --set values and --seeds make a grid of runs."""
    check_count("--gpus", gpus, 1, MAX_SLOTS)
    check_count("--parallel", parallel, 1, MAX_SLOTS)
    check_count("--nnodes", nnodes, 1, MAX_SLOTS)
    check_count("--node-rank", node_rank, 0, MAX_SLOTS)
    check_count("--master-port", master_port, 1, 65535)
    rendezvous = runner.Rendezvous(nnodes, node_rank, master_addr, master_port, rdzv_endpoint, rdzv_id).check()
    spec = runner.parse_executor(executor, slurm, runs_per_gpu)
    if runner.is_sweep(list(set_), seeds):
        if (gpus or 1) > 1 or rendezvous.multi_node:
            raise ConfigError("--gpus/--nnodes apply to a single run: a sweep runs one GPU per run "
                              "(--parallel slots); start multi-GPU runs one at a time")
        run_sweep(preset, list(set_), seed, seeds, device, detach, parallel, runs_per_gpu, spec, name, list(tags))
        return
    launched = runner.launch_run(preset, list(set_), seed=seed, device=device, gpus=gpus,  # shared with the TUI
                                 rendezvous=rendezvous, executor=spec, name=name, tags=list(tags))
    run_id, cfg, proc = launched.run_id, launched.config, launched.process
    if detach:
        if launched.job_id is not None:
            err_console.print(f"run {run_id}: submitted as {spec.name} job {launched.job_id}", highlight=False)
        console.print(run_id)
        return
    where = f"; {spec.name} job {launched.job_id}" if launched.job_id is not None else ""
    console.print(f"run [bold]{run_id}[/] ({escape(name or launched.preset)}): {cfg.method} on {cfg.dataset}, "
                  f"K={cfg.memory_size}, {cfg.n_tasks} tasks, blurry{cfg.blurry} {cfg.stream}, seed {cfg.seed}{where}; "
                  f"log {runner.log_path(run_id)}")
    status = follow(run_id, proc)
    print_run(run_id)
    raise typer.Exit(0 if status == "finished" else 1)


def follow(run_id: int, proc: Any = None, poll_s: float = 0.25) -> str:
    """Show a run's progress until it ends; Ctrl-C stops the run. Returns the final status."""
    columns = (
        TextColumn("task {task.fields[task]}"), TextColumn("[cyan]{task.fields[phase]:<13}"), BarColumn(),
        TaskProgressColumn(), TextColumn("{task.fields[rate]}"), TextColumn("ETA {task.fields[eta]}"),
    )
    reported = 0
    try:
        with Progress(*columns, console=console, transient=True) as progress:
            bar = progress.add_task("run", total=None, task="—", phase="queued", rate="", eta="—")
            for run in runner.follow_run(run_id, proc, poll_s):  # records the end of a worker that died silently
                if run.status == "queued" and run.job_state:
                    progress.update(bar, phase=run.job_state[:13])
                if run.task is not None:
                    progress.update(bar, total=max(run.phase_total, 1), completed=run.phase_done,
                                    task=f"{run.task + 1}/{run.n_tasks}", phase=run.phase or "",
                                    rate=f"{run.samples_per_s:,.0f} samples/s" if run.samples_per_s else "",
                                    eta=_duration(run.eta_s))
                results = store.task_results(run_id) if (run.metrics or {}).get("tasks_done", 0) > reported else []
                for result in results[reported:]:
                    progress.console.print(f"task {result.task + 1}/{run.n_tasks}: accuracy {result.accuracy:.2f}% "
                                           f"({result.seconds:.1f} s)")
                reported = max(reported, len(results))
        return run.status
    except KeyboardInterrupt:
        err_console.print(f"stopping run {run_id}…")
        runner.stop_run(run_id)
        return store.get_run(run_id).status


# --------------------------------------------------------------------------- sweeps


def run_sweep(preset: Optional[str], pairs: list[str], seed: Optional[int], seeds: Optional[str],
              device: Optional[str], detach: bool, parallel: Optional[int], runs_per_gpu: Optional[int] = None,
              spec: Any = None, name: Optional[str] = None, tags: Optional[list[str]] = None) -> None:
    """Validate every grid point, store the grid as queued runs, then drive the queue here (showing
    progress) or, with --detach, in a queue runner process that outlives this command; with an
    executor (--executor slurm) submit them and follow the scheduler instead."""
    launched = runner.launch_sweep(preset, pairs, seeds=seeds, seed=seed, device=device, parallel=parallel,
                                   detach=detach, runs_per_gpu=runs_per_gpu, executor=spec, name=name,
                                   tags=tags)
    sweep_id, ids, plan, slots, gpus = launched.sweep_id, launched.run_ids, launched.plan, launched.parallel, launched.gpus
    if launched.executor is not None:
        jobs = list(dict.fromkeys(launched.job_ids or []))
        line = (f"sweep {sweep_id} ({plan.preset}): {len(ids)} runs ({plan.shape()}), ids {ids[0]}-{ids[-1]}, "
                f"submitted as {len(jobs)} {spec.name} job(s) {', '.join(jobs)}" +
                (f", {spec.runs_per_gpu} runs per job" if spec.runs_per_gpu > 1 else ""))
        if detach:
            err_console.print(line, highlight=False, soft_wrap=True)
            console.print(sweep_id, highlight=False)
            return
        console.print(line, highlight=False)
        counts = follow_sweep(sweep_id, runner.ScheduledSweep(sweep_id), plan)
    else:
        line = (f"sweep {sweep_id} ({plan.preset}): {len(ids)} runs ({plan.shape()}), ids {ids[0]}-{ids[-1]}, "
                f"{slots} slot(s) on {'GPUs ' + ','.join(gpus) if gpus else 'CPU'}" +
                (f", {launched.runs_per_gpu} per GPU" if launched.runs_per_gpu > 1 else ""))
        if launched.queue_runner is not None:
            err_console.print(f"{line}; queue runner pid {launched.queue_runner.pid}, log {launched.log_path}",
                              highlight=False, soft_wrap=True)
            console.print(sweep_id, highlight=False)
            return
        console.print(line, highlight=False)
        with runner.DriverLock(sweep_id):
            counts = follow_sweep(sweep_id, runner.SweepQueue(sweep_id, slots, gpus=gpus,
                                                              runs_per_gpu=launched.runs_per_gpu), plan)
    summaries = [r.to_json() for r in store.find_runs(where("sweep", [sweep_id]), archived=True)]
    console.print(reports.rich_table(reports.build_report(summaries)))
    console.print(f"sweep {sweep_id}: " + ", ".join(f"{v} {k}" for k, v in counts.items()) +
                  f"; tables: rmconsole report --sweep {sweep_id} --format md|csv|latex|json", highlight=False)
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
                progress.update(overall, completed=sum(r.status not in store.ACTIVE for r in runs),
                                info=", ".join(f"{v} {k}" for k, v in counts.items()))
                for r in runs:
                    if r.status == "running":
                        if r.id not in bars:
                            what = " ".join(f"{k}={reports.format_value(r.config.get(k))}" for k in varying)
                            bars[r.id] = progress.add_task(f"  run {r.id} {what} seed {r.seed}".replace("  ", " ", 1),
                                                           total=None, info="")
                        if r.task is not None:
                            progress.update(bars[r.id], total=max(r.phase_total, 1), completed=r.phase_done,
                                            info=f"task {r.task + 1}/{r.n_tasks} {r.phase or ''}")
                    elif r.id in bars:
                        progress.remove_task(bars.pop(r.id))

            queue.log = lambda message: progress.console.print(message, highlight=False)
            queue.run(poll_s, on_tick=tick)
    except KeyboardInterrupt:
        err_console.print(f"stopping sweep {sweep_id}…")
        queue.stop()
    return runner.status_counts(store.list_runs(sweep_id=sweep_id))


# --------------------------------------------------------------------------- choosing runs


def _run_id(text: str) -> int:
    """A run as typed: its id, or `last` (the newest run)."""
    text = text.strip()
    if text == "last":
        try:
            return store.newest_run_id()
        except store.UnknownRun:
            raise ConfigError("last: there is no run in the store yet") from None
    if not text.lstrip("-").isdigit() or text.count("-") > 1 or text.startswith("--"):
        raise ConfigError(f"run {shorten(text)!r}: expected a run id (see `rmconsole runs`) or 'last'")
    return check_run_id(int(text))


def _chosen_runs(items: list[str], where_: Optional[str] = None, option: str = "RUN") -> list[int]:
    """Run ids from `3 4 7`, `3-9`, `3,4`, `last`, and/or a `--where` run filter; every id must exist."""
    ids: list[int] = []
    for item in items:
        for part in item.split(","):
            part = part.strip()
            first, dash, last = part.partition("-")
            if dash and first.isdigit() and last.isdigit():
                ids.extend(range(int(first), int(last) + 1))
            elif part:
                ids.append(_run_id(part))
    if where_ is not None:
        ids.extend(r.id for r in store.find_runs(where_, archived=True))
    if not ids:
        raise ConfigError(f"give the runs ({option}: ids like 3 4 7, 3-9 or last" +
                          (", or --where FILTER)" if where_ is None else "); --where matched none"))
    known = set(store.run_statuses())
    missing = [i for i in dict.fromkeys(ids) if i not in known]
    if missing:
        raise store.UnknownRun(missing[0])
    return list(dict.fromkeys(ids))


# --------------------------------------------------------------------------- show

SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float], width: int = 24) -> str:
    """A curve in one line of block characters (resampled to at most `width` points)."""
    values = [v for v in values if v is not None]
    if not values:
        return ""
    if len(values) > width:
        step = len(values) / width
        values = [values[int(i * step)] for i in range(width - 1)] + [values[-1]]
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(SPARK[min(int((v - low) / span * 7.999), 7)] for v in values)


def _metric(detail: dict[str, Any], key: str, letter: str) -> str:
    m = detail["metrics"]
    value = m.get(key)
    if value is None:
        return "—"
    if m.get("partial"):
        return f"{letter}@{m['tasks_done']}/{detail['progress']['n_tasks']} {value:.2f}"
    return f"{value:.2f}"


def _show_metrics(detail: dict[str, Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """What `show` prints of the catalogue: the main line (the RM paper's protocol's metrics,
    which every run's JSON carries), the other measured ones beside it (dim), and the top-k
    figures; a task-free run's own (A_auc, the online figures) are its anytime lines."""
    measured = {k for k, v in detail["metrics"].items() if v is not None}
    main = [x for x in metric_registry.listed(["task"], (), family="")]
    own = [x for x in metric_registry.catalogue() if "task-free" in x.default_for and "task" not in x.default_for]
    extra = [x for x in metric_registry.listed(["task"], measured, family="") if x not in main and x not in own]
    return main, extra, metric_registry.listed(["task"], measured, family="topk")


def _cross_text(detail: dict[str, Any], metric: Any) -> str:
    """A cross-run metric (I_last) in `show`: its value and the run it was measured against, or why none."""
    m = detail["metrics"]
    if metric.name != "I_last":
        value = m.get(metric.name)
        return _fmt(value) + (f" (vs run {m.get(metric.name + '_against')})" if value is not None else "")
    differs = m.get("I_last_joint_differs")
    if m["I_last"] is not None and differs:
        what = "; ".join(f"{k} {store.show_value(v['run'])} here, {store.show_value(v['joint'])} there"
                         for k, v in differs.items())
        return f"{_fmt(m['I_last'])}* (* vs joint run {m.get('I_last_joint_run')}, which differs in {what})"
    if m["I_last"] is not None:
        return f"{_fmt(m['I_last'])} (vs joint run {m.get('I_last_joint_run')})"
    if detail["method"] == "joint":
        return "— (a joint run is the upper bound itself)"
    if m.get("partial"):
        return "— (partial: not all tasks are done)"
    return "— (no matching joint run)"


def epoch_lines(epochs: list[dict[str, Any]]) -> list[str]:
    """Per task and phase: epochs, the loss from first to last epoch with a sparkline, the lr
    range and the mean samples/s (and the last test accuracy when it was recorded)."""
    groups: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for e in epochs:
        groups.setdefault((e["task"], e["phase"]), []).append(e)
    lines = []
    for (task, phase), rows in groups.items():
        losses = [r["loss"] for r in rows if r["loss"] is not None]
        rates = [r["samples_per_s"] for r in rows if r["samples_per_s"]]
        text = f"  T{task + 1} {phase:<7}{len(rows):>4} ep"
        if len(losses) == 1:
            text += f"  loss {losses[0]:.3f}"
        elif losses:
            text += f"  loss {losses[0]:.3f}→{losses[-1]:.3f}"
            if len(losses) > 2:
                text += f" {sparkline(losses, 12)}"
        lrs = [r["lr"] for r in rows]
        text += f"  lr {min(lrs):.2g}–{max(lrs):.2g}" if len(set(lrs)) > 1 else f"  lr {lrs[0]:.2g}"
        if rates:
            text += f"  {sum(rates) / len(rates):,.0f}/s"
        tests = [r["test_accuracy"] for r in rows if r.get("test_accuracy") is not None]
        if tests:
            text += f"  test {tests[-1]:.1f}%"
        lines.append(text)
    return lines


def print_run(run_id: int, detail: Optional[dict[str, Any]] = None) -> None:
    """What `show` promises: who the run is, its config (overrides first), the per-task accuracy,
    every memory update's histogram, the epochs inside each task, and the metrics."""
    detail = detail or store.run_detail(run_id)
    tasks = detail["tasks"]
    head = f"run [bold]{run_id}[/]"
    if detail.get("name"):
        head += f" “{escape(detail['name'])}”"
    head += f" · {escape(detail['preset'] or '—')} · {detail['status']}"
    if detail.get("sweep_id"):
        head += f" · sweep {detail['sweep_id']}"
    if detail.get("archived"):
        head += " · [dim]archived[/]"
    console.print(head, highlight=False)
    if detail.get("tags"):
        console.print(f"tags: {escape(', '.join(detail['tags']))}", highlight=False)
    if detail.get("note"):
        console.print(f"note: {escape(detail['note'])}", highlight=False)
    config = detail["config"]
    overrides = detail.get("overrides") or {}
    console.print("overrides: " + (escape(" ".join(f"{k}={reports.format_value(v)}" for k, v in overrides.items()))
                                   or "none (the preset as it is)"), highlight=False)
    rest = " ".join(f"{k}={reports.format_value(v)}" for k, v in config.items() if k not in overrides)
    console.print(f"[dim]config: {escape(rest)}[/]", highlight=False)
    table = Table(title=None, box=None, padding=(0, 1), header_style="bold")
    table.add_column("task", justify="right")
    table.add_column("samples", justify="right")
    table.add_column("major classes")
    table.add_column("acc %", justify="right")
    for j in range(len(tasks)):
        table.add_column(f"T{j + 1}", justify="right", style="dim")
    table.add_column("time s", justify="right")
    for t in tasks:
        majors = ", ".join(t["major_names"] or map(str, t["major_classes"])) if t.get("major_names") is not None \
            else ", ".join(map(str, t["major_classes"]))
        row = t["accuracy_row"] or [None] * len(tasks)
        table.add_row(str(t["task"] + 1), f"{t['n_samples']:,}", majors, _fmt(t["accuracy"]),
                      *[_fmt(v, 1) for v in row], _fmt(t["seconds"], 1))
    console.print(table)
    if detail["memory"]:
        policies = {(m.get("info") or {}).get("policy") for m in detail["memory"]} - {None}
        console.print("memory after each update: size/slots per class, then samples per class in class_order"
                      + (f" ({', '.join(sorted(policies))})" if policies else ""), highlight=False)
        for m in detail["memory"]:
            console.print(f"  T{m['task'] + 1} {m['size']}/{m['slots_per_class']}: {' '.join(map(str, m['histogram']))}",
                          highlight=False)
    if detail.get("epochs"):
        console.print("epochs inside each task (mean training loss, learning rate, samples/s):", highlight=False)
        for line in epoch_lines(detail["epochs"]):
            console.print(line, highlight=False)
    m = detail["metrics"]
    main, extra, topk = _show_metrics(detail)
    parts = []
    for metric in main:
        text = _cross_text(detail, metric) if metric.across is not None else _metric(detail, metric.name, metric.letter)
        parts.append(f"{metric.name} {text}")
    console.print("  ".join(parts), highlight=False)
    if extra:  # measured beyond the protocol's own (e.g. the authors' test-selected figure), a line of their own
        console.print("[dim]" + "  ".join(f"{metric.label} {_metric(detail, metric.name, metric.letter)}"
                                          for metric in extra) + "[/]", highlight=False)
    if m.get("partial"):
        console.print(f"[yellow]partial:[/] metrics after task {m['tasks_done']} of {detail['progress']['n_tasks']} "
                      f"(A@k/T is the accuracy after task k, not a final A_last)", highlight=False)
    if m.get("topk") and topk:
        shown = "  ".join(f"{t.label.removesuffix(' top-k')} {_fmt(m.get(t.name), t.digits)}" for t in topk)
        console.print(f"top-{m['topk']}: {shown}  (the figures above are top-1)")
    if detail.get("job_id"):  # the scheduler's word is news only while the run is active
        active = detail["status"] in store.ACTIVE and detail.get("job_state")
        console.print(f"{(detail.get('executor') or '').split(':')[0]} job {detail['job_id']}"
                      + (f": {detail['job_state']}" if active else ""), highlight=False)
    for extra in anytime_report.anytime_lines(detail):  # task-free runs: A_auc, first appearances, compute
        console.print(extra, highlight=False)
    for entry in (detail.get("versions") or {}).get("plugins") or []:  # the plug-in packages that made it
        console.print(f"plug-in {escape(plugins.provenance_text(entry))}", highlight=False)
    if detail["error"]:
        err_console.print(f"[red]{detail['status']}:[/] {escape(detail['error'])}")


@app.command(context_settings=RUN_ID)
def show(run: str = typer.Argument(..., metavar="RUN", help="Run id, or 'last' (the newest run)."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON (with every epoch row and memory update).")) -> None:
    """One run: who it is (name, tags, note), config (overrides first), per-task accuracy, every
    memory update's histogram, the epochs inside each task (loss, lr, samples/s), metrics."""
    run_id = _run_id(run)
    reap_quietly([store.get_run(run_id)])
    detail = store.run_detail(run_id)
    if as_json:
        print(json.dumps(detail, indent=2))
        return
    print_run(run_id, detail)


STATUS_COLOURS = {"finished": "green", "running": "cyan", "queued": "yellow", "failed": "red", "stopped": "magenta"}


@app.command()
def runs(filters: Optional[list[str]] = typer.Argument(None, metavar="FILTER",
                                                      help="Run filter terms, all of which must hold: "
                                                           "method:rm,ewc k:500 tag:baseline override:epochs "
                                                           "'A_last>85' or words."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON."),
         status: Optional[str] = typer.Option(None, "--status", help="Only runs with this status."),
         limit: int = typer.Option(50, "--limit", help="Show the newest N runs (0 = all)."),
         sweep_: Optional[str] = typer.Option(None, "--sweep", help="Only the runs of this sweep (an id or 'last')."),
         all_: bool = typer.Option(False, "--all", "-a", help="Archived runs too.")) -> None:
    """All runs, newest last, and the queue of every sweep shown. A filter term is KEY:V1,V2 (any of
    them), KEY>N (also >= < <= = !=) or a word; KEY is a run column, tag, override, a metric or a
    config key. Partial metrics (a run not through all tasks) show as @k/T."""
    if status is not None and status not in store.STATUSES:
        raise ConfigError(f"--status {shorten(status)!r}: allowed: {', '.join(store.STATUSES)}")
    if limit < 0:
        raise ConfigError(f"--limit {shorten(limit)}: the newest N runs (N >= 1), or 0 for all")
    run_filter = store.parse_run_filter(filters)
    if status is not None:
        run_filter &= where("status", [status])
    reap_quietly()
    if sweep_:
        run_filter &= where("sweep", [runner.resolve_sweep_id(sweep_)])
    records = store.find_runs(run_filter, archived=True if all_ else None)
    if limit:
        records = records[-limit:]
    if as_json:
        print(json.dumps([r.to_json() for r in records], indent=2))
        return
    if not records:  # a header over nothing says nothing: say what matched none
        _say_none_match(filters, status, sweep_, all_)
        return
    table = Table(box=None, padding=(0, 1), collapse_padding=True, pad_edge=False, header_style="bold")
    table.add_column("id", justify="right", no_wrap=True)
    table.add_column("status", no_wrap=True)
    labels = [len(r.name or r.preset or "—") for r in records]
    table.add_column("run", min_width=min(max(labels, default=3), 40))  # name, else preset: never cut (to 40)
    table.add_column("method", no_wrap=True)
    table.add_column("K", justify="right", no_wrap=True)
    table.add_column("seed", justify="right", no_wrap=True)
    wide = console.width >= 120  # narrower: a run's changes go on a second line under its name
    if wide:
        table.add_column("changes", overflow="fold", ratio=1)  # the overrides of the preset, then #tags
    # the catalogue's metric columns; one of task-free runs only (A_auc) when such a run is listed
    columns = [m for m in metric_registry.columns()
               if "task" in m.protocols or any(m.name in r.metrics for r in records)]
    carrier = mark_carrier(columns)  # (the column that writes a partial run's @k/T; the others are dim)
    for m in columns:
        table.add_column(m.label, justify="right", no_wrap=True)
    jobs = store.job_states([r.id for r in records if r.status == "queued"])
    marked = []
    for r in records:
        status_text = r.status if r.status != "running" or r.task is None else f"{r.task + 1}/{r.n_tasks} {r.phase or ''}"
        if r.id in jobs:  # queued at a scheduler: its job and the scheduler's word
            executor, job_id, job_state = jobs[r.id]
            status_text = f"queued: {executor} job {job_id} {job_state or ''}".strip()
        if r.i_last_note:  # I_last against a joint run that differs beyond its recipe
            marked.append(r)
        what = r.overrides_text
        if r.tags:
            what = (what + " " if what else "") + " ".join(f"#{t}" for t in r.tags)
        if r.archived:
            what = (what + " " if what else "") + "(archived)"
        style = "dim" if r.partial else ""
        label = escape(r.name or r.preset or "—")
        changes = [escape(what)] if wide else []
        if what and not wide:
            label += f"\n[dim]{escape(what)}[/]"  # (wraps between words under the name)
        table.add_row(str(r.id), f"[{STATUS_COLOURS[r.status]}]{escape(status_text)}[/]", label, r.method,
                      str(r.memory_size), str(r.seed), *changes,
                      *[_dim(r.metric_text(m.name, mark=m is carrier), style if m.final_only and m.across is None
                             else "") for m in columns])
    console.print(table)
    for r in marked:
        console.print(f"* run {r.id}: I_last {r.i_last_note} (rmconsole show {r.id})", highlight=False)
    if any(r.partial for r in records):
        console.print("[dim]@k/T: partial, the metrics after task k of T (not final; no I_last)[/]", highlight=False)
    print_sweep_queues([r.sweep_id for r in records if r.sweep_id])


def _say_none_match(filters: Optional[list[str]], status: Optional[str], sweep_: Optional[str], all_: bool) -> None:
    """`runs` found nothing: one line on stderr saying so (exit 1 when filters chose nothing, as grep)."""
    stored = store.count_runs()
    asked = [*(filters or []), *([f"--status {status}"] if status else []), *([f"--sweep {sweep_}"] if sweep_ else [])]
    if not asked:
        err_console.print("no runs in the store yet: start one with `rmconsole run`" if not stored else
                          f"no runs to show ({stored} archived: `rmconsole runs --all`)", highlight=False)
        return
    ranges = [t for t in filters or [] if re.fullmatch(r"id[:=]\d+-\d+", t.strip())]
    hint = ""
    if ranges:
        low, high = re.split(r"[:=]", ranges[0].strip(), maxsplit=1)[1].split("-")
        hint = f"; a range of ids is two terms: 'id>={low}' 'id<={high}'"
    err_console.print(f"no runs match {escape(shorten(' '.join(asked), 200))} ({stored} run(s) stored"
                      f"{'' if all_ else ', archived ones hidden'}; see `rmconsole runs`){hint}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(1)


def reap_quietly(runs: Optional[list[Any]] = None) -> list[int]:
    """Mark dead runs failed (runner.reap_dead) for a command that only reads: each one it marks
    is said on stderr; if the store's write lock is busy, the look is skipped with a note
    (a read never waits on a writer)."""
    try:
        dead = runner.reap_dead(runs, busy_s=2.0)
    except store.StoreLocked as err:
        err_console.print(f"note: dead runs were not checked this time: {escape(str(err))}", highlight=False,
                          soft_wrap=True)
        return []
    for run_id in dead:
        run = store.get_run(run_id)
        err_console.print(f"run {run_id} marked failed: {escape(shorten(run.error or '', 300))}", highlight=False,
                          soft_wrap=True)
    return dead


def print_sweep_queues(sweep_ids: list[str]) -> None:
    """One line per sweep: its runs per status and who drives its queue."""
    for sweep_id in dict.fromkeys(sweep_ids):
        members = store.list_runs(sweep_id=sweep_id)
        counts = runner.status_counts(members)
        done = sum(counts.get(k, 0) for k in ("finished", "failed", "stopped"))
        pid = runner.driver_pid(sweep_id)
        held = sorted({f"{(r.executor or '').split(':')[0]} job {r.job_id}" for r in members
                       if r.job_id and r.status in store.ACTIVE})
        if held:
            driver = f"; held by the scheduler: {', '.join(held[:5])}" + (" …" if len(held) > 5 else "")
        elif pid:
            driver = f"; queue driven by pid {pid}"
        elif counts.get("queued"):
            driver = f"; no queue runner: continue with `python -m rmconsole.runner.queue {sweep_id}`"
        else:
            driver = ""
        console.print(f"sweep {sweep_id} ({members[0].preset}): {done}/{len(members)} done — " +
                      ", ".join(f"{v} {k}" for k, v in counts.items()) + driver, highlight=False)


@app.command()
def presets(as_json: bool = typer.Option(False, "--json", help="Print JSON."),
            long: bool = typer.Option(False, "--long", "-l", help="With each preset's description.")) -> None:
    """The bundled presets and the installed plug-ins' (names as `--preset` takes them; --long adds
    what each one is)."""
    items = []
    shipped, problems = plugin_presets()
    problems = [*plugins.problems(), *problems]  # (a package whose entry points cannot be read at all)
    for name in preset_names():
        try:
            _, table = read_preset(name)
        except ConfigError as err:  # a plug-in's unreadable preset: said, the others listed
            problems.append(str(err))
            continue
        items.append({"name": name, "description": preset_description(name), "config": table,
                      **({"package": shipped[name][1]} if name in shipped else {})})
    for problem in problems:
        err_console.print(f"[yellow]{escape(problem)}[/]", highlight=False)
    if as_json:
        print(json.dumps(items, indent=2))
        return
    table = Table(box=None, padding=(0, 1), header_style="bold")
    table.add_column("preset", no_wrap=True, style="bold")  # the name `--preset` takes: never cut
    table.add_column("setting", ratio=1)  # wraps between words at 80 columns
    for item in items:
        c = item["config"]
        stream = c.get("stream", "online")
        how = (f"{stream}{c.get('disjoint_classes', 50)}-{c.get('blurry', 10)} task-free"
               if is_task_free(stream) else f"blurry{c.get('blurry', 10)} {stream}")
        setting = Text(f"{c.get('dataset', '?')} · {c.get('model', '?')} · {c.get('method', 'rm')} · "
                       f"K={c.get('memory_size', '?')} · {c.get('n_tasks', 5)} tasks · {how}"
                       + (f" · from package {item['package']}" if "package" in item else ""))
        if long and item["description"]:
            setting.append("\n" + item["description"], style="dim")
        table.add_row(item["name"], setting, end_section=long)
    console.print(table)
    if not long:
        console.print("[dim]descriptions: rmconsole presets --long[/]", highlight=False)


# --------------------------------------------------------------------------- new


new_app = typer.Typer(help="Start a plug-in: write a pip-installable package (a method, a dataset or a metric) that "
                            "runs as written.", no_args_is_help=True)
app.add_typer(new_app, name="new")
NEW_DIR = typer.Option(None, "--dir", help="Where to write the package's folder (default: the current folder).")
NEW_NAME = "Its name: an identifier, also its package's (a method's and a dataset's are config values)."


def _new(kind: str, name: str, where: Optional[Path]) -> None:
    from .scaffold import new_package

    folder = new_package(kind, name, Path(where) if where is not None else Path.cwd())
    console.print(f"wrote {kind} plug-in {name!r} in {escape(str(folder))}; next:", highlight=False)
    console.print(f"  pip install -e {escape(str(folder))}", highlight=False)
    console.print(f"  rmconsole run --set {kind}={name}" if kind != "metric" else "  rmconsole runs", highlight=False)


@new_app.command("method")
def new_method(name: str = typer.Argument(..., metavar="NAME", help=NEW_NAME),
               where: Optional[Path] = NEW_DIR) -> None:
    """A method: its parameters, a Method subclass with its hooks documented, a preset, tests."""
    _new("method", name, where)


@new_app.command("dataset")
def new_dataset(name: str = typer.Argument(..., metavar="NAME", help=NEW_NAME),
                where: Optional[Path] = NEW_DIR) -> None:
    """A dataset: its declaration (classes, shapes, how to load it), a preset, tests."""
    _new("dataset", name, where)


@new_app.command("metric")
def new_metric(name: str = typer.Argument(..., metavar="NAME", help=NEW_NAME),
               where: Optional[Path] = NEW_DIR) -> None:
    """A metric: its catalogue row (label, unit, better direction, how it is computed), tests."""
    _new("metric", name, where)


# --------------------------------------------------------------------------- identity, archive, rm, diff


@app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": False})
def tag(items: list[str] = typer.Argument(..., metavar="RUN... [+TAG|-TAG]...",
                                          help="Run ids (3 4, 3-9, last), then +TAG to add and -TAG to remove."),
        where_: Optional[str] = typer.Option(None, "--where", help="Also the runs that pass this run filter.")) -> None:
    """Add (+t) and remove (-t) tags: `rmconsole tag 3 4 +baseline -draft`."""
    add = [i[1:] for i in items if i.startswith("+")]
    remove = [i[1:] for i in items if i.startswith("-")]
    run_items = [i for i in items if not i.startswith(("+", "-"))]
    if not add and not remove:
        raise ConfigError("tag: say what to do with +TAG (add) or -TAG (remove), e.g. rmconsole tag 3 +baseline")
    runner.check_identity(None, add + remove)
    ids = _chosen_runs(run_items, where_)
    store.tag_runs(ids, add, remove)
    for record in store.run_records(ids, i_last=False):
        console.print(f"run {record.id}: {' '.join('#' + t for t in record.tags) or 'no tags'}", highlight=False)


@app.command()
def note(run: str = typer.Argument(..., metavar="RUN", help="Run id or 'last'."),
         text: str = typer.Argument(..., help="The note (\"\" clears it).")) -> None:
    """Write a note on a run (shown by `show`, searched by the run filter's words)."""
    run_id = _run_id(run)
    if not text.isprintable():
        raise ConfigError("note: give one line of printable text")
    store.set_note([run_id], text.strip() or None)
    console.print(f"run {run_id}: " + (f"note “{escape(text.strip())}”" if text.strip() else "note cleared"),
                  highlight=False)


@app.command()
def rename(run: str = typer.Argument(..., metavar="RUN", help="Run id or 'last'."),
           name: str = typer.Argument(..., help="The new name (\"\" clears it).")) -> None:
    """Give a run a name (as `run --name`)."""
    run_id = _run_id(run)
    if name.strip():
        runner.check_identity(name.strip(), None)
    store.set_name([run_id], name.strip() or None)
    console.print(f"run {run_id}: " + (f"name “{escape(name.strip())}”" if name.strip() else "name cleared"),
                  highlight=False)


@app.command()
def archive(items: Optional[list[str]] = typer.Argument(None, metavar="RUN...", help="Run ids (3 4, 3-9, last)."),
            where_: Optional[str] = typer.Option(None, "--where", help="The runs that pass this run filter."),
            undo: bool = typer.Option(False, "--undo", help="Bring archived runs back.")) -> None:
    """Hide runs from `runs`, `report` and the TUI (`--all` / archived:true show them); nothing is deleted."""
    ids = _chosen_runs(list(items or []), where_)
    changed = store.set_archived(ids, not undo)
    verb = "restored" if undo else "archived"
    console.print(f"{verb} {len(changed)} run(s)" + (f": {', '.join(map(str, changed))}" if changed else "") +
                  (f" ({len(ids) - len(changed)} already {verb})" if len(changed) < len(ids) else ""), highlight=False)


@app.command("rm")
def remove(items: list[str] = typer.Argument(..., metavar="RUN...", help="Run ids (3 4, 3-9, last)."),
           yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask (for scripts).")) -> None:
    """Delete runs for good: their rows, metrics, log and checkpoint. A queued or running run is
    refused (stop it first); `archive` hides a run without deleting it."""
    ids = _chosen_runs(items)
    records = store.run_records(ids, i_last=False)
    active = [r for r in records if r.active]
    if active:
        raise ConfigError(f"run {active[0].id} is {active[0].status}: stop it first (rmconsole stop {active[0].id}); "
                          f"nothing was deleted")
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigError("rm deletes runs for good: confirm with --yes (no terminal to ask on)")
        headline = mark_carrier(metric_registry.columns())  # (A_last: the runs table's @k/T column)
        for r in records:
            console.print(f"  run {r.id} {r.status} {escape(r.label)} {r.method} seed {r.seed}"
                          + (f" {headline.name} {r.metric_text(headline.name)}" if headline else ""), highlight=False)
        if not typer.confirm(f"Delete {len(records)} run(s) with their rows, logs and checkpoints?", default=False):
            err_console.print("nothing deleted")
            raise typer.Exit(1)
    for r in records:
        runner.delete_run(r.id)
        console.print(f"deleted run {r.id}", highlight=False)


@app.command()
def diff(a: str = typer.Argument(..., metavar="RUN_A", help="Run id or 'last'."),
         b: str = typer.Argument(..., metavar="RUN_B", help="Run id or 'last'."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """What differs between two runs: the config keys (values as --set writes them), then the
    metrics (B − A) and the accuracy after each task."""
    from .report import run_diff

    first, second = store.run_detail(_run_id(a)), store.run_detail(_run_id(b))
    result = run_diff(first, second)
    if as_json:
        print(json.dumps(result, indent=2))
        return
    table = Table(box=None, padding=(0, 1), header_style="bold")
    table.add_column("key", style="cyan", no_wrap=True)
    table.add_column(f"run {first['id']}", overflow="fold")
    table.add_column(f"run {second['id']}", overflow="fold")
    table.add_column("B − A", justify="right", no_wrap=True)
    for key, va, vb in result["identity"]:
        table.add_row(key, escape(va), escape(vb), "")
    if result["identity"]:
        table.add_section()
    for key, va, vb in result["config"]:
        table.add_row(key, escape(va), escape(vb), "")
    if not result["config"]:
        table.add_row("[dim]config[/]", "[dim]same[/]", "[dim]same[/]", "")
    table.add_section()
    for key, va, vb, delta in result["metrics"]:
        table.add_row(key, va, vb, delta)
    table.add_section()
    for key, va, vb, delta in result["tasks"]:
        table.add_row(key, va, vb, delta)
    console.print(table)
    for note_ in result["notes"]:
        console.print(f"[dim]{escape(note_)}[/]", highlight=False)


@app.command("config-keys")
def config_keys(markdown: bool = typer.Option(False, "--markdown",
                                              help="Print docs/configuration.md: the same table in markdown.")) -> None:
    """Every config key: type, default, allowed values, help, and the methods that read it."""
    from .config import configuration_page, key_table
    from .methods import method_specs

    if markdown:  # the page documents rmconsole's own keys: no installed plug-in's
        print(configuration_page(), end="")
        return
    for problem in method_specs()[1]:  # a plug-in that cannot be used: named, the rest listed
        err_console.print(f"warning: {problem}", highlight=False, soft_wrap=True)
    table = Table()
    for col in ("key", "type", "default", "allowed", "help", "methods"):
        table.add_column(col)
    for row in key_table():
        table.add_row(row.key, row.type, row.default, row.allowed, row.help, row.methods)
    console.print(table)


# --------------------------------------------------------------------------- report


def _listed(option: str, text: Optional[str]) -> Optional[list[str]]:
    if text is None:
        return None
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise ConfigError(f"{option} {text!r}: expected one or more comma-separated values")
    return values


def _run_id_ranges(text: str) -> list[tuple[int, int]]:
    """`3,4,7` or `3-9` (or both) -> [(3, 3), (4, 4), (7, 7)] / [(3, 9)]: ranges stay ranges, so
    `1-99999999999` costs nothing."""
    ranges = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ConfigError(f"--runs {shorten(text)!r}: expected run ids like 3,4,7 or 3-9")
        low, high = int(first), int(last) if dash else int(first)
        if low > high:
            raise ConfigError(f"--runs {shorten(text)!r}: {low}-{high} is empty (the first id is larger than the last)")
        if high > MAX_INT:
            raise ConfigError(f"--runs {shorten(text)!r}: run ids go up to {MAX_INT}")
        ranges.append((low, high))
    return ranges


def select_runs(sweep_: Optional[str] = None, preset: Optional[str] = None, dataset: Optional[str] = None,
                method: Optional[str] = None, status: Optional[str] = None, run_ids: Optional[str] = None,
                where_: Optional[list[str]] = None, filters: Optional[list[str]] = None,
                archived: bool = False) -> list[store.RunRecord]:
    """The stored runs that pass every option and filter term (comma-separated values mean any of them)."""
    statuses = _listed("--status", status)
    for value in statuses or []:
        if value not in store.STATUSES:
            raise ConfigError(f"--status {shorten(value)!r}: allowed: {', '.join(store.STATUSES)}")
    run_filter = store.parse_run_filter(filters)
    listed = {"status": statuses, "preset": _listed("--preset", preset), "dataset": _listed("--dataset", dataset),
              "method": _listed("--method", method)}
    for key, values in listed.items():
        if values is not None:
            run_filter &= where(key, values)
    if run_ids is not None:
        run_filter &= within("id", _run_id_ranges(run_ids))
    for pair in where_ or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--where {shorten(pair)!r}: expected KEY=VALUE or KEY=V1,V2")
        run_filter &= where(key.strip(), runner.split_values(raw.strip()))
    reap_quietly()
    if sweep_:
        run_filter &= where("sweep", [runner.resolve_sweep_id(sweep_)])
    return store.find_runs(run_filter, archived=True if archived or run_ids is not None else None)


@app.command()
def report(
    filters: Optional[list[str]] = typer.Argument(None, metavar="FILTER",
                                                 help="Run filter terms, as for `rmconsole runs`: method:rm,ewc 'A_last>85'."),
    sweep_: Optional[str] = typer.Option(None, "--sweep", help="Only this sweep (an id, or 'last')."),
    preset: Optional[str] = typer.Option(None, "--preset", help="Only these presets (comma-separated)."),
    dataset: Optional[str] = typer.Option(None, "--dataset", help="Only these datasets (comma-separated)."),
    method: Optional[str] = typer.Option(None, "--method", help="Only these methods (comma-separated)."),
    status: Optional[str] = typer.Option(None, "--status", help="Only these statuses (comma-separated)."),
    run_ids: Optional[str] = typer.Option(None, "--runs", help="Only these run ids: 3,4,7 or 3-9."),
    where_: list[str] = typer.Option([], "--where", help="Only runs with KEY=V1,V2 in their config (repeatable)."),
    rows: Optional[str] = typer.Option(None, "--rows", help="Keys that make a row (default: method)."),
    cols: Optional[str] = typer.Option(None, "--cols", help="Keys that make a column group, e.g. memory_size."),
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Comma-separated, of the metric catalogue: "
                                                                     f"{', '.join(metric_registry.metric_names())}."),
    paper: bool = typer.Option(False, "--paper", help="Put the paper's figure and the difference beside each "
                                                      "matching cell (same dataset, method, K, setting, augmentation)."),
    only_changed: bool = typer.Option(True, "--only-changed/--all-config",
                                      help="Config columns: only the keys that differ between runs, or every key."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | md | csv | latex | json"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the table to FILE instead of stdout."),
    digits: int = typer.Option(2, "--digits", help="Decimals in table, md and latex cells."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw accuracy after each task per row (PNG); "
                                                            "task-free runs: accuracy against samples seen."),
    memory_plot: Optional[Path] = typer.Option(None, "--memory-plot",
                                               help="Draw one run's memory class histogram per task (PNG)."),
    plot_epochs: Optional[Path] = typer.Option(None, "--plot-epochs",
                                               help="Draw the training loss and learning rate of every epoch of the "
                                                    "selected runs (PNG)."),
    all_: bool = typer.Option(False, "--all", "-a", help="Archived runs too."),
) -> None:
    """Tables of stored runs: cells are mean ± std over seeds; also the paper's figures as PNG."""
    if fmt not in reports.FORMATS:
        raise ConfigError(f"--format {shorten(fmt)!r}: allowed: {', '.join(reports.FORMATS)}")
    if fmt == "table" and out is not None:
        raise ConfigError("--out writes a file: choose --format md, csv, latex or json")
    if not 0 <= digits <= 6:
        raise ConfigError(f"--digits {digits}: allowed: 0 to 6")
    for option, path in (("--plot", plot), ("--memory-plot", memory_plot), ("--plot-epochs", plot_epochs)):
        if path is not None and path.suffix.lower() not in (".png", ".pdf", ".svg"):
            raise ConfigError(f"{option} {shorten(str(path))!r}: the file must end in .png (or .pdf, .svg)")
    for option, path in (("--out", out), ("--plot", plot), ("--memory-plot", memory_plot), ("--plot-epochs", plot_epochs)):
        if path is not None:
            reports.check_output(path, option)  # a folder, an unwritable place: refused before any work
    runs = select_runs(sweep_, preset, dataset, method, status, run_ids, where_, filters, all_)
    if not runs:
        raise ConfigError(f"no runs match the filters ({store.count_runs()} runs are stored; see `rmconsole runs`)")
    if memory_plot is not None and len(runs) != 1:
        raise ConfigError(f"--memory-plot draws one run, but {len(runs)} match: choose it with --runs ID")
    summaries = [r.to_json() for r in runs]
    table = reports.build_report(summaries, rows=_listed("--rows", rows), cols=_listed("--cols", cols) or (),
                                 metrics=_listed("--metrics", metrics), only_changed=only_changed, paper=paper)
    if fmt == "table":
        console.print(reports.rich_table(table, digits))
    else:
        text = clean_block(reports.render(table, fmt, digits))  # a name with ESC sequences is shown, not obeyed
        if out is None:
            sys.stdout.write(text)
        else:
            err_console.print(f"wrote {reports.write_output(out, text.encode(), '--out')}", highlight=False)
    if plot is not None:
        used = {run_id for cell in table.cells.values() for run_id in cell.used}
        if anytime_report.has_anytime(summaries):  # the follow-up's figure: accuracy against samples seen
            drawn = anytime_report.plot_anytime(table, store.anytime_curves(used), plot)
        else:
            drawn = reports.plot_accuracy(table, {run_id: store.run_detail(run_id) for run_id in used}, plot)
        err_console.print(f"wrote {drawn}", highlight=False)
    if memory_plot is not None:
        err_console.print(f"wrote {reports.plot_memory(store.run_detail(runs[0].id), memory_plot)}", highlight=False)
    if plot_epochs is not None:
        details = {r.id: store.run_detail(r.id) for r in runs[:24]}
        if len(runs) > 24:
            err_console.print(f"--plot-epochs: drawing the first 24 of {len(runs)} runs", highlight=False)
        err_console.print(f"wrote {reports.plot_epochs(details, plot_epochs)}", highlight=False)


# --------------------------------------------------------------------------- export


@app.command()
def export(items: Optional[list[str]] = typer.Argument(None, metavar="RUN... DIR",
                                                     help="Run ids (3 4, 3-9, last), then the folder (or --dir)."),
           to: str = typer.Option(..., "--to", help="mlflow | tensorboard"),
           sweep_: Optional[str] = typer.Option(None, "--sweep", help="Every run of this sweep (an id or 'last')."),
           experiment: str = typer.Option("rmconsole", "--experiment", help="MLflow experiment name."),
           dir_: Optional[str] = typer.Option(None, "--dir", "-o",
                                              help="Where: a folder (MLflow file store, TensorBoard log dir) or, "
                                                   "for MLflow, a tracking URI.")) -> None:
    """Write runs into an MLflow tracking store or TensorBoard event files: config as params,
    per-task and per-epoch metrics, memory histograms (`pip install 'rmconsole[mlflow]'` /
    `'rmconsole[tensorboard]'`). `rmconsole export 3 4 --to mlflow ./mlruns`."""
    from . import export as exporter

    if to not in exporter.TARGETS:
        raise ConfigError(f"--to {to!r}: allowed: {', '.join(exporter.TARGETS)}")
    names = list(items or [])
    target = dir_
    if target is None and names and not names[-1].replace("-", "").replace(",", "").isdigit() \
            and names[-1] != "last":  # the last word is the folder (`export 3 4 --to mlflow DIR`)
        target = names.pop()
    if not target:
        raise ConfigError("export: say where: rmconsole export RUN... --to mlflow DIR (or --to tensorboard DIR)")
    ids = [r.id for r in store.find_runs(where("sweep", [runner.resolve_sweep_id(sweep_)]), archived=True)] \
        if sweep_ else []
    ids += _chosen_runs(names) if names else []
    if not ids:
        raise ConfigError("export: give the runs (ids, 3-9, last) or --sweep ID|last")
    if to != "mlflow" or "://" not in target:  # a folder: never a file, nor rmconsole's own folders
        from .outputs import check_folder

        check_folder(target, "export")
    details = [store.run_detail(i) for i in dict.fromkeys(ids)]
    try:
        if to == "mlflow":
            written = exporter.to_mlflow(details, target, experiment)
            console.print(f"exported {len(written)} run(s) to MLflow at {target} (experiment {experiment!r}); "
                          f"see them with: mlflow ui --backend-store-uri {target}", highlight=False)
        else:
            folders = exporter.to_tensorboard(details, target)
            console.print(f"exported {len(folders)} run(s) to {target}; see them with: tensorboard --logdir {target}",
                          highlight=False)
    except exporter.ExportError as err:
        raise ConfigError(str(err)) from None


# --------------------------------------------------------------------------- stop / resume


@app.command(context_settings=RUN_ID)
def stop(run: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id, or 'last'."),
         sweep_: Optional[str] = typer.Option(None, "--sweep", help="Stop a whole sweep: its id, or 'last'."),
         grace: float = typer.Option(10.0, "--grace", help="Seconds between SIGTERM and SIGKILL.")) -> None:
    """Stop a running run (SIGTERM to its process group, then SIGKILL), or with --sweep every run of
    a sweep (queued ones included); finished tasks stay stored and `resume` continues them."""
    if not (math.isfinite(grace) and 0 <= grace <= 3600):
        raise ConfigError(f"--grace {grace}: seconds from 0 to 3600")
    if (run is None) == (sweep_ is None):
        raise ConfigError("stop: give a run id, or --sweep with a sweep id or last (one of them)")
    if sweep_ is not None:
        sweep_id = runner.resolve_sweep_id(sweep_)
        counts = runner.stop_sweep(sweep_id, grace)
        console.print(f"sweep {sweep_id}: " + ", ".join(f"{v} {k}" for k, v in counts.items()), highlight=False)
        return
    run_id = _run_id(run)  # type: ignore[arg-type]
    console.print(f"run {run_id} {runner.stop_run(run_id, grace)}")


@app.command(context_settings=RUN_ID)
def resume(run: str = typer.Argument(..., metavar="RUN", help="Run id, or 'last'."),
           detach: bool = typer.Option(False, "--detach", "-d", help="Return at once."),
           nnodes: int = typer.Option(1, "--nnodes", help="Nodes, for a multi-node run (as for `run`)."),
           node_rank: Optional[int] = typer.Option(None, "--node-rank", help="This node's rank (0)."),
           master_addr: Optional[str] = typer.Option(None, "--master-addr", help="This node's address for the others."),
           master_port: Optional[int] = typer.Option(None, "--master-port", help="Rendezvous port."),
           rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of a c10d rendezvous."),
           rdzv_id: Optional[str] = typer.Option(None, "--rdzv-id", help="Job id of a c10d rendezvous."),
           executor: Optional[str] = typer.Option(None, "--executor", help="Resume elsewhere: local, slurm or "
                                                  "submitit-local (default: where it ran; a Slurm run is resubmitted)."),
           slurm: list[str] = typer.Option([], "--slurm", help="Job options with --executor slurm (as for `run`).")) -> None:
    """Continue a failed or stopped run from its last finished task."""
    run_id = _run_id(run)
    check_count("--nnodes", nnodes, 1, MAX_SLOTS)
    check_count("--node-rank", node_rank, 0, MAX_SLOTS)
    check_count("--master-port", master_port, 1, 65535)
    rendezvous = runner.Rendezvous(nnodes, node_rank, master_addr, master_port, rdzv_endpoint, rdzv_id).check()
    spec = runner.parse_executor(executor, slurm) if executor is not None or slurm else runner.KEEP
    resumed = runner.resume_run(run_id, rendezvous, spec)  # shared with the TUI
    where = f" as job {resumed.job_id}" if resumed.job_id is not None else ""
    if detach:
        if where:
            err_console.print(f"run {run_id}: resubmitted{where}", highlight=False)
        console.print(run_id)
        return
    console.print(f"run {run_id}: resuming at task {resumed.first_task + 1}/{resumed.n_tasks or '?'}{where}"
                  + ("" if resumed.from_checkpoint else " (no checkpoint: no task had finished)"))
    status = follow(run_id, resumed.process)
    print_run(run_id)
    raise typer.Exit(0 if status == "finished" else 1)


@app.command(context_settings=RUN_ID)
def join(run_id: int = typer.Argument(..., metavar="RUN_ID", help="The run started on node 0 with `rmconsole run --nnodes N`."),
         gpus: int = typer.Option(..., "--gpus", help="Ranks (GPUs) on this node; the same as node 0's."),
         nnodes: int = typer.Option(..., "--nnodes", help="Nodes in the run."),
         node_rank: Optional[int] = typer.Option(None, "--node-rank", help="This node's rank, 1 to nnodes-1."),
         master_addr: Optional[str] = typer.Option(None, "--master-addr", help="Node 0's address."),
         master_port: Optional[int] = typer.Option(None, "--master-port", help="Node 0's port."),
         rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of a c10d rendezvous."),
         rdzv_id: Optional[str] = typer.Option(None, "--rdzv-id", help="Job id of a c10d rendezvous."),
         device: str = typer.Option("auto", "--device", help="auto or cpu (as the run's device).")) -> None:
    """Start this node's ranks of a multi-node run (foreground). The ranks here get the run's
    config from rank 0 and never write the store; they need the dataset under RMCONSOLE_DATA."""
    check_run_id(run_id)
    check_count("--gpus", gpus, 1, MAX_SLOTS)
    check_count("--nnodes", nnodes, 1, MAX_SLOTS)
    check_count("--node-rank", node_rank, 0, MAX_SLOTS)
    check_count("--master-port", master_port, 1, 65535)
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"--device {device!r}: allowed: auto, cuda, cpu")
    rendezvous = runner.Rendezvous(nnodes, node_rank, master_addr, master_port, rdzv_endpoint, rdzv_id).check(joining=True)
    raise typer.Exit(runner.join_run(run_id, gpus, rendezvous, device))


# --------------------------------------------------------------------------- tui


MIN_REFRESH_S = 0.1


@app.command()
def tui(refresh: float = typer.Option(1.0, "--refresh", help="Seconds between store reads."),
        serve: bool = typer.Option(False, "--serve", help="Serve the same TUI to a web browser (textual-serve)."),
        host: str = typer.Option("127.0.0.1", "--host", help="With --serve: the address to listen on "
                                                             "(default: this machine only)."),
        port: int = typer.Option(8000, "--port", help="With --serve: the port.")) -> None:
    """Open the terminal UI: runs live, one run's stream/memory/accuracy/epochs/log, compare, launch,
    stop, resume. With --serve, the same app in a browser (each browser tab runs its own copy)."""
    if not (refresh > 0 and math.isfinite(refresh)):
        raise ConfigError(f"--refresh {refresh}: must be a number of seconds above 0")
    if refresh < MIN_REFRESH_S:  # a store read per 0.1 ms burns a core and shows nothing faster
        err_console.print(f"--refresh {refresh:g}: reading the store that often only costs CPU; using "
                          f"{MIN_REFRESH_S:g} s", highlight=False)
        refresh = MIN_REFRESH_S
    store.get_engine()  # an unusable store is a one-line error here, not a screen of them
    if serve:
        serve_tui(refresh, host, port)
        return
    with long_lived_imports():
        from .tui import RMConsoleApp
    RMConsoleApp(refresh_s=refresh).run()


def serve_tui(refresh: float, host: str, port: int) -> None:
    """`tui --serve`: textual-serve runs `rmconsole tui` (this very command, without --serve) for
    each browser connection and streams it over a websocket: one code path, not a second UI.
    Every request needs the token printed here (serving.py), and a browser's must come from
    the served page (its Origin)."""
    import shlex
    import socket as socket_

    try:
        import textual_serve.server  # noqa: F401
    except ImportError:
        raise ConfigError("--serve needs textual-serve: pip install 'rmconsole[serve]'") from None
    if not 0 < port < 65536:
        raise ConfigError(f"--port {port}: allowed: 1 to 65535")
    try:  # a taken port or an unknown host is one line here, not an aiohttp traceback
        with socket_.socket(socket_.AF_INET6 if ":" in host else socket_.AF_INET) as probe:
            probe.setsockopt(socket_.SOL_SOCKET, socket_.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as err:
        raise ConfigError(f"--host {host} --port {port}: cannot listen there ({err.strerror})") from None
    from .serving import guarded_server, new_token

    command = shlex.join([sys.executable, "-m", "rmconsole", "tui", "--refresh", f"{refresh:g}"])
    shown = f"[{host}]" if ":" in host else host
    token = new_token()  # printed here once; never in an argv, an environment or an error message
    url = f"http://{shown}:{port}/?token={token}"
    console.print(f"serving the rmconsole TUI at {url} (store {store.shown_url(store.database_url())}); "
                  f"open that URL (the token is new at each start); Ctrl-C stops", highlight=False, soft_wrap=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(f"[yellow]note:[/] listening on {host}: anyone who can reach it and has the token can launch "
                          f"and stop runs, and the token crosses the network in clear; prefer the default 127.0.0.1 "
                          f"and an SSH tunnel (ssh -L {port}:127.0.0.1:{port} HOST)", highlight=False)
    guarded_server(command, host, port, token).serve()


# --------------------------------------------------------------------------- data


data_app = typer.Typer(help="Datasets: the built-ins, installed plug-ins, ImageFolder trees (folder:PATH), "
                            "under RMCONSOLE_DATA.", no_args_is_help=True)
app.add_typer(data_app, name="data")


def _data_get_help() -> str:
    from . import datasets

    return f"A downloadable dataset: {' | '.join(datasets.downloadable())} (or an installed plug-in's)."


@data_app.command("get")
def data_get(name: str = typer.Argument(..., help=_data_get_help())) -> None:
    """Download a dataset into the data root (needs internet); `rmconsole data list` shows them all."""
    from . import datasets
    from .cl.data import data_root, load_dataset

    try:
        spec = datasets.get(name)
    except datasets.UnknownDataset:
        raise ConfigError(f"data get {name!r}: downloadable: {', '.join(datasets.downloadable())}; registered "
                          f"datasets: {datasets.listing()}") from None
    if not spec.downloadable:
        raise ConfigError(f"data get {name!r}: not downloadable ({spec.get_hint()}); downloadable: "
                          f"{', '.join(datasets.downloadable())}")
    data = load_dataset(name, download=True)
    console.print(f"{name}: {len(data.train)} train / {len(data.test)} test images under {data_root()}")


@data_app.command("list")
def data_list() -> None:
    """The registered datasets: name, classes, where they come from (plug-ins are imported to describe them)."""
    from . import datasets, plugins

    table = Table("dataset", "classes", "source", "description", box=None)
    for name in datasets.names():
        try:
            spec = datasets.get(name)
        except ValueError as err:  # a broken plug-in is one row, the others are listed
            table.add_row(name, "?", "plug-in", f"[red]{escape(str(err))}[/]")
            continue
        try:
            classes = str(spec.classes()) + ("" if spec.folder is None or spec.class_folders() else " (tree absent)")
        except DatasetMissing:
            classes = "? (tree absent)"
        plugin = plugins.available("dataset").get(name)
        source = f"plug-in {plugin.package} {plugin.version}" if plugin and name not in datasets.builtin_names() \
            else "built-in"
        table.add_row(name, classes, source, escape(spec.description))
    console.print(table)
    console.print("Any ImageFolder tree: dataset = \"folder:PATH\" (train/ and val/, one folder per class; "
                  "class_orders.toml for class_order=paper).", highlight=False)


def _error(message: str, code: int = 2) -> None:
    """One line on stderr, whatever the message holds (markup is not interpreted, long values cut)."""
    text = " ".join(str(message).split())
    if len(text) > 2000:
        text = f"{text[:1400]} … {text[-500:]}"
    err_console.print(f"[red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
    sys.exit(code)


def main() -> None:
    """The console script: every failure is one line on stderr (a usage error, bad input, an OS
    error, even a bug) and a non-zero exit code; `--debug` shows tracebacks instead."""
    try:
        code = app(standalone_mode=False, prog_name="rmconsole")
    except typer.TyperException as err:  # Click's usage errors and aborts
        if _debug:
            raise
        if type(err).__name__ == "NoArgsIsHelpError":  # `rmconsole` alone: the help was shown
            sys.exit(2)
        if type(err).__name__ == "Abort":
            sys.exit(1)
        ctx = getattr(err, "ctx", None)
        where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        message = err.format_message() if hasattr(err, "format_message") else str(err)
        _error(f"{message}{where}", int(getattr(err, "exit_code", 2) or 2))
    except USER_ERRORS as err:
        if _debug:
            raise
        _error(str(err))
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as err:
        if err.errno == errno.EPIPE:  # `rmconsole runs | head`: the reader has gone
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except OSError:
                pass
            sys.exit(1)
        if _debug:
            raise
        _error(runner.describe_os_error(err))
    except Exception as err:  # noqa: BLE001 - a bug is one line too; --debug shows where
        if _debug:
            raise
        _error(f"internal error: {type(err).__name__}: {shorten(str(err), 300)} (run again with "
               f"`rmconsole --debug ...` for the traceback, and please report it)", 1)
    sys.exit(code if isinstance(code, int) else 0)


from .cli_tune import tune as _tune  # noqa: E402

app.command("tune")(_tune)

if __name__ == "__main__":
    main()
