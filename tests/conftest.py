"""Shared fixtures: a fresh store per test, the repo on PYTHONPATH for worker subprocesses,
and the offline datasets in ../shared/data when they are there.

The store backends. A module marked `pytestmark = pytest.mark.usefixtures("store_backend")`
runs each of its tests twice: on the SQLite file in RMCONSOLE_HOME, and on a fresh database of
a real PostgreSQL server (RMCONSOLE_DB). The server is CI's (`.ci/services` exports
RMCONSOLE_TEST_PG), else a throwaway cluster this session starts with the same script; where
none can start, the PostgreSQL tests are skipped with the reason. Slurm likewise
(`slurm_cluster`): CI's single-node cluster (RMCONSOLE_TEST_SLURM = its partition), else one
started here, else skipped with the reason.

Long end-to-end process tests (a real `rmconsole run` with its supervisor and worker, a sweep's
queue, a SIGKILL and a resume) run on PostgreSQL only under `-m slow` (PG_SLOW_ONLY), most of them
only under `-m full` (PG_FULL_ONLY: before every stop, not in CI): their store calls are the store
API that the store, query, transition, concurrency and bad-input tests exercise on both backends
in the default run, and doubling them would keep CI past its budget.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# A store operation slower than 2 s prints "waiting for the store..." on stderr; on a loaded 2-core
# machine that happens by chance and breaks tests that read a command's exact message. Raised for
# the suite (the processes it starts inherit it); tests of the notice lower it themselves.
os.environ.setdefault("RMCONSOLE_WAIT_NOTICE_S", "120")

# Bytecode caches written, whatever PYTHONDONTWRITEBYTECODE says (some machines, CI's among them,
# set it for every process): without them each of the suite's ~thousand Python processes compiles
# rmconsole's modules afresh (~0.15-0.2 s each) and each xdist worker of each leg rewrites the
# test files' asserts (~12 s). The caches go to __pycache__ folders (.gitignore'd), as by default.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False

# The tests train on tiny tensors: one torch thread is faster, and on a shared, loaded CPU
# several threads per process oversubscribe the cores (measured 20x slower at load 13 on 2
# cores). Set before torch is imported; worker subprocesses inherit it. A user's value wins.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The conformance kit runs a method at 2 threads once (rmconsole.testing, same-decisions-any-threads):
# OpenMP's spinning workers made that run 10x slower on a loaded core; passive waiting costs nothing
# at one thread. Read when torch loads its OpenMP runtime, so set here.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _interpreter_sites() -> list[str]:
    import site
    import sysconfig

    user = [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    found = [*site.getsitepackages(), *user, sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
    return list(dict.fromkeys(found))


# The suite never reads the plug-ins installed in its interpreter (a user who followed
# docs/extending.md has one there, and tests that list names would see it): rmconsole reads entry
# points only from sys.path folders not in RMCONSOLE_PLUGIN_IGNORE (rmconsole/plugins.py). The
# suite's own plug-ins live elsewhere (dist-info folders in tmp_path, a throwaway venv's
# site-packages: tests/support/plugin_venv.py), so they are still found; the processes a test starts
# inherit the variable. A test about the user's real installation opts in with `installed_plugins`.
INTERPRETER_SITES = _interpreter_sites()
os.environ["RMCONSOLE_PLUGIN_IGNORE"] = os.pathsep.join(
    dict.fromkeys(
        p for p in (*INTERPRETER_SITES, *os.environ.get("RMCONSOLE_PLUGIN_IGNORE", "").split(os.pathsep)) if p
    )
)


# Test files import helpers from test files of other layer folders (store/test_run_filters.py and
# faults/test_silent_failures.py from faces/test_tui.py); pytest puts only a test file's own folder on sys.path, so every layer folder goes there.
# Moving those helpers into tests/support/ makes this block unnecessary.
for _layer in ("cl", "store", "runner", "faces", "faults", "platform"):
    if str(Path(__file__).parent / _layer) not in sys.path:
        sys.path.append(str(Path(__file__).parent / _layer))

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("RMCONSOLE_TEST_DATA", REPO.parent / "shared" / "data"))


def repo_on_path(existing: str) -> str:
    """PYTHONPATH with the checkout first and no empty entry: an empty one (`REPO:` when nothing
    was set, as in CI) puts a subprocess's working folder on sys.path, where a folder named like a
    plug-in's package shadows the installed package as a namespace package."""
    return os.pathsep.join(dict.fromkeys(p for p in (str(REPO), *existing.split(os.pathsep)) if p))


def has_mnist() -> bool:
    return (SHARED_DATA / "MNIST" / "raw" / "train-images-idx3-ubyte").exists()


needs_mnist = pytest.mark.skipif(not has_mnist(), reason=f"MNIST not found under {SHARED_DATA}")


@pytest.fixture(autouse=True)
def no_metric_problems_left_over() -> Iterator[None]:
    """What a test's fake metric plug-ins left in the process's records of plug-in problems (the
    warnings `runs`, `show` and `report` print) is forgotten after it: a later in-process command
    on the same worker must not warn about a plug-in that test invented."""
    yield
    from rmconsole import metric_registry
    from rmconsole.cl import metric_catalog

    metric_registry._problems.clear()
    metric_catalog._failures.clear()


USER_WARM = {"folder": Path(), "since": 0.0, "reported": set()}  # set by `warm_servers`


def _servers_started_for_tests(folder: Path, since: float) -> list[str]:
    """Warm servers in the user's `folder` of this checkout's code (their status file's
    `installation` ends with it; runner/warm.py) that started after `since`, or served a home in
    the temporary folder (every test's) after it. A server clobbers its environment (setproctitle),
    so what started it cannot be read; one the user started from this same checkout while the suite
    ran would be counted too."""
    import json

    found = []
    for status in folder.glob("*.json") if folder.is_dir() else ():
        try:
            if status.stat().st_mtime < since:
                continue
            served = json.loads(status.read_text())
        except (OSError, ValueError):
            continue
        ours = str(served.get("installation", "")).endswith("|" + str(REPO / "rmconsole"))
        tests = any(str(home).startswith(tempfile.gettempdir()) for home in served.get("homes", []))
        if ours and ((served.get("started") or 0) >= since or tests):
            found.append(status.stem)
    return found


@pytest.fixture(scope="session", autouse=True)
def warm_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One warm-start folder per test process (runner/warm.py), never the user's own: its server
    imports torch once and forks the runs of every test after the first, as it does for a user
    (warm starts are the default), instead of each run importing torch afresh, ~3-4 s of CPU a
    start. Set for the whole session, so module- and session-scoped fixtures that start runs use it
    too (a module fixture is set up before any test's `isolated_home`); stopped when the session
    ends. RMCONSOLE_TEST_COLD=1 starts every run cold instead."""
    from rmconsole.runner import warm

    USER_WARM.update(folder=warm.servers_folder(), since=time.time() - 1)  # before the suite changes it
    folder = tmp_path_factory.mktemp("warm-servers")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RMCONSOLE_WARM_DIR", str(folder))
        patch.setenv("RMCONSOLE_WARM_IDLE_S", "1800")
        yield folder
        warm.stop_servers()


@pytest.fixture(autouse=True)
def no_warm_server_in_the_users_folder() -> Iterator[None]:
    """A process a test starts must never start a warm server in the user's own folder (it would
    outlive the suite by its idle time, holding a test's code and environment): such a server
    fails the first test to end after it appeared (a module fixture's server: that module's first)."""
    yield
    folder, reported = USER_WARM["folder"], USER_WARM["reported"]
    leaked = sorted(set(_servers_started_for_tests(folder, USER_WARM["since"])) - reported)
    reported.update(leaked)
    assert not leaked, f"a warm server for a test's store started in the user's folder {folder}: {leaked}"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm_servers: Path) -> Path:
    """Every test gets its own RMCONSOLE_HOME (store, logs, checkpoints); runs start warm from this
    test process's server (`warm_servers`): the server holds no store, each request carries its home."""
    home = tmp_path / "home"
    monkeypatch.setenv("RMCONSOLE_HOME", str(home))
    monkeypatch.delenv("RMCONSOLE_DB", raising=False)
    cold = os.environ.get("RMCONSOLE_TEST_COLD", "").strip() == "1"
    monkeypatch.setenv("RMCONSOLE_WARM", "0" if cold else "1")
    monkeypatch.setenv("RMCONSOLE_WARM_DIR", str(warm_servers))  # never the user's own servers
    monkeypatch.setenv("RMCONSOLE_WARM_IDLE_S", "1800")
    monkeypatch.setenv("PYTHONPATH", repo_on_path(os.environ.get("PYTHONPATH", "")))
    monkeypatch.chdir(tmp_path)
    return home


@pytest.fixture
def installed_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Opt in to the plug-ins installed in the test interpreter (the suite ignores them otherwise)."""
    from rmconsole import plugins

    monkeypatch.delenv("RMCONSOLE_PLUGIN_IGNORE")
    plugins.forget()
    yield
    monkeypatch.undo()
    plugins.forget()


def install_fake_plugins(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    kind: str,
    module: str,
    source: str,
    package: str,
    entries: dict[str, str],
    version: str = "0.1",
) -> dict:
    """Plug-ins of `kind` as if installed (no pip): `source` written as tmp_path/<module>.py on the
    path, `plugins.available(kind)` answering entries {name: "module:ATTR"} of `package` (every
    other kind as installed), the plug-in caches forgotten. Returns those Plugin rows by name."""
    from rmconsole import plugins

    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    found = {name: plugins.Plugin(kind, name, target, package, version) for name, target in entries.items()}
    real = plugins.available
    monkeypatch.setattr(plugins, "available", lambda asked: found if asked == kind else real(asked))
    plugins.forget()
    return found


def train_in_process(run_id: int, fail_after_task: int | None = None, lose_rename_of_task: int | None = None) -> None:
    """The worker's own training (worker.train) in this process: fast, and as written as by a
    worker process. `fail_after_task`: raise once that task (0-based) is recorded, as a crash;
    `lose_rename_of_task`: that task's checkpoint never reaches its place (a kill between the
    commit of its result and the rename)."""
    import torch

    from rmconsole import store
    from rmconsole.runner import checkpoints, worker

    pending = getattr(checkpoints, "PendingCheckpoint", None)
    real_commit = pending.commit if pending is not None else None
    real_finished = worker.StoreReporter.task_finished
    seen: list[int] = []

    def commit(self):
        if lose_rename_of_task is not None and seen and seen[-1] == lose_rename_of_task:
            self.discard()
            raise RuntimeError("killed between the commit and the rename (simulated)")
        return real_commit(self)

    def task_finished(self, outcome, checkpoint):
        seen.append(outcome.task)
        real_finished(self, outcome, checkpoint)
        if outcome.task == fail_after_task:
            raise RuntimeError("crashed after the task (simulated)")

    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as patched:
        if lose_rename_of_task is not None:
            patched.setattr(checkpoints.PendingCheckpoint, "commit", commit)
        patched.setattr(worker.StoreReporter, "task_finished", task_finished)
        try:
            with pytest.raises(RuntimeError):
                worker.train(run_id)
        finally:
            torch.set_num_threads(threads)
    store.mark_failed(run_id, "crashed (simulated)")


SERVICES = REPO / ".ci" / "services"
_started: dict[str, dict[str, str]] = {}  # services this process has read: their env lines
_database_numbers = itertools.count(1)


def _read_env(path: Path) -> dict[str, str]:
    import shlex

    env = {}
    for line in path.read_text().splitlines():
        if line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = shlex.split(value)[0] if value else ""
    return env


def _shared_root(factory: pytest.TempPathFactory, config: pytest.Config) -> Path:
    """A folder every process of this run sees: under pytest-xdist the controller's base temp
    folder, else this session's."""
    workerinput = getattr(config, "workerinput", None)
    return Path(workerinput["rmconsole_shared"]) if workerinput else factory.getbasetemp()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:  # xdist's hook (its WorkerController), in the controller
    """What each xdist worker is told: the controller's base temp folder (services are recorded
    there) and a short folder for the workers' own temp folders. xdist's default puts them at
    <base>/popen-gwN/, ten characters longer than a serial run's: the CLI's messages shorten a path
    past 80 characters and wrap long lines, and the tests that compare messages with their
    tmp_path then fail for the path's length alone. /tmp/rmtXXXXXXXX/gwN/ is shorter than a
    serial run's /tmp/pytest-of-USER/pytest-N/."""
    config = node.config
    if not hasattr(config, "_rmconsole_short_tmp"):
        config._rmconsole_short_tmp = tempfile.mkdtemp(prefix="rmt")
    node.workerinput["rmconsole_shared"] = str(config._tmp_path_factory.getbasetemp())
    node.workerinput["rmconsole_short_tmp"] = config._rmconsole_short_tmp


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path plugin reads --basetemp
def pytest_configure(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput and "rmconsole_short_tmp" in workerinput:
        config.option.basetemp = os.path.join(workerinput["rmconsole_short_tmp"], workerinput["workerid"])
    if workerinput is not None:  # xdist's workers get COLUMNS=80 LINES=24, which a serial run does not
        for name in ("COLUMNS", "LINES"):  # have: the CLI's output (rich) would wrap at 80 columns there
            if os.environ.get(name) == {"COLUMNS": "80", "LINES": "24"}[name]:
                del os.environ[name]


def _start_service(name: str, factory: pytest.TempPathFactory, config: pytest.Config) -> dict[str, str]:
    """Start `name` (postgres, slurm) with .ci/services once per test run, whatever the number of
    xdist workers (the first to ask starts it under a file lock; the others read its env file);
    its exported variables. The controller stops them all at the end (pytest_sessionfinish)."""
    if name not in _started:
        from filelock import FileLock

        root = _shared_root(factory, config) / "services"
        root.mkdir(exist_ok=True)
        with FileLock(str(root / f"{name}.lock")):
            record = root / f"{name}.folder"
            if not record.exists():
                folder = tempfile.mkdtemp(prefix=f"rmconsole-test-{name}-")  # not under pytest's 0700 tmp:
                record.write_text(folder)  # the server's user must reach it
                subprocess.run([str(SERVICES), "start", folder, name], capture_output=True, text=True, timeout=300)
            env_file = Path(record.read_text()) / "env"
            _started[name] = _read_env(env_file) if env_file.exists() else {}
    return _started[name]


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the services this run started (in the controller, after every xdist worker is done)."""
    factory = getattr(session.config, "_tmp_path_factory", None)  # pytest's own, made at configure
    if hasattr(session.config, "workerinput") or factory is None:
        return
    root = factory.getbasetemp() / "services"
    for record in sorted(root.glob("*.folder")) if root.is_dir() else ():
        folder = record.read_text()
        subprocess.run([str(SERVICES), "stop", folder], capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)
    short = getattr(session.config, "_rmconsole_short_tmp", None)  # the xdist workers' temp folders
    if short and session.exitstatus == 0:
        shutil.rmtree(short, ignore_errors=True)
    elif short:
        print(f"\nthe xdist workers' temp folders (tmp_path of each test): {short}")


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> str:
    """The URL of a PostgreSQL server's maintenance database (a user that may create databases)."""
    url = os.environ.get("RMCONSOLE_TEST_PG")
    if not url:
        reason = os.environ.get("RMCONSOLE_TEST_PG_SKIP")
        if reason:
            pytest.skip(f"PostgreSQL: {reason}")
        env = _start_service("postgres", tmp_path_factory, pytestconfig)
        url = env.get("RMCONSOLE_TEST_PG")
        if not url:
            pytest.skip(f"PostgreSQL: {env.get('RMCONSOLE_TEST_PG_SKIP', 'no server could be started')}")
    return url


def _admin(url: str):  # an autocommit engine on the server's maintenance database
    import sqlalchemy

    from rmconsole.store.db import engine_url

    return sqlalchemy.create_engine(engine_url(url), isolation_level="AUTOCOMMIT", poolclass=sqlalchemy.NullPool)


def fresh_postgres_database(server: str, template: str | None = None) -> str:
    """A new database on the server, empty or a copy of `template`; returns its URL."""
    from sqlalchemy.engine import make_url

    name = f"rmtest_{os.getpid()}_{next(_database_numbers)}"
    with _admin(server).connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    return make_url(server).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def postgres_template(postgres_server: str) -> Iterator[str]:
    """A database holding the store's schema at its head revision without an identity row, made
    once per test process: `store_backend`'s databases are copies (CREATE DATABASE ... TEMPLATE),
    so each skips the ~0.5 s of creating the schema; its first open writes its own identity (a
    random id, never the template's). Tests about creating or upgrading a store use
    `fresh_postgres_database(server)`: empty."""
    from sqlalchemy.engine import make_url

    from rmconsole.store import db

    url = fresh_postgres_database(postgres_server)
    db.get_engine(url)  # the schema, as the store creates it
    db.dispose_engines()
    engine = _admin(url)
    with engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM store_identity")
    engine.dispose()
    name = make_url(url).database
    assert name
    yield name
    drop_postgres_database(postgres_server, url)


def drop_postgres_database(server: str, url: str) -> None:
    from sqlalchemy.engine import make_url

    from rmconsole.store import db

    db.dispose_engines()
    with _admin(server).connect() as conn:
        conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def store_backend(
    request: pytest.FixtureRequest, isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The test's store on SQLite (the file in RMCONSOLE_HOME) or on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield "sqlite"
        return
    server = request.getfixturevalue("postgres_server")
    empty = request.node.get_closest_marker("empty_database") is not None  # a test of creating the schema
    filled = request.node.get_closest_marker("database_template")  # a test module's own filled template
    template = request.getfixturevalue(filled.args[0] if filled else "postgres_template")
    url = fresh_postgres_database(server, template=None if empty else template)
    monkeypatch.setenv("RMCONSOLE_DB", url)
    try:
        yield "postgresql"
    finally:
        drop_postgres_database(server, url)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> str:
    """A Slurm partition to submit to (SLURM_CONF set when the cluster is this session's own)."""
    partition = os.environ.get("RMCONSOLE_TEST_SLURM")
    if partition:
        return partition
    reason = os.environ.get("RMCONSOLE_TEST_SLURM_SKIP")
    if reason:
        pytest.skip(f"Slurm: {reason}")
    env = _start_service("slurm", tmp_path_factory, pytestconfig)
    if not env.get("RMCONSOLE_TEST_SLURM"):
        pytest.skip(f"Slurm: {env.get('RMCONSOLE_TEST_SLURM_SKIP', 'no cluster could be started')}")
    os.environ["SLURM_CONF"] = env["SLURM_CONF"]  # for this session and the processes it starts
    return env["RMCONSOLE_TEST_SLURM"]


def wait_for(predicate, timeout: float, poll: float = 0.02, what: str = "condition"):
    """`predicate()`'s first true value, polled every `poll` s; AssertionError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def worker_process(run_id: int) -> int | None:
    """The pid of run `run_id`'s worker on this machine (not its supervisor), found by its argv and
    this test's RMCONSOLE_HOME."""
    from rmconsole.runner.processes import process_argv

    home = f"RMCONSOLE_HOME={os.environ.get('RMCONSOLE_HOME', '')}".encode()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            argv = process_argv(int(entry)) or []
            if argv[1:3] == ["-m", "rmconsole.runner.worker"] and argv[-1] == str(run_id) and _has_env(entry, home):
                return int(entry)
    return None


def _has_env(pid: str, assignment: bytes) -> bool:
    """Whether process `pid`'s environment holds `assignment` (NAME=value): tests running side by
    side (pytest-xdist) each have runs numbered from 1, told apart by their RMCONSOLE_HOME."""
    try:
        return assignment in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def rmconsole(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("COLUMNS", "200")
    return subprocess.run(
        [sys.executable, "-m", "rmconsole", *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )


# ---------------------------------------------------------------------------- the legs' wall times

_leg_seconds: dict[str, float] = {}
_leg_tests: dict[str, set[str]] = {}


def _leg(item_id: str) -> str:
    if "test_slurm.py" in item_id:
        return "slurm"
    postgres = "test_postgres.py" in item_id or "[postgresql" in item_id or "-postgresql" in item_id
    return "postgresql" if postgres else "sqlite"


PG_SLOW_ONLY = (
    "tests/faults/test_killed_stopped_resumed.py::",
    "tests/faces/test_sweep_cli.py::",
    "tests/runner/test_runs_per_gpu.py::",
    "tests/faces/test_cli.py::test_default_run_end_to_end",
)
# of those, the ones run before every stop (`-m full`), not in CI's 20 minutes (about 200 s of a
# worker's time): CI's slow leg keeps one real run end to end on PostgreSQL (test_default_run_
# end_to_end), and the default run a run through a database restart (test_secrets_and_outages)
PG_FULL_ONLY = PG_SLOW_ONLY[:3]


# Modules whose tests share an expensive module-scoped fixture or one service they stop and start:
# under pytest-xdist (`--dist loadgroup`, pyproject's addopts) each runs whole on one worker, so the
# fixture is built once (a venv of the examples, a swept store, a PostgreSQL cluster of its own,
# the Slurm cluster's queue).
ONE_WORKER = ("test_examples.py", "test_sweep_cli.py", "test_secrets_and_outages.py", "test_slurm.py")


# Tests of 15 s or more (measured on a quiet 2-core machine), started first: xdist hands out the
# one-worker groups first, then the other tests in this order, so a long test left for the end
# no longer runs alone while the other worker idles (the slow leg's last 100 s ran on 1.1 cores).
LONG_FIRST = (
    "tests/platform/test_gpu_kit.py::test_the_suite_rehearses",
    "tests/cl/test_baselines.py::test_every_method_runs_to_the_end_on_digits_with_its_defaults[ocm]",
    "tests/cl/test_baselines.py::test_every_method_runs_to_the_end_on_digits_with_its_defaults[mir]",
    "tests/runner/test_executors.py::test_a_submitit_job_runs_is_stopped_and_resumed_exactly",
    "tests/faces/test_cli.py::test_mnist_preset_short_budget",
    "tests/platform/test_scaffold_new.py::test_new_method_installs_in_a_fresh_venv",
    "tests/runner/test_warm_start.py::test_a_warm_run_equals_a_cold_run",
    "tests/runner/test_distributed.py::",
    "tests/cl/test_baselines.py::test_every_method_runs_to_the_end_on_digits_with_its_defaults[clib]",
    "tests/store/test_postgres.py::test_the_password_appears_in_no_output",
    "tests/platform/test_plugins_installed.py::test_a_plugin_that_fails_to_import",
    "tests/platform/test_scaffold_new.py::test_new_dataset_and_metric_packages",
    "tests/runner/test_runs_per_gpu.py::test_a_runs_per_gpu_4_sweep",
    "tests/faults/test_killed_stopped_resumed.py::",
    "tests/store/test_concurrent_writers.py::",
)


def _long_first(item: pytest.Item) -> int:
    return next((i for i, prefix in enumerate(LONG_FIRST) if item.nodeid.startswith(prefix)), len(LONG_FIRST))


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items) -> None:  # type: ignore[no-untyped-def]
    items.sort(key=_long_first)  # (stable: the rest keep their order)
    for item in items:
        # (the PostgreSQL leg by the test's id, as the legs' times count it: test_sweep_cli's module
        # fixture `swept` has a postgresql param of its own, not store_backend's)
        if _leg(item.nodeid) == "postgresql" and item.nodeid.startswith(PG_SLOW_ONLY):
            item.add_marker(pytest.mark.slow)
            if item.nodeid.startswith(PG_FULL_ONLY):
                item.add_marker(pytest.mark.full)
        if item.get_closest_marker("full") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)  # `full` is the part of `slow` CI leaves out
        if item.path.name in ONE_WORKER:
            item.add_marker(pytest.mark.xdist_group(item.path.stem))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    leg = _leg(report.nodeid)
    _leg_seconds[leg] = _leg_seconds.get(leg, 0.0) + report.duration
    if report.when == "call" or report.skipped:
        _leg_tests.setdefault(leg, set()).add(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # type: ignore[no-untyped-def]
    """Each leg's wall time (setup + call + teardown of its tests) and test count, for CI's log."""
    if not _leg_seconds:
        return
    terminalreporter.section("legs")
    for leg in ("sqlite", "postgresql", "slurm"):
        if leg in _leg_seconds:
            stats = terminalreporter.stats
            skipped = sum(1 for r in stats.get("skipped", []) if _leg(r.nodeid) == leg)
            terminalreporter.write_line(
                f"{leg:<10} {_leg_seconds[leg]:8.1f} s  {len(_leg_tests.get(leg, ())):4d} tests"
                + (f" ({skipped} skipped)" if skipped else "")
            )
