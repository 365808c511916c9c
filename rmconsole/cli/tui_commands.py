"""The tui command: the Textual app in this terminal, or served to a browser."""

from __future__ import annotations

import math
import sys

import typer

from .. import long_lived_imports, store
from ..config import ConfigError
from .common import app, console, err_console

MIN_REFRESH_S = 0.1


@app.command()
def tui(
    ctx: typer.Context,
    refresh: float = typer.Option(1.0, "--refresh", help="Seconds between store reads."),
    serve: bool = typer.Option(False, "--serve", help="Serve the same TUI to a web browser (textual-serve)."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="With --serve: the address to listen on (default: this machine only)."
    ),
    port: int = typer.Option(8000, "--port", help="With --serve: the port."),
) -> None:
    """Open the terminal UI: runs live, one run's stream/memory/accuracy/epochs/log, compare, launch,
    stop, resume. With --serve, the same app in a browser (each browser tab runs its own copy)."""
    if not (refresh > 0 and math.isfinite(refresh)):
        raise ConfigError(f"--refresh {refresh}: must be a number of seconds above 0")
    for option in ("host", "port"):  # (without --serve they were ignored, and the TUI opened here)
        if not serve and getattr(ctx.get_parameter_source(option), "name", "") == "COMMANDLINE":
            raise ConfigError(f"--{option} is where --serve listens: add --serve, or leave --{option} out")
    if refresh < MIN_REFRESH_S:  # a store read per 0.1 ms burns a core and shows nothing faster
        err_console.print(
            f"--refresh {refresh:g}: reading the store that often only costs CPU; using {MIN_REFRESH_S:g} s",
            highlight=False,
        )
        refresh = MIN_REFRESH_S
    store.get_engine()  # an unusable store is a one-line error here, not a screen of them
    if serve:
        serve_tui(refresh, host, port)
        return
    with long_lived_imports():
        from ..tui import RMConsoleApp
    RMConsoleApp(refresh_s=refresh).run()


def serve_tui(refresh: float, host: str, port: int) -> None:
    """`tui --serve`: textual-serve runs `rmconsole tui` (this very command, without --serve) for
    each browser connection and streams it over a websocket: one code path, not a second UI.
    Every request needs the token printed here (serving.py), and a browser's must come from
    the served page (its Origin)."""
    import shlex
    import socket as socket_

    try:
        import textual_serve.server  # noqa: F401
    except ImportError:
        raise ConfigError("--serve needs textual-serve: pip install 'rmconsole[serve]'") from None
    if not 0 < port < 65536:
        raise ConfigError(f"--port {port}: allowed: 1 to 65535")
    try:  # a taken port or an unknown host is one line here, not an aiohttp traceback
        with socket_.socket(socket_.AF_INET6 if ":" in host else socket_.AF_INET) as probe:
            probe.setsockopt(socket_.SOL_SOCKET, socket_.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as err:
        raise ConfigError(f"--host {host} --port {port}: cannot listen there ({err.strerror})") from None
    from ..serving import guarded_server, new_token

    command = shlex.join([sys.executable, "-m", "rmconsole", "tui", "--refresh", f"{refresh:g}"])
    shown = f"[{host}]" if ":" in host else host
    token = new_token()  # printed here once; never in an argv, an environment or an error message
    url = f"http://{shown}:{port}/?token={token}"
    console.print(
        f"serving the rmconsole TUI at {url} (store {store.shown_url(store.database_url())}); "
        f"open that URL (the token is new at each start); Ctrl-C stops",
        highlight=False,
        soft_wrap=True,
    )
    if host not in ("127.0.0.1", "localhost", "::1"):
        err_console.print(
            f"[yellow]note:[/] listening on {host}: anyone who can reach it and has the token can launch "
            f"and stop runs, and the token crosses the network in clear; prefer the default 127.0.0.1 "
            f"and an SSH tunnel (ssh -L {port}:127.0.0.1:{port} HOST)",
            highlight=False,
        )
    guarded_server(command, host, port, token).serve()
