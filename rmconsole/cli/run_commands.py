"""Commands that start and follow runs: run, stop, resume, join (sweeps: sweeps.py)."""

from __future__ import annotations

import inspect
import math
import sys
import typing
from typing import Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

from .. import runner, store
from ..cl.protocols import setting_label
from ..config import ConfigError
from ..numbers import duration
from .common import (
    MAX_SLOTS,
    RUN_ID,
    app,
    check_count,
    check_run_id,
    console,
    err_console,
    working,
)
from .printing import print_run
from .selection import _run_id
from .sweeps import follow_launched_sweep


def _launch_parameters() -> list[inspect.Parameter]:
    """`run`'s options, derived from runner.LaunchRequest's fields (each declares its flags and
    help once, runner/request.py), then the CLI's own --yes."""
    hints = typing.get_type_hints(runner.LaunchRequest)
    parameters = []
    for f, spec in runner.LaunchRequest.options():
        annotation = list[str] if spec.repeatable else hints[f.name]
        default = [] if spec.repeatable else f.default
        option = typer.Option(default, *spec.flags, help=spec.help)
        parameters.append(
            inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=annotation)
        )
    yes = typer.Option(
        False,
        "--yes",
        "-y",
        help="Start a --set list's runs without asking (at a terminal "
        "`run` asks first; elsewhere it says how many and starts them).",
    )
    parameters.append(inspect.Parameter("yes", inspect.Parameter.KEYWORD_ONLY, default=yes, annotation=bool))
    return parameters


def run(**options: Any) -> None:
    """Train one run, or a sweep: comma-separated --set values and --seeds make a grid of runs.

    Keys a first run changes: dataset, method, memory_size (K), n_tasks, blurry, stream, epochs, augment ('+'-joined: cutmix+autoaug), seed, lr, batch_size, device (`rmconsole config-keys --essential` says what each means; `config-keys` lists every key and the methods that read it). `--set epochs=8 --set augment=none`; a comma makes a sweep: `--set method=rm,er --seeds 1,2`."""
    yes = options.pop("yes")
    request = runner.LaunchRequest.of(**options)
    try:
        with working("checking and storing…") as status:

            def asked(plan: Any) -> bool:
                if status is not None:
                    status.stop()  # (the question is asked on a clean line)
                return _confirm(plan, yes)

            launched = runner.launch_request(request, confirm=asked)
    except runner.SweepDeclined as declined:
        err_console.print(str(declined), highlight=False)
        raise typer.Exit(1) from None
    if isinstance(launched, runner.LaunchedSweep):
        follow_launched_sweep(launched, request.detach)
        return
    spec = request.executor_spec()
    run_id, cfg, proc = launched.run_id, launched.config, launched.process
    if request.detach:
        if launched.job_id is not None and spec is not None:
            err_console.print(f"run {run_id}: submitted as {spec.name} job {launched.job_id}", highlight=False)
        console.print(run_id)
        return
    where = f"; {spec.name} job {launched.job_id}" if launched.job_id is not None and spec is not None else ""
    console.print(
        f"run [bold]{run_id}[/] ({escape(request.name or launched.preset)}): {cfg.method} on {cfg.dataset}, "
        f"K={cfg.memory_size}, {cfg.n_tasks} tasks, {setting_label(cfg.to_dict())}, seed {cfg.seed}{where}"
    )
    status = follow(run_id, proc)
    print_run(run_id, brief=True)  # (the progress was shown live: no epoch lines, the memory's latest update)
    console.print(f"[dim]log {escape(str(runner.log_path(run_id)))}[/]", highlight=False)
    raise typer.Exit(0 if status == "finished" else 1)


run.__signature__ = inspect.Signature(_launch_parameters(), return_annotation=None)  # type: ignore[attr-defined]
run.__annotations__ = {p.name: p.annotation for p in run.__signature__.parameters.values()}  # type: ignore[attr-defined]
app.command()(run)


def at_terminal() -> bool:
    """Whether a person can answer a question here (stdin and stderr are a terminal)."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def _confirm(plan: Any, yes: bool) -> bool:
    """A `--set` list that makes several runs (`augment=cutmix,autoaug`, a natural slip for '+')
    is said before anything is stored: at a terminal `run` asks (unless --yes); elsewhere (a
    script, a pipe) it says so on stderr and goes on, so scripts keep working."""
    notice = runner.expansion_notice(plan)
    if notice is None:
        return True
    err_console.print(escape(notice), highlight=False, soft_wrap=True)
    if yes or not at_terminal():
        return True
    return typer.confirm(f"start these {len(plan.configs)} runs?", default=False, err=True)


def follow(run_id: int, proc: Any = None, poll_s: float = 0.25) -> str:
    """Show a run's progress until it ends; Ctrl-C stops the run. Returns the final status."""
    columns = (
        TextColumn("task {task.fields[task]}"),
        TextColumn("[cyan]{task.fields[phase]:<13}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[rate]}"),
        TextColumn("ETA {task.fields[eta]}"),
    )
    reported = 0
    try:
        with Progress(*columns, console=console, transient=True) as progress:
            bar = progress.add_task("run", total=None, task="—", phase="queued", rate="", eta="—")
            for run in runner.follow_run(run_id, proc, poll_s):  # records the end of a worker that died silently
                if run.status == "queued" and run.job_state:
                    progress.update(bar, phase=run.job_state[:13])
                if run.task is not None:
                    progress.update(
                        bar,
                        total=max(run.phase_total, 1),
                        completed=run.phase_done,
                        task=f"{run.task + 1}/{run.n_tasks}",
                        phase=run.phase or "",
                        rate=f"{run.samples_per_s:,.0f} samples/s" if run.samples_per_s else "",
                        eta=duration(run.eta_s),
                    )
                results = store.task_results(run_id) if (run.metrics or {}).get("tasks_done", 0) > reported else []
                for result in results[reported:]:
                    tested = (
                        "no test evaluation (evaluate_test=false)"
                        if result.accuracy is None
                        else f"accuracy {result.accuracy:.2f}%"
                    )
                    val = f", validation {result.val_accuracy:.2f}%" if result.val_accuracy is not None else ""
                    progress.console.print(
                        f"task {result.task + 1}/{run.n_tasks}: {tested}{val} ({result.seconds:.1f} s)"
                    )
                reported = max(reported, len(results))
        return run.status
    except KeyboardInterrupt:
        err_console.print(f"stopping run {run_id}…")
        runner.stop_run(run_id)
        return store.get_run(run_id).status


@app.command(context_settings=RUN_ID)
def stop(
    run: str | None = typer.Argument(None, metavar="[RUN]", help="Run id, or 'last'."),
    sweep_: str | None = typer.Option(None, "--sweep", help="Stop a whole sweep: its id, or 'last'."),
    grace: float = typer.Option(10.0, "--grace", help="Seconds between SIGTERM and SIGKILL."),
) -> None:
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
    run_id = _run_id(run)  # type: ignore[arg-type]  # not None: exactly one of RUN and --sweep (checked above)
    console.print(f"run {run_id} {runner.stop_run(run_id, grace)}")


@app.command(context_settings=RUN_ID)
def resume(
    run: str = typer.Argument(..., metavar="RUN", help="Run id, or 'last'."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Return at once."),
    nnodes: int = typer.Option(1, "--nnodes", help="Nodes, for a multi-node run (as for `run`)."),
    node_rank: int | None = typer.Option(None, "--node-rank", help="This node's rank (0)."),
    master_addr: str | None = typer.Option(None, "--master-addr", help="This node's address for the others."),
    master_port: int | None = typer.Option(None, "--master-port", help="Rendezvous port."),
    rdzv_endpoint: str | None = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of a c10d rendezvous."),
    rdzv_id: str | None = typer.Option(None, "--rdzv-id", help="Job id of a c10d rendezvous."),
    executor: str | None = typer.Option(
        None,
        "--executor",
        help="Resume elsewhere: local, slurm or submitit-local (default: where it ran; a Slurm run is resubmitted).",
    ),
    slurm: list[str] = typer.Option([], "--slurm", help="Job options with --executor slurm (as for `run`)."),
) -> None:
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
    console.print(
        f"run {run_id}: resuming at task {resumed.first_task + 1}/{resumed.n_tasks or '?'}{where}"
        + ("" if resumed.from_checkpoint else " (no checkpoint: no task had finished)")
    )
    status = follow(run_id, resumed.process)
    print_run(run_id)
    raise typer.Exit(0 if status == "finished" else 1)


@app.command(context_settings=RUN_ID)
def join(
    run_id: int = typer.Argument(
        ..., metavar="RUN_ID", help="The run started on node 0 with `rmconsole run --nnodes N`."
    ),
    gpus: int = typer.Option(..., "--gpus", help="Ranks (GPUs) on this node; the same as node 0's."),
    nnodes: int = typer.Option(..., "--nnodes", help="Nodes in the run."),
    node_rank: int | None = typer.Option(None, "--node-rank", help="This node's rank, 1 to nnodes-1."),
    master_addr: str | None = typer.Option(None, "--master-addr", help="Node 0's address."),
    master_port: int | None = typer.Option(None, "--master-port", help="Node 0's port."),
    rdzv_endpoint: str | None = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of a c10d rendezvous."),
    rdzv_id: str | None = typer.Option(None, "--rdzv-id", help="Job id of a c10d rendezvous."),
    device: str = typer.Option("auto", "--device", help="auto or cpu (as the run's device)."),
) -> None:
    """Start this node's ranks of a multi-node run (foreground). The ranks here get the run's
    config from rank 0 and never write the store; they need the dataset under RMCONSOLE_DATA."""
    check_run_id(run_id)
    check_count("--gpus", gpus, 1, MAX_SLOTS)
    check_count("--nnodes", nnodes, 1, MAX_SLOTS)
    check_count("--node-rank", node_rank, 0, MAX_SLOTS)
    check_count("--master-port", master_port, 1, 65535)
    if device not in ("auto", "cpu", "cuda"):
        raise ConfigError(f"--device {device!r}: allowed: auto, cuda, cpu")
    rendezvous = runner.Rendezvous(nnodes, node_rank, master_addr, master_port, rdzv_endpoint, rdzv_id).check(
        joining=True
    )
    raise typer.Exit(runner.join_run(run_id, gpus, rendezvous, device))
