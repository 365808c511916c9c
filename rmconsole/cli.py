"""The `rmconsole` command line: a thin Typer face over config, store and launch."""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table

from . import launch, store
from .cl.catalog import DatasetMissing, check_available
from .config import ConfigError, load_config, preset_description, preset_names, read_preset

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="A terminal experiment console for continual learning around Rainbow Memory.")
console = Console()
err_console = Console(stderr=True)
USER_ERRORS = (ConfigError, store.StoreError, store.UnknownRun, DatasetMissing, ValueError)
_debug = False


class UserError(Exception):
    """A refusal with a one-line reason (bad state, not a bad config)."""


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
) -> None:
    """Train one run: store it, start a worker process, follow its progress."""
    name, cfg = load_config(preset, list(set_), seed=seed, device=device)
    if not cfg.download:  # a missing dataset or GPU is a bad input: refuse before storing anything
        check_available(cfg.dataset)
    from .worker import resolve_device

    resolve_device(cfg.device)
    run_id = store.create_run(cfg.to_dict(), name)
    proc = launch.start_worker(run_id)
    if detach:
        console.print(run_id)
        return
    console.print(f"run [bold]{run_id}[/] ({name}): {cfg.method} on {cfg.dataset}, K={cfg.memory_size}, "
                  f"{cfg.n_tasks} tasks, blurry{cfg.blurry} {cfg.stream}, seed {cfg.seed}; log {launch.log_path(run_id)}")
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
            while True:
                run = store.get_run(run_id)
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
                if run.status not in store.ACTIVE:
                    return run.status
                if proc is not None and proc.poll() is not None:
                    time.sleep(poll_s)  # let a worker that exited cleanly finish its last write
                    if store.get_run(run_id).status in store.ACTIVE:
                        launch.mark_dead(run_id, launch.exit_reason(proc.returncode))
                    return store.get_run(run_id).status
                time.sleep(poll_s)
    except KeyboardInterrupt:
        err_console.print(f"stopping run {run_id}…")
        launch.stop_run(run_id)
        return store.get_run(run_id).status


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
    if detail["error"]:
        err_console.print(f"[red]{detail['status']}:[/] {detail['error']}")


@app.command()
def show(run_id: int = typer.Argument(..., help="Run id."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """One run: config, per-task accuracy, memory histograms, metrics."""
    launch.reap_dead([store.get_run(run_id)])
    if as_json:
        print(json.dumps(store.run_detail(run_id), indent=2))
        return
    print_run(run_id)


@app.command()
def runs(as_json: bool = typer.Option(False, "--json", help="Print JSON."),
         status: Optional[str] = typer.Option(None, "--status", help="Only runs with this status."),
         limit: int = typer.Option(50, "--limit", help="Show the newest N runs (0 = all).")) -> None:
    """All runs, newest last."""
    if status is not None and status not in store.STATUSES:
        raise ConfigError(f"--status {status!r}: allowed: {', '.join(store.STATUSES)}")
    launch.reap_dead()
    rows = store.list_runs(status=status)
    if limit:
        rows = rows[-limit:]
    with store.reading() as session:
        summaries = [store.run_summary(r, session) for r in rows]
    if as_json:
        print(json.dumps(summaries, indent=2))
        return
    table = Table()
    for col, just in (("id", "right"), ("status", "left"), ("preset", "left"), ("method", "left"), ("K", "right"),
                      ("seed", "right"), ("progress", "left"), ("A_last", "right"), ("F_last", "right"),
                      ("I_last", "right")):
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    colours = {"finished": "green", "running": "cyan", "queued": "yellow", "failed": "red", "stopped": "magenta"}
    for s in summaries:
        p = s["progress"]
        prog = f"task {p['task'] + 1}/{p['n_tasks']} {p['phase'] or ''}" if p["task"] is not None else ""
        m = s["metrics"]
        table.add_row(str(s["id"]), f"[{colours[s['status']]}]{s['status']}[/]", s["preset"] or "", s["method"],
                      str(s["config"]["memory_size"]), str(s["seed"]), prog if s["status"] == "running" else "",
                      _fmt(m["A_last"]), _fmt(m["F_last"]), _fmt(m["I_last"]))
    console.print(table)


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
        table.add_row(item["name"], c["dataset"], c["model"], c.get("method", "rm"), str(c["memory_size"]),
                      str(c.get("n_tasks", 5)), f"blurry{c.get('blurry', 10)} {c.get('stream', 'online')}",
                      item["description"])
    console.print(table)


# --------------------------------------------------------------------------- stop / resume


@app.command()
def stop(run_id: int = typer.Argument(..., help="Run id."),
         grace: float = typer.Option(10.0, "--grace", help="Seconds between SIGTERM and SIGKILL.")) -> None:
    """Stop a running run (SIGTERM to its process group, then SIGKILL); finished tasks stay stored."""
    run = store.get_run(run_id)
    if run.status not in store.ACTIVE:
        raise UserError(f"run {run_id} is {run.status}: only queued or running runs can be stopped")
    console.print(f"run {run_id} {launch.stop_run(run_id, grace)}")


@app.command()
def resume(run_id: int = typer.Argument(..., help="Run id."),
           detach: bool = typer.Option(False, "--detach", "-d", help="Return at once.")) -> None:
    """Continue a failed or stopped run from its last finished task."""
    launch.reap_dead([store.get_run(run_id)])
    run = store.get_run(run_id)
    if run.status not in ("failed", "stopped"):
        raise UserError(f"run {run_id} is {run.status}: only failed or stopped runs can be resumed")
    store.update_run(run_id, status="queued", error=None, finished_at=None)
    proc = launch.start_worker(run_id)
    if detach:
        console.print(run_id)
        return
    status = follow(run_id, proc)
    print_run(run_id)
    raise typer.Exit(0 if status == "finished" else 1)


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
    except (*USER_ERRORS, UserError) as err:
        if _debug:
            raise
        err_console.print(f"[red]error:[/] {err}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
