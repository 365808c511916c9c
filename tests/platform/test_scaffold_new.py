"""`rmconsole new method|dataset|metric NAME`: what it writes installs and runs as written.

The issue's done-when, as a user does it: in a fresh virtual environment (tests/support/plugin_venv.py),
`rmconsole new method mymethod` in an empty folder outside the checkout, `pip install -e` it,
`rmconsole run --set method=mymethod` trains on digits; the method and its parameter show in
`config-keys`, `presets` and the TUI's launch form; a wrong value of its own parameter is one
line; its runs filter and report like built-in ones and record the package that produced them
(its commit: the package is a git checkout here). The package's own tests (the conformance kit)
pass as written; so do a new dataset's and a new metric's."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, rmconsole
from support.plugin_venv import Venv, git

from rmconsole import scaffold
from rmconsole.config import ConfigError

# The declarations the templates write are rmconsole's registries' (MethodSpec, DatasetSpec,
# Metric): without them there is nothing to install a package into.
needs_registries = pytest.mark.skipif(
    not all(
        importlib.util.find_spec(m) for m in ("rmconsole.methods", "rmconsole.datasets", "rmconsole.metric_registry")
    ),
    reason="the method, dataset and metric registries (rmconsole.methods, .datasets, .metric_registry) are not here",
)


def test_names_and_folders_are_refused_in_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    where = tmp_path / "here"
    where.mkdir()
    cases = {
        "9lives": "must be a Python identifier",
        "my-method": "must be a Python identifier",
        "class": "must be a Python identifier",
        "rm": "a built-in method has that name",
        "json": "a module of that name is importable already",
    }
    for name, says in cases.items():
        with pytest.raises(ConfigError, match=says):
            scaffold.new_package("method", name, where)
    (where / "taken").mkdir()
    (where / "taken" / "mine.txt").write_text("keep me\n")
    with pytest.raises(ConfigError, match="exists; nothing was written"):
        scaffold.new_package("method", "taken", where)
    with pytest.raises(ConfigError, match="is not a folder"):
        scaffold.new_package("method", "fine", where / "nowhere")
    assert sorted(p.name for p in where.rglob("*")) == ["mine.txt", "taken"]  # nothing written, nothing touched
    done = rmconsole("new", "method", "rm", "--dir", str(where))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().count("\n") == 0 and "'rm'" in done.stderr


def test_the_templates_are_package_data_and_render_every_placeholder(tmp_path: Path) -> None:
    for kind in scaffold.KINDS:
        files = scaffold.templates(kind)
        assert {"pyproject.toml", "README.md", "pkg/__init__.py", "pkg/declare.py"} <= {rel for rel, _ in files}
        assert any(rel.startswith("tests/test_pkg.py") for rel, _ in files)
        for rel, text in files:
            rendered = scaffold.render(text, "my_thing")
            assert "{{" not in rendered and "}}" not in rendered, (kind, rel)
            if rel.endswith(".py"):
                compile(rendered, rel, "exec")  # valid Python as written
    assert scaffold.class_name("my_thing") == "MyThing"


TUI_PROBE = """
import asyncio, json
from textual.widgets import Input, Select
from rmconsole.tui import RMConsoleApp
from rmconsole.tui.screens.launch import LaunchScreen

async def main():
    app = RMConsoleApp(refresh_s=0.5)
    out = {}
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("n")
        for _ in range(200):
            if isinstance(app.screen, LaunchScreen):
                break
            await pilot.pause(0.05)
        screen = app.screen
        errors = []
        shown = screen.show_error
        screen.show_error = lambda text: (errors.append(text), shown(text))
        screen.query_one("#preset", Select).value = "mymethod-digits"  # refused unless it is an option
        await pilot.pause(0.3)
        table = screen.query_one("#config-preview")
        out["keys"] = [key.value for key in table.rows]
        out["valid"] = screen.valid
        screen.query_one("#overrides", Input).value = "mymethod_replay_share=2"
        await pilot.pause(0.3)
        out["valid_after"] = screen.valid
        out["error"] = next((e for e in reversed(errors) if e), None)
    print(json.dumps(out))

asyncio.run(main())
"""


@needs_registries
@pytest.mark.full  # a fresh venv and pip install, about 40 s of a worker: before every stop, not in CI
def test_new_method_installs_in_a_fresh_venv_and_trains_everywhere(tmp_path: Path) -> None:
    venv = Venv(tmp_path / "venv")
    elsewhere = tmp_path / "research"  # an empty folder outside the checkout
    elsewhere.mkdir()
    assert not elsewhere.is_relative_to(REPO)
    wrote = venv.rmconsole("new", "method", "mymethod", cwd=elsewhere)
    assert wrote.returncode == 0, wrote.stderr
    package = elsewhere / "mymethod"
    assert (package / "pyproject.toml").exists() and (package / "mymethod" / "method.py").exists()
    git(package, "init", "-q")
    git(package, "add", ".")
    git(package, "commit", "-q", "-m", "mymethod as rmconsole new wrote it")
    venv.install_editable(package)

    ran = venv.rmconsole("run", "--set", "method=mymethod", "--set", "epochs=1", timeout=600)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr
    assert "A_last" in ran.stdout
    commit = git(package, "rev-parse", "HEAD")
    detail = json.loads(venv.rmconsole("show", "last", "--json").stdout)
    assert detail["method"] == "mymethod" and detail["status"] == "finished"
    assert detail["versions"]["plugins"] == [
        {
            "kind": "method",
            "name": "mymethod",
            "package": "mymethod",
            "version": "0.1.0",
            "path": str(package),
            "commit": commit,
            "dirty": False,
        }
    ]
    shown = " ".join(venv.rmconsole("show", "last").stdout.split())
    assert f"plug-in method mymethod: package mymethod 0.1.0, {package} @ {commit[:12]}" in shown

    keys = venv.rmconsole("config-keys", COLUMNS="250")
    assert keys.returncode == 0 and "mymethod_replay_share" in keys.stdout
    row = next(line for line in keys.stdout.splitlines() if "mymethod_replay_share" in line)
    assert "mymethod" in row.replace("mymethod_replay_share", "")  # the method that reads it
    presets = venv.rmconsole("presets")
    assert "mymethod-digits" in presets.stdout and "from package mymethod" in presets.stdout

    wrong = venv.rmconsole("run", "--set", "method=mymethod", "--set", "mymethod_replay_share=2")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert wrong.stderr.strip().count("\n") == 0 and "mymethod_replay_share=2" in wrong.stderr
    other = venv.rmconsole("run", "--set", "mymethod_replay_share=0.3")  # the default preset's method is rm
    assert other.returncode == 2 and "mymethod" in other.stderr

    found = json.loads(venv.rmconsole("runs", "method:mymethod", "--json").stdout)
    assert [r["method"] for r in found] == ["mymethod"]
    report = venv.rmconsole("report", "method:mymethod")
    assert report.returncode == 0 and "mymethod" in report.stdout, report.stderr

    tui = venv.python_run(TUI_PROBE, timeout=300)
    assert tui.returncode == 0, tui.stderr[-3000:]
    form = json.loads(tui.stdout.strip().splitlines()[-1])
    assert form["valid"] and "mymethod_replay_share" in form["keys"] and "method" in form["keys"]
    assert not form["valid_after"] and "mymethod_replay_share=2" in form["error"]

    # the package's own tests, as written: the conformance kit (rmconsole.testing.check_method)
    own = subprocess.run(
        [str(venv.python), "-P", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-k", "conformance", "tests"],
        cwd=package,
        capture_output=True,
        text=True,
        env=venv.env(),
        timeout=600,
    )
    assert own.returncode == 0, own.stdout[-3000:] + own.stderr[-2000:]
    assert "1 passed" in own.stdout


@needs_registries
@pytest.mark.slow
@pytest.mark.full  # 35-40 s of a worker, not in CI: the method package's own tests run in the default run
def test_new_dataset_and_metric_packages_pass_their_own_tests(tmp_path: Path) -> None:
    venv = Venv(tmp_path / "venv")
    elsewhere = tmp_path / "research"
    elsewhere.mkdir()
    for kind, name in (("dataset", "mydata"), ("metric", "F_worst")):
        wrote = venv.rmconsole("new", kind, name, cwd=elsewhere)
        assert wrote.returncode == 0, wrote.stderr
        venv.install_editable(elsewhere / name)
    for name in ("mydata", "F_worst"):
        own = subprocess.run(
            [str(venv.python), "-P", "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "tests"],
            cwd=elsewhere / name,
            capture_output=True,
            text=True,
            env=venv.env(),
            timeout=600,
        )
        assert own.returncode == 0, own.stdout[-3000:] + own.stderr[-2000:]
        assert "2 passed" in own.stdout
    listed = venv.rmconsole("data", "list")
    assert listed.returncode == 0 and "mydata" in listed.stdout
