"""`rmconsole tui --serve`: the same Textual app through textual-serve, driven end to end in a
real headless Chromium by Playwright: the runs table appears, a run opens, screenshots differ.

Needs Debian's chromium (`apt-get install chromium`; .ci/install-chromium does it in CI) and the
playwright package; skipped with the reason where either is missing."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import identity_store

from rmconsole import store

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CAPTURE = """
(() => {
  window.__rmText = "";
  const Native = window.WebSocket;
  window.WebSocket = function (...args) {
    const ws = new Native(...args);
    ws.addEventListener("message", (event) => {
      const data = event.data;
      if (typeof data === "string") { window.__rmText += data; }
      else if (data instanceof ArrayBuffer) { window.__rmText += new TextDecoder().decode(data); }
      else if (data instanceof Blob) { data.arrayBuffer().then((b) => { window.__rmText += new TextDecoder().decode(b); }); }
    });
    return ws;
  };
  window.WebSocket.prototype = Native.prototype;
  Object.assign(window.WebSocket, Native);
})();
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def needs_a_browser() -> Any:
    """The playwright module, or a skip with its reason (no chromium, playwright or textual-serve)."""
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium; CI: .ci/install-chromium)")
    playwright = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    pytest.importorskip("textual_serve", reason="textual-serve is not installed (pip install 'rmconsole[serve]')")
    return playwright


@contextmanager
def served() -> Iterator[str]:
    """`rmconsole tui --serve` on a free port for this test's store; yields its URL (with the token)."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "rmconsole", "tui", "--serve", "--port", str(port), "--refresh", "0.5"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ),
        start_new_session=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        assert f"serving the rmconsole TUI at http://127.0.0.1:{port}/?token=" in first, first
        url = first.split(" at ", 1)[1].split(" ", 1)[0]  # with the token printed once for this start
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the port answers
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def open_page(p: Any, url: str) -> tuple[Any, Any, Callable[..., None]]:
    """(browser, page, seen): headless Chromium on the served TUI; `seen(text)` waits until the
    app has drawn `text` (read from the websocket the page receives)."""
    browser = p.chromium.launch(
        executable_path=CHROMIUM,
        headless=True,
        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
    )
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.add_init_script(CAPTURE)
    page.goto(url)

    def seen(text: str, timeout: float = 90) -> None:
        page.wait_for_function("(t) => window.__rmText.includes(t)", arg=text, timeout=timeout * 1000)

    return browser, page, seen


@pytest.mark.timeout(300)
def test_the_tui_served_to_a_real_browser(tmp_path: Path) -> None:
    playwright = needs_a_browser()
    ids = identity_store.build()
    with served() as url, playwright.sync_playwright() as p:
        browser, page, seen = open_page(p, url)
        seen("baseline")  # the runs table: a run's name, drawn by the app in the browser's terminal
        seen("no augmentation")
        page.wait_for_timeout(1500)
        runs_png = page.screenshot(path=str(tmp_path / "runs.png"))
        page.mouse.click(700, 450)  # focus the terminal (a click on the table highlights a row)
        page.wait_for_timeout(1000)
        page.keyboard.press("Enter")  # open the highlighted run
        seen("loss & lr per epoch")  # the run page's epochs panel
        seen("task stream")
        page.wait_for_timeout(1500)
        run_png = page.screenshot(path=str(tmp_path / "run.png"))
        browser.close()
    assert len(runs_png) > 10_000 and len(run_png) > 10_000  # drawn, not blank pages
    assert runs_png != run_png  # the run page is not the runs page
    assert ids["base"]


@pytest.mark.full  # ~15 s (a server and Chromium), before every stop: CI keeps the served TUI in a real browser above
@pytest.mark.timeout(300)
def test_the_launch_form_typed_fast_in_a_browser() -> None:
    """Issue 27 item 8: keys typed right after Tab land in the field Tab moved to (they landed in
    the previous one: seeds "ab", name "ct1 t2"). Every field is typed the moment Tab is sent, no
    wait between, the form is started from the keyboard, and the sweep it stores is read back."""
    playwright = needs_a_browser()
    typed = {
        "overrides": "epochs=1",
        "seeds": "3,4",
        "name": "ct1",
        "tags": "t2 t3",
        "sweep name": "fast-typing",
        "name template": "{name}-s{seed}",
    }
    with served() as url, playwright.sync_playwright() as p:
        browser, page, seen = open_page(p, url)
        seen("No runs yet")
        page.mouse.click(700, 450)  # focus the terminal
        page.wait_for_timeout(500)
        page.keyboard.press("n")  # the launch form, its overrides field focused
        seen("run-name template")
        page.wait_for_timeout(1000)
        for i, text in enumerate(typed.values()):
            if i:
                page.keyboard.press("Tab")  # and at once the next field's keys
            page.keyboard.type(text)
        page.keyboard.press("Tab")  # the Start button
        page.keyboard.press("Enter")
        deadline = time.monotonic() + 30
        runs: list[store.Run] = []
        while time.monotonic() < deadline and len(runs) < 2:
            time.sleep(0.2)
            runs = store.list_runs()
        browser.close()
    try:
        assert len(runs) == 2, (
            f"the form stored {[(r.seed, r.name, r.tags, r.overrides) for r in runs]} (none: the keys typed "
            "after a Tab did not land in their fields, and the form could not start)"
        )
        assert sorted(r.seed for r in runs) == [3, 4]
        assert {r.sweep_id for r in runs} == {"fast-typing"}
        assert sorted(r.name or "" for r in runs) == ["ct1-s3", "ct1-s4"]
        assert all(r.tags == ["t2", "t3"] for r in runs)
        assert all(r.config["epochs"] == 1 and (r.overrides or {}).get("epochs") == 1 for r in runs)
    finally:
        from rmconsole.runner.queue import stop_sweep

        if runs:
            stop_sweep(runs[0].sweep_id or "", grace_s=5)
