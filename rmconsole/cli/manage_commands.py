"""Commands that change runs' identity or existence, and compare two: tag, note, rename,
archive, rm, diff."""

from __future__ import annotations

import sys

import typer
from rich.markup import escape
from rich.table import Table

from .. import metric_registry, runner, store
from ..cl.metric_catalog import mark_carrier
from ..config import ConfigError, shorten
from ..sanitize import json_text
from .common import app, console, err_console
from .selection import _chosen_runs, _run_id


@app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": False})
def tag(
    items: list[str] = typer.Argument(
        ..., metavar="RUN... [+TAG|-TAG]...", help="Run ids (3 4, 3-9, last), then +TAG to add and -TAG to remove."
    ),
    where_: str | None = typer.Option(None, "--where", help="Also the runs that pass this run filter."),
) -> None:
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
def note(
    run: str = typer.Argument(..., metavar="RUN", help="Run id or 'last'."),
    text: str = typer.Argument(..., help='The note ("" clears it).'),
) -> None:
    """Write a note on a run (shown by `show`, searched by the run filter's words)."""
    note_ = runner.check_note(text)  # refused before the run is looked up: nothing read, nothing written
    run_id = _run_id(run)
    store.set_note([run_id], note_)
    console.print(f"run {run_id}: " + (f"note “{escape(note_)}”" if note_ else "note cleared"), highlight=False)


@app.command()
def rename(
    run: str = typer.Argument(..., metavar="RUN", help="Run id or 'last'."),
    name: str = typer.Argument(..., help='The new name ("" clears it).'),
) -> None:
    """Give a run a name (as `run --name`)."""
    run_id = _run_id(run)
    if name.strip():
        runner.check_identity(name.strip(), None)
    store.set_name([run_id], name.strip() or None)
    console.print(
        f"run {run_id}: " + (f"name “{escape(name.strip())}”" if name.strip() else "name cleared"), highlight=False
    )


@app.command()
def archive(
    items: list[str] | None = typer.Argument(None, metavar="RUN...", help="Run ids (3 4, 3-9, last)."),
    where_: str | None = typer.Option(None, "--where", help="The runs that pass this run filter."),
    undo: bool = typer.Option(False, "--undo", help="Bring archived runs back."),
) -> None:
    """Hide runs from `runs`, `report` and the TUI (`--all` / archived:true show them); nothing is deleted."""
    verb = "restored" if undo else "archived"
    if where_ is not None and not items and not store.find_runs(where_, archived=True):
        # nothing to tidy is an answer, not a usage error: a script's `archive --where status:failed` goes on
        console.print(
            f"{verb} 0 runs: none matches --where {escape(shorten(where_, 200))} ({store.count_runs()} run(s) stored)",
            highlight=False,
        )
        return
    ids = _chosen_runs(list(items or []), where_)
    changed = store.set_archived(ids, not undo)
    console.print(
        f"{verb} {len(changed)} run(s)"
        + (f": {', '.join(map(str, changed))}" if changed else "")
        + (f" ({len(ids) - len(changed)} already {verb})" if len(changed) < len(ids) else ""),
        highlight=False,
    )


@app.command("rm")
def remove(
    items: list[str] = typer.Argument(..., metavar="RUN...", help="Run ids (3 4, 3-9, last)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask (for scripts)."),
) -> None:
    """Delete runs for good: their rows, metrics, log and checkpoint. A queued or running run is
    refused (stop it first); `archive` hides a run without deleting it."""
    ids = _chosen_runs(items)
    records = store.run_records(ids, i_last=False)
    active = [r for r in records if r.active]
    if active:
        raise ConfigError(
            f"run {active[0].id} is {active[0].status}: stop it first (rmconsole stop {active[0].id}); "
            f"nothing was deleted"
        )
    if not yes:
        if not sys.stdin.isatty():
            raise ConfigError("rm deletes runs for good: confirm with --yes (no terminal to ask on)")
        headline = mark_carrier(metric_registry.columns())  # (A_last: the runs table's @k/T column)
        for r in records:
            console.print(
                f"  run {r.id} {r.status} {escape(r.label)} {r.method} seed {r.seed}"
                + (f" {headline.name} {r.metric_text(headline.name)}" if headline else ""),
                highlight=False,
            )
        if not typer.confirm(f"Delete {len(records)} run(s) with their rows, logs and checkpoints?", default=False):
            err_console.print("nothing deleted")
            raise typer.Exit(1)
    for r in records:
        runner.delete_run(r.id)
        console.print(f"deleted run {r.id}", highlight=False)


@app.command()
def diff(
    a: str = typer.Argument(..., metavar="RUN_A", help="Run id or 'last'."),
    b: str = typer.Argument(..., metavar="RUN_B", help="Run id or 'last'."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """What differs between two runs: the config keys (values as --set writes them), then the
    metrics (B − A) and the accuracy after each task."""
    from ..report import run_diff

    first, second = store.run_detail(_run_id(a)), store.run_detail(_run_id(b))
    result = run_diff(first, second)
    if as_json:
        print(json_text(result, indent=2))
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
