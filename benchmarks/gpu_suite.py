"""The GPU suite: the `gpu` tests and the GPU benchmarks in one command, one JSON, one summary.

    bash benchmarks/gpu_suite.sh OUT_DIR [options]      # or: python benchmarks/gpu_suite.py OUT_DIR

Parts (each can be left out with --skip NAME, each has its own time limit):
  tests     pytest -m gpu (resumed-run determinism, bf16 parity on MNIST, sweep GPU slots,
            SyncBatchNorm on one NCCL rank, --gpus 1 under torchrun)
  profile   torch.profiler over RM's memory epochs (what bounds the batch-8 steps)
  cifar     (a) a CIFAR10-shaped RM run end to end with its phase split
  imagenet  (b) ImageNet-shaped streaming throughput, ResNet34 at 224, nvJPEG on and off
  slots     (c) 1, 2, 4, 8 CIFAR-shaped runs at once on one GPU -> runs/hour
Writes OUT_DIR/gpu_suite.json, OUT_DIR/gpu_suite.md and OUT_DIR/gpu_suite.log (every part's output).
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
PARTS = ("tests", "profile", "cifar", "imagenet", "slots")


class Suite:
    def __init__(self, out: Path) -> None:
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        self.log = (out / "gpu_suite.log").open("a")
        self.results: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "parts": {}}

    def run(self, name: str, argv: list[str], limit_s: float, env: dict | None = None) -> tuple[int, float]:
        """Run one command, its output teed to the log; (exit code, seconds). 124 = over its limit."""
        self.log.write(f"\n===== {name}: {' '.join(argv)}\n")
        self.log.flush()
        print(f"== {name}", flush=True)
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
            "tests/runner/test_gpu.py",
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
    return {"exit": code, "seconds": sec, "cases": cases}


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
    return _json_runs(
        s,
        "profile",
        {"graphs": [*script, "--cuda-graphs", "true"], "eager": [*script, "--cuda-graphs", "false"]},
        args.part_limit,
    )


def part_cifar(s: Suite, args: argparse.Namespace) -> dict:
    out = s.out / "cifar.json"
    argv = [sys.executable, str(HERE / "cifar_run.py"), "--data", args.cifar_data, "--json", str(out)]
    if args.cifar_epochs is not None:
        argv += ["--epochs", str(args.cifar_epochs)]
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
    rows = {}
    for n in args.slots:
        outs = [s.out / f"slot-{n}-{i}.json" for i in range(n)]
        argv = (
            " & ".join(
                f"{sys.executable} {HERE / 'cifar_run.py'} --epochs {args.slots_epochs} "
                f"--seed {i + 1} --memory-share {1 / n!r} --json {o}"
                for i, o in enumerate(outs)
            )
            + " & wait"
        )
        code, sec = s.run(f"slots {n}", ["bash", "-c", argv], args.part_limit)
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
        rows[str(n)] = row
    return rows


def _pop_json(path: Path) -> dict:
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
    path.unlink()
    return data


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
    if "tests" in parts:
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
    if "profile" in parts:
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
    if "imagenet" in parts:
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
    if "slots" in parts:
        lines += [
            "## (c) Runs per GPU (each with 1/N of its memory)",
            "",
            "| runs at once | finished | wall s | runs/hour (short) | projected full-run s | "
            "projected full runs/hour | peak reserved GiB per run |",
            "|---|---|---|---|---|---|---|",
        ]
        for n, row in parts["slots"].items():
            peak = row.get("peak_reserved_gib")
            lines.append(
                f"| {n} | {row['finished']} | {row['wall_s']:.0f} | {row.get('runs_per_hour', 0):.1f} | "
                f"{row.get('projected_full_run_s', 0):.0f} | {row.get('projected_full_runs_per_hour', 0):.1f} | "
                f"{'—' if peak is None else f'{peak:.1f}'} |"
            )
        lines.append("")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--skip", action="append", default=[], choices=PARTS)
    parser.add_argument("--only", action="append", default=[], choices=PARTS)
    parser.add_argument("--tests-limit", type=float, default=480)
    parser.add_argument("--part-limit", type=float, default=300)
    parser.add_argument("--cifar-limit", type=float, default=600)
    parser.add_argument("--cifar-epochs", type=int, default=None, help="memory epochs (default: the paper's 256)")
    parser.add_argument("--cifar-data", choices=["synthetic", "mnist"], default="synthetic")
    parser.add_argument("--profile-epochs", type=int, default=4)
    parser.add_argument("--imagenet-images", type=int, default=8192)
    parser.add_argument("--slots", type=lambda t: [int(x) for x in t.split(",")], default=[1, 2, 4, 8])
    parser.add_argument("--slots-epochs", type=int, default=16)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/rmconsole-gpu-suite"))
    args = parser.parse_args(argv)
    suite = Suite(args.out)
    suite.results["environment"] = environment()
    print(json.dumps(suite.results["environment"]), flush=True)
    chosen = [p for p in (args.only or PARTS) if p not in args.skip]
    for name in chosen:
        suite.results["parts"][name] = globals()[f"part_{name}"](suite, args)
        suite.save()
    suite.save()
    print((args.out / "gpu_suite.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
