"""Throughput of RM's four hot paths, in samples per second, and peak memory.

    python benchmarks/throughput.py                     # CPU (and the GPU too, when there is one)
    python benchmarks/throughput.py --device cpu --threads 1
    python benchmarks/throughput.py --data mnist        # real MNIST from RMCONSOLE_DATA

Phases, each through the same code a run uses (Method.fit, Method.uncertainty_of, loop.evaluate):
  stream pass     one pass over a task's stream, RM batches (8 stream + 8 memory), augmented
  memory epochs   epochs over the K-sample memory, batch 8, augmented
  uncertainty     RM's scoring: every candidate x `views` perturbed views, voted (samples/s
                  counts candidates; views/s counts forward passes)
  evaluation      batched inference over the test set
Peak memory: the process's peak RSS on CPU (resource.getrusage, never decreases, so it is
the peak up to and including that phase), torch.cuda.max_memory_allocated per phase on GPU.

Workloads: MNIST-shaped (1x28x28, MLP400) always; on a GPU also CIFAR-shaped (3x32x32,
ResNet18 with the CIFAR stem) on synthetic data. Synthetic images are random uint8 pixels
with random labels: the speed of every phase does not depend on what the pixels show.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from rmconsole.cl.data import Dataset, TensorImages, load_dataset
from rmconsole.cl.loop import build_protocol, evaluate, make_augmenter
from rmconsole.cl.methods import Setup, Task, method_class
from rmconsole.config import build_config


def synthetic(name: str, shape: tuple[int, int, int], n_train: int, n_test: int, seed: int = 0) -> Dataset:
    gen = torch.Generator().manual_seed(seed)

    def split(n: int) -> TensorImages:
        images = torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=gen)
        return TensorImages(images, torch.arange(n) % 10)

    channels = shape[0]
    return Dataset(
        name,
        split(n_train),
        split(n_test),
        [str(i) for i in range(10)],
        (0.5,) * channels,
        (0.25,) * channels,
        crop_padding=4,
    )


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def timed(device: torch.device, work: Callable[[], object]) -> tuple[float, float]:
    """(seconds, peak MiB) of one call; GPU work is synchronised before the clock stops."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else peak_rss_mib()
    return seconds, peak


def bench(
    label: str, data: Dataset, model: str, dataset: str, device: torch.device, args: argparse.Namespace
) -> list[tuple]:
    cfg = build_config(
        {
            "dataset": dataset,
            "model": model,
            "method": "rm",
            "memory_size": args.memory,
            "epochs": args.epochs,
            "augment": args.augment,
            "uncertainty": args.measure,
            "uncertainty_views": args.views,
            "batch_size": 16,
            "lr": 0.05,
            "seed": 1,
        }
    )
    torch.manual_seed(1)
    protocol = build_protocol(cfg, data)
    data = data.to(device)
    augmenter = make_augmenter(cfg, data, device)
    setup = Setup(
        cfg, data, protocol.train_labels.to(device), protocol.test_labels.to(device), protocol.groups, device, augmenter
    )
    rm = method_class("rm")(setup)
    stream = protocol.tasks[1][: args.stream]
    task = Task(1, stream, len(protocol.tasks))
    memory = protocol.tasks[0][: args.memory]
    rm.memory.replace(memory, protocol.train_labels[memory])
    rm.before_task(task)
    candidates = torch.cat([memory, stream])[: args.candidates]
    classes = list(range(data.n_classes))

    if args.warmup:  # first calls pay for lazy initialisation (kernels, allocator)
        rm.fit(1, lambda e: rm.stream_batches(task)[:4], "stream", task)
        rm.uncertainty_of(candidates[:64])
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    n_stream = sum(len(b) for b in rm.stream_batches(task))
    n_memory = len(rm.memory) * args.epochs
    rows = []
    for phase, count, work, unit in (
        ("stream pass", n_stream, lambda: rm.fit(1, lambda e: rm.stream_batches(task), "stream", task), "samples"),
        (
            "memory epochs",
            n_memory,
            lambda: rm.fit(
                args.epochs, lambda e: rm.shuffled_batches(rm.memory.indices, rm.memory_batch_size), "memory", task
            ),
            "samples",
        ),
        ("uncertainty", len(candidates), lambda: rm.uncertainty_of(candidates), "candidates"),
        ("evaluation", len(data.test), lambda: evaluate(rm, data, setup.test_labels, classes, augmenter), "samples"),
    ):
        seconds, peak = timed(device, work)
        extra = f"{count * args.views / seconds:,.0f} views/s" if phase == "uncertainty" else ""
        rows.append((label, phase, count, unit, seconds, count / seconds, extra, peak))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="auto", help="auto (CPU, plus the GPU when there is one), cpu, cuda")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument(
        "--data",
        choices=["synthetic", "mnist"],
        default="synthetic",
        help="MNIST-shaped workload: random pixels, or real MNIST from RMCONSOLE_DATA",
    )
    parser.add_argument("--stream", type=int, default=4000, help="stream samples in the pass")
    parser.add_argument("--memory", type=int, default=500, help="K")
    parser.add_argument("--epochs", type=int, default=4, help="memory epochs timed")
    parser.add_argument("--candidates", type=int, default=2000, help="candidates scored for uncertainty")
    parser.add_argument("--views", type=int, default=12)
    parser.add_argument("--measure", default="randaug", help="uncertainty measure")
    parser.add_argument("--augment", default="cutmix+autoaug", help="train augmentation")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    devices = [torch.device("cpu")]
    if args.device in ("auto", "cuda") and torch.cuda.is_available():
        devices.append(torch.device("cuda"))
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("error: --device cuda: no CUDA device is available", file=sys.stderr)
            return 2
        devices = [torch.device("cuda")]

    if args.data == "mnist":
        mnist = load_dataset("mnist")
    else:
        mnist = synthetic("mnist", (1, 28, 28), 20000, 10000)

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {os.cpu_count()} cores"
        f"{', GPU ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else ', no GPU'}; "
        f"augment={args.augment}, uncertainty={args.measure} x {args.views} views"
    )
    rows = []
    for device in devices:
        rows += bench(
            f"{device.type}: {'MNIST' if args.data == 'mnist' else 'MNIST-shaped'} 1x28x28 MLP400",
            mnist,
            "mlp400",
            "mnist",
            device,
            args,
        )
        if device.type == "cuda":
            cifar = synthetic("cifar10", (3, 32, 32), 20000, 10000)
            rows += bench("cuda: CIFAR-shaped 3x32x32 ResNet18 (synthetic)", cifar, "resnet18", "cifar10", device, args)

    print(f"\n{'workload':<48} {'phase':<14} {'count':>8} {'seconds':>8} {'samples/s':>11}  {'peak memory':>16}")
    for label, phase, count, _unit, seconds, rate, extra, peak in rows:
        mem = f"{peak:,.0f} MiB " + ("RSS" if label.startswith("cpu") else "GPU")
        print(f"{label:<48} {phase:<14} {count:>8,} {seconds:>8.2f} {rate:>11,.0f}  {mem:>16}  {extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
