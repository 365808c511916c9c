"""`rmconsole server list|stop`: this user's warm-start servers (runner/warm.py), a thin face.

A warm server is a ~700 MB process (torch imported) that forks runs so they start in a second;
there is one per user and installed version, whatever the number of store homes, and it exits
after RMCONSOLE_WARM_IDLE_S (default 900) idle seconds. These commands show what is running,
for how long it stays, and stop it now (runs it started go on: each is its own session).
"""

from __future__ import annotations

import json

import typer

from ..runner import warm
from .common import app, console

server_app = typer.Typer(
    no_args_is_help=True,
    help="This user's warm-start servers: list them, stop them "
    "(one per installed version, shared by every store home).",
)
app.add_typer(server_app, name="server")


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = round(seconds)
    return (
        f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else f"{seconds // 60}:{seconds % 60:02d}"
    )


def _line(server: warm.Server) -> str:
    """One server on one line of at most 80 columns."""
    rss = f"{server.rss_kb / 1024:.0f} MB" if server.rss_kb is not None else "? MB"
    who = (
        "current"
        if server.current
        else "stale code"
        if server.stale  # stale: this checkout's older code
        else "other env"
        if server.installation.startswith(warm.installation())  # other thread/path settings
        else "other install"
    )
    homes = f"{len(server.homes)} home{'s' if len(server.homes) != 1 else ''}"
    return (
        f"pid {server.pid}  {rss}  idle {_clock(server.idle_s)}, exits in {_clock(server.exits_in_s)}  "
        f"{server.runs} run{'s' if server.runs != 1 else ''}, {homes}  {who}"
    )


@server_app.command("list")
def server_list(as_json: bool = typer.Option(False, "--json", help="One JSON object per server.")) -> None:
    """This user's warm servers: pid, resident memory, idle time, when each exits, runs and homes served."""
    found = warm.servers()
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "pid": s.pid,
                        "fingerprint": s.fingerprint,
                        "version": s.version,
                        "rss_kb": s.rss_kb,
                        "idle_s": s.idle_s,
                        "exits_in_s": s.exits_in_s,
                        "idle_exit_s": s.idle_exit_s,
                        "runs": s.runs,
                        "homes": list(s.homes),
                        "installation": s.installation,
                        "current": s.current,
                        "stale": s.stale,
                    }
                    for s in found
                ],
                indent=1,
            )
        )
        return
    if not found:
        console.print(
            f"no warm server running (one starts with the next run; folder {warm.servers_folder()})",
            highlight=False,
            soft_wrap=True,
        )
        return
    console.print(
        f"warm servers in {warm.servers_folder()}; each exits after {_clock(found[0].idle_exit_s)} idle "
        f"(current: the one this installation uses)",
        highlight=False,
        soft_wrap=True,
    )
    for server in found:
        console.print("  " + _line(server), highlight=False, soft_wrap=True)


@server_app.command("stop")
def server_stop() -> None:
    """Stop this user's warm servers now (the runs they started go on; the next run starts a new one)."""
    stopped = warm.stop_servers()
    if not stopped:
        console.print("no warm server running", highlight=False)
        return
    pids = ", ".join(str(s.pid) for s in stopped)
    console.print(
        f"stopped {len(stopped)} warm server{'s' if len(stopped) != 1 else ''} (pid {pids}); runs they started go on",
        highlight=False,
        soft_wrap=True,
    )
