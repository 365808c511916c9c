"""What the benchmarks share: the machine they ran on, and a reporter that times the phases."""

from __future__ import annotations

import os
import platform
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from rmconsole.cl.events import Reporter

ACCEL_KEYS = ("amp", "compile", "channels_last", "cuda_graphs")


def add_accel_options(parser: Any) -> None:
    """--amp/--compile/--channels-last/--cuda-graphs: the run's GPU fast-path keys (auto by default)."""
    for key in ACCEL_KEYS:
        parser.add_argument(f"--{key.replace('_', '-')}", default="auto", help=f"the run's `{key}` key")


def accel_settings(args: Any) -> dict[str, Any]:
    """The fast-path keys of parsed options as config values ("true"/"false" -> booleans)."""

    def toml(value: str) -> object:
        return {"true": True, "false": False}.get(value, value)

    return {key: toml(getattr(args, key)) for key in ACCEL_KEYS}


def machine() -> str:
    """One paragraph: CPU, cores, load, torch, GPU."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()) if hasattr(os, "getloadavg") else ""
    gpu = "no GPU"
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = f"{torch.cuda.device_count()} x {props.name} ({props.total_memory / 2**30:.0f} GiB)"
    return (
        f"machine: {cpu}, {cores} cores{load}; {gpu}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} torch threads; python {platform.python_version()}"
    )


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_gib(device: torch.device) -> float:
    """Peak GPU memory allocated since the last reset, or the process's peak RSS on CPU (which
    never resets: on CPU it is the peak up to and including the phase)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    return peak_rss_mib() / 1024


def memory_unit(device: torch.device) -> str:
    return "GiB GPU" if device.type == "cuda" else "GiB RSS"


def reset_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


@dataclass
class Phase:
    task: int
    name: str
    samples: int
    seconds: float = 0.0
    peak: float = 0.0  # GiB
    cpu_seconds: float = 0.0  # process time (all threads of this process)


@dataclass
class TimingReporter(Reporter):
    """Times each phase of a run (synchronising the GPU at the boundaries) with its peak memory."""

    device: torch.device
    phases: list[Phase] = field(default_factory=list)
    started: float = 0.0
    cpu_started: float = 0.0
    memory_seconds: list[float] = field(default_factory=list)

    def _close(self) -> None:
        if self.phases and not self.phases[-1].seconds:
            sync(self.device)
            self.phases[-1].seconds = time.perf_counter() - self.started
            self.phases[-1].cpu_seconds = time.process_time() - self.cpu_started
            self.phases[-1].peak = peak_gib(self.device)

    def finish(self) -> None:
        """Close the last phase (a run's end)."""
        self._close()

    def phase(self, task: int, name: str, total: int) -> None:
        self._close()
        reset_peak(self.device)
        self.phases.append(Phase(task, name, total))
        self.started = time.perf_counter()
        self.cpu_started = time.process_time()

    def task_finished(self, outcome: Any, checkpoint: Any) -> None:
        self._close()
        done = [p for p in self.phases if p.task == outcome.task]
        print(
            f"  task {outcome.task + 1}: {sum(p.seconds for p in done):.1f} s ("
            + ", ".join(f"{p.name} {p.seconds:.1f} s" for p in done)
            + ")",
            flush=True,
        )

    def log(self, message: str) -> None:
        print(f"  {message}", flush=True)

    def summary(self, views: int) -> dict[str, dict[str, float]]:
        """Per phase name: samples, seconds, samples/s, peak memory (GiB), as numbers."""
        out = {}
        for name in dict.fromkeys(p.name for p in self.phases):
            group = [p for p in self.phases if p.name == name]
            n, s = sum(p.samples for p in group), sum(p.seconds for p in group)
            out[name] = {
                "samples": n,
                "seconds": s,
                "per_s": n / s if s else None,
                "peak_gib": max(p.peak for p in group),
            }
            if name == "memory update" and s:
                out[name]["views_per_s"] = n * views / s
        return out

    def table(self, views: int) -> str:
        """Per phase name: samples, seconds, samples/s, peak memory; then per task."""
        lines = [f"{'phase':<15} {'samples':>10} {'seconds':>9} {'share':>6} {'samples/s':>11}  {'peak memory':>16}"]
        total = sum(p.seconds for p in self.phases) or 1e-9
        for name in dict.fromkeys(p.name for p in self.phases):
            group = [p for p in self.phases if p.name == name]
            n, s = sum(p.samples for p in group), sum(p.seconds for p in group)
            rate = f"{n / s:,.0f}" if s else "—"
            extra = f"  ({n * views / s:,.0f} views/s)" if name == "memory update" and s else ""
            peak = f"{max(p.peak for p in group):.2f} {memory_unit(self.device)}"
            lines.append(f"{name:<15} {n:>10,} {s:>9.1f} {s / total:>6.0%} {rate:>11}  {peak:>16}{extra}")
        lines.append(f"{'all phases':<15} {'':>10} {total:>9.1f}")
        return "\n".join(lines)


def top_level_ops(prof: object) -> int:
    """The aten operators a torch.profiler trace shows the host issuing itself (not called inside
    another aten operator): the per-update operator count of online_step_ops.py and rm_memory_step.py."""

    def top_level(event: object) -> bool:
        parent = getattr(event, "cpu_parent", None)
        while parent is not None:
            if parent.name.startswith("aten::"):
                return False
            parent = parent.cpu_parent
        return True

    return sum(1 for e in prof.events() if e.name.startswith("aten::") and top_level(e))  # type: ignore[attr-defined]


def gpu_kernels(prof: Any, per: int, top: int = 12) -> dict[str, Any]:
    """What the GPU ran under a torch.profiler trace with CUDA activity, per step or update (of
    `per`): its kernels (a CUDA graph replay's included, one by one) and the `top` by device time,
    each (name, microseconds, count). What tells the next change to make: which kernels the
    time goes to. Empty without CUDA activity (a CPU)."""
    times: dict[str, float] = {}
    counts: dict[str, int] = {}
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            times[e.name] = times.get(e.name, 0.0) + e.device_time_total
            counts[e.name] = counts.get(e.name, 0) + 1
    if not times:
        return {}
    ranked = sorted(times, key=lambda n: -times[n])[:top]
    return {
        "gpu_kernels": sum(counts.values()) / per,
        "top_gpu_kernels": [(n[:120], round(times[n] / per, 2), round(counts[n] / per, 2)) for n in ranked],
    }


def launches(audit: Any, audited: int) -> tuple[float, float | None]:
    """Kernel launches outside every graph and host-only operators, per update (of `audited`),
    from a `StepAudit`. An older checkout's audit has no host column: it counted every operator
    outside a graph as a launch, so that count, and None."""
    if not hasattr(audit, "host_ops"):
        return (sum(audit.kernel_ops().values()) - getattr(audit, "graphable_ops", 0)) / audited, None
    return audit.kernels_outside / audited, sum(audit.host_ops.values()) / audited


def measure_rows(names: list[str], key: str, measure: Any, row: Any, jsonl: Any, device: Any) -> int:
    """Measure each of `names` (`measure(name)` -> a row dict), print its table row (`row(r)`) or its
    one-line failure, append it to `jsonl` when given; exit status 1 when any failed. One name's
    failure is its row: the others still run."""
    import json

    failed = 0
    for name in names:
        try:
            r = measure(name)
        except Exception as err:  # noqa: BLE001 - one failure is its row; the others still run
            failed += 1
            r = {key: name, "error": f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"}
            print(f"{name} | failed: {r['error']}", flush=True)
        else:
            print(row(r), flush=True)
        if jsonl is not None:
            with jsonl.open("a") as out:
                out.write(json.dumps({**r, "device": str(device)}) + "\n")
    return 1 if failed else 0
