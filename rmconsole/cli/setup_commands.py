"""Commands about what runs can be made of: presets, new (plug-in packages), config-keys, data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import plugins
from ..cl.datasets import DatasetMissing
from ..cl.protocols import setting_label
from ..config import (
    ConfigError,
    plugin_presets,
    preset_description,
    preset_names,
    read_preset,
)
from .common import app, console, err_console, working


@app.command()
def presets(
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
    long: bool = typer.Option(False, "--long", "-l", help="With each preset's description."),
) -> None:
    """The bundled presets and the installed plug-ins' (names as `--preset` takes them; --long adds
    what each one is)."""
    items: list[dict[str, Any]] = []
    with working("reading the presets…"):
        shipped, problems = plugin_presets()
        problems = [*plugins.problems(), *problems]  # (a package whose entry points cannot be read at all)
        for name in preset_names():
            try:
                _, config = read_preset(name)
            except ConfigError as err:  # a plug-in's unreadable preset: said, the others listed
                problems.append(str(err))
                continue
            items.append(
                {
                    "name": name,
                    "description": preset_description(name),
                    "config": config,
                    **({"package": shipped[name][1]} if name in shipped else {}),
                }
            )
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
        how = setting_label(c)
        setting = Text(
            f"{c.get('dataset', '?')} · {c.get('model', '?')} · {c.get('method', 'rm')} · "
            f"K={c.get('memory_size', '?')} · {c.get('n_tasks', 5)} tasks · {how}"
            + (f" · from package {item['package']}" if "package" in item else "")
        )
        if long and item["description"]:
            setting.append("\n" + item["description"], style="dim")
        table.add_row(item["name"], setting, end_section=long)
    console.print(table)
    if not long:
        console.print("[dim]descriptions: rmconsole presets --long[/]", highlight=False)


# --------------------------------------------------------------------------- new


new_app = typer.Typer(
    help="Start a plug-in: write a pip-installable package (a method, a dataset or a metric) that runs as written.",
    no_args_is_help=True,
)
app.add_typer(new_app, name="new")
NEW_DIR = typer.Option(None, "--dir", help="Where to write the package's folder (default: the current folder).")
NEW_NAME = "Its name: an identifier, also its package's (a method's and a dataset's are config values)."


def _new(kind: str, name: str, where: Path | None) -> None:
    from ..scaffold import new_package

    folder = new_package(kind, name, Path(where) if where is not None else Path.cwd())
    console.print(f"wrote {kind} plug-in {name!r} in {escape(str(folder))}; next:", highlight=False)
    console.print(f"  pip install -e {escape(str(folder))}", highlight=False)
    console.print(f"  rmconsole run --set {kind}={name}" if kind != "metric" else "  rmconsole runs", highlight=False)


@new_app.command("method")
def new_method(name: str = typer.Argument(..., metavar="NAME", help=NEW_NAME), where: Path | None = NEW_DIR) -> None:
    """A method: its parameters, a Method subclass with its hooks documented, a preset, tests."""
    _new("method", name, where)


@new_app.command("dataset")
def new_dataset(name: str = typer.Argument(..., metavar="NAME", help=NEW_NAME), where: Path | None = NEW_DIR) -> None:
    """A dataset: its declaration (classes, shapes, how to load it), a preset, tests."""
    _new("dataset", name, where)


@new_app.command("metric")
def new_metric(name: str = typer.Argument(..., metavar="NAME", help=NEW_NAME), where: Path | None = NEW_DIR) -> None:
    """A metric: its catalogue row (label, unit, better direction, how it is computed), tests."""
    _new("metric", name, where)


@app.command("config-keys")
def config_keys(
    markdown: bool = typer.Option(False, "--markdown", help="Print docs/configuration.md: the same table in markdown."),
    essential: bool = typer.Option(
        False, "--essential", "-e", help="Only the dozen keys a first run changes, one line each."
    ),
) -> None:
    """Every config key: type, default, allowed values, help, and the methods that read it."""
    from ..config import configuration_page, essential_keys_help, key_table
    from ..methods import method_specs

    if markdown and essential:
        raise ConfigError("config-keys: give --markdown (the whole page) or --essential (a dozen keys), not both")
    if markdown:  # the page documents rmconsole's own keys: no installed plug-in's
        print(configuration_page(), end="")
        return
    if essential:  # the curated help: what a newcomer changes, with its default
        for line in essential_keys_help():
            console.print(escape(line), highlight=False)
        console.print("[dim]every key, and the methods that read it: rmconsole config-keys[/]", highlight=False)
        return
    with working("reading the methods' keys…"):
        unusable = method_specs()[1]
        rows = key_table()
    for problem in unusable:  # a plug-in that cannot be used: named, the rest listed
        err_console.print(f"warning: {problem}", highlight=False, soft_wrap=True)
    table = Table()
    table.add_column("key", no_wrap=True)  # the name `--set` takes (and `| grep lwf_` finds): never cut
    for col in ("type", "default", "allowed", "help", "methods"):
        table.add_column(col, overflow="fold")  # a long value folds onto the next line: never cut either
    for row in rows:
        table.add_row(row.key, row.type, row.default, row.allowed, row.help, row.methods)
    console.print(table)


data_app = typer.Typer(
    help="Datasets: the built-ins, installed plug-ins, ImageFolder trees (folder:PATH), under RMCONSOLE_DATA.",
    no_args_is_help=True,
)
app.add_typer(data_app, name="data")


def _data_get_help() -> str:
    from .. import datasets

    return f"A downloadable dataset: {' | '.join(datasets.downloadable())} (or an installed plug-in's)."


@data_app.command("get")
def data_get(name: str = typer.Argument(..., help=_data_get_help())) -> None:
    """Download a dataset into the data root (needs internet); `rmconsole data list` shows them all."""
    from .. import datasets
    from ..cl.data import data_root, load_dataset

    try:
        spec = datasets.get(name)
    except datasets.UnknownDataset:
        raise ConfigError(
            f"data get {name!r}: downloadable: {', '.join(datasets.downloadable())}; registered "
            f"datasets: {datasets.listing()}"
        ) from None
    if not spec.downloadable:
        raise ConfigError(
            f"data get {name!r}: not downloadable ({spec.get_hint()}); downloadable: "
            f"{', '.join(datasets.downloadable())}"
        )
    data = load_dataset(name, download=True)
    console.print(f"{name}: {len(data.train)} train / {len(data.test)} test images under {data_root()}")


@data_app.command("list")
def data_list() -> None:
    """The registered datasets: name, classes, where they come from (plug-ins are imported to describe them)."""
    from .. import datasets, plugins

    rows = []
    for name in datasets.names():
        try:
            spec = datasets.get(name)
        except ValueError as err:  # a broken plug-in is one row, the others are listed
            rows.append((name, "?", "plug-in", f"[red]{escape(str(err))}[/]"))
            continue
        try:
            classes = str(spec.classes()) + ("" if spec.folder is None or spec.class_folders() else " (tree absent)")
        except DatasetMissing:
            classes = "? (tree absent)"
        plugin = plugins.available("dataset").get(name)
        source = (
            f"plug-in\n{plugin.package}\n{plugin.version}"  # (one per line: a long package name stays whole)
            if plugin and name not in datasets.builtin_names()
            else "built-in"
        )
        rows.append((name, classes, source, escape(spec.description)))
    table = Table(box=None)
    table.add_column("dataset", no_wrap=True)  # the name a config takes: never cut
    table.add_column("classes")
    # a plug-in's package name, however long, is never cut (`rmconsole-mnist-fash…`)
    table.add_column("source", min_width=max(len(line) for row in rows for line in row[2].splitlines()))
    table.add_column("description")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(
        'Any ImageFolder tree: dataset = "folder:PATH" (train/ and val/, one folder per class; '
        "class_orders.toml for class_order=paper).",
        highlight=False,
    )
