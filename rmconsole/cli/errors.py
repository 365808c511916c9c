"""The console script's edge: `--debug`, and every failure as one line on stderr."""

from __future__ import annotations

import errno
import os
import sys

import typer
from rich.markup import escape

from .. import runner
from ..config import shorten
from .common import USER_ERRORS, app, err_console

_debug = False


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")) -> None:
    global _debug
    _debug = debug


def _error(message: str, code: int = 2) -> None:
    """One line on stderr, whatever the message holds (markup is not interpreted, long values cut)."""
    text = " ".join(str(message).split())
    if len(text) > 2000:
        text = f"{text[:1400]} … {text[-500:]}"
    err_console.print(f"[red]error:[/] {escape(text)}", highlight=False, soft_wrap=True)
    sys.exit(code)


def main() -> None:
    """The console script: every failure is one line on stderr (a usage error, bad input, an OS
    error, even a bug) and a non-zero exit code; `--debug` shows tracebacks instead."""
    try:
        code = app(standalone_mode=False, prog_name="rmconsole")
    except typer.TyperException as err:  # Click's usage errors and aborts
        if _debug:
            raise
        if type(err).__name__ == "NoArgsIsHelpError":  # `rmconsole` alone: the help was shown
            sys.exit(2)
        if type(err).__name__ == "Abort":
            sys.exit(1)
        ctx = getattr(err, "ctx", None)
        where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        message = err.format_message() if hasattr(err, "format_message") else str(err)
        _error(f"{message}{where}", int(getattr(err, "exit_code", 2) or 2))
    except USER_ERRORS as err:
        if _debug:
            raise
        _error(str(err))
    except KeyboardInterrupt:
        sys.exit(130)
    except OSError as err:
        if err.errno == errno.EPIPE:  # `rmconsole runs | head`: the reader has gone
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except OSError:
                pass
            sys.exit(1)
        if _debug:
            raise
        _error(runner.describe_os_error(err))
    except Exception as err:
        if _debug:
            raise
        _error(
            f"internal error: {type(err).__name__}: {shorten(str(err), 300)} (run again with "
            f"`rmconsole --debug ...` for the traceback, and please report it)",
            1,
        )
    sys.exit(code if isinstance(code, int) else 0)
