"""The example plug-ins (examples/: the LwF method, the mnist_fashion dataset, the A_new metric)
installed as a user installs them, and used through the installed `rmconsole` end to end.

What CI does: a throwaway virtual environment that reuses this interpreter's packages (a .pth:
no download, seconds), the three example folders installed with `pip install --no-deps
--no-build-isolation -e`, then, with that environment's python, the commands a researcher types:
a run and a sweep of LwF on digits (the sweep from the package's own preset), `presets` and
`show` naming the plug-in, `report` with A_new as a column and a filter, `config-keys`, a bad LwF
value refused in one line, the mnist_fashion dataset through `run`, and the TUI's runs table and
launch form (a short Pilot script). docs/extending.md walks through the same steps.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, SHARED_DATA, needs_mnist, repo_on_path

# the examples installed into a fresh venv by pip (about 90 s of a worker): run before every stop
# (`-m full`), not in CI's 20 minutes; plug-in loading itself is CI's (test_plugins_installed.py)
pytestmark = pytest.mark.full

EXAMPLES = ("lwf", "mnist_fashion", "a_new")
# the packages' presets by path (`--preset digits-lwf` by name too: test_the_packages_presets_...)
LWF_PRESET = str(REPO / "examples" / "lwf" / "rmconsole_lwf" / "presets" / "digits-lwf.toml")
MNIST_FASHION_PRESET = str(
    REPO / "examples" / "mnist_fashion" / "rmconsole_mnist_fashion" / "presets" / "mnist-fashion-4tasks.toml"
)


class Env:
    """The throwaway environment and the store its commands share."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.python = root / "venv" / "bin" / "python"
        self.home = root / "home"
        self.env = {
            **os.environ,
            "RMCONSOLE_HOME": str(self.home),
            "RMCONSOLE_WARM": "0",
            "COLUMNS": "200",
            "RMCONSOLE_DATA": str(SHARED_DATA),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": repo_on_path(os.environ.get("PYTHONPATH", "")),
        }
        self.env.pop("RMCONSOLE_DB", None)

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.python), "-m", "rmconsole", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            cwd=self.root,
        )

    def ok(self, *args: str, timeout: float = 300) -> str:
        done = self.run(*args, timeout=timeout)
        assert done.returncode == 0, (
            f"rmconsole {' '.join(args)}: rc {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
        return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Env:
    """The examples pip-installed into a fresh venv, and an LwF run plus a 2-run sweep stored."""
    env = Env(tmp_path_factory.mktemp("examples"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env.root / "venv")], check=True, timeout=120)
    shared = sysconfig.get_paths()["purelib"]  # this interpreter's packages (torch, textual, pip, setuptools)
    site = next((env.root / "venv" / "lib").glob("python*/site-packages"))
    (site / "shared.pth").write_text(f"import site; site.addsitedir({shared!r})\n")
    folders = [arg for name in EXAMPLES for arg in ("-e", str(REPO / "examples" / name))]
    pip = subprocess.run(
        [str(env.python), "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "-q", *folders],
        capture_output=True,
        text=True,
        env=env.env,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    out = env.ok("run", "--set", "method=lwf", "--set", "epochs=1", "--set", "threads=1", "--name", "lwf-default")
    assert "A_last" in out
    env.ok("run", "--preset", LWF_PRESET, "--set", "epochs=2", "--set", "lwf_lambda=0,1", "--set", "threads=1")
    return env


def test_the_examples_install_and_list_as_plugins(installed: Env) -> None:
    listed = subprocess.run(
        [
            str(installed.python),
            "-c",
            "from rmconsole import plugins; "
            "print(sorted((k, n, p.package) for k in ('method', 'dataset', 'metric') "
            "for n, p in plugins.available(k).items()))",
        ],
        capture_output=True,
        text=True,
        env=installed.env,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    for kind, name, package in (
        ("method", "lwf", "rmconsole-lwf"),
        ("dataset", "mnist_fashion", "rmconsole-mnist-fashion"),
        ("metric", "A_new", "rmconsole-a-new"),
    ):
        assert f"('{kind}', '{name}', '{package}')" in listed.stdout, listed.stdout


def test_the_packages_presets_are_listed_and_runs_record_the_plugin(installed: Env) -> None:
    presets = installed.ok("presets")
    assert "digits-lwf" in presets and "mnist-fashion-4tasks" in presets, presets
    shown = installed.ok("show", "1")
    assert "rmconsole-lwf" in shown and str(REPO / "examples" / "lwf") in shown, shown[-2000:]


def test_lwf_runs_and_sweeps_and_reports_with_the_example_metric(installed: Env) -> None:
    runs = installed.ok("runs", "method:lwf", "--json")
    import json

    rows = json.loads(runs)
    assert len(rows) == 3 and all(r["status"] == "finished" for r in rows), runs[-2000:]
    assert sorted(r["config"].get("lwf_lambda") for r in rows) == [0.0, 1.0, 1.0]
    assert all(r["metrics"].get("A_new") is not None for r in rows), rows
    report = installed.ok("report", "method:lwf", "--rows", "method,lwf_lambda", "--metrics", "A_last,F_last,A_new")
    assert "A_new" in report and "lwf" in report, report
    everything = installed.ok("report", "method:lwf", "--format", "json", "--metrics", "A_new")
    assert "A_new" in everything
    none = installed.ok("runs", "method:lwf", "A_new>100", "--json")
    assert json.loads(none) == []
    some = installed.ok("runs", "method:lwf", "A_new>=0", "--json")
    assert len(json.loads(some)) == 3


def test_config_keys_lists_lwf_and_a_bad_value_is_one_line(installed: Env) -> None:
    keys = installed.ok("config-keys")
    for key in ("lwf_lambda", "lwf_temperature", "lwf_warmup_epochs"):
        assert key in keys, keys[-3000:]
    bad = installed.run("run", "--set", "method=lwf", "--set", "lwf_temperature=0")
    assert bad.returncode != 0
    message = (bad.stderr + bad.stdout).strip()
    assert "lwf_temperature" in message and "Traceback" not in message and len(message.splitlines()) == 1, message
    other = installed.run("run", "--set", "method=er", "--set", "lwf_lambda=2")  # a key only LwF reads
    assert other.returncode != 0 and "lwf" in (other.stderr + other.stdout), other.stderr


@needs_mnist
def test_the_dataset_plugin_runs_through_run(installed: Env) -> None:
    """mnist_fashion end to end (no training: epochs=0 evaluates the 20-class head after each task)."""
    out = installed.ok("run", "--preset", MNIST_FASHION_PRESET, "--set", "epochs=0", "--set", "threads=1", timeout=600)
    assert "A_last" in out
    shown = installed.ok("runs", "dataset:mnist_fashion", "--json")
    import json

    (row,) = json.loads(shown)
    assert row["status"] == "finished" and row["config"]["dataset"] == "mnist_fashion"


TUI_SCRIPT = textwrap.dedent("""
    import asyncio, sys, time
    from rmconsole.tui import RMConsoleApp
    from rmconsole.tui.screens.launch import LaunchScreen
    from rmconsole.tui.screens.run import RunScreen
    from rmconsole.tui.widgets.memory_panel import MemoryPanel
    from rmconsole.tui.widgets.runs_table import RunsTable
    from textual.widgets import DataTable

    async def until(pilot, condition, what, timeout=30.0):
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                sys.exit(f"timed out waiting for {what}")
            await pilot.pause(0.05)

    async def main():
        app = RMConsoleApp(refresh_s=0.1)
        async with app.run_test(size=(160, 45)) as pilot:
            table = lambda: app.screen.query_one(RunsTable)
            await until(pilot, lambda: table().row_count >= 3, "the LwF runs in the runs table")
            methods = {str(getattr(table().get_cell(str(r.key.value), "method"), "plain", "")) for r in table().ordered_rows}
            assert "lwf" in methods, methods
            await pilot.press("n")
            await until(pilot, lambda: isinstance(app.screen, LaunchScreen), "the launch screen")
            await pilot.press(*"method=lwf lwf_lambda=0.5")
            await until(pilot, lambda: app.screen.valid, "a valid LwF config")
            preview = app.screen.query_one("#config-preview", DataTable)
            keys = {str(r.key.value) for r in preview.ordered_rows}
            assert {"lwf_lambda", "lwf_temperature", "lwf_warmup_epochs"} <= keys, sorted(keys)
            await pilot.press(*"5", "backspace", "backspace", "backspace", "backspace", *"-1")  # lwf_lambda=-1
            await until(pilot, lambda: not app.screen.valid, "the bad value refused")
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, LaunchScreen), "the runs page again")
            table().move_cursor(row=table().get_row_index("1"))  # the LwF run on the digits default
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, RunScreen) and app.screen.view is not None, "its run page")
            memory = app.screen.query_one(MemoryPanel)
            await until(pilot, lambda: len(memory.updates) == 5, "its five memory updates")
            assert "LwF keeps no exemplars" in memory.render().plain, memory.render().plain
            print("TUI OK")

    asyncio.run(main())
""")


def test_the_tui_shows_lwf_runs_its_keys_in_the_launch_form_and_its_empty_memory(installed: Env) -> None:
    script = installed.root / "tui_check.py"
    script.write_text(TUI_SCRIPT)
    done = subprocess.run(
        [str(installed.python), str(script)],
        capture_output=True,
        text=True,
        env=installed.env,
        timeout=180,
        cwd=installed.root,
    )
    assert done.returncode == 0 and "TUI OK" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
