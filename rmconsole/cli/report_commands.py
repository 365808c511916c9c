"""Commands that write runs out: report (tables and figures) and export (MLflow, TensorBoard)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import typer
from rich.markup import escape

from .. import metric_registry, runner, store
from .. import report as reports
from ..config import ConfigError, shorten
from ..report import anytime as anytime_report
from ..report import budget as budget_report
from ..report import select_by as select_by_validation
from ..sanitize import clean_block
from ..store.filters import where
from .common import app, console, err_console, say_metric_problems, working
from .selection import _chosen_runs, _listed, select_runs


@app.command()
def report(
    filters: list[str] | None = typer.Argument(
        None, metavar="FILTER", help="Run filter terms, as for `rmconsole runs`: method:rm,ewc 'A_last>85'."
    ),
    sweep_: str | None = typer.Option(None, "--sweep", help="Only this sweep (an id, or 'last')."),
    preset: str | None = typer.Option(None, "--preset", help="Only these presets (comma-separated)."),
    dataset: str | None = typer.Option(None, "--dataset", help="Only these datasets (comma-separated)."),
    method: str | None = typer.Option(None, "--method", help="Only these methods (comma-separated)."),
    status: str | None = typer.Option(None, "--status", help="Only these statuses (comma-separated)."),
    run_ids: str | None = typer.Option(None, "--runs", help="Only these run ids: 3,4,7 or 3-9."),
    where_: list[str] = typer.Option([], "--where", help="Only runs with KEY=V1,V2 in their config (repeatable)."),
    rows: str | None = typer.Option(None, "--rows", help="Keys that make a row (default: method)."),
    cols: str | None = typer.Option(None, "--cols", help="Keys that make a column group, e.g. memory_size."),
    metrics: str | None = typer.Option(
        None,
        "--metrics",
        help=f"Comma-separated, of the metric catalogue: {', '.join(metric_registry.metric_names())}.",
    ),
    paper: bool = typer.Option(
        False,
        "--paper",
        help="Put the paper's figure and the difference beside each "
        "matching cell (same dataset, method, K, setting, augmentation).",
    ),
    only_changed: bool = typer.Option(
        True,
        "--only-changed/--all-config",
        help="Config columns: only the keys that differ between runs, or every key.",
    ),
    fmt: str = typer.Option("table", "--format", "-f", help="table | md | csv | latex | json"),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the table to FILE instead of stdout."),
    digits: int = typer.Option(2, "--digits", help="Decimals in table, md and latex cells."),
    plot: Path | None = typer.Option(
        None,
        "--plot",
        help="Also draw accuracy after each task per row (PNG); task-free runs: accuracy against samples seen.",
    ),
    memory_plot: Path | None = typer.Option(
        None, "--memory-plot", help="Draw one run's memory class histogram per task (PNG)."
    ),
    plot_epochs: Path | None = typer.Option(
        None,
        "--plot-epochs",
        help="Draw the training loss and learning rate of every epoch of the selected runs (PNG).",
    ),
    all_: bool = typer.Option(False, "--all", "-a", help="Archived runs too."),
    select_by: str | None = typer.Option(
        None,
        "--select-by",
        metavar="METRIC",
        help="Per row, only the configuration best on this VALIDATION metric "
        "(val_A_last, val_A_avg, val_A_auc: runs with val_fraction > 0), "
        "mean over seeds; its test figures are reported.",
    ),
    budget: float | None = typer.Option(
        None,
        "--budget",
        metavar="TFLOP",
        help="Compare at equal training compute (Prabhu et al. 2023): each task-free run's anytime curve "
        "read at the last evaluation within TFLOP of training (A_budget, A_auc_budget); ▲ marks a cell "
        "with a run that spent more. FLOPs: matmul and convolution, forward + backward (docs/compute.md).",
    ),
) -> None:
    """Tables of stored runs: cells are mean ± std over seeds; also the paper's figures as PNG."""
    if fmt not in reports.FORMATS:
        raise ConfigError(f"--format {shorten(fmt)!r}: allowed: {', '.join(reports.FORMATS)}")
    if fmt == "table" and out is not None:
        raise ConfigError("--out writes a file: choose --format md, csv, latex or json")
    if not 0 <= digits <= 6:
        raise ConfigError(f"--digits {digits}: allowed: 0 to 6")
    if budget is not None and not (budget > 0 and math.isfinite(budget)):
        raise ConfigError(f"--budget {shorten(budget)}: a training budget in TFLOP, a number > 0")
    for option, path in (("--plot", plot), ("--memory-plot", memory_plot), ("--plot-epochs", plot_epochs)):
        if path is not None and path.suffix.lower() not in (".png", ".pdf", ".svg"):
            raise ConfigError(f"{option} {shorten(str(path))!r}: the file must end in .png (or .pdf, .svg)")
    outputs: dict[Path, str] = {}
    for option, path in (
        ("--out", out),
        ("--plot", plot),
        ("--memory-plot", memory_plot),
        ("--plot-epochs", plot_epochs),
    ):
        if path is not None:
            reports.check_output(path, option)  # a folder, an unwritable place: refused before any work
            same = outputs.setdefault(path.expanduser().resolve(), option)
            if same != option:  # the second would overwrite the first
                raise ConfigError(f"{same} and {option} are the same file ({shorten(str(path))}): give each its own")
    runs = select_runs(sweep_, preset, dataset, method, status, run_ids, where_, filters, all_)
    if not runs:
        raise ConfigError(f"no runs match the filters ({store.count_runs()} runs are stored; see `rmconsole runs`)")
    if memory_plot is not None and len(runs) != 1:
        raise ConfigError(f"--memory-plot draws one run, but {len(runs)} match: choose it with --runs ID")
    summaries = [r.to_json() for r in runs]
    say_metric_problems()
    chosen = None
    if select_by is not None:  # per row (and column group), the validation-best configuration's runs
        chosen = select_by_validation.select(
            summaries, select_by, [*(_listed("--rows", rows) or ["method"]), *(_listed("--cols", cols) or ())]
        )
        summaries = chosen.runs
    over: frozenset[int] = frozenset()
    if budget is not None:  # every run's curve read at the budget (A_budget, A_auc_budget)
        summaries, over = budget_report.read_at_budget(
            summaries, store.anytime_compute_curves([s["id"] for s in summaries]), budget
        )
    table = reports.build_report(
        summaries,
        rows=_listed("--rows", rows),
        cols=_listed("--cols", cols) or (),
        metrics=_listed("--metrics", metrics) or (list(budget_report.BUDGET_METRICS) if budget is not None else None),
        only_changed=only_changed,
        paper=paper,
        budget=budget,
        over_budget=over,
    )
    if fmt == "table":
        console.print(reports.rich_table(table, digits, width=console.width))
    else:
        text = clean_block(reports.render(table, fmt, digits))  # a name with ESC sequences is shown, not obeyed
        if out is None:
            sys.stdout.write(text)
        else:
            err_console.print(f"wrote {reports.write_output(out, text.encode(), '--out')}", highlight=False)
    if chosen is not None:  # what was selected, and among how many (stderr beside a file format's output)
        for line in chosen.lines(digits):
            (console if fmt == "table" else err_console).print(clean_block(line), markup=False, highlight=False)
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
def export(
    items: list[str] | None = typer.Argument(
        None, metavar="RUN... DIR", help="Run ids (3 4, 3-9, last), then the folder (or --dir)."
    ),
    to: str = typer.Option(..., "--to", help="mlflow | tensorboard"),
    sweep_: str | None = typer.Option(None, "--sweep", help="Every run of this sweep (an id or 'last')."),
    experiment: str = typer.Option("rmconsole", "--experiment", help="MLflow experiment name."),
    dir_: str | None = typer.Option(
        None,
        "--dir",
        "-o",
        help="Where: a folder (MLflow file store, TensorBoard log dir) or, for MLflow, a tracking URI.",
    ),
) -> None:
    """Write runs into an MLflow tracking store or TensorBoard event files: config as params,
    per-task and per-epoch metrics, memory histograms (`pip install 'rmconsole\\[mlflow]'` /
    `'rmconsole\\[tensorboard]'`). `rmconsole export 3 4 --to mlflow ./mlruns`."""
    from .. import export as exporter

    if to not in exporter.TARGETS:
        raise ConfigError(f"--to {to!r}: allowed: {', '.join(exporter.TARGETS)}")
    if to == "mlflow" and not experiment.strip():
        raise ConfigError(f"--experiment {experiment!r}: give the MLflow experiment a name")
    names = list(items or [])
    target = dir_
    if (
        target is None and names and not names[-1].replace("-", "").replace(",", "").isdigit() and names[-1] != "last"
    ):  # the last word is the folder (`export 3 4 --to mlflow DIR`)
        target = names.pop()
    if not target:
        raise ConfigError("export: say where: rmconsole export RUN... --to mlflow DIR (or --to tensorboard DIR)")
    ids = (
        [r.id for r in store.find_runs(where("sweep", [runner.resolve_sweep_id(sweep_)]), archived=True)]
        if sweep_ is not None
        else []
    )
    ids += _chosen_runs(names) if names else []
    if not ids:
        raise ConfigError("export: give the runs (ids, 3-9, last) or --sweep ID|last")
    if to != "mlflow" or "://" not in target:  # a folder: never a file, nor rmconsole's own folders
        from ..outputs import check_folder

        check_folder(target, "export")
    try:
        with working(f"exporting {len(set(ids))} run(s) to {to}…"):
            details = [store.run_detail(i) for i in dict.fromkeys(ids)]
            system = {d["id"]: store.system_json(d["id"]) for d in details}  # sampled by each run's supervisor
            written = exporter.to_mlflow(details, target, experiment, system) if to == "mlflow" else []
            folders = exporter.to_tensorboard(details, target, system) if to != "mlflow" else []
        if to == "mlflow":
            console.print(
                f"exported {len(written)} run(s) to MLflow at {escape(exporter.shown_uri(target))} "
                f"(experiment {escape(repr(experiment))})",
                highlight=False,
                soft_wrap=True,
            )
            hint = exporter.view_hint("mlflow", target, experiment, exporter.experiment_id_of(target, experiment))
        else:
            console.print(f"exported {len(folders)} run(s) to {escape(target)}", highlight=False, soft_wrap=True)
            hint = exporter.view_hint("tensorboard", target)
        for line in hint:  # (commands to copy: never wrapped)
            console.print(escape(line), highlight=False, soft_wrap=True)
    except exporter.ExportError as err:
        raise ConfigError(str(err)) from None
