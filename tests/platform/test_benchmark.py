"""The throughput benchmark runs (tiny sizes) and prints a positive rate for every phase."""

import re
import runpy
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "throughput.py"


def test_throughput_script_prints_every_phase(capsys, monkeypatch) -> None:
    monkeypatch.setattr(
        sys,
        "argv",
        [
            str(BENCH),
            "--device",
            "cpu",
            "--threads",
            "1",
            "--stream",
            "64",
            "--memory",
            "40",
            "--candidates",
            "24",
            "--epochs",
            "1",
            "--no-warmup",
        ],
    )
    try:
        runpy.run_path(str(BENCH), run_name="__main__")
    except SystemExit as done:
        assert done.code == 0
    out = capsys.readouterr().out
    for phase, count in (("stream pass", 64 + 64), ("memory epochs", 40), ("uncertainty", 24), ("evaluation", 10000)):
        row = next(line for line in out.splitlines() if line.startswith("cpu:") and phase in line)
        numbers = re.findall(r"[\d,]+\.?\d*", row.split(phase, 1)[1])
        assert int(numbers[0].replace(",", "")) == count, row
        assert float(numbers[2].replace(",", "")) > 0 and "MiB RSS" in row


def test_every_benchmark_help_says_its_whole_first_sentence() -> None:
    """`iblurry_table.py --help` (docs/anytime.md's table) said "... of a task-free preset, stored
    as ordinary" and stopped: the description was the docstring's first line, not its sentence."""
    import ast

    cut = []
    for script in sorted(BENCH.parent.rglob("*.py")):
        tree = ast.parse(script.read_text())
        doc = ast.get_docstring(tree, clean=False) or ""
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "ArgumentParser":
                for kw in node.keywords:
                    if kw.arg == "description":
                        said = eval(compile(ast.Expression(kw.value), str(script), "eval"), {"__doc__": doc})
                        if not said.rstrip().endswith((".", ")", ":")):
                            cut.append(f"{script.name}: {said!r}")
    assert not cut


def test_the_startup_benchmark_finds_the_warm_server_its_runs_start(tmp_path, monkeypatch) -> None:
    """`benchmarks/startup.py --modes warm` (docs/performance.md) waited 300 s for a socket in
    RMCONSOLE_HOME/warm: warm servers moved to one folder per user, so it never came, and the run
    it timed was the user's own server's. The benchmark now gives its runs a servers folder of
    its own and waits there."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("startup_benchmark", BENCH.parent / "startup.py")
    assert spec is not None and spec.loader is not None
    startup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(startup)
    home = tmp_path / "home"
    env = startup.env_for(home, BENCH.parents[1], warm=True)
    for key in ("RMCONSOLE_WARM_DIR", "XDG_RUNTIME_DIR", "HOME"):
        if key in env:
            monkeypatch.setenv(key, env[key])
        else:
            monkeypatch.delenv(key, raising=False)
    from rmconsole.runner import warm

    socket = warm.servers_folder() / "server.sock"  # where a server started with the runs' env listens
    assert tmp_path in socket.parents, socket  # never the user's own servers
    socket.parent.mkdir(parents=True)
    socket.touch()
    startup.wait_for_server(home, BENCH.parents[1], timeout=2.0)


def test_the_tui_refresh_benchmark_takes_a_small_store_and_refuses_a_tiny_one(tmp_path) -> None:
    """`tui_refresh.py --runs 20` ended in a traceback: its start-up child waited for a 36-row
    screenful that 20 runs never fill. Now the screenful is min(36, runs); under 10 runs (no
    running run to refresh) it says so in one line."""
    import os
    import subprocess

    script = BENCH.parent / "tui_refresh.py"
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1]), "RMCONSOLE_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    small = ["--tasks", "1", "--starts", "1", "--repeat", "1"]
    done = subprocess.run(
        [sys.executable, str(script), "--runs", "12", *small], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "all 12 rows in the table" in done.stdout and "one runs-page refresh" in done.stdout
    tiny = subprocess.run([sys.executable, str(script), "--runs", "9", *small], capture_output=True, text=True, env=env)
    assert tiny.returncode == 1 and tiny.stderr.strip().splitlines() == [
        "tui_refresh.py: --runs 9 --tasks 1: give at least 10 runs (every tenth is a running run, whose refresh "
        "is measured) and 1 task"
    ]


def test_the_gpu_kernels_of_a_trace_are_counted_and_ranked_per_step(monkeypatch) -> None:
    """benchmarks/common.gpu_kernels: a trace's CUDA kernels (a graph replay's one by one) per
    step, and the costliest first with their microseconds and counts a step; host events and a
    trace without CUDA activity (a CPU) give nothing."""
    from types import SimpleNamespace

    import torch

    monkeypatch.syspath_prepend(str(BENCH.parent))
    from common import gpu_kernels

    cuda, cpu = torch.autograd.DeviceType.CUDA, torch.autograd.DeviceType.CPU

    def event(name: str, device, us: float) -> SimpleNamespace:
        return SimpleNamespace(name=name, device_type=device, device_time_total=us)

    trace = SimpleNamespace(
        events=lambda: [
            *[event("bn_fw_kernel", cuda, 3.0)] * 8,
            *[event("sm90_gemm", cuda, 10.0)] * 4,
            event("elementwise_add", cuda, 2.0),
            event("aten::add_", cpu, 50.0),
        ]
    )
    got = gpu_kernels(trace, per=4, top=2)
    assert got == {"gpu_kernels": 13 / 4, "top_gpu_kernels": [("sm90_gemm", 10.0, 1.0), ("bn_fw_kernel", 6.0, 2.0)]}
    assert gpu_kernels(SimpleNamespace(events=lambda: [event("aten::mm", cpu, 5.0)]), per=1) == {}
