"""`rmconsole tui --serve`: textual-serve behind a per-start secret token and an Origin check.

The served TUI launches and stops runs, so whoever reaches its websocket acts as the user. Two
locks, as Jupyter's server has them:
- a token, new at every start (`secrets.token_urlsafe`), printed once on the terminal that
  started the server inside the URL to open (`http://127.0.0.1:8000/?token=...`). The page
  trades it for an HttpOnly, SameSite=Strict cookie and redirects to a URL without it; every
  request but the static files (the page, the websocket, downloads) needs the cookie or the
  token. It never sits in a process's argv or environment: the app processes textual-serve
  starts (`rmconsole tui`) are started without it, and no error message repeats it.
- an Origin check: a browser request that says where its page came from must come from the
  page this server served (the Origin's host:port is the request's Host), so a page of another
  site open in the same browser cannot drive the TUI, even knowing the port.
The page's websocket URL is built from the request's own Host, so an SSH tunnel to another
local port (`ssh -L 9000:127.0.0.1:8000`) works as well.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

COOKIE = "rmconsole_tui_token"
REFUSED = (
    "rmconsole: this TUI needs the token that `rmconsole tui --serve` printed where it was started: "
    "open the full URL it printed (…/?token=…)"
)


def new_token() -> str:
    return secrets.token_urlsafe(32)


def same_origin(origin: str, host: str) -> bool:
    """Whether a browser's Origin header names the host:port this request was sent to."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    netloc = parts.netloc.lower()
    host = host.lower()
    default = {"http": ":80", "https": ":443"}[parts.scheme]
    return netloc == host or netloc + default == host or netloc == host + default


def token_matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


def guarded_server(command: str, host: str, port: int, token: str, title: str = "rmconsole") -> Any:
    """A textual-serve Server whose every request but static files needs the token, and whose
    browser requests must come from its own page."""
    import aiohttp_jinja2
    from aiohttp import web
    from textual_serve.server import Server, to_int

    cookie = f"{COOKIE}_{port}"  # one per server: cookies are shared between a host's ports

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if origin is not None and not same_origin(origin, request.host):
            raise web.HTTPForbidden(text=f"rmconsole: refused a request from another site's page ({origin[:100]})")
        if request.path.startswith("/static/"):
            return await handler(request)
        if token_matches(request.query.get("token"), token):
            if request.path == "/" and request.method == "GET":  # trade it for a cookie; drop it from the URL
                query = "&".join(f"{k}={v}" for k, v in request.query.items() if k != "token")
                found = web.HTTPFound("/" + (f"?{query}" if query else ""))
                found.set_cookie(cookie, token, httponly=True, samesite="Strict", path="/")
                raise found
            return await handler(request)
        if token_matches(request.cookies.get(cookie), token):
            return await handler(request)
        raise web.HTTPForbidden(text=REFUSED)

    class GuardedServer(Server):
        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(guard)
            return app

        async def on_startup(self, app: web.Application) -> None:  # the CLI has said where to go
            return None

        @aiohttp_jinja2.template("app_index.html")
        async def handle_index(self, request: web.Request) -> dict[str, Any]:
            """textual-serve's page, its URLs built from the request's own scheme and host (a
            tunnel to another port works), never from the address the server listens on."""
            base = f"{request.scheme}://{request.host}"
            ws = ("wss" if request.scheme == "https" else "ws") + f"://{request.host}"
            return {
                "font_size": to_int(request.query.get("fontsize", "16"), 16),
                "app_websocket_url": ws + str(request.app.router["websocket"].url_for()),
                "config": {
                    "static": {"url": base + str(request.app.router["static"].url_for(filename="/")).rstrip("/") + "/"}
                },
                "application": {"name": self.title},
            }

    return GuardedServer(command, host=host, port=port, title=title)
