"""The CLI called in this process, for tests of arguments, formats and messages.

`conftest.rmconsole(...)` starts `python -m rmconsole` as a user would: a fresh interpreter that
imports torch, 1-2 s each on the CI machine, which across the suite's ~150 calls was minutes of
its wall time. Tests about processes (a worker killed, resumed, a supervisor's exit code, a
server, a pipe closed) keep starting processes; the rest call `in_process(...)`, which runs the
console script's own entry point (`cli.main`: the one-line errors and their exit codes) in
Click's CliRunner isolation and answers like `subprocess.run(..., capture_output=True,
text=True)`: `.returncode`, `.stdout`, `.stderr`.

What does not leak from one call to the next: the environment (`env` and COLUMNS set only for
the call, and what the command itself sets), sys.argv, stdin/stdout/stderr (CliRunner's), the `--debug` flag, the store's pooled
connections (a process's own: dropped after each call, as a fresh process would have none).
The test's RMCONSOLE_HOME, cwd and PYTHONPATH are the autouse `isolated_home` fixture's.
"""

from __future__ import annotations

import os
import subprocess
import sys

from typer.testing import CliRunner


def in_process(
    *args: str, env: dict[str, str] | None = None, input: str | None = None, columns: int = 200
) -> subprocess.CompletedProcess:
    """`rmconsole ARGS` run by `cli.main` in this process: a CompletedProcess (returncode, stdout,
    stderr) as `conftest.rmconsole` returns. COLUMNS defaults to 200 as there; `env` wins."""
    from rmconsole import cli
    from rmconsole.cli import errors
    from rmconsole.store import db

    full_env = {"COLUMNS": str(columns), **(env or {})}
    code: int = 0
    environ = dict(os.environ)  # what a command sets for itself (os.environ.setdefault) ends with it
    with CliRunner().isolation(input=input, env=full_env) as (out, err, _):
        argv, sys.argv = sys.argv, ["rmconsole", *args]
        try:
            cli.main()
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        finally:
            sys.stdout.flush()  # (print() writes through a buffered wrapper; a process's exit flushes it)
            sys.stderr.flush()
            sys.argv = argv
            os.environ.clear()
            os.environ.update(environ)
            errors._debug = False  # `--debug` is a module flag: a fresh process starts without it
            db.dispose_engines()  # a fresh process has no pooled connections (a replaced store is read anew)
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess(["rmconsole", *args], code, stdout, stderr)
