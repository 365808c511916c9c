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
from pathlib import Path

import pytest
from support import identity_store

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


@pytest.mark.timeout(300)
def test_the_tui_served_to_a_real_browser(tmp_path: Path) -> None:
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium; CI: .ci/install-chromium)")
    playwright = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    pytest.importorskip("textual_serve", reason="textual-serve is not installed (pip install 'rmconsole[serve]')")
    ids = identity_store.build()
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
        with playwright.sync_playwright() as p:
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
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
