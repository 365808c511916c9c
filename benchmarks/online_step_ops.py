"""What one task-free update costs the host, per method, at a preset's model, image size and
batch: operators (on a GPU, about one kernel launch each), host synchronisations and milliseconds.

    python benchmarks/online_step_ops.py --methods er,clib                    # CPU: counts, slow steps
    python benchmarks/online_step_ops.py --device cuda --samples 960           # a GPU: ms per update

Columns, per update (a training step of the method; its per-sample work, memory included, is
shared out over them):
- top-level: operators the host issued itself (the profiler's, not those inside another operator);
- dispatcher: every operator that reached the dispatcher (composites decomposed, autograd's
  backward included: what a CUDA graph would have to capture);
- kernels outside: those of the dispatcher's that launch a kernel on a GPU (views and metadata
  left out, `step_audit.NO_KERNEL`; operators on device data, and the copy of a host operand
  beside it), issued outside every region a CUDA graph replays on a GPU (`step_audit.graphable`:
  a method's step, the augmentation, MIR's retrieval, CLIB's importance pass). On CPU the
  counted updates take the GPU's path (`graphs_path`): each region's body runs eagerly, its
  operators counted apart, and the copies into its static inputs are counted outside, as a GPU
  makes them; the bodies are kept capturable by tests/cl/test_step_syncs.py;
- host-only: kernel-type operators on host tensors alone (a draw turned into parameters, CLIB's
  importance bookkeeping): host CPU time on a GPU too, but no launch;
- syncs: host synchronisations (`step_audit.StepAudit`: `.item()`, `bool(tensor)`, `nonzero`,
  boolean-mask indexing... on device data);
- CPU ms: the process's CPU time (what a laptop pays; stable on a shared machine), and wall ms.
Synthetic images of the preset's shape (no dataset needed); the stream is the preset's first
task on them, `online_iter` updates per sample. The same script measures an older checkout
(without `online.feed` it feeds samples as the driver then did).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

import torch
from common import gpu_kernels, launches, measure_rows, sync, top_level_ops

from rmconsole.cl.data import Dataset, TensorImages
from rmconsole.cl.events import Reporter
from rmconsole.cl.learner import Setup, Task
from rmconsole.cl.methods import method_class
from rmconsole.cl.online import build_online_protocol
from rmconsole.cl.resume import make_augmenter
from rmconsole.cl.step_audit import NO_KERNEL, StepAudit
from rmconsole.config import load_config

try:
    from rmconsole.cl.online import feed as drive
except ImportError:  # a checkout before issue 43: the driver's code of then

    def drive(method: object, index: int, label: int) -> None:
        if not bool(method.seen[label]):  # type: ignore[attr-defined]
            method.online_new_class(label)  # type: ignore[attr-defined]
        method.online_observe(index, label)  # type: ignore[attr-defined]


class LoggingReporter(Reporter):
    """The silent Reporter, but its log lines (a failed CUDA graph capture says so there) go to
    stderr: a capture that fails trains eagerly, as slowly as no graph, and must not pass unseen."""

    def __init__(self, method: str) -> None:
        self.method = method

    def log(self, message: str) -> None:
        print(f"{self.method}: {message}", file=sys.stderr, flush=True)


def graph_counts(learner: object) -> dict:
    """The learner's step graphs (train.graphed_step / method_step, MIR's retrieval): captured and failed (each
    failed one trains eagerly from then on); none made on CPU or with graphs off."""
    made = [*getattr(learner, "graphs", {}).values(), *getattr(learner, "retrievals", {}).values()]  # MIR's too
    return {
        "graphs": sum(1 for g in made if getattr(g, "graph", None) is not None),
        "graphs_failed": sum(1 for g in made if getattr(g, "failed", False)),
    }


def graphs_path(learner: object) -> None:
    """On a CPU, the counted updates take the path a GPU's CUDA graphs take (as the tests do): the
    optimiser graph-ready (its lr a tensor), the Stepper's steps graphed (replayed eagerly inside
    `graphable()`), so the copies into the graphs' static inputs, made outside the graphs, are
    counted as a GPU makes them. A GPU run is there already; an older checkout: unchanged."""
    stepper = getattr(learner, "stepper", None)
    if not getattr(learner, "graphs_wanted", False) or stepper is None or learner.device.type != "cpu":
        return
    from rmconsole.cl import graphs

    graphs.graph_ready_optimizer(learner.optimizer)
    stepper.graphs = learner.plain_step
    stepper.capture = stepper.captured


def synthetic(n_classes: int, size: int, per_class: int, test_per_class: int) -> Dataset:
    gen = torch.Generator().manual_seed(0)

    def split(k: int) -> TensorImages:
        labels = torch.arange(n_classes).repeat_interleave(k)
        images = torch.randint(0, 256, (len(labels), 3, size, size), generator=gen, dtype=torch.uint8)
        return TensorImages(images, labels)

    names = [f"c{i}" for i in range(n_classes)]
    return Dataset("synthetic", split(per_class), split(test_per_class), names, (0.5,) * 3, (0.5,) * 3)


def measure(
    preset: str,
    method: str,
    samples: int,
    device: torch.device,
    warm_batches: int = 4,
    sets: dict | None = None,
    counted: bool = True,
    busy_samples: int = 0,
    boundary: bool = False,
) -> dict:
    """The CPU and wall milliseconds an update over `samples` stream samples, then (`counted`)
    operators and syncs per update: the profiler over as many more, the audit over as many after
    those, on the GPU's path (`graphs_path`). The GPU check times only: the profiler over a GPU
    update is slower than the call's minutes allow. `boundary`: the task's end comes after the
    warm-up (`online_task_end`) and the same stream goes on: the updates of a later task (EWC++'s
    penalty)."""
    _, cfg = load_config(preset, {"method": method, "device": str(device), **(sets or {})})
    data = synthetic(200, cfg.image_size or 64, 100, 2).to(device)
    protocol = build_online_protocol(cfg, data)
    train_labels, test_labels = protocol.train_labels.to(device), protocol.test_labels.to(device)
    augmenter = make_augmenter(cfg, data, device)
    setup = Setup(cfg, data, train_labels, test_labels, protocol.groups, device, augmenter, LoggingReporter(method))
    learner = method_class(cfg.method_spec)(setup)
    learner.online_start()
    task = Task(0, protocol.tasks[0], len(protocol.tasks))
    learner.online_task_start(task)
    stream = task.stream.tolist()
    labels = protocol.train_labels[task.stream].tolist()

    def feed(lo: int, hi: int) -> None:
        for index, label in zip(stream[lo:hi], labels[lo:hi]):
            drive(learner, index, label)

    chunk = max(1, cfg.batch_size // 2)  # updates come when this many stream samples are in
    samples = max(chunk, samples // chunk * chunk)
    warm = warm_batches * chunk
    feed(0, warm)  # the memory fills, the first updates allocate
    if boundary:
        learner.online_task_end(task)
        feed(warm, 2 * warm)  # the updates after it allocate
        warm *= 2
    sync(device)
    from torch.profiler import ProfilerActivity, profile

    def timed(lo: int, hi: int) -> dict:
        """CPU and wall milliseconds an update while streaming samples lo..hi."""
        steps = learner.online_steps
        wall, cpu = time.perf_counter(), time.process_time()
        feed(lo, hi)
        sync(device)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        n = max(learner.online_steps - steps, 1)
        return {"updates": n, "cpu_ms": 1000 * cpu / n, "wall_ms": 1000 * wall / n}

    def busy(lo: int, hi: int) -> dict:
        """The GPU's kernel time an update while streaming samples lo..hi (the profiler's CUDA
        activity, graph replays' kernels included), against the wall time: an update whose GPU
        is busy for much less than its wall time is bound by the host. On CPU: none."""
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
        steps = learner.online_steps
        with profile(activities=activities) as prof:
            feed(lo, hi)
            sync(device)
        n = max(learner.online_steps - steps, 1)
        if device.type != "cuda":
            return {}
        kernel_us = sum(e.device_time_total for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        return {"busy_ms": kernel_us / 1000 / n, "busy_updates": n, **gpu_kernels(prof, n)}

    shape = {"model": cfg.model, "image_size": cfg.image_size, "batch_size": cfg.batch_size}
    if not counted:
        row = {"method": method, **timed(warm, warm + samples), **graph_counts(learner), **shape}
        if busy_samples:
            row.update(busy(lo=warm + samples, hi=warm + samples + max(chunk, busy_samples // chunk * chunk)))
        return row
    times = timed(warm, warm + samples)  # the device's own path (a CPU's: what a laptop runs)
    steps = learner.online_steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        feed(warm + samples, warm + 2 * samples)
        sync(device)
    updates = max(learner.online_steps - steps, 1)

    top = top_level_ops(prof)
    graphs_path(learner)
    audit = StepAudit(device).mark_method(learner)
    steps = learner.online_steps
    with audit:
        feed(warm + 2 * samples, warm + 3 * samples)
        sync(device)
    audited = max(learner.online_steps - steps, 1)
    kernels: Counter[str] = audit.kernel_ops()
    outside, host = launches(audit, audited)
    sync(device)
    return {
        "method": method,
        **times,
        "top_ops": top / updates,
        "dispatch_ops": audit.n_dispatch_ops / audited,
        "kernel_ops": sum(kernels.values()) / audited,  # kernel-launching, inside the graphs and out
        "kernels_outside": outside,
        "host_ops": host,  # kernel-type operators on host tensors only (a draw): no launch on a GPU
        "syncs": audit.n_syncs / audited,
        "where": audit.where.most_common(3),
        "common": [(n, c) for n, c in kernels.most_common(5) if n not in NO_KERNEL],
        # kernel-launching operators outside the graphed step, per update (an older checkout: none)
        "outside": [(n, round(c / audited, 2)) for n, c in getattr(audit, "outside_ops", Counter()).most_common(12)],
        **shape,
    }


def _value(text: str) -> object:
    """A --set value as the config takes it: a number or boolean when it reads as one."""

    try:
        return json.loads(text)
    except ValueError:
        return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--preset", default="tiny-imagenet-iblurry50-10")
    ap.add_argument("--methods", default="er,clib")
    ap.add_argument("--samples", type=int, default=32, help="stream samples profiled, then as many timed")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warm-batches", type=int, default=4, help="temp batches streamed before measuring")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a config override (repeatable)")
    ap.add_argument("--time-only", action="store_true", help="no profiler, no audit: milliseconds only (the GPU check)")
    ap.add_argument(
        "--busy-samples",
        type=int,
        default=0,
        help="with --time-only: stream this many more samples under the profiler's CUDA activity (GPU busy ms an update)",
    )
    ap.add_argument(
        "--boundary",
        action="store_true",
        help="a task boundary after the warm-up, then the same stream: a later task's updates (EWC++'s penalty)",
    )
    ap.add_argument("--jsonl", type=Path, default=None, help="append each method's row to this file as it ends")
    ap.add_argument(
        "--cudnn-benchmark",
        action="store_true",
        help="cuDNN times its algorithms for each new shape and keeps the fastest (torch.backends.cudnn.benchmark): "
        "a GPU measurement of whether the run should",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = args.cudnn_benchmark
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(args.device)
    print(f"{args.preset} on {device}, {args.threads} CPU thread(s); overrides {args.set or 'none'}")
    print(
        "method | updates timed | top-level ops | dispatcher ops | kernel ops outside the graphed step "
        "| host-only ops | host syncs | CPU ms | wall ms (all per update) | most called kernels; where the syncs are"
    )
    sets = {k: _value(v) for k, v in (kv.split("=", 1) for kv in args.set)}
    return measure_rows(
        args.methods.split(","),
        "method",
        lambda method: {
            **measure(
                args.preset,
                method,
                args.samples,
                device,
                args.warm_batches,
                sets,
                not args.time_only,
                args.busy_samples,
                args.boundary,
            ),
            **({"boundary": True} if args.boundary else {}),
            **({"cudnn_benchmark": True} if args.cudnn_benchmark else {}),
        },
        _row,
        args.jsonl,
        device,
    )


def _row(r: dict) -> str:
    shape = f"  ({r['model']} at {r['image_size']}, batch {r['batch_size']})"
    if "syncs" not in r:  # --time-only
        graphs = f"; CUDA graphs {r['graphs']} captured, {r['graphs_failed']} failed" if "graphs" in r else ""
        graphs += f"; GPU busy {r['busy_ms']:.2f} ms an update" if "busy_ms" in r else ""
        return f"{r['method']} | {r['updates']:g} | — | — | — | — | — | {r['cpu_ms']:.1f} | {r['wall_ms']:.1f} | not counted{graphs}{shape}"
    common = ", ".join(f"{name} {n}" for name, n in r["common"])
    where = "; ".join(f"{w} x{n}" for w, n in r["where"])
    return (
        f"{r['method']} | {r['updates']:g} | {r['top_ops']:.0f} | {r['dispatch_ops']:.0f} | {r['kernels_outside']:.0f} "
        f"| {'—' if r.get('host_ops') is None else format(r['host_ops'], '.0f')} | {r['syncs']:.2f} | {r['cpu_ms']:.1f} | {r['wall_ms']:.1f} | {common}"
        + (f"; syncs: {where}" if where else "")
        + (f"; outside: {', '.join(f'{n} {c:g}' for n, c in r['outside'])}" if r.get("outside") else "")
        + shape
    )


if __name__ == "__main__":
    sys.exit(main())
