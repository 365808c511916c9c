"""`rmconsole tune`: the thin face over runner/tune.py (a search whose trials are runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from .. import runner, store
from ..runner import tune as tuning
from .common import MAX_SLOTS, app, check_count, console, err_console


@app.command()
def tune(
    study: str | None = typer.Option(None, "--study", help="The study's name: a new one, or one to continue."),
    param: list[str] = typer.Option(
        [],
        "--param",
        help="A searched key: KEY=log:LO..HI, float:LO..HI, int:LO..HI, intlog:LO..HI or choice:A,B,... (repeatable).",
    ),
    metric: str | None = typer.Option(
        None, "--metric", help="The validation metric to select on (val_A_last, ...); test metrics are refused."
    ),
    trials: int | None = typer.Option(
        None, "--trials", help="Trials that complete or are pruned (default 20; grid: the grid's size)."
    ),
    sampler: str | None = typer.Option(None, "--sampler", help="tpe (default), random or grid."),
    pruner: str | None = typer.Option(
        None,
        "--pruner",
        help="median (default: on per-task validation accuracy), median:startup=N,warmup=M (prune "
        "nothing before N trials finished, nor in a trial's first M tasks), or none.",
    ),
    sampler_seed: int | None = typer.Option(
        None, "--sampler-seed", help="The sampler's seed (default 0; a run's seed is --set seed=N)."
    ),
    study_file: Path | None = typer.Option(
        None,
        "--file",
        "-f",
        help="A TOML study file (name, preset, metric, trials, sampler, pruner, seed, tags; tables set and params).",
    ),
    preset: str | None = typer.Option(None, "--preset", "-p", help="Preset name or TOML file of every trial."),
    set_: list[str] = typer.Option([], "--set", "-s", help="A fixed config key of every trial: KEY=VALUE."),
    parallel: int = typer.Option(1, "--parallel", "-j", help="Trials running at once."),
    executor: str | None = typer.Option(
        None,
        "--executor",
        help="Where the trials' workers run: local (default), slurm or submitit-local, as for a sweep.",
    ),
    slurm: list[str] = typer.Option([], "--slurm", help="Job options for --executor slurm (as for `run`)."),
    tags: list[str] = typer.Option([], "--tag", "-t", help="A tag for every trial's run (besides study:NAME)."),
    show: bool = typer.Option(False, "--show", help="Print the study's trials and its best so far; start nothing."),
    plot: Path | None = typer.Option(
        None,
        "--plot",
        help="With --show: write the study's optimisation history, parameter importance and parallel "
        "coordinates into this folder (history.png, importance.png, parallel.png).",
    ),
) -> None:
    """Search config keys with Optuna on a validation metric; every trial is a run.

    TPE, random or grid; trial N of study S is the run S·tN, tagged study:S. `--study NAME` alone
    continues a study (after its driver was killed, too: runs that died are resumed)."""
    check_count("--parallel", parallel, 1, MAX_SLOTS)
    check_count("--trials", trials, 1, 100_000)
    if study is None and study_file is None:
        names = tuning.study_names()
        raise tuning.TuneError("give --study NAME (stored: " + (", ".join(names[-8:]) or "none yet") + ")")
    if plot is not None and not show:
        raise tuning.TuneError("--plot: give it with --show (the figures of a study's trials so far)")
    if show:
        if study_file is None and not param and metric is None:
            print_study(study or "", plot)  # (one not stored: load_study says how to start it)
            return
        shown, new = tuning.prepare(study or "", params=list(param), metric=metric, study_file=study_file)
        if new:  # the file (or --param/--metric) holds what it needs: the study has just not started
            raise tuning.TuneError(
                f"--show: study {shown.name} has not started yet, so it has no trials to show; "
                "run the same command without --show to start it"
            )
        print_study(shown.name, plot)
        return
    spec = runner.parse_executor(executor, slurm)
    asked, new = tuning.prepare(
        study or "",
        preset=preset,
        pairs=list(set_),
        params=list(param),
        metric=metric,
        trials=trials,
        sampler=sampler,
        pruner=pruner,
        seed=sampler_seed,
        tags=list(tags),
        study_file=study_file,
    )
    tuning.check_startable(asked, scheduled=spec is not None)  # (a refused study stores nothing)
    optuna_study = tuning.open_study(asked, create=new)
    if not new and trials is not None:
        optuna_study.set_user_attr(tuning.ATTR, asked.to_json())
    driver = tuning.StudyDriver(
        asked,
        optuna_study,
        parallel=parallel,
        executor=spec,
        log=lambda message: console.print(message, highlight=False, soft_wrap=True),
    )
    _, direction = tuning.check_metric(asked.metric)
    console.print(
        f"study {asked.name} ({'new' if new else 'continued'}): {asked.trials} trials, {asked.sampler} "
        f"sampler, pruner {asked.pruner}, {direction} {asked.metric}; "
        f"{driver.settled()} done so far; runs tagged {tuning.study_tag(asked.name)}; "
        f"kept in {store.shown_url(store.database_url_object())}",
        highlight=False,
        soft_wrap=True,
    )
    from ..runner.queue import DriverLock, QueueBusy
    from ..store.db import holding_as_a_run

    try:
        with DriverLock(tuning.lock_id(asked.name)), holding_as_a_run():  # an outage waited out as its trials do
            try:
                counts = driver.run()
            except KeyboardInterrupt:
                err_console.print(f"stopping study {asked.name}'s running trials…")
                driver.stop()
                err_console.print(f"continue with: rmconsole tune --study {asked.name}")
                raise typer.Exit(1) from None
    except QueueBusy as err:
        raise tuning.TuneError(str(err).replace(f"sweep {tuning.lock_id(asked.name)}", f"study {asked.name}")) from None
    console.print(f"study {asked.name}: " + ", ".join(f"{v} {k}" for k, v in counts.items()), highlight=False)
    print_study(asked.name)
    if driver.settled() < asked.trials and not driver.grid_done():  # it gave up: too many trials failed
        raise typer.Exit(1)


def print_study(name: str, plot: Path | None = None) -> None:
    """The trials (number, state, run, searched values, metric, validation steps) and the best line;
    with `plot`, the study's figures written there (report/study.py)."""
    summary = tuning.summarize(name)
    if plot is not None:
        from ..outputs import check_folder
        from ..report.study import write_figures

        check_folder(str(plot), "--plot")
        study, _ = tuning.load_study(name)
        written = write_figures(study, summary.spec.metric, summary.direction == "maximize", plot)
        console.print("wrote " + ", ".join(escape(str(p)) for p in written), highlight=False, soft_wrap=True)
    keys = [p.key for p in summary.spec.params]
    table = Table(
        title=f"study {name}: {summary.direction} {summary.spec.metric}, {summary.spec.sampler} sampler",
        title_justify="left",
    )
    for column in ("trial", "state", "run", *keys, summary.spec.metric, "tasks"):
        table.add_column(
            column, justify="right" if column not in ("state",) else "left", no_wrap=column == summary.spec.metric
        )
    for row in summary.trials:
        best = summary.best is not None and row.number == summary.best.number
        cells: list[Any] = [str(row.number), row.state + (" *" if best else ""), str(row.run_id or "—")]
        cells += [row.param_text(k) for k in keys]
        cells += [row.value_text(), str(row.steps)]
        table.add_row(*cells, style="bold" if best else "")
    console.print(table)
    if any(row.state == "pruned" and row.last is not None for row in summary.trials):
        console.print(f"[dim]{tuning.PRUNED_NOTE}[/]", highlight=False, soft_wrap=True)
    console.print(tuning.best_line(name, summary) or "", highlight=False, soft_wrap=True)
    if summary.driver is not None:
        console.print(f"driven now by process {summary.driver}", highlight=False)
