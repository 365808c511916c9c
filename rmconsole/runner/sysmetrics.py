"""A run's system load, sampled by its supervisor every few seconds (issue 42) and stored as
`systemsample` rows: the worker's process tree's CPU (percent of one core) and resident memory
(Linux /proc: the sum over the tree, shared pages counted in each process), the machine's
1-minute load average, and, when NVML is importable (`pynvml`, from nvidia-ml-py; never a
dependency) and the tree holds a CUDA context, the utilisation of those GPUs and the memory the
tree's processes hold there. Where a figure cannot be read it is None; on CPU the GPU figures
are simply absent.

RMCONSOLE_SYSMETRICS_S sets the period in seconds (default 5; 0 turns sampling off). Sampling
never stops or fails a run: a read or a write that fails is skipped (one line on stderr for a
write). Like the supervisor, this module never imports torch.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

PERIOD_ENV = "RMCONSOLE_SYSMETRICS_S"
DEFAULT_PERIOD_S = 5.0
FLUSH_EVERY = 3  # samples buffered per store write (the supervisor is not the store's only writer)

Tree = dict[int, tuple[int, int]]  # pid -> (CPU clock ticks used so far, resident bytes)


def period_s(env: dict[str, str] | None = None) -> float | None:
    """The sampling period from RMCONSOLE_SYSMETRICS_S (None: off). A value that is not a
    non-negative number is one line on stderr and the default, never a failed run."""
    raw = (os.environ if env is None else env).get(PERIOD_ENV, "").strip()
    if not raw:
        return DEFAULT_PERIOD_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        print(
            f"supervisor: {PERIOD_ENV}={raw!r} is not a number of seconds >= 0; sampling every {DEFAULT_PERIOD_S:g} s",
            file=sys.stderr,
        )
        return DEFAULT_PERIOD_S
    return value or None


# ---------------------------------------------------------------------------- reading /proc


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, utime + stime in clock ticks) of a process, from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[11]) + int(fields[12])


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return 0


def process_tree(root: int) -> Tree:
    """`root` and its descendants: each one's CPU ticks used so far and resident bytes."""
    parents: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (stat := _stat(int(name))) is not None:
            parents[int(name)] = stat
    tree, todo = set(), [root] if root in parents else []
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo.extend(p for p, (ppid, _) in parents.items() if ppid == pid and p not in tree)
    return {pid: (parents[pid][1], _rss(pid)) for pid in tree}


def load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


class Nvml:
    """GPU utilisation and memory of a set of processes through NVML; `read` answers None (and
    the object turns itself off) where NVML cannot be imported or initialised."""

    def __init__(self) -> None:
        self.nvml: Any = None
        try:
            import pynvml  # type: ignore[import-not-found]  # nvidia-ml-py: optional

            pynvml.nvmlInit()
            self.nvml = pynvml
        except Exception:  # noqa: BLE001 - no NVML, no driver, no GPU: no GPU figures
            self.nvml = None

    def read(self, pids: set[int]) -> tuple[float | None, int | None]:
        """(mean utilisation % of the GPUs where `pids` hold a context, the memory they hold there)."""
        nv = self.nvml
        if nv is None or not pids:
            return None, None
        try:
            utils, memory = [], 0
            for i in range(nv.nvmlDeviceGetCount()):
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                ours = [p for p in nv.nvmlDeviceGetComputeRunningProcesses(handle) if p.pid in pids]
                if ours:
                    utils.append(float(nv.nvmlDeviceGetUtilizationRates(handle).gpu))
                    memory += sum(int(p.usedGpuMemory or 0) for p in ours)
        except Exception:  # noqa: BLE001 - a driver that stops answering: no GPU figures from now on
            self.nvml = None
            return None, None
        if not utils:
            return None, None
        return sum(utils) / len(utils), memory


# ---------------------------------------------------------------------------- the sampler


class Sampler:
    """Turns successive readings of a process tree into samples (rows of `systemsample`). Every
    source is injectable, so the arithmetic is tested without processes."""

    def __init__(
        self,
        root: int,
        *,
        tree: Callable[[int], Tree] = process_tree,
        clock: Callable[[], float] = time.monotonic,
        load: Callable[[], float | None] = load1,
        gpu: Callable[[set[int]], tuple[float | None, int | None]] | None = None,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        ticks_per_s: float | None = None,
    ) -> None:
        self.root, self.tree, self.clock, self.load, self.now = root, tree, clock, load, now
        self.gpu = gpu if gpu is not None else Nvml().read
        self.ticks_per_s = ticks_per_s or float(os.sysconf("SC_CLK_TCK"))
        self._last: tuple[float, Tree] | None = None

    def sample(self) -> dict[str, Any] | None:
        """One sample; None when the tree is gone. CPU % is over the time since the previous
        sample (None at the first): each process's ticks since then (a process new since then:
        all its ticks), so a tree that grows or shrinks is measured by the processes alive now."""
        tree = self.tree(self.root)
        if not tree:
            return None
        t = self.clock()
        cpu = None
        if self._last is not None and t > self._last[0]:
            before = self._last[1]
            ticks = sum(max(0, used - before.get(pid, (0, 0))[0]) for pid, (used, _) in tree.items())
            cpu = round(100.0 * ticks / self.ticks_per_s / (t - self._last[0]), 1)
        self._last = (t, tree)
        gpu_util, gpu_mem = self.gpu(set(tree))
        return {
            "at": self.now(),
            "cpu_percent": cpu,
            "rss_bytes": sum(rss for _, rss in tree.values()),
            "load1": self.load(),
            "gpu_util": gpu_util,
            "gpu_mem_bytes": gpu_mem,
        }


class Recorder:
    """A thread of the supervisor that samples `pid`'s tree every `period` seconds and writes the
    samples to the store in batches, until `stop()` (which writes what is left)."""

    def __init__(self, run_id: int, pid: int, period: float, sampler: Sampler | None = None) -> None:
        self.run_id, self.period = run_id, period
        self.sampler = sampler if sampler is not None else Sampler(pid)
        self.pending: list[dict[str, Any]] = []
        self.lost = False  # the store or the run's attempt is no longer ours: write nothing more
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sysmetrics", daemon=True)

    @classmethod
    def start(cls, run_id: int, pid: int) -> Recorder | None:
        period = period_s()
        if period is None or not sys.platform.startswith("linux"):
            return None
        recorder = cls(run_id, pid, period)
        recorder._thread.start()
        return recorder

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                row = self.sampler.sample()
            except Exception:  # noqa: BLE001 - a /proc read racing a process's exit: skip this one
                row = None
            if row is not None:
                self.pending.append(row)
            if len(self.pending) >= FLUSH_EVERY:
                self.flush()

    def flush(self) -> None:
        rows, self.pending = self.pending, []
        if not rows or self.lost:
            return
        from .. import store

        try:  # with the lease the supervisor was started with: never into another store or attempt
            store.record_system(self.run_id, rows, lease=store.Lease.from_env(self.run_id))
        except store.LeaseLost:
            self.lost = True
        except Exception as err:  # noqa: BLE001 - the run matters more than its load figures
            print(
                f"supervisor: could not record system samples of run {self.run_id}: {err}", file=sys.stderr, flush=True
            )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5.0)
        self.flush()


# ---------------------------------------------------------------------------- shown


def _bytes(n: int | None) -> str:
    if n is None:
        return "—"
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n}B"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x:.0f}%"


def summary_text(summary: dict[str, Any] | None) -> str | None:
    """One line of a run's system load (`store.system_summary`): CPU % mean/peak (of one core:
    200% = two cores busy), the process tree's peak resident memory, the load average mean/peak,
    and on a GPU its utilisation mean/peak and the tree's peak GPU memory. None: not sampled."""
    if not summary:
        return None
    load = summary.get("load1_mean"), summary.get("load1_peak")
    parts = [
        f"CPU {_pct(summary.get('cpu_mean'))}/{_pct(summary.get('cpu_peak'))} mean/peak",
        f"RSS {_bytes(summary.get('rss_peak_bytes'))} peak",
        "load " + ("—" if load[0] is None else f"{load[0]:.1f}/{load[1]:.1f}"),
    ]
    if summary.get("gpu_util_mean") is not None or summary.get("gpu_mem_peak_bytes") is not None:
        parts.append(
            f"GPU {_pct(summary.get('gpu_util_mean'))}/{_pct(summary.get('gpu_util_peak'))} "
            f"mem {_bytes(summary.get('gpu_mem_peak_bytes'))} peak"
        )
    parts.append(f"{summary['samples']} samples")
    return " · ".join(parts)
