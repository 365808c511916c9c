"""The `rmconsole` command line: a thin Typer face over config, store and runner."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table

from . import report as reports, report_anytime as anytime_report, runner, store
from .cl.catalog import DatasetMissing
from .store.filters import where
from .config import ConfigError, preset_description, preset_names, read_preset

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="A terminal experiment console for continual learning around Rainbow Memory.")
console = Console()
err_console = Console(stderr=True)
USER_ERRORS = (ConfigError, store.StoreError, store.UnknownRun, DatasetMissing, ValueError)
_debug = False


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")) -> None:
    global _debug
    _debug = debug


def _fmt(value: Optional[float], digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


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
) -> None:
    """Train one run, or a sweep: comma-separated --set values and --seeds make a grid of runs."""
    rendezvous = runner.Rendezvous(nnodes, node_rank, master_addr, master_port, rdzv_endpoint, rdzv_id).check()
    if gpus is not None and gpus < 1:
        raise ConfigError(f"--gpus {gpus}: must be at least 1")
    if runner.is_sweep(list(set_), seeds):
        if (gpus or 1) > 1 or rendezvous.multi_node:
            raise ConfigError("--gpus/--nnodes apply to a single run: a sweep runs one GPU per run "
                              "(--parallel slots); start multi-GPU runs one at a time")
        run_sweep(preset, list(set_), seed, seeds, device, detach, parallel)
        return
    launched = runner.launch_run(preset, list(set_), seed=seed, device=device, gpus=gpus,  # shared with the TUI
                                 rendezvous=rendezvous)
    run_id, name, cfg, proc = launched.run_id, launched.preset, launched.config, launched.process
    if detach:
        console.print(run_id)
        return
    console.print(f"run [bold]{run_id}[/] ({name}): {cfg.method} on {cfg.dataset}, K={cfg.memory_size}, "
                  f"{cfg.n_tasks} tasks, blurry{cfg.blurry} {cfg.stream}, seed {cfg.seed}; log {runner.log_path(run_id)}")
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
              device: Optional[str], detach: bool, parallel: Optional[int]) -> None:
    """Validate every grid point, store the grid as queued runs, then drive the queue here (showing
    progress) or, with --detach, in a queue runner process that outlives this command."""
    launched = runner.launch_sweep(preset, pairs, seeds=seeds, seed=seed, device=device, parallel=parallel,
                                   detach=detach)
    sweep_id, ids, plan, slots, gpus = launched.sweep_id, launched.run_ids, launched.plan, launched.parallel, launched.gpus
    line = (f"sweep {sweep_id} ({plan.preset}): {len(ids)} runs ({plan.shape()}), ids {ids[0]}-{ids[-1]}, "
            f"{slots} slot(s) on {'GPUs ' + ','.join(gpus) if gpus else 'CPU'}")
    if launched.queue_runner is not None:
        err_console.print(f"{line}; queue runner pid {launched.queue_runner.pid}, log {launched.log_path}",
                          highlight=False, soft_wrap=True)
        console.print(sweep_id, highlight=False)
        return
    console.print(line, highlight=False)
    with runner.DriverLock(sweep_id):
        counts = follow_sweep(sweep_id, runner.SweepQueue(sweep_id, slots, gpus=gpus), plan)
    summaries = [r.to_json() for r in store.find_runs(where("sweep", [sweep_id]))]
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


# --------------------------------------------------------------------------- show


def print_run(run_id: int) -> None:
    """The per-task table, the final memory and the summary metrics of one run."""
    detail = store.run_detail(run_id)
    tasks = detail["tasks"]
    table = Table(title=f"run {run_id} · {detail['preset'] or ''} · {detail['status']}", title_justify="left")
    table.add_column("task", justify="right")
    table.add_column("samples", justify="right")
    table.add_column("major classes")
    table.add_column("accuracy %", justify="right")
    for j in range(len(tasks)):
        table.add_column(f"T{j + 1} %", justify="right", style="dim")
    table.add_column("time s", justify="right")
    names = detail.get("class_names") or []
    order = detail.get("class_order") or []
    for t in tasks:
        majors = ", ".join(names[order[c]] if order and names else str(c) for c in t["major_classes"])
        row = t["accuracy_row"] or [None] * len(tasks)
        table.add_row(str(t["task"] + 1), f"{t['n_samples']:,}", majors, _fmt(t["accuracy"]),
                      *[_fmt(v, 1) for v in row], _fmt(t["seconds"], 1))
    console.print(table)
    if detail["memory"]:
        last = detail["memory"][-1]
        console.print(f"memory after task {last['task'] + 1}: {last['size']} samples, "
                      f"{last['slots_per_class']} slots/class, per class {last['histogram']}")
    m = detail["metrics"]
    if m["I_last"] is not None:
        i_last = f"{_fmt(m['I_last'])} (vs joint run {m.get('I_last_joint_run')})"
    else:
        i_last = "— (a joint run is the upper bound itself)" if detail["method"] == "joint" else "— (no matching joint run)"
    line = (f"A_last {_fmt(m['A_last'])}  A_avg {_fmt(m['A_avg'])}  F_last {_fmt(m['F_last'])}  "
            f"I_last {i_last}")
    if m.get("A_last_best_epoch") is not None:
        line += f"  [dim]A_last best-over-epochs (test-set selected, authors' figure) {_fmt(m['A_last_best_epoch'])}[/]"
    console.print(line)
    for extra in anytime_report.anytime_lines(detail):  # task-free runs: A_auc, first appearances, compute
        console.print(extra, highlight=False)
    if detail["error"]:
        err_console.print(f"[red]{detail['status']}:[/] {escape(detail['error'])}")


@app.command()
def show(run_id: int = typer.Argument(..., help="Run id."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """One run: config, per-task accuracy, memory histograms, metrics."""
    runner.reap_dead([store.get_run(run_id)])
    if as_json:
        print(json.dumps(store.run_detail(run_id), indent=2))
        return
    print_run(run_id)


@app.command()
def runs(filters: Optional[list[str]] = typer.Argument(None, metavar="FILTER",
                                                      help="Run filter terms, all of which must hold: "
                                                           "method:rm,ewc k:500 status:finished 'A_last>85' or words."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON."),
         status: Optional[str] = typer.Option(None, "--status", help="Only runs with this status."),
         limit: int = typer.Option(50, "--limit", help="Show the newest N runs (0 = all)."),
         sweep_: Optional[str] = typer.Option(None, "--sweep", help="Only the runs of this sweep (an id or 'last').")) -> None:
    """All runs, newest last, and the queue of every sweep shown. A filter term is KEY:V1,V2 (any of
    them), KEY>N (also >= < <= = !=) or a word; KEY is a run column, a metric or a config key."""
    if status is not None and status not in store.STATUSES:
        raise ConfigError(f"--status {status!r}: allowed: {', '.join(store.STATUSES)}")
    run_filter = store.parse_run_filter(filters)
    if status is not None:
        run_filter &= where("status", [status])
    runner.reap_dead()
    if sweep_:
        run_filter &= where("sweep", [runner.resolve_sweep_id(sweep_)])
    records = store.find_runs(run_filter)
    if limit:
        records = records[-limit:]
    summaries = [r.to_json() for r in records]
    if as_json:
        print(json.dumps(summaries, indent=2))
        return
    table = Table()
    anytime = any(s["metrics"].get("A_auc") is not None for s in summaries)  # task-free runs listed: their A_auc too
    for col, just in (("id", "right"), ("status", "left"), ("preset", "left"), ("method", "left"), ("K", "right"),
                      ("seed", "right"), ("progress", "left"), *([("A_auc", "right")] if anytime else []),
                      ("A_last", "right"), ("F_last", "right"), ("I_last", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    colours = {"finished": "green", "running": "cyan", "queued": "yellow", "failed": "red", "stopped": "magenta"}
    for s in summaries:
        p = s["progress"]
        prog = f"task {p['task'] + 1}/{p['n_tasks']} {p['phase'] or ''}" if p["task"] is not None else ""
        m = s["metrics"]
        table.add_row(str(s["id"]), f"[{colours[s['status']]}]{s['status']}[/]", s["preset"] or "", s["method"],
                      str(s["config"]["memory_size"]), str(s["seed"]), prog if s["status"] == "running" else "",
                      *([_fmt(m.get("A_auc"))] if anytime else []), _fmt(m["A_last"]), _fmt(m["F_last"]),
                      _fmt(m["I_last"]))
    console.print(table)
    print_sweep_queues([s["sweep_id"] for s in summaries if s["sweep_id"]])


def print_sweep_queues(sweep_ids: list[str]) -> None:
    """One line per sweep: its runs per status and who drives its queue."""
    for sweep_id in dict.fromkeys(sweep_ids):
        members = store.list_runs(sweep_id=sweep_id)
        counts = runner.status_counts(members)
        done = sum(counts.get(k, 0) for k in ("finished", "failed", "stopped"))
        pid = runner.driver_pid(sweep_id)
        if pid:
            driver = f"; queue driven by pid {pid}"
        elif counts.get("queued"):
            driver = f"; no queue runner: continue with `python -m rmconsole.runner.queue {sweep_id}`"
        else:
            driver = ""
        console.print(f"sweep {sweep_id} ({members[0].preset}): {done}/{len(members)} done — " +
                      ", ".join(f"{v} {k}" for k, v in counts.items()) + driver, highlight=False)


@app.command()
def presets(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """The bundled presets."""
    items = []
    for name in preset_names():
        _, table = read_preset(name)
        items.append({"name": name, "description": preset_description(name), "config": table})
    if as_json:
        print(json.dumps(items, indent=2))
        return
    table = Table()
    for col in ("preset", "dataset", "model", "method", "K", "tasks", "setting", "description"):
        table.add_column(col)
    for item in items:
        c = item["config"]
        stream = c.get("stream", "online")
        setting = (f"{stream}{c.get('disjoint_classes', 50)}-{c.get('blurry', 10)} task-free"
                   if stream in ("iblurry", "siblurry") else f"blurry{c.get('blurry', 10)} {stream}")
        table.add_row(item["name"], c["dataset"], c["model"], c.get("method", "rm"), str(c["memory_size"]),
                      str(c.get("n_tasks", 5)), setting, item["description"])
    console.print(table)


@app.command("config-keys")
def config_keys(markdown: bool = typer.Option(False, "--markdown",
                                              help="Print docs/configuration.md: the same table in markdown.")) -> None:
    """Every config key: type, default, allowed values, help, and the methods that read it."""
    from .config import configuration_page, key_table

    if markdown:
        print(configuration_page(), end="")
        return
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


def _run_ids(text: str) -> set[int]:
    """`3,4,7` or `3-9` (or both) -> run ids."""
    ids: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise ConfigError(f"--runs {text!r}: expected run ids like 3,4,7 or 3-9")
        ids.update(range(int(first), int(last) + 1) if dash else [int(first)])
    return ids


def select_runs(sweep_: Optional[str] = None, preset: Optional[str] = None, dataset: Optional[str] = None,
                method: Optional[str] = None, status: Optional[str] = None, run_ids: Optional[str] = None,
                where_: Optional[list[str]] = None, filters: Optional[list[str]] = None) -> list[store.RunRecord]:
    """The stored runs that pass every option and filter term (comma-separated values mean any of them)."""
    statuses = _listed("--status", status)
    for value in statuses or []:
        if value not in store.STATUSES:
            raise ConfigError(f"--status {value!r}: allowed: {', '.join(store.STATUSES)}")
    run_filter = store.parse_run_filter(filters)
    listed = {"status": statuses, "preset": _listed("--preset", preset), "dataset": _listed("--dataset", dataset),
              "method": _listed("--method", method)}
    for key, values in listed.items():
        if values is not None:
            run_filter &= where(key, values)
    if run_ids is not None:
        run_filter &= where("id", [str(i) for i in sorted(_run_ids(run_ids))])
    for pair in where_ or []:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--where {pair!r}: expected KEY=VALUE or KEY=V1,V2")
        run_filter &= where(key.strip(), runner.split_values(raw.strip()))
    runner.reap_dead()
    if sweep_:
        run_filter &= where("sweep", [runner.resolve_sweep_id(sweep_)])
    return store.find_runs(run_filter)


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
    metrics: Optional[str] = typer.Option(None, "--metrics", help="Of A_last, A_avg, F_last, I_last, A_last_best_epoch, "
                                                                  "A_auc, train_samples_per_s, train_seconds, eval_seconds, "
                                                                  "wall_seconds."),
    only_changed: bool = typer.Option(True, "--only-changed/--all-config",
                                      help="Config columns: only the keys that differ between runs, or every key."),
    fmt: str = typer.Option("table", "--format", "-f", help="table | md | csv | latex | json"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the table to FILE instead of stdout."),
    digits: int = typer.Option(2, "--digits", help="Decimals in table, md and latex cells."),
    plot: Optional[Path] = typer.Option(None, "--plot", help="Also draw accuracy after each task per row (PNG); "
                                                            "task-free runs: accuracy against samples seen."),
    memory_plot: Optional[Path] = typer.Option(None, "--memory-plot",
                                               help="Draw one run's memory class histogram per task (PNG)."),
) -> None:
    """Tables of stored runs: cells are mean ± std over seeds; also the paper's figures as PNG."""
    if fmt not in reports.FORMATS:
        raise ConfigError(f"--format {fmt!r}: allowed: {', '.join(reports.FORMATS)}")
    if fmt == "table" and out is not None:
        raise ConfigError("--out writes a file: choose --format md, csv, latex or json")
    if not 0 <= digits <= 6:
        raise ConfigError(f"--digits {digits}: allowed: 0 to 6")
    for option, path in (("--plot", plot), ("--memory-plot", memory_plot)):
        if path is not None and path.suffix.lower() not in (".png", ".pdf", ".svg"):
            raise ConfigError(f"{option} {str(path)!r}: the file must end in .png (or .pdf, .svg)")
    runs = select_runs(sweep_, preset, dataset, method, status, run_ids, where_, filters)
    if not runs:
        raise ConfigError(f"no runs match the filters ({store.count_runs()} runs are stored; see `rmconsole runs`)")
    if memory_plot is not None and len(runs) != 1:
        raise ConfigError(f"--memory-plot draws one run, but {len(runs)} match: choose it with --runs ID")
    summaries = [r.to_json() for r in runs]
    table = reports.build_report(summaries, rows=_listed("--rows", rows), cols=_listed("--cols", cols) or (),
                                 metrics=_listed("--metrics", metrics), only_changed=only_changed)
    if fmt == "table":
        console.print(reports.rich_table(table, digits))
    else:
        text = reports.render(table, fmt, digits)
        if out is None:
            sys.stdout.write(text)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = out.with_name(f".{out.name}.tmp")
            tmp.write_text(text)
            tmp.replace(out)
            err_console.print(f"wrote {out}", highlight=False)
    if plot is not None:
        used = {run_id for cell in table.cells.values() for run_id in cell.used}
        if anytime_report.has_anytime(summaries):  # the follow-up's figure: accuracy against samples seen
            drawn = anytime_report.plot_anytime(table, store.anytime_curves(used), plot)
        else:
            drawn = reports.plot_accuracy(table, {run_id: store.run_detail(run_id) for run_id in used}, plot)
        err_console.print(f"wrote {drawn}", highlight=False)
    if memory_plot is not None:
        err_console.print(f"wrote {reports.plot_memory(store.run_detail(runs[0].id), memory_plot)}", highlight=False)


# --------------------------------------------------------------------------- stop / resume


@app.command()
def stop(run_id: int = typer.Argument(..., help="Run id."),
         grace: float = typer.Option(10.0, "--grace", help="Seconds between SIGTERM and SIGKILL.")) -> None:
    """Stop a running run (SIGTERM to its process group, then SIGKILL); finished tasks stay stored."""
    console.print(f"run {run_id} {runner.stop_run(run_id, grace)}")


@app.command()
def resume(run_id: int = typer.Argument(..., help="Run id."),
           detach: bool = typer.Option(False, "--detach", "-d", help="Return at once."),
           nnodes: int = typer.Option(1, "--nnodes", help="Nodes, for a multi-node run (as for `run`)."),
           node_rank: Optional[int] = typer.Option(None, "--node-rank", help="This node's rank (0)."),
           master_addr: Optional[str] = typer.Option(None, "--master-addr", help="This node's address for the others."),
           master_port: Optional[int] = typer.Option(None, "--master-port", help="Rendezvous port."),
           rdzv_endpoint: Optional[str] = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of a c10d rendezvous."),
           rdzv_id: Optional[str] = typer.Option(None, "--rdzv-id", help="Job id of a c10d rendezvous.")) -> None:
    """Continue a failed or stopped run from its last finished task."""
    rendezvous = runner.Rendezvous(nnodes, node_rank, master_addr, master_port, rdzv_endpoint, rdzv_id).check()
    resumed = runner.resume_run(run_id, rendezvous)  # shared with the TUI
    if detach:
        console.print(run_id)
        return
    console.print(f"run {run_id}: resuming at task {resumed.first_task + 1}/{resumed.n_tasks or '?'}"
                  + ("" if resumed.from_checkpoint else " (no checkpoint: no task had finished)"))
    status = follow(run_id, resumed.process)
    print_run(run_id)
    raise typer.Exit(0 if status == "finished" else 1)


@app.command()
def join(run_id: int = typer.Argument(..., help="The run started on node 0 with `rmconsole run --nnodes N`."),
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
    if gpus < 1:
        raise ConfigError(f"--gpus {gpus}: must be at least 1")
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"--device {device!r}: allowed: auto, cuda, cpu")
    rendezvous = runner.Rendezvous(nnodes, node_rank, master_addr, master_port, rdzv_endpoint, rdzv_id).check(joining=True)
    raise typer.Exit(runner.join_run(run_id, gpus, rendezvous, device))


# --------------------------------------------------------------------------- tui


@app.command()
def tui(refresh: float = typer.Option(1.0, "--refresh", help="Seconds between store reads.")) -> None:
    """Open the terminal UI: runs live, one run's stream/memory/accuracy/log, compare, launch, stop."""
    if not refresh > 0:
        raise ConfigError(f"--refresh {refresh}: must be a number of seconds above 0")
    store.get_engine()  # an unusable store is a one-line error here, not a screen of them
    from .tui import RMConsoleApp

    RMConsoleApp(refresh_s=refresh).run()


# --------------------------------------------------------------------------- data


data_app = typer.Typer(help="Datasets under RMCONSOLE_DATA.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("get")
def data_get(name: str = typer.Argument(..., help="mnist | fashion_mnist | cifar10 | cifar100")) -> None:
    """Download a torchvision dataset into the data root (needs internet)."""
    from .cl.data import data_root, load_dataset

    if name not in ("mnist", "fashion_mnist", "cifar10", "cifar100"):
        raise ConfigError(f"data get {name!r}: downloadable: mnist, fashion_mnist, cifar10, cifar100")
    data = load_dataset(name, download=True)
    console.print(f"{name}: {len(data.train)} train / {len(data.test)} test images under {data_root()}")


def main() -> None:
    try:
        app()
    except USER_ERRORS as err:
        if _debug:
            raise
        err_console.print(f"[red]error:[/] {err}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
