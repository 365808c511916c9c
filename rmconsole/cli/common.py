"""What every command module shares: the Typer app, the two consoles (control characters
shown, never obeyed), the errors that are the user's, and the checks of counts and run ids."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import typer

from .. import runner, store
from ..cl.datasets import DatasetMissing
from ..config import MAX_INT, ConfigError, shorten
from ..sanitize import SafeConsole

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="A terminal experiment console for continual learning around Rainbow Memory.",
)
console = SafeConsole()  # whatever a run's name, tag, note or preset holds, no control character reaches the terminal
err_console = SafeConsole(stderr=True)
USER_ERRORS = (
    ConfigError,
    store.StoreError,
    store.UnknownRun,
    DatasetMissing,
    ValueError,
    runner.StartFailed,
    store.LeaseLost,
)


@contextlib.contextmanager
def working(what: str) -> Iterator[Any]:
    """A spinner and `what` on stderr while a command that may take seconds works (listing presets
    or keys reads every installed plug-in; an export, a detached sweep's validation), removed when
    it ends. Only when stderr is a terminal: never in a pipe, a log or on `--json`'s stdout.
    Yields the status (`.stop()` before asking a question), or None."""
    if not err_console.is_terminal:
        yield None
        return
    with err_console.status(what, spinner="dots") as status:
        yield status


MAX_SLOTS = runner.MAX_SLOTS  # --parallel, --gpus and --nnodes beyond this are typing errors (runner/request.py)
RUN_ID = {"ignore_unknown_options": True}  # `show -1` is a run id to refuse, not an unknown option


def check_run_id(run_id: int) -> int:
    """A run id within the store's range (a negative or 20-digit id is one line, not an OverflowError)."""
    if not 1 <= run_id <= MAX_INT:
        raise ConfigError(
            f"run id {shorten(run_id)}: run ids are whole numbers from 1 to {MAX_INT} (see `rmconsole runs`)"
        )
    return run_id


def check_count(option: str, value: int | None, low: int, high: int = MAX_INT) -> None:
    if value is not None and not low <= value <= high:
        raise ConfigError(f"{option} {shorten(value)}: allowed: {low} to {high}")


def dim(text: str, style: str) -> str:
    return f"[{style}]{text}[/]" if style else text
