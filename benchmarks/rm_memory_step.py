"""What one step of RM's memory epochs (the task protocol) costs the host, at the paper's two
shapes: samples/s, operators and host syncs per step, CPU and wall ms per step. The sibling of
online_step_ops.py (the task-free update), for issue 43.

    python benchmarks/rm_memory_step.py                                   # both shapes, K=500
    python benchmarks/rm_memory_step.py --shapes mnist --memory 64 --jsonl out.jsonl
    python benchmarks/rm_memory_step.py --device cuda --time-only --epochs 8   # a GPU: samples/s

Shapes (synthetic images of the dataset's shape, no dataset needed; the preset's settings):
- cifar: CIFAR10 3x32x32, ResNet18, CutMix + AutoAugment, batch 16 (memory batch 8);
- mnist: MNIST 1x28x28, MLP400, the same augmentation and batches.
The memory (K samples of 10 classes) is trained `--epochs` memory epochs as RM's `learn_task`
trains it (`fit`: the epochs' augmentation planned and applied chunk by chunk, one call each).
Columns, per step: top-level operators (the profiler's, issued by the host itself), dispatcher
operators and those that may launch a kernel (step_audit), the kernel ones issued outside a
`graphable()` region (what a CUDA graph replay would not cover), host syncs (step_audit: on the
CPU device the audit counts syncs on the run's tensors as it does on a GPU), CPU ms (process
time) and wall ms. Epoch ends (the loss's one read, the finiteness check) are included: they are
shared out over the epoch's steps.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from common import accel_settings, add_accel_options, launches, machine, measure_rows, sync, top_level_ops

from rmconsole.cl import graphs
from rmconsole.cl.data import Dataset, TensorImages
from rmconsole.cl.events import Reporter
from rmconsole.cl.loop import build_protocol, make_augmenter
from rmconsole.cl.methods import Setup, Task, method_class
from rmconsole.cl.step_audit import NO_KERNEL, StepAudit
from rmconsole.config import build_config

SHAPES = {  # name: (dataset, model, image shape, mean, std)
    "cifar": ("cifar10", "resnet18", (3, 32, 32), (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)),
    "mnist": ("mnist", "mlp400", (1, 28, 28), (0.1307,), (0.3081,)),
}


def synthetic(name: str, shape: tuple[int, ...], mean: tuple[float, ...], std: tuple[float, ...], n: int) -> Dataset:
    gen = torch.Generator().manual_seed(0)

    def split(k: int) -> TensorImages:
        labels = torch.arange(k) % 10
        return TensorImages(torch.randint(0, 256, (k, *shape), dtype=torch.uint8, generator=gen), labels)

    return Dataset(name, split(n), split(100), [f"class{i}" for i in range(10)], mean, std, crop_padding=4)


def measure(
    shape: str,
    memory: int,
    epochs: int,
    device: torch.device,
    accel: dict,
    counted: bool = True,
    graphs_here: bool = False,
    stack: int = 1,
) -> dict:
    if stack > 1:
        return measure_stacked(shape, memory, epochs, device, accel, counted, graphs_here, stack)
    model = SHAPES[shape][1]
    rm, task = make_rm(shape, memory, epochs, device, accel, graphs_here)
    per_epoch = -(-memory // rm.memory_batch_size)

    def run(n: int) -> int:
        """n memory epochs; the steps they took."""
        rm.fit(n, lambda e: rm.shuffled_batches(rm.memory.indices, rm.memory_batch_size), "memory", task)
        sync(device)
        return n * per_epoch

    run(1)  # warm-up: first allocations, cuDNN autotuning, graph capture
    wall, cpu = time.perf_counter(), time.process_time()
    steps = run(epochs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    row = {
        "shape": shape,
        "model": model,
        "memory": memory,
        "batch": rm.memory_batch_size,
        "epochs": epochs,
        "steps": steps,
        "samples_per_s": epochs * memory / wall,
        "cpu_ms": 1000 * cpu / steps,
        "wall_ms": 1000 * wall / steps,
        "accel": f"{rm.accel.describe()}, cuda_graphs={rm.uses_graphs}",
        "steps_per_replay": graphs.STEPS_PER_REPLAY if rm.uses_graphs else None,
        "stack": 1,
    }
    if not counted:
        return row
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        steps = run(1)

    top = top_level_ops(prof)
    audit = StepAudit(device).mark_method(rm)
    with audit:
        audited = run(1)
    kernels = audit.kernel_ops()
    outside, host = launches(audit, audited)
    row.update(
        top_ops=top / steps,
        dispatch_ops=audit.n_dispatch_ops / audited,
        kernel_ops=sum(kernels.values()) / audited,
        kernels_outside=outside,
        host_ops=host,
        syncs=audit.n_syncs / audited,
        where=audit.where.most_common(3),
        common=[(n, c) for n, c in kernels.most_common(5) if n not in NO_KERNEL],
    )
    return row


def measure_stacked(
    shape: str,
    memory: int,
    epochs: int,
    device: torch.device,
    accel: dict,
    counted: bool,
    graphs_here: bool,
    stack: int,
) -> dict:
    """`stack` seeds (1, 2, ...) of RM, each in its own thread, their graphed memory steps taken as
    one (cl/stacked.py): samples/s of all seeds together. Counted: one stacked call of the graph's
    body audited in this thread (the threads' host work, each seed's own, is the unstacked row's)."""
    from rmconsole.cl.stacked import SeedStack, run_stacked

    runs = [make_rm(shape, memory, epochs, device, accel, graphs_here, seed=1 + i) for i in range(stack)]
    rms = [rm for rm, _ in runs]
    first = rms[0]
    per_epoch = -(-memory // first.memory_batch_size)
    seats = SeedStack()

    def run(n: int) -> int:
        run_stacked(
            rms,
            lambda rm: rm.fit(
                n,
                lambda e: rm.shuffled_batches(rm.memory.indices, rm.memory_batch_size),
                "memory",
                next(t for r, t in runs if r is rm),
            ),
            seats,
        )
        sync(device)
        return n * per_epoch

    run(1)
    wall, cpu = time.perf_counter(), time.process_time()
    steps = run(epochs)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    row = {
        "shape": shape,
        "model": SHAPES[shape][1],
        "memory": memory,
        "batch": first.memory_batch_size,
        "epochs": epochs,
        "steps": steps,
        "samples_per_s": stack * epochs * memory / wall,
        "cpu_ms": 1000 * cpu / steps,
        "wall_ms": 1000 * wall / steps,
        "accel": f"{first.accel.describe()}, cuda_graphs={first.uses_graphs}",
        "steps_per_replay": graphs.STEPS_PER_REPLAY if first.uses_graphs else None,
        "stack": stack,
        "stacked_calls": seats.counts.stacked,
        "apart_calls": seats.counts.apart,
        "why_apart": dict(seats.counts.why_apart),
    }
    if not counted or not seats.steps:
        return row
    step = max(seats.steps.values(), key=lambda s: s.k)  # the epoch's common shape: k steps a call
    b, k = step.batch, step.k
    xs = [torch.zeros(k * b, *first.setup.data.image_shape, device=device) for _ in rms]
    ys = [torch.zeros(k * b, dtype=torch.long, device=device) for _ in rms]
    draws = [[first.setup.augmenter.draw_mix(b, *first.setup.data.image_shape[-2:]) for _ in range(k)] for _ in rms]
    audit = StepAudit(device)
    for rm in rms:
        audit.mark_method(rm)
    audit.mark(step.models.params, step.models.buffers, step.models.optimizer, *xs, *ys)
    with audit:
        step(xs, ys, [rm.seen for rm in rms], draws)
    kernels = audit.kernel_ops()
    row.update(
        dispatch_ops=audit.n_dispatch_ops / k,
        kernel_ops=sum(kernels.values()) / k,
        kernel_ops_per_sample=sum(kernels.values()) / (k * b * stack),
        syncs=audit.n_syncs / k,
        where=audit.where.most_common(3),
        common=[(n, c) for n, c in kernels.most_common(5) if n not in NO_KERNEL],
    )
    return row


def make_rm(
    shape: str, memory: int, epochs: int, device: torch.device, accel: dict, graphs_here: bool, seed: int = 1
) -> tuple:
    """An RM run of this shape, its memory (K samples) filled and its task begun: (rm, task)."""
    dataset, model, image_shape, mean, std = SHAPES[shape]
    cfg = build_config(
        {
            "dataset": dataset,
            "model": model,
            "method": "rm",
            "memory_size": memory,
            "epochs": epochs,
            "seed": seed,
            "augment": ["cutmix", "autoaug"],
            "batch_size": 16,
            "lr": 0.05,
            "schedule": "cosine",
            "device": str(device),
            **accel,
        }
    )
    data = synthetic(dataset, image_shape, mean, std, max(2 * memory, 200))
    protocol = build_protocol(cfg, data)
    data = data.to(device)
    labels = protocol.train_labels.to(device)
    setup = Setup(
        cfg,
        data,
        labels,
        protocol.test_labels.to(device),
        protocol.groups,
        device,
        make_augmenter(cfg, data, device),
        Reporter(),
    )
    cls = method_class("rm")
    if graphs_here:  # the graphed path where CUDA graphs cannot run: replays run their body (EagerGraph)
        cls = type(cls.__name__, (cls,), {"uses_graphs": property(lambda self: True)})
    torch.manual_seed(seed)  # the model's initialisation, as the loop seeds it
    rm = cls(setup)
    kept = torch.randperm(len(data.train), generator=torch.Generator().manual_seed(seed - 1))[:memory]
    rm.memory.replace(kept, protocol.train_labels[kept])
    task = Task(0, kept, 5)
    rm.before_task(task)
    return rm, task


def _row(r: dict) -> str:
    k = r.get("steps_per_replay")
    replay = f", {k} steps a replay" if k else ""
    n = r.get("stack", 1)
    seeds = f", {n} seeds stacked ({r['stacked_calls']} calls stacked, {r['apart_calls']} apart)" if n > 1 else ""
    head = (
        f"{r['shape']} ({r['model']}, K={r['memory']}, batch {r['batch']}{replay}{seeds}) | {r['steps']} "
        f"| {r['samples_per_s']:,.0f}"
    )
    if n > 1 and "syncs" in r:
        common = ", ".join(f"{name} {c}" for name, c in r["common"])
        return (
            f"{head} | — | {r['dispatch_ops']:.0f} | {r['kernel_ops']:.0f} (a sample: {r['kernel_ops_per_sample']:.1f}) "
            f"| 0 (the graph's body) | {r['syncs']:.2f} | {r['cpu_ms']:.1f} | {r['wall_ms']:.1f} | {common}"
        )
    if "syncs" not in r:
        return f"{head} | — | — | — | — | — | {r['cpu_ms']:.1f} | {r['wall_ms']:.1f} | not counted"
    where = "; ".join(f"{w} x{n}" for w, n in r["where"])
    common = ", ".join(f"{n} {c}" for n, c in r["common"])
    return (
        f"{head} | {r['top_ops']:.0f} | {r['dispatch_ops']:.0f} | {r['kernel_ops']:.0f} | {r['kernels_outside']:.0f} "
        f"| {r['syncs']:.2f} | {r['cpu_ms']:.1f} | {r['wall_ms']:.1f} | {common}"
        + (f"; syncs: {where}" if where else "")
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--shapes", default="cifar,mnist", help=f"comma-separated, of {', '.join(SHAPES)}")
    ap.add_argument("--memory", type=int, default=500, help="K, the memory trained on")
    ap.add_argument("--epochs", type=int, default=2, help="memory epochs timed (after one of warm-up)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--time-only", action="store_true", help="no profiler, no audit: samples/s and ms only")
    ap.add_argument("--jsonl", type=Path, default=None, help="append each shape's row to this file as it ends")
    ap.add_argument(
        "--graphs-here",
        action="store_true",
        help="take the CUDA-graphed path on a device without CUDA graphs (a replay runs its body: "
        "graphs.EagerGraph), to count what the host issues around replays",
    )
    ap.add_argument(
        "--steps-per-replay",
        type=int,
        default=graphs.STEPS_PER_REPLAY,
        help=f"equal batches per graph replay (graphs.STEPS_PER_REPLAY, {graphs.STEPS_PER_REPLAY}; 1: one a replay)",
    )
    ap.add_argument(
        "--stack",
        default="1",
        help="comma-separated numbers of seeds stacked in one process (cl/stacked.py), a row each: 1,4,8 "
        "(1: one run, as before)",
    )
    add_accel_options(ap)
    args = ap.parse_args(argv)
    graphs.STEPS_PER_REPLAY = max(1, args.steps_per_replay)
    shapes = args.shapes.split(",")
    unknown = [s for s in shapes if s not in SHAPES]
    try:
        stacks = [int(n) for n in args.stack.split(",")]
    except ValueError:
        stacks = [0]
    if any(n < 1 for n in stacks):
        unknown.append(f"--stack {args.stack} (whole numbers >= 1, comma-separated)")
    if unknown or args.memory < 1 or args.epochs < 1:
        print(
            f"rm_memory_step: bad option ({', '.join(unknown) or 'memory and epochs must be >= 1'}); shapes are "
            f"{', '.join(SHAPES)}",
            file=sys.stderr,
        )
        return 2
    torch.set_num_threads(args.threads)
    device = torch.device(
        "cuda" if args.device == "auto" and torch.cuda.is_available() else args.device.replace("auto", "cpu")
    )
    print(machine())
    print(f"RM memory epochs on {device}, {args.threads} CPU thread(s)")
    print(
        "shape | steps timed | samples/s | top-level ops | dispatcher ops | kernel ops | kernel ops outside the "
        "graphed step | host syncs | CPU ms | wall ms (per step) | most called kernels; where the syncs are"
    )
    settings = accel_settings(args)
    rows = [f"{shape}:{n}" for shape in shapes for n in stacks]
    return measure_rows(
        rows,
        "shape",
        lambda name: measure(
            name.split(":")[0],
            args.memory,
            args.epochs,
            device,
            settings,
            not args.time_only,
            args.graphs_here,
            int(name.split(":")[1]),
        ),
        _row,
        args.jsonl,
        device,
    )


if __name__ == "__main__":
    sys.exit(main())
