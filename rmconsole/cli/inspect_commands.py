"""Commands that read runs: show and runs."""

from __future__ import annotations

import re

import typer
from rich.markup import escape
from rich.table import Table

from .. import metric_registry, runner, store
from ..cl.metric_catalog import column_when_measured
from ..config import ConfigError, shorten
from ..sanitize import json_text
from ..store.filters import where
from .common import RUN_ID, app, console, dim, err_console, say_metric_problems
from .printing import print_run, print_sweep_queues
from .selection import _run_id, reap_quietly, status_filter


@app.command(context_settings=RUN_ID)
def show(
    run: str = typer.Argument(..., metavar="RUN", help="Run id, or 'last' (the newest run)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (with every epoch row and memory update)."),
) -> None:
    """One run: who it is (name, tags, note), config (overrides first), per-task accuracy, every
    memory update's histogram, the epochs inside each task (loss, lr, samples/s), metrics."""
    run_id = _run_id(run)
    reap_quietly([store.get_run(run_id)])
    detail = store.run_detail(run_id)
    say_metric_problems()
    if as_json:
        print(json_text(detail, indent=2))
        return
    print_run(run_id, detail)


STATUS_WIDTH = 11  # `4/5 memory`: a live run's task and phase, cut here so the metrics stay on the line
STATUS_COLOURS = {"finished": "green", "running": "cyan", "queued": "yellow", "failed": "red", "stopped": "magenta"}


@app.command()
def runs(
    filters: list[str] | None = typer.Argument(
        None,
        metavar="FILTER",
        help="Run filter terms, all of which must hold: "
        "method:rm,ewc k:500 tag:baseline override:epochs "
        "'A_last>85' or words.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    status: str | None = typer.Option(None, "--status", help="Only runs with one of these statuses (comma-separated)."),
    limit: int = typer.Option(50, "--limit", help="Show the newest N runs (0 = all)."),
    sweep_: str | None = typer.Option(None, "--sweep", help="Only the runs of this sweep (an id or 'last')."),
    all_: bool = typer.Option(False, "--all", "-a", help="Archived runs too."),
) -> None:
    """All runs, newest last, and the queue of every sweep shown. A filter term is KEY:V1,V2 (any of
    them), KEY>N (also >= < <= = !=) or a word; KEY is a run column, tag, override, a metric or a
    config key. Partial metrics (a run not through all tasks) show as @k/T."""
    if limit < 0:
        raise ConfigError(f"--limit {shorten(limit)}: the newest N runs (N >= 1), or 0 for all")
    run_filter = store.parse_run_filter(filters) & status_filter(status)
    reap_quietly()
    if sweep_ is not None:
        run_filter &= where("sweep", [runner.resolve_sweep_id(sweep_)])
    records = store.find_runs(run_filter, archived=True if all_ else None)
    say_metric_problems()
    if limit:
        records = records[-limit:]
    if as_json:
        print(json_text([r.to_json() for r in records], indent=2))
        return
    if not records:  # a header over nothing says nothing: say what matched none
        _say_none_match(filters, status, sweep_, all_)
        return
    # one line per run at any width: narrower than 120 columns, a run's changes follow its name
    # in the same cell and are cut (…) before any number is; a live status is cut to its column
    wide = console.width >= 120
    # the catalogue's metric columns; one of task-free runs only (A_auc) or a validation figure (a
    # `tune` trial evaluates no test set: its A_last is —, its A_last (val) is what the study
    # selected by) when a listed run has it
    columns = [
        m for m in metric_registry.columns() if not column_when_measured(m) or any(m.name in r.metrics for r in records)
    ]
    jobs = store.job_states([r.id for r in records if r.status == "queued"])
    marked = []
    rows = []
    for r in records:
        status_text = (
            r.status if r.status != "running" or r.task is None else f"{r.task + 1}/{r.n_tasks} {r.phase or ''}"
        )
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
        # every final-only metric of a partial run carries its @k/T (a bare partial F_last read as final)
        metrics = [(r.metric_text(m.name), style if m.final_only and m.across is None else "") for m in columns]
        rows.append((r, status_text.strip(), r.name or r.preset or "—", what, metrics))
    natural = {  # the widths the other columns need: the run's label gets what is left
        "id": max(2, *(len(str(r.id)) for r, *_ in rows)),
        "status": min(max(6, *(len(t) for _, t, *_ in rows)), STATUS_WIDTH),
        "method": max(len("method"), *(len(r.method) for r, *_ in rows)),
        "K": max(1, *(len(str(r.memory_size)) for r, *_ in rows)),
        "seed": max(4, *(len(str(r.seed)) for r, *_ in rows)),
    }
    metric_widths = [max(len(m.label), *(len(row[4][i][0]) for row in rows)) for i, m in enumerate(columns)]
    if not wide:  # the metric columns the catalogue drops first (its `column` priority) until the run's label fits
        while len(columns) > 1:
            left = console.width - sum(natural.values()) - sum(metric_widths) - (len(natural) + len(columns))
            if left >= 8:
                break
            worst = max(range(len(columns)), key=lambda i: (columns[i].column, i))
            del columns[worst], metric_widths[worst]
            for row in rows:
                del row[4][worst]
    table = Table(box=None, padding=(0, 1), collapse_padding=True, pad_edge=False, header_style="bold")
    table.add_column("id", justify="right", no_wrap=True, min_width=natural["id"])
    table.add_column(
        "status", no_wrap=True, overflow="ellipsis", min_width=natural["status"], max_width=natural["status"]
    )
    if wide:
        labels = [len(label) for _, _, label, _, _ in rows]
        table.add_column("run", min_width=min(max(labels, default=3), 40))  # name, else preset: never cut (to 40)
    else:
        left = console.width - sum(natural.values()) - sum(metric_widths) - (len(natural) + len(columns))
        table.add_column("run", no_wrap=True, overflow="ellipsis", width=max(left, 8))
    table.add_column("method", no_wrap=True, min_width=natural["method"])
    table.add_column("K", justify="right", no_wrap=True, min_width=natural["K"])
    table.add_column("seed", justify="right", no_wrap=True, min_width=natural["seed"])
    if wide:
        table.add_column("changes", overflow="fold", ratio=1)  # the overrides of the preset, then #tags
    for m, width in zip(columns, metric_widths):
        table.add_column(m.label, justify="right", no_wrap=True, min_width=width)
    for r, status_text, label, what, metrics in rows:
        cell = escape(label)
        if what and not wide:  # (cut with … at the cell's end, never a second line)
            # a name, then what it changes; unnamed: what it changes first (what tells it apart), then its preset
            cell = f"{escape(label)} [dim]{escape(what)}[/]" if r.name else f"{escape(what)} [dim]{escape(label)}[/]"
        table.add_row(
            str(r.id),
            f"[{STATUS_COLOURS[r.status]}]{escape(status_text)}[/]",
            cell,
            r.method,
            str(r.memory_size),
            str(r.seed),
            *([escape(what)] if wide else []),
            *[dim(text, style) for text, style in metrics],
        )
    console.print(table)
    for r in marked:
        console.print(f"* run {r.id}: I_last {r.i_last_note} (rmconsole show {r.id})", highlight=False)
    if any(r.partial for r in records):
        console.print("[dim]@k/T: partial, the metrics after task k of T (not final; no I_last)[/]", highlight=False)
    print_sweep_queues([r.sweep_id for r in records if r.sweep_id])


def _say_none_match(filters: list[str] | None, status: str | None, sweep_: str | None, all_: bool) -> None:
    """`runs` found nothing: one line on stderr saying so (exit 1 when filters chose nothing, as grep)."""
    stored = store.count_runs()
    asked = [*(filters or []), *([f"--status {status}"] if status else []), *([f"--sweep {sweep_}"] if sweep_ else [])]
    if not asked:
        err_console.print(
            "no runs in the store yet: start one with `rmconsole run`"
            if not stored
            else f"no runs to show ({stored} archived: `rmconsole runs --all`)",
            highlight=False,
        )
        return
    ranges = [t for t in filters or [] if re.fullmatch(r"id[:=]\d+-\d+", t.strip())]
    hint = ""
    if ranges:
        low, high = re.split(r"[:=]", ranges[0].strip(), maxsplit=1)[1].split("-")
        hint = f"; a range of ids is two terms: 'id>={low}' 'id<={high}'"
    err_console.print(
        f"no runs match {escape(shorten(' '.join(asked), 200))} ({stored} run(s) stored"
        f"{'' if all_ else ', archived ones hidden'}; see `rmconsole runs`){hint}",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(1)
