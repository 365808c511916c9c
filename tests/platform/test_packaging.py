"""The presets live at the top level (presets/) and are installed as the package data
`rmconsole.presets`: a checkout and a pip-installed rmconsole must both find them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from rmconsole import config

REPO = Path(__file__).resolve().parents[2]
CHECKOUT_PRESETS = sorted(p.stem for p in (REPO / "presets").glob("*.toml"))

# What an installed rmconsole reports about itself: where it is and where its presets are.
PROBE = """
import json, rmconsole
from rmconsole import config
print(json.dumps({"package": rmconsole.__file__, "preset_dir": str(config.preset_dir()),
                  "presets": config.preset_names()}))
"""


def packages_under(root: Path) -> list[str]:
    """Dotted names of the packages (directories with an __init__.py) in rmconsole/ under root."""
    return sorted(".".join(p.parent.relative_to(root).parts) for p in (root / "rmconsole").rglob("__init__.py"))


def test_a_checkout_finds_the_top_level_presets() -> None:
    assert not (REPO / "rmconsole" / "presets").exists()  # one copy, at the top level
    assert config.preset_dir() == REPO / "presets"
    assert config.preset_names() == CHECKOUT_PRESETS and config.DEFAULT_PRESET in CHECKOUT_PRESETS


def test_a_stale_empty_package_presets_folder_does_not_hide_the_presets(tmp_path: Path) -> None:
    """A checkout updated from before the move can keep an empty rmconsole/presets/ (a sync that
    deletes files but not folders did, on a GPU machine): the top-level presets still count."""
    copy = tmp_path / "checkout"
    shutil.copytree(REPO / "rmconsole", copy / "rmconsole", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "presets", copy / "presets")
    (copy / "rmconsole" / "presets" / "__pycache__").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert found["preset_dir"] == str(copy / "presets") and found["presets"] == CHECKOUT_PRESETS


def test_a_pip_installed_wheel_carries_the_presets_and_every_package(tmp_path: Path) -> None:
    """Build a wheel from a copy of the checkout, pip-install it into a bare directory and ask
    that copy (with the checkout off sys.path) where its presets are."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("rmconsole", "presets"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(source)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    wheel = next((tmp_path / "dist").glob("rmconsole-*.whl"))
    site = tmp_path / "site"
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120
    )
    assert out.returncode == 0, out.stderr
    found = json.loads(out.stdout)
    assert Path(found["package"]).is_relative_to(site)  # the installed copy, not the checkout
    assert Path(found["preset_dir"]) == site / "rmconsole" / "presets"
    assert found["presets"] == CHECKOUT_PRESETS
    # every package of the checkout made it (pyproject.toml lists them by hand), styles included
    assert packages_under(site) == packages_under(REPO)
    assert sorted(p.name for p in (site / "rmconsole").rglob("*.tcss")) == sorted(
        p.name for p in (REPO / "rmconsole").rglob("*.tcss")
    )
    # `rmconsole new`'s templates (package data in folders that are no packages)
    assert sorted(str(p.relative_to(site)) for p in (site / "rmconsole" / "templates").rglob("*.tmpl")) == sorted(
        str(p.relative_to(REPO)) for p in (REPO / "rmconsole" / "templates").rglob("*.tmpl")
    )
    assert len(list((REPO / "rmconsole" / "templates").rglob("*.tmpl"))) >= 7


def test_the_suite_imports_this_checkouts_rmconsole() -> None:
    """pyproject's `pythonpath = ["."]`: in a second checkout (a git worktree) the venv's editable
    install would map `import rmconsole` to the checkout it was installed from, so the in-process
    tests ran that one's code while tools/mutation.py and the tests' subprocesses ran this one's."""
    import rmconsole

    assert Path(rmconsole.__file__ or "").resolve() == REPO / "rmconsole" / "__init__.py"
