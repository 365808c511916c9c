"""Shared fixtures: a fresh store per test, the repo on PYTHONPATH for worker subprocesses,
and the offline datasets in ../shared/data when they are there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# The tests train on tiny tensors: one torch thread is faster, and on a shared, loaded CPU
# several threads per process oversubscribe the cores (measured 20x slower at load 13 on 2
# cores). Set before torch is imported; worker subprocesses inherit it. A user's value wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RMCONSOLE_TEST_DATA", REPO.parent / "shared" / "data"))


def has_mnist() -> bool:
    return (SHARED_DATA / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()


needs_mnist = pytest.mark.skipif(not has_mnist(), reason=f"MNIST not found under {SHARED_DATA}")


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own RMCONSOLE_HOME (store, logs, checkpoints)."""
    home = tmp_path / "home"
    monkeypatch.setenv("RMCONSOLE_HOME", str(home))
    monkeypatch.delenv("RMCONSOLE_DB", raising=False)
    monkeypatch.setenv("RMCONSOLE_WARM", "0")  # no warm-start server per test home (tests/test_warm.py turns it on)
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.chdir(tmp_path)
    return home


def rmconsole(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("COLUMNS", "200")
    return subprocess.run([sys.executable, "-m", "rmconsole", *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)
