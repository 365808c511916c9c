"""Where RM's memory epochs spend their time on a GPU: torch.profiler over a few memory epochs
of the CIFAR-shaped setting (K = 500, batch 8, ResNet18, CutMix + AutoAugment).

    python benchmarks/profile_memory_epochs.py [--epochs 4] [--json out.json]

Prints samples/s, the share of wall time the GPU was busy with kernels (low = bound by
launches and host work, not arithmetic), kernel launches per step, and the top operators by
host time and by GPU time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from cifar_run import synthetic_cifar
from common import accel_settings, add_accel_options, gpu_kernels, machine, sync
from torch.profiler import ProfilerActivity, profile

from rmconsole.cl.events import Reporter
from rmconsole.cl.loop import build_protocol, make_augmenter
from rmconsole.cl.methods import Setup, Task, method_class
from rmconsole.config import build_config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--epochs", type=int, default=4, help="memory epochs profiled (after 2 of warm-up)")
    parser.add_argument("--memory", type=int, default=500)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--json", type=Path)
    add_accel_options(parser)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    cfg = build_config(
        {
            "dataset": "cifar10",
            "model": args.model,
            "method": "rm",
            "memory_size": args.memory,
            "epochs": args.epochs,
            "augment": ["cutmix", "autoaug"],
            "batch_size": 16,
            **accel_settings(args),
        }
    )
    data = synthetic_cifar(5000, 100)
    protocol = build_protocol(cfg, data)
    data = data.to(device)
    setup = Setup(
        cfg,
        data,
        protocol.train_labels.to(device),
        protocol.test_labels.to(device),
        protocol.groups,
        device,
        make_augmenter(cfg, data, device),
        Reporter(),
    )
    rm = method_class("rm")(setup)
    memory = torch.randperm(len(data.train), generator=torch.Generator().manual_seed(0))[: args.memory]
    rm.memory.replace(memory, protocol.train_labels[memory])
    task = Task(0, memory, 5)
    rm.before_task(task)

    def epochs(n: int) -> None:
        rm.fit(n, lambda e: rm.shuffled_batches(rm.memory.indices, rm.memory_batch_size), "memory", task)

    epochs(2)  # warm-up: cuDNN autotuning, compilation
    sync(device)
    steps = args.epochs * (args.memory // rm.memory_batch_size)
    start = time.perf_counter()
    epochs(args.epochs)
    sync(device)
    plain = time.perf_counter() - start
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        epochs(args.epochs)
        sync(device)
        profiled = time.perf_counter() - start
    events = prof.key_averages()
    kernel_us = (
        sum(e.self_device_time_total for e in events if e.device_type.name == "CUDA") if device.type == "cuda" else 0
    )
    launches = sum(
        e.count
        for e in events
        if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cudaGraphLaunch")
    )
    print(machine())
    print(
        f"workload: {args.epochs} memory epochs, K={args.memory}, batch {rm.memory_batch_size}, {args.model}, "
        f"cutmix+autoaug; {rm.accel.describe()}, cuda_graphs={rm.uses_graphs}; device {device}"
    )
    samples = args.epochs * args.memory
    print(
        f"memory epochs: {samples / plain:,.0f} samples/s, {plain / steps * 1e3:.2f} ms/step "
        f"(profiled: {profiled / steps * 1e3:.2f} ms/step)"
    )
    if device.type == "cuda":
        print(
            f"GPU busy with kernels: {kernel_us / 1e6 / profiled:.0%} of wall; {launches / steps:.0f} kernel launches per step"
        )
    sort = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(events.table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=48))
    if device.type == "cuda":
        print(events.table(sort_by=sort, row_limit=12, max_name_column_width=48))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "samples_per_s": samples / plain,
                    "ms_per_step": plain / steps * 1e3,
                    "steps": steps,
                    "gpu_busy": kernel_us / 1e6 / profiled if device.type == "cuda" else None,
                    "launches_per_step": launches / steps,
                    "accel": f"{rm.accel.describe()}, cuda_graphs={rm.uses_graphs}",
                    "top_host_ops": [
                        (e.key, e.self_cpu_time_total / steps)
                        for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:15]
                    ],
                    **gpu_kernels(prof, steps),
                },
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
