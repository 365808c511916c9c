"""A throwaway virtual environment that real plug-in packages are pip-installed into.

It reuses the test interpreter's packages (a .pth onto its site-packages: torch and the rest are
not installed again) and has no pip of its own (the shared one runs in it, installing into the
throwaway's site-packages); installs are `--no-deps --no-build-isolation`, so nothing is
downloaded: a few seconds each. rmconsole itself is the checkout under test, on PYTHONPATH
(conftest's isolated_home puts REPO there), run as `python -m rmconsole`."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

from conftest import repo_on_path

# `python -m` and `-c` put the working folder first on sys.path, where a plug-in's project folder
# (holding a folder of the package's name) would shadow the installed package as a namespace
# package; the `rmconsole` console script does not, and neither does -P (Python 3.11+).
SAFE_PATH = ["-P"] if sys.version_info >= (3, 11) else []


class Venv:
    def __init__(self, root: Path) -> None:
        self.root = root
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
        self.python = root / "bin" / "python"
        site = Path(
            subprocess.run(
                [str(self.python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
        )
        (site / "shared.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        self.site = site

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = repo_on_path(env.get("PYTHONPATH", ""))
        env.setdefault("COLUMNS", "200")
        env.pop("RMCONSOLE_NO_PLUGINS", None)
        env.update(extra)
        return env

    def install_editable(self, folder: Path) -> None:
        done = subprocess.run(
            [
                str(self.python),
                "-m",
                "pip",
                "install",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "--disable-pip-version-check",
                "--no-index",
                "-e",
                str(folder),
            ],
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr

    def python_run(self, code: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(self.python), *SAFE_PATH, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            env=self.env(**env),
            timeout=timeout,
        )

    def rmconsole(
        self, *args: str, timeout: float = 300, cwd: Path | None = None, **env: str
    ) -> subprocess.CompletedProcess:
        """The real CLI, run by the throwaway's interpreter (it sees the plug-ins installed there)."""
        return subprocess.run(
            [str(self.python), *SAFE_PATH, "-m", "rmconsole", *args],
            capture_output=True,
            text=True,
            env=self.env(**env),
            timeout=timeout,
            cwd=cwd,
        )


def git(folder: Path, *args: str) -> str:
    """A git command in `folder` (an author set: a test machine may have none configured)."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(
        ["git", *args], cwd=folder, check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def write_package(
    folder: Path, name: str, files: dict[str, str], entry_points: dict[str, dict[str, str]], version: str = "0.1.0"
) -> Path:
    """A minimal pip-installable package: pyproject.toml (setuptools, its entry points) + `files`."""
    folder.mkdir(parents=True, exist_ok=True)
    groups = "".join(
        f'\n[project.entry-points."{group}"]\n' + "".join(f'{k} = "{v}"\n' for k, v in entries.items())
        for group, entries in entry_points.items()
    )
    (folder / "pyproject.toml").write_text(
        textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{name}"
        version = "{version}"
        requires-python = ">=3.10"

        [tool.setuptools.packages.find]
        include = ["{name.replace("-", "_")}*"]

        [tool.setuptools.package-data]
        "*" = ["*.toml"]
        """)
        + groups
    )
    for rel, text in files.items():
        path = folder / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return folder
