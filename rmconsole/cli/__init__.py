"""The `rmconsole` command line: a thin Typer face over config, store and runner.

One module per responsibility; a command module registers its commands on the shared `app`
(common.py) when it is imported, and this face imports every one of them:
- common.py: the app, the consoles, the user's errors, count and run-id checks
- errors.py: `--debug` and `main` (every failure one line on stderr)
- selection.py: which runs a command means (ids, ranges, last, --where, --runs, filters)
- printing.py: how a run is printed (`show`, the end of `run`), the sweeps' queue lines
- run_commands.py: run, stop, resume, join; sweeps.py: driving a sweep from here
- inspect_commands.py: show, runs
- manage_commands.py: tag, note, rename, archive, rm, diff
- report_commands.py: report, export
- setup_commands.py: presets, new, config-keys, data
- tui_commands.py: tui (and --serve)
- server_commands.py: server list|stop (this user's warm-start servers, runner/warm.py)
- tune_commands.py: tune (an Optuna search whose trials are runs; runner/tune.py)

A new command: a module NAME_commands.py here that does `from .common import app` (and the
consoles and checks it needs) and decorates its functions with `@app.command()` (a group:
`app.add_typer(sub_app, name=...)`), added to the `from . import (...)` below (and to
HELP_ORDER, for its place in `rmconsole --help`; one not named there comes last). The names
below stay importable from `rmconsole.cli` for code written against the single-module CLI.
"""

from __future__ import annotations

# the order of `rmconsole --help`'s commands (Typer lists them as registered; the modules
# register them by responsibility, the help reads by what a user does first)
import inspect

from typer.models import CommandInfo

from . import (  # noqa: F401
    inspect_commands,
    manage_commands,
    report_commands,
    run_commands,
    server_commands,
    setup_commands,
    tui_commands,
    tune_commands,
)
from .common import MAX_SLOTS, RUN_ID, USER_ERRORS, app, check_count, check_run_id, console, dim, err_console
from .errors import main
from .inspect_commands import runs, show
from .printing import epoch_lines, print_run, print_sweep_queues, sparkline
from .run_commands import follow
from .selection import reap_quietly, select_runs
from .sweeps import follow_launched_sweep, follow_sweep

HELP_ORDER = (
    "run",
    "show",
    "runs",
    "presets",
    "tag",
    "note",
    "rename",
    "archive",
    "rm",
    "diff",
    "config-keys",
    "report",
    "export",
    "tune",
    "stop",
    "resume",
    "join",
    "tui",
    "server",
)


def _command_name(info: CommandInfo) -> str:
    if info.name:
        return info.name
    return info.callback.__name__.replace("_", "-") if info.callback else ""


def _reflowed(doc: str) -> str:
    """A docstring as help: each paragraph one line that the terminal wraps. Typer joins the
    first paragraph's lines but keeps the later ones' line breaks, which at 80 columns left a
    stray break where the source's line ended (`tune --help`: "`--study NAME`" alone on a line)."""
    return "\n\n".join(
        part if part.startswith("\b") else " ".join(line.strip() for line in part.splitlines())
        for part in inspect.cleandoc(doc).split("\n\n")
    )


for _info in [
    *app.registered_commands,
    *(c for g in app.registered_groups if g.typer_instance for c in g.typer_instance.registered_commands),
]:
    if _info.help is None and _info.callback is not None and _info.callback.__doc__:
        _info.help = _reflowed(_info.callback.__doc__)

app.registered_commands.sort(
    key=lambda info: HELP_ORDER.index(_command_name(info)) if _command_name(info) in HELP_ORDER else len(HELP_ORDER)
)

__all__ = [
    "HELP_ORDER",
    "MAX_SLOTS",
    "RUN_ID",
    "USER_ERRORS",
    "app",
    "check_count",
    "check_run_id",
    "console",
    "dim",
    "epoch_lines",
    "err_console",
    "follow",
    "follow_launched_sweep",
    "follow_sweep",
    "main",
    "print_run",
    "print_sweep_queues",
    "reap_quietly",
    "runs",
    "select_runs",
    "show",
    "sparkline",
]
