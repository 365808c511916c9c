"""The GPU suite: the `gpu` tests and the GPU benchmarks in one command, one JSON, one summary.

    bash benchmarks/gpu_suite.sh OUT_DIR [options]      # or: python benchmarks/gpu_suite.py OUT_DIR

Parts (each can be left out with --skip NAME, each has its own time limit):
  tests     pytest -m gpu (resumed-run determinism, bf16 parity on MNIST, sweep GPU slots,
            SyncBatchNorm on one NCCL rank, --gpus 1 under torchrun)
  steps     milliseconds an update of every task-free method (one process, a row per method as it
            ends; no profiler: benchmarks/online_step_ops.py --time-only)
  stack     RM's memory epochs (CIFAR-shaped, ResNet18, K=500) with 1, 4, 8, 16 seeds stacked in one
            process (cl/stacked.py): memory samples/s of all seeds, beside `slots` (packed processes)
  profile   torch.profiler over RM's memory epochs (what bounds the batch-8 steps)
  cifar     (a) a CIFAR10-shaped RM run end to end with its phase split
  imagenet  (b) ImageNet-shaped streaming throughput, ResNet34 at 224, nvJPEG on and off
  slots     (c) 1, 2, 4, 8 CIFAR-shaped runs at once on one GPU -> runs/hour (--mps: under NVIDIA MPS
            when its daemon can be started; the summary says whether it was)
  tiny      (d) the follow-up's Tiny-ImageNet i-Blurry-50-10 on the offline subset (the preset's GPU
            settings: ResNet34 at 64x64, online_iter 3, batch 32, eval every 100): ER and CLIB
            seed 1 by default, one process per run, A_auc and A_last beside the follow-up's figures.
            A call cut by --tiny-limit keeps the finished runs and each run's last task checkpoint
            under --tiny-home; the next call with the same --tiny-home resumes them (bit for bit).
Writes OUT_DIR/gpu_suite.json, OUT_DIR/gpu_suite.md and OUT_DIR/gpu_suite.log (every part's output),
the first two again as each part ends, so a call cut short keeps every part that finished.
--total-limit S caps the whole command: each part gets its own limit or what is left, whichever is
less, and a part left under 15 s is skipped. benchmarks/device/gpu_check.sh is the 8-minute check.

--rehearse runs every part on this machine's CPU at toy sizes (minutes): the plumbing, the
scripts' options and the summary checked before a GPU's minutes are spent on them. Its figures
mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PARTS = ("tests", "steps", "stack", "profile", "cifar", "imagenet", "slots", "tiny")
MIN_PART_S = 15.0  # a part left less than this by --total-limit is skipped (said in the summary)
# the follow-up (i-Blurry, ICLR 2022) Table: Tiny-ImageNet A_auc on 500 images a class (PROTOCOL.md §9)
FOLLOW_UP_TINY_A_AUC = {"rm": 5.74, "er": 22.45, "clib": 23.87}


class Suite:
    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.log = (out / "gpu_suite.log").open("a")
        self.results: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "parts": {}}
        self.deadline: float | None = None  # time.monotonic() by which the whole command ends

    def limit(self, own: float) -> float:
        """A part's (or a step's) time limit: its own, or what is left of --total-limit."""
        if self.deadline is None:
            return own
        return max(0.0, min(own, self.deadline - time.monotonic()))

    def run(self, name: str, argv: list[str], limit_s: float, env: dict | None = None) -> tuple[int, float]:
        """Run one command, its output teed to the log; (exit code, seconds). 124 = over its limit."""
        self.log.write(f"\n===== {name}: {' '.join(argv)}\n")
        self.log.flush()
        limit_s = self.limit(limit_s)
        print(f"== {name} (limit {limit_s:.0f} s)", flush=True)
        start = time.perf_counter()
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        lines = []
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass

        watchdog = threading.Timer(limit_s, kill)
        watchdog.start()
        for line in proc.stdout:  # type: ignore[union-attr]
            self.log.write(line)
            lines.append(line)
        code = proc.wait()
        watchdog.cancel()
        if killed.is_set():
            code = 124
        seconds = time.perf_counter() - start
        self.log.write(f"===== {name}: exit {code} after {seconds:.0f} s\n")
        self.log.flush()
        print("".join(lines[-25:]), end="", flush=True)
        return code, seconds

    def save(self) -> None:
        (self.out / "gpu_suite.json").write_text(json.dumps(self.results, indent=1))
        (self.out / "gpu_suite.md").write_text(summary(self.results))


def environment() -> dict:
    import torch

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
        "commit": os.environ.get("RMCONSOLE_COMMIT"),
        "cpu_cores": len(os.sched_getaffinity(0)),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(
            gpu=p.name,
            gpu_memory_gib=round(p.total_memory / 2**30, 1),
            gpus=torch.cuda.device_count(),
            multiprocessors=p.multi_processor_count,
        )
    try:
        env["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        env["driver"] = None
    return env


def part_tests(s: Suite, args: argparse.Namespace) -> dict:
    xml = s.out / "gpu-tests.xml"
    code, sec = s.run(
        "tests",
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "gpu",
            "-p",
            "no:cacheprovider",
            "-n",
            "0",
            "-v",
            "-rs",
            "tests",  # every `gpu` test, wherever it lives (graph43's per-method ones went unrun under one file)
            f"--junitxml={xml}",
            "-s",
        ],
        args.tests_limit,
    )
    cases = []
    if xml.exists():
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                node = case.find(tag)
                if node is not None:
                    outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                    detail = (node.get("message") or "")[:300]
                    break
            else:
                detail = ""
            cases.append(
                {"test": case.get("name"), "outcome": outcome, "seconds": float(case.get("time", 0)), "detail": detail}
            )
        xml.unlink()
    else:  # killed at its limit: the -v lines it printed say which tests ended
        log = (s.out / "gpu_suite.log").read_text().split("===== tests:")[-1]
        for line in log.splitlines():
            for outcome in ("PASSED", "FAILED", "SKIPPED", "ERROR"):
                if f" {outcome}" in line and "::" in line:
                    name = line.split("::", 1)[1].split(" ", 1)[0]
                    cases.append({"test": name, "outcome": outcome.lower(), "seconds": 0.0, "detail": "(from the log)"})
    return {"exit": code, "seconds": sec, "cases": cases}


def task_free_methods() -> list[str]:
    """Every registered method that runs under the task-free protocol (built-ins and plug-ins)."""
    sys.path.insert(0, str(REPO))
    from rmconsole.cl.methods import REGISTRY

    return [name for name, spec in REGISTRY.items() if "task-free" in spec.protocols]


def part_steps(s: Suite, args: argparse.Namespace) -> dict:
    rows_file = s.out / "steps.jsonl"
    rows_file.unlink(missing_ok=True)
    methods = args.steps_methods or ",".join(task_free_methods())
    argv = [
        sys.executable,
        str(HERE / "online_step_ops.py"),
        "--time-only",
        "--methods",
        methods,
        "--samples",
        str(args.steps_samples),
        "--preset",
        args.steps_preset,
        "--jsonl",
        str(rows_file),
        "--busy-samples",
        "16",  # the GPU's kernel time an update beside the wall time: host- or device-bound
    ]
    argv += ["--device", "cpu"] if args.rehearse else []
    code, sec = 0, 0.0
    if args.steps_cudnn_benchmark:  # first, each such method with cuDNN's algorithms timed (the same rows' file)
        extra = ["--methods", args.steps_cudnn_benchmark, "--cudnn-benchmark"]
        code, sec = s.run("steps (cudnn.benchmark)", [*argv, *extra], args.steps_limit / 3)
    more_code, more_sec = s.run("steps", argv, max(0.0, args.steps_limit - sec))
    code, sec = code or more_code, sec + more_sec
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()] if rows_file.exists() else []
    rows_file.unlink(missing_ok=True)
    done = {r["method"] for r in rows if not r.get("cudnn_benchmark")}
    missing = [m for m in methods.split(",") if m not in done]
    return {"exit": code, "seconds": sec, "preset": args.steps_preset, "rows": rows, "not_reached": missing}


def part_stack(s: Suite, args: argparse.Namespace) -> dict:
    rows_file = s.out / "stack.jsonl"
    rows_file.unlink(missing_ok=True)
    argv = [
        sys.executable,
        str(HERE / "rm_memory_step.py"),
        "--time-only",
        "--shapes",
        "cifar",
        "--memory",
        str(args.stack_memory),
        "--epochs",
        str(args.stack_epochs),
        "--stack",
        ",".join(str(n) for n in args.stack),
        "--jsonl",
        str(rows_file),
    ]
    argv += ["--device", "cpu", "--graphs-here"] if args.rehearse else []
    code, sec = s.run("stack", argv, args.stack_limit)
    rows = [json.loads(line) for line in rows_file.read_text().splitlines()] if rows_file.exists() else []
    rows_file.unlink(missing_ok=True)
    return {"exit": code, "seconds": sec, "rows": rows}


def _json_runs(s: Suite, label: str, variants: dict[str, list[str]], limit: float) -> dict:
    """One benchmark command per variant, each writing a JSON file: {variant: its figures}."""
    rows = {}
    for name, argv in variants.items():
        out = s.out / f"{label}-{name}.json"
        code, sec = s.run(f"{label} {name}", [*argv, "--json", str(out)], limit)
        rows[name] = {"exit": code, "seconds": sec, **_pop_json(out)}
    return rows


def part_profile(s: Suite, args: argparse.Namespace) -> dict:
    script = [sys.executable, str(HERE / "profile_memory_epochs.py"), "--epochs", str(args.profile_epochs)]
    if args.rehearse:
        script += ["--memory", "32"]
    modes = {"graphs": [*script, "--cuda-graphs", "true"], "eager": [*script, "--cuda-graphs", "false"]}
    return _json_runs(s, "profile", {m: modes[m] for m in args.profile_modes}, args.profile_limit or args.part_limit)


def part_cifar(s: Suite, args: argparse.Namespace) -> dict:
    out = s.out / "cifar.json"
    argv = [sys.executable, str(HERE / "cifar_run.py"), "--data", args.cifar_data, "--json", str(out)]
    if args.cifar_epochs is not None:
        argv += ["--epochs", str(args.cifar_epochs)]
    argv += REHEARSAL_CIFAR if args.rehearse else []
    code, sec = s.run("cifar", argv, args.cifar_limit)
    return {"exit": code, "seconds": sec, **_pop_json(out)}


def part_imagenet(s: Suite, args: argparse.Namespace) -> dict:
    script = [
        sys.executable,
        str(HERE / "imagenet_throughput.py"),
        "--synthetic",
        str(args.imagenet_images),
        "--root",
        str(args.scratch),
        "--train",
        str(args.imagenet_images),
    ]
    if args.rehearse:
        script += REHEARSAL_IMAGENET
    return _json_runs(
        s,
        "imagenet",
        {"nvjpeg": [*script, "--gpu-decode", "true"], "cpu_decode": [*script, "--gpu-decode", "false"]},
        args.part_limit,
    )


def part_slots(s: Suite, args: argparse.Namespace) -> dict:
    """N runs at once (each its own process, as a sweep's slots are), a shortened memory phase;
    per-run wall times -> runs/hour of that workload and, scaled, of the full 256-epoch run. Each
    of the N gets 1/N of the GPU, as `--runs-per-gpu N` gives its workers (the allocator capped,
    the forward passes shrunk)."""
    rows: dict = {}
    mps_env, mps_note = start_mps(s.out) if args.mps else ({}, "not asked for (--mps)")
    rows["mps"] = mps_note
    part_deadline = time.monotonic() + s.limit(args.part_limit)
    try:
        _slots(s, args, rows, mps_env, part_deadline)
    finally:
        if mps_env:
            stop_mps(mps_env)
    return rows


def start_mps(out: Path) -> tuple[dict, str]:
    """NVIDIA MPS for the packed runs: its control daemon started with pipe and log folders of its
    own; ({}, why not) where it cannot be (no daemon binary, no permission, no GPU)."""
    import shutil

    binary = shutil.which("nvidia-cuda-mps-control")
    if binary is None:
        return {}, "not started: nvidia-cuda-mps-control is not on PATH"
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(out / "mps-pipe"), "CUDA_MPS_LOG_DIRECTORY": str(out / "mps-log")}
    for folder in env.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    try:
        done = subprocess.run([binary, "-d"], env={**os.environ, **env}, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as err:
        return {}, f"not started: {type(err).__name__}: {err}"
    if done.returncode != 0:
        return {}, f"not started: exit {done.returncode}: {' '.join((done.stderr or done.stdout).split())[:200]}"
    return env, "started (nvidia-cuda-mps-control -d)"


def stop_mps(env: dict) -> None:
    try:
        subprocess.run(
            ["nvidia-cuda-mps-control"], input="quit\n", env={**os.environ, **env}, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        pass


def _slots(s: Suite, args: argparse.Namespace, rows: dict, mps_env: dict, part_deadline: float) -> None:
    for n in args.slots:
        left = part_deadline - time.monotonic()
        if left < MIN_PART_S:
            rows[str(n)] = {"skipped": f"{left:.0f} s left of the part's limit"}
            continue
        outs = [s.out / f"slot-{n}-{i}.json" for i in range(n)]
        argv = (
            " & ".join(
                f"{sys.executable} {HERE / 'cifar_run.py'} --epochs {args.slots_epochs} "
                f"--seed {i + 1} --memory-share {1 / n!r} --json {o}"
                + (" " + " ".join(REHEARSAL_CIFAR) if args.rehearse else "")
                for i, o in enumerate(outs)
            )
            + " & wait"
        )
        code, sec = s.run(f"slots {n}", ["bash", "-c", argv], left, mps_env)
        runs = [_pop_json(o) for o in outs]
        done = [r for r in runs if r]
        row = {"exit": code, "wall_s": sec, "finished": len(done)}
        if done:

            def full_run_s(r: dict) -> float:
                phases = r["phases"]
                mem = phases.get("memory", {}).get("seconds", 0.0)
                rest = sum(p["seconds"] for k, p in phases.items() if k != "memory")
                return rest + mem * 256 / args.slots_epochs

            row["mean_run_s"] = sum(r["wall_s"] for r in done) / len(done)
            peaks = [r["peak_reserved_gib"] for r in done if r.get("peak_reserved_gib") is not None]
            row["peak_reserved_gib"] = max(peaks) if peaks else None
            row["runs_per_hour"] = len(done) * 3600 / sec
            row["projected_full_run_s"] = sum(full_run_s(r) for r in done) / len(done)
            row["projected_full_runs_per_hour"] = len(done) * 3600 / row["projected_full_run_s"]
            row["memory_samples_per_s"] = sum(r["phases"].get("memory", {}).get("per_s", 0.0) for r in done)
        rows[str(n)] = row
        s.results["parts"]["slots"] = rows  # saved as each N ends
        s.save()


REHEARSAL_IMAGENET = [
    "--device",
    "cpu",
    "--threads",
    "1",
    "--batch",
    "16",
    "--candidates",
    "16",
    "--views",
    "2",
    "--size",
    "64",
]
REHEARSAL_IMAGENET += ["--synthetic-classes", "20", "--synthetic-val", "32"]
REHEARSAL_CIFAR = [
    "--device",
    "cpu",
    "--threads",
    "1",
    "--train",
    "64",
    "--test",
    "32",
    "--memory",
    "16",
    "--views",
    "2",
]


def part_tiny(s: Suite, args: argparse.Namespace) -> dict:
    """(d) Tiny-ImageNet i-Blurry-50-10, one process per run (the runs share the GPU, as sweep
    slots do), resumed where an earlier call under the same --tiny-home was cut off."""
    home = args.tiny_home.resolve()
    home.mkdir(parents=True, exist_ok=True)
    env = {"RMCONSOLE_HOME": str(home), "RMCONSOLE_DATA": str(args.tiny_data.resolve())}
    sweep_file = home / "suite-sweep.txt"
    script = [
        sys.executable,
        str(HERE / "iblurry_table.py"),
        "--preset",
        args.tiny_preset,
        "--methods",
        args.tiny_methods,
    ]
    n_runs = len(args.tiny_methods.split(",")) * len(args.tiny_seeds.split(","))
    jobs = ["--jobs", str(args.tiny_jobs or n_runs)]
    if sweep_file.exists():
        sweep = sweep_file.read_text().strip()
        argv = [*script, "--resume", sweep, *jobs]
    else:
        argv = [*script, "--seeds", args.tiny_seeds, *jobs, "--sweep-file", str(sweep_file)]
    code, sec = s.run("tiny", argv, args.tiny_limit, env)
    if not sweep_file.exists():
        return {"exit": code, "seconds": sec, "runs": []}
    sweep = sweep_file.read_text().strip()
    rmconsole = [sys.executable, "-m", "rmconsole"]
    listed = subprocess.run(
        [*rmconsole, "runs", "--json", "--sweep", sweep, "--limit", "0"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
    )
    runs = json.loads(listed.stdout) if listed.returncode == 0 else []
    plot = s.out / "tiny-anytime.png"
    subprocess.run(
        [*rmconsole, "report", "--sweep", sweep, "--plot", str(plot)],
        capture_output=True,
        cwd=REPO,
        env={**os.environ, **env},
    )
    rows = []
    for run in runs:
        cfg, metrics, progress = run["config"], run.get("metrics") or {}, run.get("progress") or {}
        rows.append(
            {
                "run": run["id"],
                "method": run["method"] + (f" ({cfg.get('rm_variant')})" if run["method"] == "rm" else ""),
                "seed": run["seed"],
                "status": run["status"]
                if run["status"] == "finished" or code != 124
                else "cut (the next call resumes it)",
                "tasks_done": (progress.get("task", -1) + 1) if run["status"] == "finished" else progress.get("task"),
                "n_tasks": cfg["n_tasks"],
                "model": cfg["model"],
                "image_size": cfg["image_size"],
                "online_iter": cfg["online_iter"],
                "device": run.get("device"),
                **{k: metrics.get(k) for k in TINY_METRICS},
                "follow_up_A_auc": FOLLOW_UP_TINY_A_AUC.get(run["method"]),
            }
        )
    return {
        "exit": code,
        "seconds": sec,
        "sweep": sweep,
        "preset": args.tiny_preset,
        "runs": rows,
        "plot": plot.name if plot.exists() else None,
    }


TINY_METRICS = (
    "A_auc",
    "A_last",
    "A_avg",
    "F_last",
    "train_seconds",
    "eval_seconds",
    "wall_seconds",
    "train_samples_per_s",
)


def _pop_json(path: Path) -> dict:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    path.unlink()
    return data


def _kernel_lines(rows: dict[str, dict]) -> list[str]:
    """Where the GPU's time goes (benchmarks/common.gpu_kernels): a line per row that has it, its
    kernels and the five costliest (microseconds, count)."""
    lines = []
    for what, r in rows.items():
        if r.get("top_gpu_kernels"):
            top = "; ".join(f"`{n[:60]}` {us:.0f} µs ×{c:g}" for n, us, c in r["top_gpu_kernels"][:5])
            lines.append(f"- {what}: {r['gpu_kernels']:.0f} GPU kernels; costliest: {top}")
    return ["GPU kernels (torch.profiler's CUDA activity):", "", *lines, ""] if lines else []


def summary(r: dict) -> str:
    env = r.get("environment", {})
    lines = [
        "# GPU suite",
        "",
        f"{env.get('gpu')} ({env.get('gpu_memory_gib')} GiB, driver {env.get('driver')}), "
        f"{env.get('cpu_cores')} CPU cores; torch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN "
        f"{env.get('cudnn')}, Python {env.get('python')}; commit {env.get('commit')}; {r.get('started')}",
        "",
    ]
    parts = r["parts"]
    if "tests" in parts and "skipped" not in parts["tests"]:
        t = parts["tests"]
        lines += ["## Tests marked gpu", "", "| test | outcome | seconds |", "|---|---|---|"]
        lines += [
            f"| {c['test']} | {c['outcome']}{(': ' + c['detail']) if c['detail'] else ''} | {c['seconds']:.1f} |"
            for c in t["cases"]
        ]
        lines.append("")
    if parts.get("cifar", {}).get("phases"):
        c = parts["cifar"]
        w = c["workload"]
        lines += [
            f"## (a) CIFAR10-shaped RM run end to end: {c['wall_s']:.0f} s",
            "",
            f"{w['data']} 3x32x32, {w['train']:,} train / {w['test']:,} test, {w['model']}, K={w['memory_size']}, "
            f"{w['epochs']} memory epochs, {w['views']} views, batch {w['batch_size']}"
            + (f"; A_last {c['a_last']:.2f}" if c.get("a_last") is not None else ""),
            "",
            "| phase | samples | seconds | samples/s | peak GiB |",
            "|---|---|---|---|---|",
        ]
        for name, p in c["phases"].items():
            extra = f" ({p['views_per_s']:,.0f} views/s)" if "views_per_s" in p else ""
            lines.append(
                f"| {name} | {p['samples']:,} | {p['seconds']:.1f} | {p['per_s']:,.0f}{extra} | {p['peak_gib']:.2f} |"
            )
        lines.append("")
    if "profile" in parts and "skipped" not in parts["profile"]:
        lines += [
            "## Memory epochs (K=500, batch 8, ResNet18, CutMix+AutoAugment), torch.profiler",
            "",
            "| steps | samples/s | ms/step | GPU busy with kernels | launches/step | accel |",
            "|---|---|---|---|---|---|",
        ]
        for how, p in parts["profile"].items():
            if p.get("samples_per_s"):
                lines.append(
                    f"| {how} | {p['samples_per_s']:,.0f} | {p['ms_per_step']:.2f} | {(p['gpu_busy'] or 0):.0%} | "
                    f"{p['launches_per_step']:.1f} | {p['accel']} |"
                )
        lines.append("")
        lines += _kernel_lines({f"{how}, a step": p for how, p in parts["profile"].items() if isinstance(p, dict)})
    if "imagenet" in parts and "skipped" not in parts["imagenet"]:
        lines += [
            "## (b) ImageNet-shaped streaming (synthetic JPEGs, ResNet34 at 224)",
            "",
            "| decode | phase | images | images/s | peak GiB |",
            "|---|---|---|---|---|",
        ]
        for decode, row in parts["imagenet"].items():
            for name, p in row.get("phases", {}).items():
                lines.append(
                    f"| {decode} | {name} | {p['images']:,} | {p['images_per_s']:,.0f} | {p['peak_gib']:.2f} |"
                )
        lines.append("")
    skipped = {name: p["skipped"] for name, p in parts.items() if isinstance(p, dict) and "skipped" in p}
    if skipped:
        lines += ["## Parts not run", ""] + [f"- {name}: {why}" for name, why in skipped.items()] + [""]
    if parts.get("steps", {}).get("rows") is not None:
        st = parts["steps"]
        lines += [
            f"## Task-free updates ({st['preset']}; no profiler; exit {st['exit']}, {st['seconds']:.0f} s)",
            "",
            "| method | updates timed | ms/update (wall) | GPU busy ms/update | CUDA graphs captured / failed | model | image | batch |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in st["rows"]:
            if "error" in r:
                lines.append(f"| {r['method']} | failed: {r['error']} | | | | | | |")
            else:
                graphs = f"{r['graphs']} / {r['graphs_failed']}" if "graphs" in r else "—"
                busy = f"{r['busy_ms']:.2f}" if "busy_ms" in r else "—"
                name = f"{r['method']} (cudnn.benchmark)" if r.get("cudnn_benchmark") else r["method"]
                lines.append(
                    f"| {name} | {r['updates']} | {r['wall_ms']:.2f} | {busy} | {graphs} | {r['model']} | "
                    f"{r['image_size']} | {r['batch_size']} |"
                )
        lines += [f"| {m} | not reached in the part's limit | | | | | | |" for m in st.get("not_reached", [])]
        lines.append("")
        lines += _kernel_lines(
            {
                f"{r['method']}{' (cudnn.benchmark)' if r.get('cudnn_benchmark') else ''}, an update": r
                for r in st["rows"]
            }
        )
    if "stack" in parts and "skipped" not in parts["stack"]:
        st = parts["stack"]
        lines += [
            f"## RM's memory epochs, seeds stacked in one process (exit {st['exit']}, {st['seconds']:.0f} s)",
            "",
            "| seeds stacked | memory samples/s (all seeds) | wall ms a step | steps taken stacked / apart | accel |",
            "|---|---|---|---|---|",
        ]
        for r in st["rows"]:
            if "error" in r:
                lines.append(f"| {r.get('shape')} | failed: {r['error']} | | | |")
                continue
            calls = f"{r.get('stacked_calls', '—')} / {r.get('apart_calls', '—')}" if r.get("stack", 1) > 1 else "—"
            lines.append(
                f"| {r.get('stack', 1)} | {r['samples_per_s']:,.0f} | {r['wall_ms']:.2f} | {calls} | {r['accel']} |"
            )
        lines.append("")
    if "slots" in parts and "skipped" not in parts["slots"]:
        lines += [
            f"## (c) Runs per GPU (each with 1/N of its memory; MPS {parts['slots'].get('mps', 'not asked for')})",
            "",
            "| runs at once | finished | wall s | memory samples/s (all runs) | runs/hour (short) | "
            "projected full-run s | projected full runs/hour | peak reserved GiB per run |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for n, row in parts["slots"].items():
            if n == "mps":
                continue
            if "skipped" in row:
                lines.append(f"| {n} | skipped: {row['skipped']} | | | | | | |")
                continue
            peak = row.get("peak_reserved_gib")
            lines.append(
                f"| {n} | {row['finished']} | {row['wall_s']:.0f} | {row.get('memory_samples_per_s', 0):,.0f} | "
                f"{row.get('runs_per_hour', 0):.1f} | "
                f"{row.get('projected_full_run_s', 0):.0f} | {row.get('projected_full_runs_per_hour', 0):.1f} | "
                f"{'—' if peak is None else f'{peak:.1f}'} |"
            )
        lines.append("")
    if "tiny" in parts and "skipped" not in parts["tiny"]:
        t = parts["tiny"]
        lines += [
            f"## (d) Tiny-ImageNet i-Blurry-50-10 ({t.get('preset')}; sweep {t.get('sweep')}; this call "
            f"{t['seconds']:.0f} s, exit {t['exit']})",
            "",
            "100 train images a class (the offline subset), not the follow-up's 500; its A_auc beside each row "
            "(Table 2 of the follow-up). A run not finished shows its metrics so far (tasks done / of).",
            "",
            "| run | method | seed | status | tasks | A_auc | follow-up A_auc | A_last | train s | eval s | "
            "train samples/s |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in t.get("runs", []):
            lines.append(
                f"| {r['run']} | {r['method']} | {r['seed']} | {r['status']} | {r['tasks_done']}/{r['n_tasks']} | "
                f"{_num(r['A_auc'])} | {_num(r['follow_up_A_auc'])} | {_num(r['A_last'])} | "
                f"{_num(r['train_seconds'], 0)} | {_num(r['eval_seconds'], 0)} | {_num(r['train_samples_per_s'], 0)} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--skip", action="append", default=[], choices=PARTS)
    parser.add_argument("--only", action="append", default=[], choices=PARTS)
    parser.add_argument("--tests-limit", type=float, default=480)
    parser.add_argument(
        "--total-limit",
        type=float,
        default=None,
        help="seconds for the whole command (each part: its own or what is left)",
    )
    parser.add_argument("--steps-limit", type=float, default=60)
    parser.add_argument("--steps-samples", type=int, default=64, help="stream samples timed per method")
    parser.add_argument("--steps-preset", default="tiny-imagenet-iblurry50-10")
    parser.add_argument("--steps-methods", default=None, help="comma list (default: every task-free method)")
    parser.add_argument(
        "--steps-cudnn-benchmark",
        default="",
        help="comma list: these methods timed first with torch.backends.cudnn.benchmark on (a row each, so marked)",
    )
    parser.add_argument("--mps", action="store_true", help="the slots part under NVIDIA MPS when it can be started")
    parser.add_argument("--part-limit", type=float, default=300)
    parser.add_argument("--cifar-limit", type=float, default=600)
    parser.add_argument("--cifar-epochs", type=int, default=None, help="memory epochs (default: the paper's 256)")
    parser.add_argument("--cifar-data", choices=["synthetic", "mnist"], default="synthetic")
    parser.add_argument("--profile-epochs", type=int, default=4)
    parser.add_argument(
        "--profile-modes",
        type=lambda t: t.split(","),
        default=["graphs", "eager"],
        help="comma list of graphs, eager: the profile part's runs",
    )
    parser.add_argument(
        "--profile-limit", type=float, default=None, help="each profile run's limit (default: --part-limit)"
    )
    parser.add_argument("--imagenet-images", type=int, default=8192)
    parser.add_argument("--slots", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 4, 8])
    parser.add_argument("--slots-epochs", type=int, default=16)
    parser.add_argument("--stack", type=lambda t: [int(x) for x in t.split(",")], default=[1, 4, 8, 16])
    parser.add_argument("--stack-memory", type=int, default=500)
    parser.add_argument("--stack-epochs", type=int, default=8)
    parser.add_argument("--stack-limit", type=float, default=120)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/rmconsole-gpu-suite"))
    parser.add_argument(
        "--tiny-data",
        type=Path,
        default=Path(os.environ.get("RMCONSOLE_DATA") or "../shared/data"),
        help="the folder that holds tiny-imagenet-200/ (default: RMCONSOLE_DATA)",
    )
    parser.add_argument("--tiny-preset", default="tiny-imagenet-iblurry50-10")
    parser.add_argument("--tiny-methods", default="er,clib", help="as iblurry_table.py's --methods")
    parser.add_argument("--tiny-seeds", default="1")
    parser.add_argument("--tiny-jobs", type=int, default=None, help="processes (default: one per run)")
    parser.add_argument("--tiny-limit", type=float, default=540)
    parser.add_argument(
        "--tiny-home",
        type=Path,
        default=None,
        help="the tiny runs' store and checkpoints; a later call with the same folder resumes them "
        "(default: SCRATCH/tiny-home)",
    )
    parser.add_argument("--rehearse", action="store_true", help="every part on this CPU at toy sizes")
    args = parser.parse_args(argv)
    if args.tiny_home is None:
        args.tiny_home = args.scratch / "tiny-home"
    if args.rehearse:
        args.profile_epochs, args.cifar_epochs, args.slots_epochs = 1, 1, 1
        args.steps_samples = 8
        if args.steps_preset == "tiny-imagenet-iblurry50-10":
            args.steps_preset = str(HERE / "presets" / "tiny-imagenet-iblurry50-10-cpu.toml")
        args.imagenet_images, args.slots = 32, [1, 2]
        args.stack, args.stack_memory, args.stack_epochs = [1, 2], 16, 1
        if args.tiny_preset == "tiny-imagenet-iblurry50-10":
            args.tiny_preset = str(HERE / "presets" / "tiny-imagenet-iblurry50-10-cpu.toml")
            args.tiny_methods = "er"
    suite = Suite(args.out)
    if args.total_limit is not None:
        suite.deadline = time.monotonic() + args.total_limit
    suite.results["environment"] = environment()
    print(json.dumps(suite.results["environment"]), flush=True)
    chosen = [p for p in (args.only or PARTS) if p not in args.skip]
    for name in chosen:
        left = suite.limit(float("inf"))
        if left < MIN_PART_S:
            suite.results["parts"][name] = {"skipped": f"{left:.0f} s left of --total-limit"}
        else:
            suite.results["parts"][name] = globals()[f"part_{name}"](suite, args)
        suite.save()
    suite.save()
    print((args.out / "gpu_suite.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
